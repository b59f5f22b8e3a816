/**
 * buildResult's status order: the supervisor's stop wins over everything, an OOM kill over the
 * command's own exit, a signal over an exit code, any exit report over a refusal, and only
 * what is left is an internal error.
 */
import t from 'tap';
import type { TurnCgroupStats } from '../../../../cgroup/types.js';
import { buildResult, finishedWithoutRun, type ResultInputs } from '../../../../supervisor/turns/turn-result.js';
import type { TurnRecord } from '../../../../supervisor/turns/types.js';
import type { ExitMessage } from '../../../../supervisor/turns/worker-protocol.js';

const quietStats: TurnCgroupStats = {
  cpuUsec: 10,
  nrThrottled: 0,
  throttledUsec: 0,
  memoryPeakBytes: 1024,
  oomKills: 0,
  pidsPeak: 2,
  pidsCurrent: 0,
  pidsMaxEvents: 0,
  limitHits: [],
};

function exitWith(exitCode: number | null, signal: string | null = null): ExitMessage {
  return { type: 'exit', exitCode, signal, rusage: { userCpuUsec: 1, systemCpuUsec: 2, maxRssKiB: 3 } };
}

function inputs(overrides: Partial<ResultInputs>): ResultInputs {
  return {
    stopReason: null,
    exitMessage: null,
    workerError: null,
    refusal: null,
    workerExitCode: 0,
    stats: quietStats,
    durationMs: 5,
    ...overrides,
  };
}

const oomStats: TurnCgroupStats = { ...quietStats, oomKills: 1, limitHits: ['memory_oom'] };

t.test('each status, and which fact wins when several hold', async (t) => {
  const cases: Array<[string, Partial<ResultInputs>, string]> = [
    ['a clean exit', { exitMessage: exitWith(0) }, 'ok'],
    ['a nonzero exit', { exitMessage: exitWith(3) }, 'nonzero_exit'],
    ['a signal beats the exit code', { exitMessage: exitWith(null, 'SIGTERM') }, 'signaled'],
    ['an OOM kill beats the command signal', { exitMessage: exitWith(null, 'SIGKILL'), stats: oomStats }, 'oom_killed'],
    [
      'a timeout beats the OOM kill',
      { stopReason: 'timeout', exitMessage: exitWith(null, 'SIGKILL'), stats: oomStats },
      'timeout',
    ],
    ['a cancel beats a clean exit', { stopReason: 'cancelled', exitMessage: exitWith(0) }, 'cancelled'],
    ['an exit report beats a refusal', { exitMessage: exitWith(0), refusal: 'refused late' }, 'ok'],
    [
      'a refusal without a report',
      { refusal: 'view refused: .env is a symbolic link', workerExitCode: 78 },
      'launch_refused',
    ],
    ['a refusal beats a worker error', { refusal: 'refused', workerError: 'spawn_failed: ENOENT' }, 'launch_refused'],
    ['nothing reported: internal error', { workerError: 'spawn_failed: ENOENT', workerExitCode: 1 }, 'internal_error'],
  ];
  for (const [name, given, status] of cases) t.equal(buildResult(inputs(given)).status, status, name);
});

t.test("an exit status only the worker's report gives is marked so; the supervisor's own facts are not", async (t) => {
  const cases: Array<[Partial<ResultInputs>, string]> = [
    [{ exitMessage: exitWith(0) }, 'worker_report'],
    [{ exitMessage: exitWith(3) }, 'worker_report'],
    [{ exitMessage: exitWith(null, 'SIGTERM') }, 'worker_report'],
    [{ exitMessage: exitWith(null, 'SIGKILL'), stats: oomStats }, 'supervisor'],
    [{ stopReason: 'timeout', exitMessage: exitWith(0) }, 'supervisor'],
    [{ refusal: 'refused' }, 'supervisor'],
    [{ workerError: 'protocol: bad line' }, 'supervisor'],
  ];
  for (const [given, source] of cases) {
    const result = buildResult(inputs(given));
    t.equal(result.source, source, result.status);
  }
});

t.test('a command that could not start is a nonzero exit with its spawn error and why', async (t) => {
  const result = buildResult(
    inputs({
      exitMessage: { ...exitWith(127), spawnError: 'not_found', detail: '"nope": command not found' },
    }),
  );
  t.match(result, {
    status: 'nonzero_exit',
    exitCode: 127,
    spawnError: 'not_found',
    detail: '"nope": command not found',
    source: 'worker_report',
  });
  const cancelled = buildResult(
    inputs({ stopReason: 'cancelled', exitMessage: { ...exitWith(126), spawnError: 'not_executable', detail: 'x' } }),
  );
  t.equal(cancelled.spawnError, undefined, 'only a nonzero exit carries it');
});

t.test('details: a refusal and an internal error say why; other statuses carry none', async (t) => {
  t.equal(buildResult(inputs({ refusal: 'the reason' })).detail, 'the reason');
  t.equal(buildResult(inputs({ workerError: 'protocol: bad line' })).detail, 'protocol: bad line');
  t.match(buildResult(inputs({ workerExitCode: 9 })).detail, /exited \(code 9\) without reporting a result/);
  t.notOk('detail' in buildResult(inputs({ exitMessage: exitWith(0) })), 'an ok result has no detail');
});

t.test('usage: rusage from the report, counters from the cgroup, limit hits copied', async (t) => {
  const result = buildResult(inputs({ exitMessage: exitWith(0), stats: oomStats }));
  t.same(result.usage, {
    userCpuUsec: 1,
    systemCpuUsec: 2,
    maxRssKiB: 3,
    cgroupCpuUsec: 10,
    memoryPeakBytes: 1024,
    pidsPeak: 2,
    oomKills: 1,
  });
  t.same(result.limitHits, ['memory_oom']);
  t.not(result.limitHits, oomStats.limitHits, 'a copy, not the stats array');
  t.same(buildResult(inputs({ refusal: 'x' })).usage.userCpuUsec, null, 'no report: no rusage');
});

t.test('a turn that never ran ends finished with no usage', async (t) => {
  const record: TurnRecord = {
    id: 'turn-x',
    sessionId: 's',
    mode: 'ordinary',
    profile: 'governed',
    state: 'starting',
    identity: 'shared_uid',
    workerUid: null,
    createdAt: new Date(Date.now() - 1000).toISOString(),
    endedAt: null,
    tty: false,
    result: null,
    argv: ['true'],
    cwd: '/w',
    envNames: [],
    limits: {},
    timeoutSeconds: 600,
  };
  const ended = finishedWithoutRun(record, 'interrupted', 'the supervisor stopped');
  t.equal(ended.state, 'finished');
  t.match(ended.result, {
    status: 'interrupted',
    exitCode: null,
    detail: 'the supervisor stopped',
    limitHits: [],
    source: 'supervisor',
  });
  t.ok((ended.result?.durationMs ?? 0) >= 1000, 'its duration runs from its creation');
  t.equal(record.state, 'starting', 'the record given is not changed');
});
