/**
 * A turn's result, from the facts the supervisor holds at its end: why it was stopped, what the
 * worker reported, what the helper refused, and the turn cgroup's counters.
 */
import type { LimitHit } from '../../core/limits.js';
import type { ExitMessage } from './worker-protocol.js';
import type { TurnCgroupStats } from '../../cgroup/types.js';
import type { TurnRecord, TurnResult, TurnStatus, TurnUsage } from './types.js';

export interface ResultInputs {
  stopReason: 'cancelled' | 'timeout' | null;
  exitMessage: ExitMessage | null;
  workerError: string | null;
  /** Why the launch was refused (the helper's refusal, or the claim's checks); null when it was not. */
  refusal: string | null;
  workerExitCode: number | null;
  stats: TurnCgroupStats;
  durationMs: number;
}

/**
 * The status, first match wins: the supervisor stopped it (cancel, timeout) → the cgroup saw
 * an OOM kill → the command died of a signal → it exited (0 or not) → the launch was refused →
 * anything else is an internal error, with what is known of it.
 */
export function buildResult(inputs: ResultInputs): TurnResult {
  const { exitMessage, stats } = inputs;
  const limitHits: LimitHit[] = [...stats.limitHits];
  const usage: TurnUsage = {
    userCpuUsec: exitMessage?.rusage.userCpuUsec ?? null,
    systemCpuUsec: exitMessage?.rusage.systemCpuUsec ?? null,
    maxRssKiB: exitMessage?.rusage.maxRssKiB ?? null,
    cgroupCpuUsec: stats.cpuUsec,
    memoryPeakBytes: stats.memoryPeakBytes,
    pidsPeak: stats.pidsPeak,
    oomKills: stats.oomKills,
  };
  let status: TurnStatus;
  let detail: string | undefined;
  if (inputs.stopReason) status = inputs.stopReason;
  else if ((stats.oomKills ?? 0) > 0) status = 'oom_killed';
  else if (exitMessage?.signal) status = 'signaled';
  else if (exitMessage) {
    status = exitMessage.exitCode === 0 ? 'ok' : 'nonzero_exit';
    detail = exitMessage.detail;
  } else if (inputs.refusal) {
    status = 'launch_refused';
    detail = inputs.refusal;
  } else {
    status = 'internal_error';
    detail = inputs.workerError ?? `the worker exited (code ${inputs.workerExitCode}) without reporting a result`;
  }
  const fromReport = status === 'ok' || status === 'nonzero_exit' || status === 'signaled';
  return {
    status,
    exitCode: exitMessage?.exitCode ?? null,
    signal: exitMessage?.signal ?? null,
    durationMs: inputs.durationMs,
    usage,
    limitHits,
    ...(detail ? { detail } : {}),
    source: fromReport ? 'worker_report' : 'supervisor',
    ...(status === 'nonzero_exit' && exitMessage?.spawnError ? { spawnError: exitMessage.spawnError } : {}),
  };
}

/** A turn that ends without a worker result (refused, or interrupted by a supervisor restart). */
export function finishedWithoutRun(
  turn: TurnRecord,
  status: 'launch_refused' | 'interrupted',
  detail: string,
): TurnRecord {
  const endedAt = new Date().toISOString();
  const result: TurnResult = {
    status,
    exitCode: null,
    signal: null,
    durationMs: Date.parse(endedAt) - Date.parse(turn.createdAt),
    usage: emptyUsage(),
    limitHits: [],
    detail,
    source: 'supervisor',
  };
  return { ...turn, state: 'finished', endedAt, result };
}

function emptyUsage(): TurnUsage {
  return {
    userCpuUsec: null,
    systemCpuUsec: null,
    maxRssKiB: null,
    cgroupCpuUsec: null,
    memoryPeakBytes: null,
    pidsPeak: null,
    oomKills: null,
  };
}
