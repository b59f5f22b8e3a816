/**
 * The worker's turn temp (its TMPDIR): created owned by the worker uid and held by a directory
 * fd; at disposal measured and purged without following links, with a `turn_temp_purge`
 * receipt for the turn the worker served (none for a prepared worker no turn claimed). With
 * `helper` (a non-root supervisor) the temp is created as ours, the helper's launch hands it to
 * the worker, and the helper's reclaim hands it back right before the purge.
 */
import { serverTurnEvent, type EventSink, type TurnAttribution } from '../../core/events.js';
import type { Logger } from '../../core/log.js';
import { fail, ok, type Result } from '../../core/result.js';
import type { RootHandle } from '../fs/guard.js';
import { createTurnTemp, purgeTurnTemp, turnTempPurgePayload } from '../fs/turn-temp.js';
import { runHelperReclaim, type HelperLocation } from '../identity/helper-client.js';

export interface WorkerTemp {
  temp: RootHandle;
  /** Reclaims (through the helper) and purges the temp; run after the worker's processes are dead. */
  dispose(): Promise<void>;
}

export function createWorkerTemp(options: {
  parentDir: string;
  name: string;
  uid: number;
  helper: HelperLocation | null;
  events: EventSink;
  logger: Logger;
  /** The turn the worker served by the time it is disposed, if any. */
  turnOf: () => TurnAttribution | null;
}): Result<WorkerTemp, 'temp_unavailable'> {
  const { name, uid, helper, logger } = options;
  const temp = createTurnTemp({ parentDir: options.parentDir, name, uid, gid: uid, owner: helper ? 'self' : 'worker' });
  if (!temp.ok) return fail('temp_unavailable', `turn temp: ${temp.reason}: ${temp.detail}`);
  const dispose = async (): Promise<void> => {
    if (helper) {
      // A failed reclaim leaves worker-owned entries the purge cannot remove: its receipt says partial.
      const reclaimed = await runHelperReclaim(helper, { uid, temp: temp.path });
      if (reclaimed.ok)
        logger.debug('turn temp reclaimed', {
          worker: name,
          reclaimed: reclaimed.reclaimed,
          skipped: reclaimed.skipped,
        });
      else
        logger.warn('turn temp reclaim failed', { worker: name, reason: reclaimed.reason, detail: reclaimed.detail });
    }
    const purge = purgeTurnTemp(temp, { removeRoot: true });
    if (purge.outcome !== 'purged')
      logger.warn('turn temp purge incomplete', { worker: name, errorCount: purge.errorCount, errors: purge.errors });
    const turn = options.turnOf();
    if (turn) options.events.append(serverTurnEvent(turn, 'turn_temp_purge', { ...turnTempPurgePayload(purge) }));
  };
  return ok({ temp, dispose });
}
