import t from 'tap';
import { defaultConfig } from '../../../../supervisor/config/load.js';
import { applyLiveKeys, LIVE_KEYS, planReload } from '../../../../supervisor/config/reload.js';
import { buildTurnPolicy } from '../../../../proxy/policy.js';
import { workerKey } from '../../../../supervisor/turns/turn-request.js';

const base = () => defaultConfig({ installed: false, cwd: '/srv/x' });

t.test('live keys are applied in place; boot-bound keys are reported for a restart and left alone', async (t) => {
  const running = base();
  const held = running.egress;
  const next = base();
  next.egress.allowlist = ['example.org'];
  next.limits = { ...next.limits, memory: '1G' };
  next.logLevel = 'debug';
  next.events.unboundRetentionDays = 7;
  next.events.sessionRetentionDays = 30;
  next.listen.tcp = '127.0.0.1:9999';
  next.turns.preparedWorkers = 0;
  const plan = planReload(running, next);
  t.same(plan.live, [
    'egress.allowlist',
    'events.sessionRetentionDays',
    'events.unboundRetentionDays',
    'limits',
    'logLevel',
  ]);
  t.same(plan.restart, ['listen.tcp', 'turns.preparedWorkers']);
  applyLiveKeys(running, next, plan);
  t.same(running.egress.allowlist, ['example.org']);
  t.equal(running.egress, held, 'the same objects stay in place: mechanisms holding them see the change');
  t.equal(running.limits.memory, '1G');
  t.equal(running.logLevel, 'debug');
  t.equal(running.events.unboundRetentionDays, 7);
  t.equal(running.events.sessionRetentionDays, 30, 'session retention is read at each pass');
  t.equal(running.listen.tcp, '127.0.0.1:7707', 'a restart key is not applied');
  t.equal(running.turns.preparedWorkers, 1);
  next.egress.allowlist.push('later.example');
  t.same(running.egress.allowlist, ['example.org'], 'applied values are copies');
});

t.test('an unchanged configuration plans nothing', async (t) => {
  t.same(planReload(base(), base()), { live: [], restart: [] });
});

t.test('every live key names a real configuration key', async (t) => {
  const config = base() as unknown as Record<string, unknown>;
  for (const key of LIVE_KEYS) {
    let node: unknown = config;
    for (const part of key.split('.')) node = (node as Record<string, unknown>)[part];
    t.not(node, undefined, key);
  }
});

t.test('a prepared worker key changes with the egress policy', async (t) => {
  const policy = (allow: string[]) => {
    const built = buildTurnPolicy({ ...base().egress, allowlist: allow }, { mode: 'ordinary', additions: [] });
    if (!built.ok) throw new Error(built.detail);
    return built.policy;
  };
  const brokers = { providers: [], credentials: [], maxRequestBytes: 1 << 20 };
  const spec = { mode: 'ordinary' as const, cwd: '/srv/x', limits: { pids: 64 }, egressAdditions: [], brokers };
  t.equal(workerKey({ ...spec, policy: policy(['a.example']) }), workerKey({ ...spec, policy: policy(['a.example']) }));
  t.not(
    workerKey({ ...spec, policy: policy(['a.example']) }),
    workerKey({ ...spec, policy: policy(['a.example', 'b.example']) }),
    'a worker prepared before the allowlist changed is not claimed after it',
  );
});
