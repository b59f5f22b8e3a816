/**
 * At boot: turns a dead supervisor left running are marked interrupted, and every turn cgroup
 * left behind is killed, measured and removed, with a `worker_recovered` event each. Each such
 * turn's /tmp (a tmpfs of its own, turn-tmp.ts) is purged with it: a tmpfs ends with the last
 * process and fd holding it, the supervisor's fd died with the supervisor, and the reap ends
 * every process of the turn. Its `turn_temp_purge` receipt says whether that was established.
 */
import { reapStaleTurnCgroups } from '../../cgroup/reap.js';
import { serverTurnEvent } from '../../core/events.js';
import type { LaunchEnvironment } from './launch-environment.js';
import { isPreparedWorkerName } from './prepared-workers.js';
import { finishedWithoutRun } from './turn-result.js';
import type { TurnRecord } from './types.js';

export function recoverInterruptedTurns(env: LaunchEnvironment): void {
  const { deps, records } = env;
  const unfinished = records.unfinished();
  // A turn that claimed a prepared worker runs in a leaf named after the worker, not the turn.
  const turnOfLeaf = new Map(
    unfinished.flatMap(({ turn, cgroupPaths }) => cgroupPaths.map((leaf) => [leaf, turn] as const)),
  );
  const turnById = new Map<string, TurnRecord>(unfinished.map(({ turn }) => [turn.id, turn]));
  /** Turns whose every leaf was emptied and removed: nothing of them can still hold their temp. */
  const emptied = new Map<string, boolean>();
  if (env.cgroupSubtree.ok) {
    for (const reaped of reapStaleTurnCgroups(env.cgroupSubtree.subtree)) {
      const turn =
        reaped.paths.map((leaf) => turnOfLeaf.get(leaf)).find((found) => found !== undefined) ??
        turnById.get(reaped.turnId);
      if (turn) emptied.set(turn.id, (emptied.get(turn.id) ?? true) && reaped.outcome.ok);
      deps.events.append({
        sessionId: turn?.sessionId ?? null,
        // A prepared worker no turn had claimed belongs to no turn.
        turnId: turn?.id ?? (isPreparedWorkerName(reaped.turnId) ? null : reaped.turnId),
        kind: 'worker_recovered',
        actor: 'server',
        model: null,
        profile: turn?.profile ?? null,
        payload: {
          cgroup: reaped.paths[0] ?? '',
          paths: reaped.paths,
          usage: reaped.stats,
          killedProcesses: reaped.killedProcesses,
          outcome: reaped.outcome,
        },
      });
    }
  }
  for (const { turn } of unfinished) {
    deps.events.append(
      serverTurnEvent(
        { sessionId: turn.sessionId, turnId: turn.id, profile: turn.profile, model: null },
        'turn_temp_purge',
        // The tmpfs is gone with its holders and cannot be measured any more: no counts.
        { bytes: 0, inodes: 0, outcome: emptied.get(turn.id) === true ? 'recovered' : 'unconfirmed' },
      ),
    );
    records.update(
      finishedWithoutRun(
        turn,
        'interrupted',
        'the supervisor stopped while this turn ran; its processes were killed at the next start',
      ),
    );
    deps.logger.warn('turn interrupted by a supervisor restart', { turnId: turn.id });
  }
}
