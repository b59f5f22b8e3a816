/**
 * The turn's /tmp: a tmpfs of its own that the helper mounts in the worker's view (also at
 * /var/tmp; its /dev/shm is another of the same size), bounded by the `tmp_size` limit and
 * charged to the turn's memory cgroup. The helper hands its root to the supervisor before the
 * worker exists (the launch report); the supervisor holds it for host writes into the turn's
 * temp, and at disposal measures what the turn left (the kernel's own count, readable by any
 * supervisor, root or not) with a `turn_temp_purge` receipt, then lets it go: the tmpfs ends
 * with the last process and the last fd that hold it. Nothing of it is ever on a host disk.
 */
import fs from 'node:fs';
import { serverTurnEvent, type EventSink, type TurnAttribution } from '../../core/events.js';
import type { Logger } from '../../core/log.js';
import type { RootHandle } from '../fs/guard.js';

/** The path the worker and its command know the turn's temp by (their TMPDIR). */
export const TURN_TMP_PATH = '/tmp';

export interface TurnTmp {
  /** The tmpfs root, for the fs guard (host writes). */
  root: RootHandle;
  /** Measures, records the receipt for the turn the worker served (if any) and closes the fd. */
  dispose(): void;
}

export interface TurnTmpUsage {
  bytes: number;
  inodes: number;
}

/** What the turn's tmpfs holds now: the kernel's count of its used blocks and inodes. */
export function measureTurnTmp(fd: number): TurnTmpUsage | null {
  try {
    const st = fs.statfsSync(`/proc/self/fd/${fd}`);
    // The root directory is an inode of its own: an empty tmpfs uses one.
    return { bytes: (st.blocks - st.bfree) * st.bsize, inodes: Math.max(0, st.files - st.ffree - 1) };
  } catch {
    return null;
  }
}

export function holdTurnTmp(
  fd: number,
  options: { events: EventSink; logger: Logger; turnOf: () => TurnAttribution | null },
): TurnTmp {
  const st = fs.fstatSync(fd, { bigint: true });
  const root: RootHandle = { fd, path: TURN_TMP_PATH, dev: st.dev, ino: st.ino };
  return {
    root,
    dispose() {
      const usage = measureTurnTmp(fd);
      fs.closeSync(fd);
      if (usage === null) options.logger.warn('turn temp could not be measured');
      const turn = options.turnOf();
      if (turn) {
        options.events.append(
          serverTurnEvent(turn, 'turn_temp_purge', {
            bytes: usage?.bytes ?? 0,
            inodes: usage?.inodes ?? 0,
            outcome: usage === null ? 'unmeasured' : 'purged',
          }),
        );
      }
    },
  };
}
