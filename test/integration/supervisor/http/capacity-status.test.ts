/**
 * The status's capacity through a real served supervisor in each identity mode: the
 * `turns.maxConcurrent` derived from this host (nothing configures it here) and, in
 * separate_uid, the worker uid range that caps it, which is what a turn beyond it meets.
 */
import t from 'tap';
import { deriveMaxConcurrent, hostCapacityFacts } from '../../../../supervisor/config/capacity.js';
import { stopTapInjectingIntoChildren } from '../../../support/no-tap-inject.js';
import { servedApi } from '../../../support/served-api.js';
import { setUpHelper, startSupervisor, stopSupervisors, supervisorBase } from '../../../support/served-supervisor.js';

stopTapInjectingIntoChildren();

/** Two uids: fewer than the derived value on any host with 2 GiB or more. */
const RANGE = { first: 3_192_900, count: 2 };
const helper = setUpHelper([supervisorBase('capacity-separate').dataDir], RANGE);
t.teardown(() => helper.remove());
const separate = await startSupervisor({ name: 'capacity-separate', helper });
const shared = await startSupervisor({ name: 'capacity-shared' });
t.teardown(() => stopSupervisors([separate, shared]));

/** The served supervisors' limits.memory (test/support/served-supervisor.ts). */
const derived = deriveMaxConcurrent(hostCapacityFacts(), 512 * 1024 ** 2);

t.test('shared_uid: the derived value, no uid range to cap it', async (t) => {
  const status = await servedApi(shared).request('GET', '/api/status');
  t.equal(status.status, 200);
  t.match((status.body as any).runtime.concurrency, {
    maxConcurrent: derived.value,
    configured: derived.value,
    source: 'derived',
    cappedBy: null,
    uidRangeSize: null,
    derived: { value: derived.value, memoryBound: derived.memoryBound, cpuBound: derived.cpuBound },
  });
});

t.test('separate_uid: a uid range smaller than the derived value caps it, and status says so', async (t) => {
  const api = servedApi(separate);
  const status = (await api.request('GET', '/api/status')).body as any;
  t.same(status.runtime.workerHost.uidRange, RANGE, 'the probe reports the range the helper verified');
  const capped = derived.value > RANGE.count;
  t.match(status.runtime.concurrency, {
    maxConcurrent: Math.min(derived.value, RANGE.count),
    configured: derived.value,
    source: 'derived',
    cappedBy: capped ? 'uid_range' : null,
    uidRangeSize: RANGE.count,
  });
  if (capped) t.match(status.runtime.concurrency.reason, /; capped at 2 by the worker uid range/);

  // The cap is what a turn meets: with both uids held, the next turn is refused as over capacity.
  const running: string[] = [];
  for (let i = 0; i < RANGE.count; i++) {
    const created = await api.createTurn('capacity', ['sleep', '600']);
    t.equal(created.status, 201, `turn ${i + 1} of ${RANGE.count} starts`);
    running.push((created.body as any).turn.id);
  }
  const beyond = await api.createTurn('capacity', ['/bin/true']);
  t.equal(beyond.status, 429, 'one turn beyond the uid range is refused');
  t.match(beyond.body, { code: 'capacity_exhausted', error: /all 2 worker uids from 3192900 are in use/ });
  for (const id of running) {
    const cancelled = await api.request('POST', `/api/turns/${id}/cancel?wait=60`);
    t.equal(cancelled.status, 200);
  }
  const after = await api.request('POST', '/api/turns?wait=60', {
    sessionId: 'capacity',
    mode: 'ordinary',
    argv: ['/bin/true'],
    cwd: separate.workspace,
  });
  t.match(after.body, { turn: { state: 'finished', result: { status: 'ok' } } }, 'a uid freed, a turn runs again');
});
