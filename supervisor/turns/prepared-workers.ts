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

export interface PreparedWorkerPool<W extends PoolWorker, S> {
  /** The worker prepared for this key (waiting for one still starting); null when there is none. */
  take(key: string): Promise<W | null>;
  /** After a turn with this spec started: prepare one worker for the next turn like it. */
  prepareFor(spec: S): void;
  /** Stops the oldest idle worker; false when none was idle. */
  evictOne(): Promise<boolean>;
  counts(): { ready: number; starting: number };
  /** Stops every prepared worker; later `prepareFor` calls do nothing. */
  close(): Promise<void>;
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

export function createPreparedWorkerPool<W extends PoolWorker, S>(
  options: PoolOptions<W, S>,
): PreparedWorkerPool<W, S> {
  const entries: Entry<W>[] = [];
  const stopping = new Set<Promise<void>>();
  let closed = false;

  const leave = (entry: Entry<W>, state: 'taken' | 'retired'): void => {
    entries.splice(entries.indexOf(entry), 1);
    entry.state = state;
    if (entry.idleTimer) clearTimeout(entry.idleTimer);
  };
  const stop = (worker: W): Promise<void> => {
    const stopped = options.stop(worker).finally(() => stopping.delete(stopped));
    stopping.add(stopped);
    return stopped;
  };
  /** A starting worker is stopped as soon as it is ready (its preparation sees the state). */
  const retire = (entry: Entry<W>, why: string): void => {
    if (entry.state !== 'pooled') return;
    leave(entry, 'retired');
    if (!entry.worker) return;
    options.logger.info('prepared worker stopped', { preparedWorker: entry.worker.name, why });
    void stop(entry.worker);
  };

  const settle = (entry: Entry<W>, worker: W | null): W | null => {
    if (!worker) {
      if (entry.state === 'pooled') leave(entry, 'retired');
      return null;
    }
    if (entry.state === 'retired' || closed) {
      void stop(worker);
      return null;
    }
    if (entry.state === 'taken') return worker;
    entry.worker = worker;
    entry.idleTimer = setTimeout(() => retire(entry, 'idle'), options.idleMs);
    entry.idleTimer.unref();
    worker.onEnd(() => retire(entry, 'exited while idle'));
    return worker;
  };

  return {
    async take(key) {
      const entry = entries.find((e) => e.key === key);
      if (!entry) return null;
      leave(entry, 'taken');
      const worker = await entry.pending;
      if (worker?.ended) {
        await stop(worker);
        return null;
      }
      return worker;
    },

    prepareFor(spec) {
      if (closed || options.capacity === 0) return;
      const key = options.keyOf(spec);
      if (entries.some((e) => e.key === key)) return;
      // Full: the oldest worker for another key gives way, idle or still starting.
      const oldest = entries.length >= options.capacity ? entries[0] : undefined;
      if (oldest) retire(oldest, 'replaced by a worker for another key');
      const entry: Entry<W> = { key, state: 'pooled', pending: Promise.resolve(null), worker: null, idleTimer: null };
      entry.pending = options.prepare(spec).then(
        (worker) => settle(entry, worker),
        (error: unknown) => {
          options.logger.warn('preparing a worker failed', { detail: (error as Error).message });
          return settle(entry, null);
        },
      );
      entries.push(entry);
    },

    async evictOne() {
      const idle = entries.find((e) => e.worker !== null);
      if (!idle?.worker) return false;
      const worker = idle.worker;
      leave(idle, 'retired');
      await stop(worker);
      return true;
    },

    counts() {
      const ready = entries.filter((e) => e.worker !== null).length;
      return { ready, starting: entries.length - ready };
    },

    async close() {
      closed = true;
      const all = [...entries];
      for (const entry of all) leave(entry, 'retired');
      // Ready ones are stopped here; starting ones by their preparation, which sees `retired`.
      for (const entry of all) if (entry.worker) void stop(entry.worker);
      await Promise.all(all.map((e) => e.pending));
      await Promise.all([...stopping]);
    },
  };
}
