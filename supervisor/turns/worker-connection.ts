/**
 * The supervisor's side of one worker process: the protocol socket (fd 3, newline-delimited
 * JSON, supervisor/turns/worker-protocol.ts; the native worker parses it in
 * worker/src/protocol.c) decoded by one decoder for the worker's whole life, the worker's
 * stdout and stderr, the last bytes of its stderr (a helper refusal is read from there), and
 * its exit. The lifecycle awaits its steps in order: `ready()`, `launch()`, `started()`,
 * `exited()`, `closed()`.
 */
import type { ChildProcess } from 'node:child_process';
import type net from 'node:net';
import { fail, ok, type Result } from '../../core/result.js';
import {
  encodeMessage,
  LineDecoder,
  parseWorkerMessage,
  type ExitMessage,
  type LaunchMessage,
  type SupervisorMessage,
  type WorkerMessage,
} from './worker-protocol.js';
import { parseHelperRefusal } from '../identity/helper-process.js';
import { workerSeccompMessage } from './worker-seccomp.js';

const STDERR_TAIL_BYTES = 4096;
/** Helper and worker stderr that arrives before a turn reads the output: kept for that turn. */
const EARLY_STDERR_BYTES = 64 * 1024;

export type WorkerOutput = { stream: 'stdout' | 'stderr'; data: Buffer };

/** What the worker reported and how its process ended; the lifecycle turns it into a result. */
export interface WorkerReport {
  /** The worker's exit report for the command; null when none arrived. */
  exit: ExitMessage | null;
  /** The first protocol or worker error, in words; null when there was none. */
  error: string | null;
  /** The worker process's own exit code (the helper's, when it refused before exec). */
  processExitCode: number | null;
  /** A refusal of the identity helper read from its exit code and stderr; null when it did not refuse. */
  helperRefusal: string | null;
}

type Phase = 'booting' | 'waiting' | 'launched' | 'started' | 'reported';

/** How long a refusal waits for the rest of the helper's stderr after its exit. */
const STDERR_DRAIN_MS = 2000;

export class WorkerConnection {
  readonly child: ChildProcess;
  private readonly protocol: net.Socket;
  private readonly killWorker: () => void;
  private readonly ownerUid: number;
  private readonly decoder = new LineDecoder();
  private phase: Phase = 'booting';
  private exitMessage: ExitMessage | null = null;
  private firstError: string | null = null;
  private stderrTail = Buffer.alloc(0);
  private earlyStderr: Buffer[] = [];
  private earlyStderrBytes = 0;
  private sink: ((output: WorkerOutput) => void) | null = null;
  private readonly phaseWaiters: Array<() => void> = [];
  private readonly exitPromise: Promise<number | null>;
  private readonly closePromise: Promise<void>;
  /** The helper's refusal line can arrive after its exit: `exit` may fire before stderr is read. */
  private readonly stderrEnded: Promise<unknown>;
  private processExited = false;
  /** Attached readers that asked to stop reading output (backpressure); see holdOutput. */
  private outputHolds = 0;
  private outputPaused = false;

