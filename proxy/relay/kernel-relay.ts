/**
 * The kernel relay, as the rest of the process sees it: `kernelRelay()` starts one relay
 * thread per process on first use; `adopt` hands it two connected sockets, after which bytes
 * move between them by splice(2) and never through JavaScript. Until the thread reports ready
 * (and for ever if it fails) `adopt` answers `relay_not_ready` and callers relay in Node as
 * before: the kernel relay changes speed, never what is allowed.
 *
 * Why a thread: Node cannot wait on arbitrary fds, and koffi's async calls cost a thread-pool
 * round trip each; a thread blocked in epoll_wait and splicing with synchronous calls costs a
 * few microseconds per wake-up. docs/egress.md ("Kernel relay") has the measurements.
 */
import type net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { MessageChannel, Worker } from 'node:worker_threads';
import { errnoName } from '../../core/linux-abi.js';
import { fail, ok, type Result } from '../../core/result.js';
import type { ByteBudget } from './byte-budget.js';
import { PIPE_CAPACITY, type RelayCommand, type TunnelReport } from './splice-loop.js';
import { detachSockets } from './socket-handoff.js';
import { spliceSys } from './splice-sys.js';
import type { ThreadMessage } from './relay-thread.js';

/** How a tunnel ended: its report from the relay thread, without the thread's id. */
export type TunnelEnd = Omit<TunnelReport, 'id'>;

export interface KernelTunnel {
  readonly ended: Promise<TunnelEnd>;
  /** Closes both sockets at once; `ended` then reports 'aborted'. */
  abort(): void;
}

export interface AdoptOptions {
  /** Bytes each side receives before anything relayed (e.g. a CONNECT's 200 line). */
  initial?: [Buffer | null, Buffer | null];
  /** Charged for every byte read from either side; exceeding it ends the tunnel. */
  budget?: ByteBudget;
  /** Ends the tunnel after this long without a byte either way; 0 or absent: never. */
  idleTimeoutMs?: number;
  /**
   * Bytes to read from side 0 and from side 1, exactly (a forward request's body), instead of
   * each until its EOF: no byte past them is read, no EOF is passed on, and 0 leaves that side
   * unread by the relay. Both or neither.
   */
  lengths?: [number, number];
}

type AdoptFailure = 'relay_not_ready' | 'not_adoptable';

export interface KernelRelay {
  /** Side 0 is `a`, side 1 is `b`. On failure neither socket was touched. */
  adopt(a: net.Socket, b: net.Socket, options?: AdoptOptions): Result<{ tunnel: KernelTunnel }, AdoptFailure>;
  /**
   * Side 0 is `fds[0]`, side 1 `fds[1]`: connected sockets the caller took from Node
   * (socket-handoff.ts). On success the relay owns and closes them; on failure the caller still does.
   */
  adoptFds(fds: [number, number], options?: AdoptOptions): Result<{ tunnel: KernelTunnel }, 'relay_not_ready'>;
  state(): RelayState;
  /** Resolves once the thread is ready or has failed (tests and the bench wait on it). */
  settled(): Promise<RelayState>;
  report(): RelayReport;
  /** Aborts every tunnel and ends the thread. */
  stop(): Promise<void>;
}

type RelayState = 'starting' | 'ready' | 'failed' | 'stopped';

/** What an operator sees of a relay (GET /api/status, `runtime.egressRelay`). */
export interface RelayReport {
  state: RelayState;
  /** Why the thread failed or could not start; null otherwise. */
  failure: string | null;
  /** Tunnels adopted since the thread started. */
  adopted: number;
  /** Adopted tunnels not yet reported ended. */
  open: number;
  /** Hand-offs refused, by reason: each such connection was relayed in Node instead. */
  refused: Record<AdoptFailure, number>;
}

function noRefusals(): Record<AdoptFailure, number> {
  return { relay_not_ready: 0, not_adoptable: 0 };
}

/** Small heap: the thread only moves fds and numbers. */
const THREAD_LIMITS = { maxOldGenerationSizeMb: 16, maxYoungGenerationSizeMb: 4 };

/**
 * The thread runs the sibling module. From TypeScript sources (tests, bench) the thread first
 * registers tsx's loader: loader flags of the parent do not carry into worker threads.
 */
