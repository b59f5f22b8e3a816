import t from 'tap';
import { lowerOnly, parseLimitSettings, parseLimitsEnv } from '../../../../supervisor/limits/parse.js';

t.test('settings with units parse to bytes, CPUs and counts', async (t) => {
  const parsed = parseLimitSettings(
    { memory: '512M', data: '2g', file_size: 1024, cpu: '1.5', pids: 256, processes: '512', open_files: '1024' },
    'limits config',
  );
  t.same(parsed, {
    ok: true,
    limits: {
      memory: 512 * 1024 ** 2,
      data: 2 * 1024 ** 3,
      file_size: 1024,
      cpu: 1.5,
      pids: 256,
      processes: 512,
      open_files: 1024,
    },
  });
  t.same(parseLimitSettings({ memory: '1T', cpu: 2 }, 'x'), { ok: true, limits: { memory: 1024 ** 4, cpu: 2 } });
});

t.test('malformed settings are refused naming the key', async (t) => {
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ memory: '512MB' }, /memory must be a positive byte count/],
    [{ memory: '1.5G' }, /memory must be/],
    [{ memory: '0' }, /memory must be/],
    [{ memory: '-1' }, /memory must be/],
    [{ memory: '99999999999T' }, /memory must be/],
    [{ cpu: '0' }, /cpu must be a positive decimal number of CPUs/],
    [{ cpu: '1e3' }, /cpu must be/],
    [{ cpu: 'half' }, /cpu must be/],
    [{ pids: 1.5 }, /pids must be a positive integer/],
    [{ pids: '0' }, /pids must be/],
    [{ open_files: ' ' }, /open_files must be/],
    [{ pids: true }, /pids must be/],
    [{ swap: '1G' }, /unknown limit "swap"/],
    [{ __proto__x: '1' }, /unknown limit/],
  ];
  for (const [settings, detail] of cases) {
    const parsed = parseLimitSettings(settings, 'limits config');
    t.equal(parsed.ok, false, JSON.stringify(settings));
    if (!parsed.ok) {
      t.equal(parsed.reason, 'malformed_limits');
      t.match(parsed.detail, /^limits config: /);
      t.match(parsed.detail, detail);
    }
  }
});

t.test('TURNHOST_WORKER_LIMITS parses as a whole', async (t) => {
  t.same(parseLimitsEnv('memory=512M,pids=256,cpu=1.5,processes=512,open_files=1024,file_size=1G,data=2G'), {
    ok: true,
    limits: {
      memory: 512 * 1024 ** 2,
      pids: 256,
      cpu: 1.5,
      processes: 512,
      open_files: 1024,
      file_size: 1024 ** 3,
      data: 2 * 1024 ** 3,
    },
  });
  t.same(parseLimitsEnv(''), { ok: true, limits: {} });
  t.same(parseLimitsEnv(' memory = 1G , pids=2'), { ok: true, limits: { memory: 1024 ** 3, pids: 2 } });
});

t.test('one malformed entry refuses the whole variable, never a partial application', async (t) => {
  for (const value of [
    'memory=512M,pids=lots',
    'memory=512M,pids',
    'memory=512M,,pids=2',
    'memory=1G,memory=2G',
    'memory=512M,color=red',
    '=5',
  ]) {
    const parsed = parseLimitsEnv(value);
    t.equal(parsed.ok, false, value);
    t.notOk('limits' in parsed, `${value}: no limits returned`);
    if (!parsed.ok) t.match(parsed.detail, /^TURNHOST_WORKER_LIMITS: /);
  }
});

t.test('per-turn overrides may only lower', async (t) => {
  const defaults = { memory: 1024, pids: 100 };
  t.same(lowerOnly(defaults, { memory: 512 }), { ok: true, limits: { memory: 512, pids: 100 } });
  t.same(lowerOnly(defaults, { pids: 100 }), { ok: true, limits: { memory: 1024, pids: 100 } });
  const raised = lowerOnly(defaults, { memory: 512, pids: 101 });
  t.equal(raised.ok, false);
  if (!raised.ok) {
    t.equal(raised.reason, 'limit_raise');
    t.match(raised.detail, /^pids: override 101 is above the configured limit 100/);
  }
  // No default means unlimited, so any override lowers it.
  t.same(lowerOnly(defaults, { cpu: 0.5 }), { ok: true, limits: { memory: 1024, pids: 100, cpu: 0.5 } });
});

t.test('tmp_size is held between 1M and 1T, naming the field', async (t) => {
  for (const value of ['1023K', '2T', 1000]) {
    const parsed = parseLimitSettings({ tmp_size: value }, 'limits');
    t.equal(parsed.ok, false, String(value));
    if (!parsed.ok) t.match(parsed.detail, /^limits: tmp_size must be between 1M and 1T/);
  }
  t.same(parseLimitSettings({ tmp_size: '1M' }, 'limits'), { ok: true, limits: { tmp_size: 1024 ** 2 } });
  t.same(parseLimitSettings({ tmp_size: '1T' }, 'limits'), { ok: true, limits: { tmp_size: 1024 ** 4 } });
});