  /**
   * `ownerUid` is the worker's uid (a non-root supervisor may signal only its own); `killWorker`
   * ends the whole worker (its cgroup), used when the protocol loses its framing.
   */
  constructor(spawned: { child: ChildProcess; protocol: net.Socket }, ownerUid: number, killWorker: () => void) {
    this.child = spawned.child;
    this.protocol = spawned.protocol;
    this.ownerUid = ownerUid;
    this.killWorker = killWorker;
    this.exitPromise = new Promise((resolve) =>
      this.child.on('exit', (code) => {
        this.processExited = true;
        this.applyOutputFlow();
        this.wake();
        resolve(code);
      }),
    );
    this.closePromise = new Promise((resolve) => this.child.on('close', () => resolve()));
    const stderr = this.child.stderr;
    this.stderrEnded =
      stderr && !stderr.readableEnded
        ? new Promise((resolve) => {
            stderr.once('end', resolve);
            stderr.once('close', resolve);
          })
        : Promise.resolve();
    this.child.on('error', (error) => this.noteError(`spawn: ${error.message}`));
    this.protocol.on('data', (chunk: Buffer) => this.receive(chunk));
    this.protocol.on('error', () => undefined);
    this.child.stderr?.on('data', (data: Buffer) => this.receiveStderr(data));
    this.child.stdin?.on('error', () => undefined);
    // The worker installs this filter before anything else it does: it is the first message.
    const seccomp = workerSeccompMessage();
    if (seccomp.ok) this.send(seccomp.message);
    else this.noteError(`seccomp: ${seccomp.detail}`);
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** The process has exited (or could not be started). */
  get ended(): boolean {
    return this.processExited || this.child.exitCode !== null || this.child.signalCode !== null;
  }

  /**
   * Settles when the worker reported `ready` (booted, fds checked, seccomp installed, listener
   * handed over) as its first and only message, or when it failed or exited first. The protocol
   * is then paused until `launch`: a worker waiting for a turn has nothing to say.
   */
  async ready(timeoutMs: number): Promise<Result> {
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)));
    await Promise.race([
      this.until(() => this.phase !== 'booting' || this.ended || this.firstError !== null),
      timedOut,
    ]);
    clearTimeout(timer);
    if (this.firstError !== null) return fail('worker_not_ready', this.firstError);
    if (this.phase === 'waiting') return ok({});
    if (this.ended) {
      const code = await this.exitPromise;
      const refusal = await this.helperRefusal(code);
      return fail('worker_exited', refusal ?? `the worker exited (code ${code}) before it was ready`);
    }
    return fail('worker_not_ready', `no ready within ${timeoutMs / 1000} s`);
  }

  /** Sends the launch message and resumes the protocol. */
  launch(message: LaunchMessage): void {
    this.phase = 'launched';
    this.send(message);
    this.protocol.resume();
  }

  /** Settles when the command started (`started`), or false when the worker ended before it did. */
  async started(): Promise<boolean> {
    await this.until(() => this.phase === 'started' || this.phase === 'reported' || this.ended);
    return this.phase === 'started' || this.phase === 'reported';
  }

  /** The worker process's exit, with what it reported. */
  async exited(): Promise<WorkerReport> {
    const code = await this.exitPromise;
    const commandRan = this.phase === 'started' || this.phase === 'reported';
    return {
      exit: this.exitMessage,
      error: this.firstError,
      processExitCode: code,
      helperRefusal: commandRan || this.exitMessage ? null : await this.helperRefusal(code),
    };
  }

  /** Every output pipe is drained (background holders are gone: after the cgroup kill). */
  closed(): Promise<void> {
    return this.closePromise;
  }

  /** Where the worker's output goes from now on; stderr that came before is given first. */
  readOutput(sink: (output: WorkerOutput) => void): void {
    this.sink = sink;
    for (const data of this.earlyStderr) sink({ stream: 'stderr', data });
    this.earlyStderr = [];
    this.child.stdout?.on('data', (data: Buffer) => sink({ stream: 'stdout', data }));
  }

  /**
   * Stops reading the worker's output while held: its pipe fills and the command blocks in
   * write, so a reader that cannot keep up slows the command instead of growing anyone's memory.
   * The returned function lets go. Holds end once the worker reported or exited: a finished
   * command's last output is always read, so the turn's disposal never waits on a reader.
   */
  holdOutput(): () => void {
    this.outputHolds += 1;
    this.applyOutputFlow();
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.outputHolds -= 1;
      this.applyOutputFlow();
    };
  }

  private applyOutputFlow(): void {
    const pause = this.outputHolds > 0 && this.phase !== 'reported' && !this.ended;
    if (pause === this.outputPaused) return;
    this.outputPaused = pause;
    for (const stream of [this.child.stdout, this.child.stderr]) {
      if (stream === null) continue;
      if (pause) stream.pause();
      else stream.resume();
    }
  }

  send(message: SupervisorMessage): void {
    const encoded = encodeMessage(message);
    if (encoded.ok && !this.protocol.destroyed) this.protocol.write(encoded.line);
  }

  writeInput(data: Buffer): void {
    const { stdin } = this.child;
    if (stdin && !stdin.destroyed && !stdin.writableEnded) stdin.write(data);
  }

  /**
   * Ends the worker's stdin after what was written: in pipes mode the command reads EOF (it holds
   * the other end itself); in pty mode the worker answers the end with the terminal's VEOF.
   */
  endInput(): void {
    const { stdin } = this.child;
    if (stdin && !stdin.destroyed && !stdin.writableEnded) stdin.end();
  }

  /**
   * SIGKILL for the worker process itself, when this supervisor may signal it (a non-root
   * supervisor cannot signal another uid, and a refused kill would surface as an 'error' event),
   * and the protocol socket closed: a worker ends itself when it loses its protocol fd.
   */
  stop(): void {
    this.killProcess();
    this.protocol.destroy();
  }

  private killProcess(): void {
    const euid = process.geteuid?.();
    if (!this.ended && (euid === 0 || euid === this.ownerUid)) this.child.kill('SIGKILL');
  }

  /**
   * The helper's refusal for exit `code`, its own line once stderr has been read to its end (or
   * after a short bound: a process that kept the pipe cannot hold the turn's result back).
   */
  private async helperRefusal(code: number | null): Promise<string | null> {
    if (parseHelperRefusal(code, '') === null) return null;
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      this.stderrEnded,
      new Promise<void>((resolve) => (timer = setTimeout(resolve, STDERR_DRAIN_MS))),
    ]);
    clearTimeout(timer);
    return parseHelperRefusal(code, this.stderrTail.toString('utf8'))?.detail ?? null;
  }

  private receive(chunk: Buffer): void {
    const framed = this.decoder.push(chunk);
    if (!framed.ok) {
      // A stream that lost its framing can no longer be trusted: the worker is ended.
      this.noteError(`protocol: ${framed.detail}`);
      this.killWorker();
      return;
    }
    for (const line of framed.lines) {
      const parsed = parseWorkerMessage(line);
      if (!parsed.ok) {
        this.noteError(`protocol: ${parsed.detail}`);
        continue;
      }
      this.handle(parsed.message);
    }
  }

  private handle(message: WorkerMessage): void {
    if (message.type === 'error') {
      this.noteError(`${message.code}: ${message.detail}`);
    } else if (this.phase === 'booting') {
      if (message.type === 'ready') {
        this.phase = 'waiting';
        this.protocol.pause();
      } else this.noteError(`unexpected ${message.type} before launch`);
    } else if (message.type === 'started' && this.phase === 'launched') {
      this.phase = 'started';
    } else if (
      message.type === 'exit' &&
      (this.phase === 'started' || (this.phase === 'launched' && message.spawnError !== undefined))
    ) {
      this.exitMessage = message;
      this.phase = 'reported';
      this.applyOutputFlow();
      // The report is complete; the worker's own teardown (Node's exit) adds nothing to wait for.
      this.killProcess();
    } else {
      this.noteError(`protocol: unexpected ${message.type} message`);
    }
    this.wake();
  }

  private receiveStderr(data: Buffer): void {
    this.stderrTail = Buffer.concat([this.stderrTail, data]).subarray(-STDERR_TAIL_BYTES);
    if (this.sink) return this.sink({ stream: 'stderr', data });
    if (this.earlyStderrBytes + data.length > EARLY_STDERR_BYTES) return;
    this.earlyStderr.push(data);
    this.earlyStderrBytes += data.length;
  }

  private noteError(detail: string): void {
    this.firstError ??= detail;
    this.wake();
  }

  private until(condition: () => boolean): Promise<void> {
    if (condition()) return Promise.resolve();
    return new Promise((resolve) => {
      const check = (): void => {
        if (condition()) resolve();
        else this.phaseWaiters.push(check);
      };
      this.phaseWaiters.push(check);
    });
  }

  private wake(): void {
    const waiters = this.phaseWaiters.splice(0);
    for (const waiter of waiters) waiter();
  }
}