function threadEntry(): { entry: string | URL; evaluate: boolean } {
  const extension = path.extname(fileURLToPath(import.meta.url));
  const script = new URL(`./relay-thread${extension}`, import.meta.url);
  if (extension !== '.ts') return { entry: script, evaluate: false };
  const bootstrap = `import('tsx/esm/api').then((api) => { api.register(); return import(${JSON.stringify(script.href)}); })`;
  return { entry: bootstrap, evaluate: true };
}

class RelayThread implements KernelRelay {
  private current: RelayState = 'starting';
  private failure = '';
  private readonly refused = noRefusals();
  private awaitingStart = 0;
  private nextId = 1;
  private readonly waiting = new Map<number, (end: TunnelEnd) => void>();
  private readonly port: MessageChannel['port1'];
  private readonly worker: Worker;
  private readonly wakeFd: number;
  private readonly wakeValue = Buffer.alloc(8);
  private readonly exited: Promise<void>;
  private readonly started: Promise<void>;
  private markStarted!: () => void;

  constructor() {
    this.started = new Promise((resolve) => (this.markStarted = resolve));
    const sys = spliceSys();
    this.wakeFd = sys.eventfd();
    if (this.wakeFd < 0) throw new Error(`eventfd failed: ${errnoName(sys.errno())}`);
    this.wakeValue.writeBigUInt64LE(1n);
    const channel = new MessageChannel();
    this.port = channel.port1;
    const { entry, evaluate } = threadEntry();
    try {
      this.worker = new Worker(entry, {
        eval: evaluate,
        workerData: { port: channel.port2, wakeFd: this.wakeFd },
        transferList: [channel.port2],
        resourceLimits: THREAD_LIMITS,
      });
    } catch (error) {
      sys.close(this.wakeFd);
      throw error;
    }
    this.port.on('message', (message: ThreadMessage) => this.receive(message));
    // Neither keeps the process alive (a listener refs the port, so unref comes after it).
    this.worker.unref();
    this.port.unref();
    // process.exit() joins worker threads, and this one may be blocked in epoll_wait: without
    // a stop command first, the process would never exit.
    process.once('exit', this.stopForExit);
    this.exited = new Promise((resolve) => {
      this.worker.once('error', (error) => this.lose(`the relay thread failed: ${error.message}`));
      this.worker.once('exit', () => {
        this.lose('the relay thread exited');
        // lose() left no state in which send() writes the wake fd again.
        sys.close(this.wakeFd);
        resolve();
      });
    });
  }

  state(): RelayState {
    return this.current;
  }

  async settled(): Promise<RelayState> {
    this.awaitingStart++;
    this.holdProcessWhileAwaited();
    await this.started;
    this.awaitingStart--;
    this.holdProcessWhileAwaited();
    return this.current;
  }

  report(): RelayReport {
    return {
      state: this.current,
      failure: this.failure || null,
      adopted: this.nextId - 1,
      open: this.waiting.size,
      refused: { ...this.refused },
    };
  }

  adopt(a: net.Socket, b: net.Socket, options: AdoptOptions = {}): Result<{ tunnel: KernelTunnel }, AdoptFailure> {
    const initial = options.initial ?? [null, null];
    const accepted = this.accept(a, b, initial);
    if (!accepted.ok) {
      this.refused[accepted.reason]++;
      return accepted;
    }
    return ok({ tunnel: this.start(accepted.fds, options) });
  }

  adoptFds(fds: [number, number], options: AdoptOptions = {}): Result<{ tunnel: KernelTunnel }, 'relay_not_ready'> {
    if (this.current !== 'ready' || (options.initial ?? []).some((bytes) => bytes && bytes.length > PIPE_CAPACITY)) {
      this.refused.relay_not_ready++;
      return fail('relay_not_ready', `the kernel relay is ${this.current}${this.failure ? `: ${this.failure}` : ''}`);
    }
    return ok({ tunnel: this.start(fds, options) });
  }

  private start(fds: [number, number], options: AdoptOptions): KernelTunnel {
    const initial = options.initial ?? [null, null];
    const id = this.nextId++;
    const ended = new Promise<TunnelEnd>((resolve) => this.waiting.set(id, resolve));
    this.holdProcessWhileAwaited();
    const budget = options.budget ? { shared: options.budget.shared, maxBytes: options.budget.maxBytes } : null;
    const lengths = options.lengths ?? [null, null];
    this.send({ op: 'adopt', id, fds, initial, lengths, budget, idleTimeoutMs: options.idleTimeoutMs ?? 0 });
    return { ended, abort: () => this.abort(id) };
  }

