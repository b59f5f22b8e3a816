/**
 * Runs the native worker (worker/build/) the way the identity helper leaves it: directly, fd 3 =
 * the protocol socket, fd 4 = the listener channel, with an empty environment; the supervisor's
 * compiled seccomp program is its first message, as the supervisor sends it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type net from 'node:net';
import path from 'node:path';
import { listOpenFds, markCloseOnExec } from '../../core/fds.js';
import { compilePolicy } from '../../core/seccomp/policy.js';
import { closeChannelEnd, openListenerChannel } from '../../supervisor/turns/listener-channel.js';
import { LineDecoder, parseWorkerMessage, type WorkerMessage } from '../../supervisor/turns/worker-protocol.js';
import { REPO_ROOT } from './turn-harness.js';

/** The ASan/UBSan build (make -C worker asan): memory errors fail the tests. */
export const WORKER_ASAN = path.join(REPO_ROOT, 'worker/build/turnhost-worker-asan');
/** The hardened static build the helper executes (make -C worker all). */
export const WORKER_HARDENED = path.join(REPO_ROOT, 'worker/build/turnhost-worker');
/** LeakSanitizer stops the world with ptrace, which the worker's own filter denies. */
const ASAN_OPTIONS = 'detect_leaks=0';

export function seccompMessage(): object {
  const compiled = compilePolicy();
  if (!compiled.ok) throw new Error(compiled.detail);
  return { type: 'seccomp', program: compiled.program.toString('base64') };
}

export interface WorkerOptions {
  /** Default WORKER_ASAN. */
  binary?: string;
  /** The uid and gid the worker runs as (default: this process's). */
  uid?: number;
}

// Supervisor hygiene: whatever this test process inherited must not reach the worker.
const inherited = listOpenFds();
if (inherited.ok) for (const { fd } of inherited.fds) if (fd > 2) markCloseOnExec(fd);

export interface Worker {
  child: ChildProcess;
  /** The supervisor's end of the listener channel (closed when the worker is done). */
  channel: number;
  messages: WorkerMessage[];
  stdout: () => string;
  next: (type: WorkerMessage['type']) => Promise<WorkerMessage>;
  send: (message: object) => void;
  done: Promise<number | null>;
}

/**
 * `fd4`: what the worker gets as fd 4 (by default the listener channel, as the supervisor gives it).
 * `seccomp`: the first message (by default the supervisor's compiled policy; null: none).
 */
export function startWorker(
  launch: object | null,
  extraStdio: (number | 'pipe')[] = [],
  fd4?: number | 'none',
  seccomp: object | null = seccompMessage(),
  options: WorkerOptions = {},
): Worker {
  const channel = openListenerChannel();
  if (!channel.ok) throw new Error(channel.detail);
  const fourth = fd4 === 'none' ? [] : [fd4 ?? channel.workerFd];
  // The helper gives the worker an empty environment; `env -i` also drops the NODE_OPTIONS
  // tap's process tracking injects into every spawn.
  const child = spawn('/usr/bin/env', ['-i', `ASAN_OPTIONS=${ASAN_OPTIONS}`, options.binary ?? WORKER_ASAN], {
    stdio: ['pipe', 'pipe', 'pipe', 'pipe', ...fourth, ...extraStdio],
    ...(options.uid === undefined ? {} : { uid: options.uid, gid: options.uid }),
    cwd: '/',
    env: {},
  });
  closeChannelEnd(channel.workerFd);
  const messages: WorkerMessage[] = [];
  const waiters: (() => void)[] = [];
  let out = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (out += d.toString()));
  const control = child.stdio[3] as net.Socket;
  const decoder = new LineDecoder();
  control.on('data', (chunk: Buffer) => {
    const framed = decoder.push(chunk);
    if (!framed.ok) throw new Error(framed.detail);
    for (const line of framed.lines) {
      const parsed = parseWorkerMessage(line);
      if (!parsed.ok) throw new Error(`${parsed.reason}: ${parsed.detail}`);
      messages.push(parsed.message);
    }
    for (const wake of waiters.splice(0)) wake();
  });
  const send = (message: object): void => void control.write(JSON.stringify(message) + '\n');
  if (seccomp) send(seccomp);
  if (launch) send(launch);
  const next = (type: WorkerMessage['type']): Promise<WorkerMessage> =>
    new Promise((resolve, reject) => {
      const check = (): void => {
        const found = messages.find((m) => m.type === type);
        if (found) return resolve(found);
        if (child.exitCode !== null && control.readableEnded)
          return reject(new Error(`worker exited without ${type}: ${JSON.stringify(messages)} ${out}`));
        waiters.push(check);
      };
      check();
    });
  const done = new Promise<number | null>((resolve) =>
    child.on('close', (code) => {
      for (const wake of waiters.splice(0)) wake();
      closeChannelEnd(channel.supervisorFd);
      resolve(code);
    }),
  );
  return { child, channel: channel.supervisorFd, messages, stdout: () => out, next, send, done };
}
