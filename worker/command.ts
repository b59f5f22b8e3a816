/**
 * Runs the turn command in a new session, in a pty (node-pty) or with the worker's own
 * stdio, and exposes one shape to main: pid, resize, signal-the-group, exit.
 *
 * Pipes mode: the command inherits the worker's fds 0-2 directly (no copy through the
 * worker: no buffering, EOF and backpressure stay between the supervisor and the command).
 * Pty mode: the pty output is copied to the worker's stdout, the worker's stdin to the pty.
 */
import { spawn as spawnChild } from 'node:child_process';
import { EventEmitter } from 'node:events';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { IPty } from 'node-pty';
import { fail, ok, type Result } from '../core/result.js';
import type { ForwardableSignal, TtySize } from './protocol.js';

/** glibc execvp's search path when PATH is unset. */
const DEFAULT_PATH = '/bin:/usr/bin';

export interface CommandSpec {
  argv: string[];
  cwd: string;
  env: Record<string, string>;
  tty: TtySize | null;
}

interface CommandExit {
  exitCode: number | null;
  signal: string | null;
}

export interface RunningCommand {
  pid: number;
  resize(size: TtySize): void;
  signalGroup(signal: ForwardableSignal): void;
  exited: Promise<CommandExit>;
}

function isExecutableFile(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

/**
 * Why a command could not start, as every shell, `timeout` and `systemd-run` say it: nothing
 * of that name (127), or something that cannot be executed (126).
 */
export type SpawnError = 'not_found' | 'not_executable';
export const SPAWN_ERROR_EXIT_CODES: Record<SpawnError, number> = { not_found: 127, not_executable: 126 };

function exists(file: string): boolean {
  try {
    fs.statSync(file);
    return true;
  } catch {
    return false;
  }
}

/**
 * execvp's lookup, done up front so both modes report a missing or unexecutable command as a
 * typed spawn error (and an unreachable cwd as `spawn_failed`) instead of a child that prints
 * an error and exits 1.
 */
function resolveExecutable(spec: CommandSpec): Result<{ file: string }, 'spawn_failed' | SpawnError> {
  let cwdIsDir = false;
  try {
    cwdIsDir = fs.statSync(spec.cwd).isDirectory();
  } catch {
    cwdIsDir = false;
  }
  if (!cwdIsDir) return fail('spawn_failed', `cwd ${spec.cwd} is not a directory this worker can reach`);
  const name = spec.argv[0] ?? '';
  const candidates = name.includes('/')
    ? [path.resolve(spec.cwd, name)]
    : (spec.env.PATH ?? DEFAULT_PATH).split(':').map((dir) => path.resolve(spec.cwd, dir || '.', name));
  const file = candidates.find(isExecutableFile);
  if (file !== undefined) return ok({ file });
  const present = candidates.find(exists);
  if (present !== undefined)
    return fail('not_executable', `${JSON.stringify(name)}: ${present} is not an executable file`);
  return fail('not_found', `${JSON.stringify(name)}: command not found (searched ${candidates.length} location(s))`);
}

function signalName(signal: number | NodeJS.Signals | null): string | null {
  if (signal === null || signal === 0) return null;
  if (typeof signal === 'string') return signal;
  const entry = Object.entries(os.constants.signals).find(([, n]) => n === signal);
  return entry ? entry[0] : `SIG${signal}`;
}

/**
 * Signals the command's process group. A group that does not exist yet while the command runs is
 * a pty child between fork and its setsid() (node-pty returns after fork, not after exec): the
 * child alone is then the whole command, and the signal goes to it. A group that is gone after
 * the command exited needs nothing; its exit is reported through `exited`.
 */
function killGroup(pid: number, signal: ForwardableSignal, running: boolean): void {
  try {
    process.kill(-pid, signal);
    return;
  } catch {
    // ESRCH: no such group; see above.
  }
  if (!running) return;
  try {
    // Not reported exited: the pid is still the child's (barring the instant between libuv's
    // reap and its exit report, in which a reuse of the pid is not plausible).
    process.kill(pid, signal);
  } catch {
    // It exited just now.
  }
}

function startPipes(spec: CommandSpec, file: string): Promise<Result<{ command: RunningCommand }, 'spawn_failed'>> {
  const child = spawnChild(file, spec.argv.slice(1), {
    argv0: spec.argv[0],
    cwd: spec.cwd,
    env: spec.env,
    stdio: ['inherit', 'inherit', 'inherit'],
    detached: true, // setsid(): the command leads a new session and process group
  });
  let running = true;
  const exited = new Promise<CommandExit>((resolve) => {
    child.once('exit', (code, signal) => {
      running = false;
      resolve({ exitCode: signal ? null : code, signal: signalName(signal) });
    });
  });
  return new Promise((resolve) => {
    child.once('error', (err) => resolve(fail('spawn_failed', `spawn ${file}: ${err.message}`)));
    child.once('spawn', () => {
      const pid = child.pid;
      if (pid === undefined) {
        resolve(fail('spawn_failed', `spawn ${file}: no pid`));
        return;
      }
      const command: RunningCommand = { pid, resize: () => {}, signalGroup: (s) => killGroup(pid, s, running), exited };
      resolve(ok({ command }));
    });
  });
}

/** The terminal's end-of-input character (^D, the default VEOF of a new pty). */
const VEOF = '\x04';

/** The most a drain reads: a pty holds 12-17 KiB (8 KiB of buffers and 4 KiB in the line discipline). */
const MAX_PTY_DRAIN_BYTES = 1024 * 1024;

/** node-pty (1.1, pinned) keeps the master fd and libuv's stream on it in these fields. */
function ptyMaster(term: IPty): Result<{ fd: number; stream: NodeJS.EventEmitter }, 'spawn_failed'> {
  const internals = term as unknown as { _fd?: unknown; _socket?: unknown };
  const fd = internals._fd;
  const stream = internals._socket;
  if (typeof fd !== 'number' || !(stream instanceof EventEmitter)) {
    return fail(
      'spawn_failed',
      "node-pty's master fd or stream is not where worker/command.ts expects it (node-pty 1.1)",
    );
  }
  return ok({ fd, stream });
}

/**
 * libuv ends a stream when epoll reports POLLHUP right after a read that did not fill its
 * buffer. A pty master reads at most 4 KiB at a time and reports POLLHUP as soon as the last
 * slave fd is closed, while up to 17 KiB of the command's output may still be in the pty; that
 * tail was lost. At that 'end' no writer is left, so reading the non-blocking master until it
 * fails (EIO once drained, or EAGAIN) ends; MAX_PTY_DRAIN_BYTES bounds it regardless.
 */
function drainPtyMaster(fd: number, forward: (chunk: Buffer) => void): void {
  const buffer = Buffer.alloc(65536);
  for (let drained = 0; drained < MAX_PTY_DRAIN_BYTES;) {
    let count: number;
    try {
      count = fs.readSync(fd, buffer, 0, Math.min(buffer.length, MAX_PTY_DRAIN_BYTES - drained), null);
    } catch {
      return;
    }
    if (count === 0) return;
    forward(Buffer.from(buffer.subarray(0, count)));
    drained += count;
  }
}

async function startPty(
  spec: CommandSpec,
  file: string,
  size: TtySize,
): Promise<Result<{ command: RunningCommand }, 'spawn_failed'>> {
  // Loaded only for pty turns: importing node-pty costs ~40 ms of every launch.
  const { default: pty } = await import('node-pty');
  let term: IPty;
  try {
    // forkpty(): setsid() and the pty becomes the controlling terminal.
    term = pty.spawn(file, spec.argv.slice(1), {
      cwd: spec.cwd,
      env: spec.env,
      cols: size.cols,
      rows: size.rows,
      encoding: null,
    });
  } catch (err) {
    return fail('spawn_failed', `pty spawn ${file}: ${(err as Error).message}`);
  }
  const forwardOutput = (data: string | Buffer): void => {
    if (!process.stdout.write(data)) {
      term.pause();
      process.stdout.once('drain', () => term.resume());
    }
  };
  const master = ptyMaster(term);
  if (!master.ok) {
    term.kill('SIGKILL');
    return master;
  }
  term.onData(forwardOutput);
  // Before node-pty closes the master on this end: what libuv left in the pty is read first.
  master.stream.prependListener('end', () => drainPtyMaster(master.fd, forwardOutput));
  const forwardInput = (chunk: Buffer): void => term.write(chunk);
  // The supervisor ends the worker's stdin when the turn's input ends; on a terminal the end of
  // input is the VEOF character (the line discipline turns it into a zero-length read).
  const endInput = (): void => term.write(VEOF);
  process.stdin.on('data', forwardInput);
  process.stdin.once('end', endInput);
  let running = true;
  const exited = new Promise<CommandExit>((resolve) => {
    term.onExit(({ exitCode, signal }) => {
      running = false;
      process.stdin.off('data', forwardInput);
      process.stdin.off('end', endInput);
      process.stdin.pause();
      const name = signalName(signal ?? null);
      resolve({ exitCode: name ? null : exitCode, signal: name });
    });
  });
  const command: RunningCommand = {
    pid: term.pid,
    resize: (s) => term.resize(s.cols, s.rows),
    signalGroup: (s) => killGroup(term.pid, s, running),
    exited,
  };
  return ok({ command });
}

export async function startCommand(
  spec: CommandSpec,
): Promise<Result<{ command: RunningCommand }, 'spawn_failed' | SpawnError>> {
  const resolved = resolveExecutable(spec);
  if (!resolved.ok) return resolved;
  return spec.tty ? startPty(spec, resolved.file, spec.tty) : startPipes(spec, resolved.file);
}