  /** The checks before a hand-off; on success Node has let go of both sockets. */
  private accept(
    a: net.Socket,
    b: net.Socket,
    initial: [Buffer | null, Buffer | null],
  ): Result<{ fds: [number, number] }, AdoptFailure> {
    if (this.current !== 'ready')
      return fail('relay_not_ready', `the kernel relay is ${this.current}${this.failure ? `: ${this.failure}` : ''}`);
    if (initial.some((bytes) => bytes !== null && bytes.length > PIPE_CAPACITY)) {
      return fail('not_adoptable', `initial bytes exceed ${PIPE_CAPACITY}`);
    }
    const detached = detachSockets([a, b]);
    if (!detached.ok) return detached;
    return ok({ fds: [detached.fds[0]!, detached.fds[1]!] });
  }

  async stop(): Promise<void> {
    this.stopForExit();
    // Unref'd, the worker alone would let the process exit before its 'exit' event.
    this.worker.ref();
    await this.exited;
  }

  private readonly stopForExit = (): void => {
    process.removeListener('exit', this.stopForExit);
    if (this.current === 'starting' || this.current === 'ready') this.send({ op: 'stop' });
    this.current = 'stopped';
  };

  /**
   * An idle relay must not keep the process alive, but an awaited answer (the thread's start,
   * a tunnel's end) must, as an open socket would: the port is ref'd exactly while one is due.
   */
  private holdProcessWhileAwaited(): void {
    if (this.awaitingStart > 0 || this.waiting.size > 0) this.port.ref();
    else this.port.unref();
  }

  private abort(id: number): void {
    if (this.waiting.has(id) && this.current === 'ready') this.send({ op: 'abort', id });
  }

  private send(command: RelayCommand): void {
    this.port.postMessage(command);
    spliceSys().write(this.wakeFd, this.wakeValue, 8);
  }

  private receive(message: ThreadMessage): void {
    if (message.type === 'ready') {
      if (this.current === 'starting') this.current = 'ready';
      this.markStarted();
    } else if (message.type === 'ended') this.settle(message.report);
    else this.lose(message.detail);
  }

  private settle(report: TunnelReport): void {
    const resolve = this.waiting.get(report.id);
    this.waiting.delete(report.id);
    this.holdProcessWhileAwaited();
    const { id: _id, ...end } = report;
    resolve?.(end);
  }

  /**
   * The thread is gone: its tunnels end as 'relay_failed'. Their fds stay open until the
   * process exits; closing them from here could close a number the process has reused since.
   */
  private lose(detail: string): void {
    if (this.current !== 'stopped') {
      this.current = 'failed';
      this.failure = detail;
    }
    this.markStarted();
    for (const id of [...this.waiting.keys()])
      this.settle({ id, outcome: 'relay_failed', failedSide: null, detail, bytes: [0, 0], eofFrom: [false, false] });
  }
}

/** What `kernelRelay()` answers when the thread could not even be created: every adopt is refused. */
function unavailableRelay(detail: string): KernelRelay {
  const refused = noRefusals();
  const refuse = (): Result<never, 'relay_not_ready'> => {
    refused.relay_not_ready++;
    return fail('relay_not_ready', `the kernel relay is failed: ${detail}`);
  };
  return {
    adopt: refuse,
    adoptFds: refuse,
    state: () => 'failed',
    settled: () => Promise.resolve('failed'),
    report: () => ({ state: 'failed', failure: detail, adopted: 0, open: 0, refused: { ...refused } }),
    stop: async () => {},
  };
}

let shared: KernelRelay | undefined;

/** The report of this process's kernel relay; null while nothing has asked for one. */
export function kernelRelayReport(): RelayReport | null {
  return shared?.report() ?? null;
}

/** This process's kernel relay, started on first call (and again after `stop`; never after a failure). */
export function kernelRelay(): KernelRelay {
  if (shared && shared.state() !== 'stopped') return shared;
  try {
    shared = new RelayThread();
  } catch (error) {
    shared = unavailableRelay((error as Error).message);
  }
  return shared;
}
