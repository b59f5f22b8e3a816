import t from 'tap';
import { defaultConfig } from '../../../../supervisor/config/load.js';
import { reservedEnvName } from '../../../../supervisor/turns/env-filter.js';
import { commandEnv } from '../../../../supervisor/turns/turn-request.js';
import { validateTurnRequest } from '../../../../supervisor/turns/validate.js';

const config = defaultConfig({ installed: false, cwd: '/work' });
config.turns.workspaceRoots = ['/work'];
const base = { sessionId: 's1', mode: 'ordinary', argv: ['true'], cwd: '/work' };

/** One name of every class the boundary owns. */
const RESERVED = [
  'LD_PRELOAD',
  'LD_LIBRARY_PATH',
  'LD_AUDIT',
  'LD_anything',
  'GLIBC_TUNABLES',
  'HTTP_PROXY',
  'https_proxy',
  'All_Proxy',
  'no_proxy',
  'NO_PROXY',
  'TMPDIR',
  'NODE_USE_ENV_PROXY',
  'TURNHOST_ENV_EXTRA',
  'TURNHOST_TOKEN',
  'TURNHOST_CREDENTIAL_GIT_URL',
  'ANTHROPIC_BASE_URL',
  'ANTHROPIC_API_KEY',
  'ANTHROPIC_AUTH_TOKEN',
  'OPENAI_BASE_URL',
  'OPENAI_API_KEY',
  'GIT_CONFIG_COUNT',
  'GIT_CONFIG_KEY_0',
  'GIT_CONFIG_VALUE_0',
  'GIT_CONFIG_PARAMETERS',
];

t.test('every reserved class is refused, naming env.NAME', async (t) => {
  for (const name of RESERVED) {
    t.ok(reservedEnvName(name), `${name} is reserved`);
    const checked = validateTurnRequest({ ...base, env: { OK: 'x', [name]: 'v' } }, config);
    t.equal(checked.ok, false, name);
    if (checked.ok) continue;
    t.equal(checked.field, `env.${name}`);
    t.match(checked.detail, new RegExp(`^env\\.${name}: reserved: `));
    t.same(
      checked.errors.map((e) => e.field),
      [`env.${name}`],
      'only the reserved name is refused',
    );
  }
});

t.test('ordinary names pass, whatever the old allowlist said', async (t) => {
  for (const name of [
    'FOO',
    'AWS_SECRET_ACCESS_KEY',
    'NODE_OPTIONS',
    'PATH',
    'HOME',
    'my.var',
    'x-y',
    'LDX',
    'PROXY',
  ]) {
    t.equal(reservedEnvName(name), null, name);
    t.ok(validateTurnRequest({ ...base, env: { [name]: 'v' } }, config).ok, name);
  }
});

t.test('names without "=" or NUL, values without NUL and within the cap', async (t) => {
  const cases: Array<[Record<string, string>, string]> = [
    [{ 'A=B': 'x' }, 'env.A=B'],
    [{ 'A\u0000B': 'x' }, 'env.A\u0000B'],
    [{ '': 'x' }, 'env.'],
    [{ A: 'x\u0000y' }, 'env.A'],
    [{ A: 'x'.repeat(32 * 1024 + 1) }, 'env.A'],
  ];
  for (const [env, field] of cases) {
    const checked = validateTurnRequest({ ...base, env }, config);
    t.equal(checked.ok, false, JSON.stringify(field));
    if (!checked.ok) t.equal(checked.field, field);
  }
  t.ok(validateTurnRequest({ ...base, env: { A: 'x'.repeat(32 * 1024) } }, config).ok, 'a value at the cap passes');
});

t.test('the command environment: the base, the caller variables as given, then the boundary', async (t) => {
  const checked = validateTurnRequest({ ...base, env: { FOO: 'bar', PATH: '/opt/bin', HOME: '/h' } }, config);
  if (!checked.ok) throw new Error(checked.detail);
  t.same(commandEnv(checked.request), {
    PATH: '/opt/bin',
    HOME: '/h',
    LANG: 'C.UTF-8',
    FOO: 'bar',
    NODE_USE_ENV_PROXY: '1',
  });
  const plain = validateTurnRequest({ ...base, tty: { cols: 80, rows: 24 } }, config);
  if (!plain.ok) throw new Error(plain.detail);
  t.same(Object.keys(commandEnv(plain.request)).sort(), ['HOME', 'LANG', 'NODE_USE_ENV_PROXY', 'PATH', 'TERM']);
});
