/**
 * Prepared workers: after a turn starts, a worker for the same key (mode, cwd, limits, egress
 * additions) is started ahead of the next turn, through the same start sequence a turn uses
 * (its own probe, uid, temp, cgroup leaf, proxy, view, helper) up to `ready`. The next turn with
 * that key claims it, attests the live process, and only then sends its launch message. Each
 * prepared worker serves exactly one turn; unclaimed ones are stopped after an idle time, when
 * a turn needs their uid, or at close.
 */
import { randomBytes } from 'node:crypto';
import type { Logger } from '../../core/log.js';

/** Prepared workers name their cgroup leaves, temps and runtime directories with it; turn ids never start with it. */
export const PREPARED_WORKER_PREFIX = 'prepared_';

/** A prepared worker's leaf, temp and runtime directory name; a valid turn-id spelling, never a turn's. */
export function preparedWorkerName(): string {
  return `${PREPARED_WORKER_PREFIX}${randomBytes(9).toString('base64url')}`;
}

export function isPreparedWorkerName(name: string): boolean {
  return name.startsWith(PREPARED_WORKER_PREFIX);
}

export interface PoolWorker {
  name: string;
  key: string;
  /** The worker process has exited. */
  readonly ended: boolean;
  onEnd(listener: () => void): void;
}

export interface PoolOptions<W extends PoolWorker, S> {
  capacity: number;
  idleMs: number;
  keyOf(spec: S): string;
  /** Starts a worker and waits until it is ready; null when it could not be. */
  prepare(spec: S): Promise<W | null>;
  stop(worker: W): Promise<void>;
  logger: Logger;
}

interface Entry<W> {
  key: string;
  /** In the pool; taken by a turn (the taker owns the worker); or retired (stopped once it exists). */
  state: 'pooled' | 'taken' | 'retired';
  pending: Promise<W | null>;
  worker: W | null;
  idleTimer: NodeJS.Timeout | null;
}

/**
 * The prepared workers, at most `capacity` of them, one per key: each is pooled while it starts
 * and while it waits idle, until a turn takes it or it is retired.
 */
export class PreparedWorkerPool<W extends PoolWorker, S> {
  private readonly entries: Entry<W>[] = [];
  private readonly stopping = new Set<Promise<void>>();
  private closed = false;

  constructor(private readonly options: PoolOptions<W, S>) {}

  /** The worker prepared for this key (waiting for one still starting); null when there is none. */
  async take(key: string): Promise<W | null> {
    const entry = this.entries.find((e) => e.key === key);
    if (!entry) return null;
    this.leave(entry, 'taken');
    const worker = await entry.pending;
    if (worker?.ended) {
      await this.stop(worker);
      return null;
    }
    return worker;
  }

  /** After a turn with this spec started: prepare one worker for the next turn like it. */
  prepareFor(spec: S): void {
    const { options, entries } = this;
    if (this.closed || options.capacity === 0) return;
    const key = options.keyOf(spec);
    if (entries.some((e) => e.key === key)) return;
    // Full: the oldest worker for another key gives way, idle or still starting.
    const oldest = entries.length >= options.capacity ? entries[0] : undefined;
    if (oldest) this.retire(oldest, 'replaced by a worker for another key');
    const entry: Entry<W> = { key, state: 'pooled', pending: Promise.resolve(null), worker: null, idleTimer: null };
    entry.pending = options.prepare(spec).then(
      (worker) => this.settle(entry, worker),
      (error: unknown) => {
        options.logger.warn('preparing a worker failed', { detail: (error as Error).message });
        return this.settle(entry, null);
      },
    );
    entries.push(entry);
  }

  /** Stops the oldest idle worker; false when none was idle. */
  async evictOne(): Promise<boolean> {
    const idle = this.entries.find((e) => e.worker !== null);
    if (!idle?.worker) return false;
    const worker = idle.worker;
    this.leave(idle, 'retired');
    await this.stop(worker);
    return true;
  }

  counts(): { ready: number; starting: number } {
    const ready = this.entries.filter((e) => e.worker !== null).length;
    return { ready, starting: this.entries.length - ready };
  }

  /** Stops every prepared worker; later `prepareFor` calls do nothing. */
  async close(): Promise<void> {
    this.closed = true;
    const all = [...this.entries];
    for (const entry of all) this.leave(entry, 'retired');
    // Ready ones are stopped here; starting ones by their preparation, which sees `retired`.
    for (const entry of all) if (entry.worker) void this.stop(entry.worker);
    await Promise.all(all.map((e) => e.pending));
    await Promise.all([...this.stopping]);
  }

  private leave(entry: Entry<W>, state: 'taken' | 'retired'): void {
    this.entries.splice(this.entries.indexOf(entry), 1);
    entry.state = state;
    if (entry.idleTimer) clearTimeout(entry.idleTimer);
  }

  private stop(worker: W): Promise<void> {
    const stopped = this.options.stop(worker).finally(() => this.stopping.delete(stopped));
    this.stopping.add(stopped);
    return stopped;
  }

  /** A starting worker is stopped as soon as it is ready (its preparation sees the state). */
  private retire(entry: Entry<W>, why: string): void {
    if (entry.state !== 'pooled') return;
    this.leave(entry, 'retired');
    if (!entry.worker) return;
    this.options.logger.info('prepared worker stopped', { preparedWorker: entry.worker.name, why });
    void this.stop(entry.worker);
  }

  /** A preparation's outcome: pooled and idle-timed, handed to its taker, or stopped. */
  private settle(entry: Entry<W>, worker: W | null): W | null {
    if (!worker) {
      if (entry.state === 'pooled') this.leave(entry, 'retired');
      return null;
    }
    if (entry.state === 'retired' || this.closed) {
      void this.stop(worker);
      return null;
    }
    if (entry.state === 'taken') return worker;
    entry.worker = worker;
    entry.idleTimer = setTimeout(() => this.retire(entry, 'idle'), this.options.idleMs);
    entry.idleTimer.unref();
    worker.onEnd(() => this.retire(entry, 'exited while idle'));
    return worker;
  }
}

export function createPreparedWorkerPool<W extends PoolWorker, S>(
  options: PoolOptions<W, S>,
): PreparedWorkerPool<W, S> {
  return new PreparedWorkerPool(options);
}
