/**
 * Worker uids for concurrent turns (isolate-style): each running turn holds one uid from the
 * helper's verified range, and no two running turns share one.
 */
import { fail, ok, type Result } from '../../core/result.js';

export interface UidPool {
  acquire(): Result<{ uid: number }, 'uid_range_exhausted'>;
  release(uid: number): void;
  inUse(): number[];
}

function createUidPool(range: { first: number; count: number }): UidPool {
  const held = new Set<number>();
  let cursor = 0;
  return {
    acquire() {
      for (let step = 0; step < range.count; step++) {
        const uid = range.first + ((cursor + step) % range.count);
        if (!held.has(uid)) {
          held.add(uid);
          cursor = (cursor + step + 1) % range.count;
          return ok({ uid });
        }
      }
      return fail('uid_range_exhausted', `all ${range.count} worker uids from ${range.first} are in use`);
    },
    release(uid) {
      held.delete(uid);
    },
    inUse: () => [...held],
  };
}

/** A worker uid held until `release`. */
export interface UidLease {
  uid: number;
  release(): void;
}

/** A uid from the pool of this range (one pool per verified range, made on first use). */
export function leaseUid(
  pools: Map<string, UidPool>,
  range: { first: number; count: number },
): Result<UidLease, 'uid_range_exhausted'> {
  const key = `${range.first}:${range.count}`;
  let pool = pools.get(key);
  if (!pool) {
    pool = createUidPool(range);
    pools.set(key, pool);
  }
  const taken = pool.acquire();
  if (!taken.ok) return taken;
  const held = pool;
  return ok({ uid: taken.uid, release: () => held.release(taken.uid) });
}
