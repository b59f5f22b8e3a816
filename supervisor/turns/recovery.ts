/**
 * At boot: turns a dead supervisor left running are marked interrupted, and every turn cgroup
 * left behind is killed, measured and removed, with a `worker_recovered` event each. Each such
 * turn's /tmp (a tmpfs of its own, turn-tmp.ts) is purged with it: a tmpfs ends with the last
 * process and fd holding it, the supervisor's fd died with the supervisor, and the reap ends
 * every process of the turn. Its `turn_temp_purge` receipt says whether that was established.
 *
 * An interrupted turn keeps the output that reached its files, and its result counts those
 * bytes (what was dropped over the cap before the restart is not known, so none is counted).
 * Output no turn record names (a delete interrupted between the record and its files) is removed.
 */
import { reapStaleTurnCgroups } from '../../cgroup/reap.js';
import { serverTurnEvent } from '../../core/events.js';
import type { LaunchEnvironment } from './launch-environment.js';
import { streamsOf, type OutputFiles } from './output.js';
import { isPreparedWorkerName } from './prepared-workers.js';
import { finishedWithoutRun } from './turn-result.js';
import type { OutputCounts, TurnRecord } from './types.js';

export function recoverInterruptedTurns(env: LaunchEnvironment, outputs: OutputFiles): void {
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
    const interrupted = finishedWithoutRun(
      turn,
      'interrupted',
      'the supervisor stopped while this turn ran; its processes were killed at the next start',
    );
    if (interrupted.result) interrupted.result.output = keptOutput(outputs, turn);
    records.update(interrupted);
    deps.logger.warn('turn interrupted by a supervisor restart', { turnId: turn.id });
  }
  for (const turnId of outputs.removeOrphans((id) => records.exists(id)))
    deps.logger.info('output of a deleted turn removed', { turnId });
}

/** What an interrupted turn's files hold, as its counts. */
function keptOutput(outputs: OutputFiles, turn: TurnRecord): OutputCounts {
  const counts: OutputCounts = {};
  for (const stream of streamsOf(turn.tty))
    counts[stream] = { written: outputs.keptBytes(turn.id, stream) ?? 0, dropped: 0 };
  return counts;
}
