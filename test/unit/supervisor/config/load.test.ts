import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { defaultConfig, isInstalledLayout, loadConfig, parseHostPort } from '../../../../supervisor/config/load.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-config-'));
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }));
const cwd = path.join(tmp, 'checkout');
/** 0.8 x 16 GiB / 2 GiB (the default limits.memory) = 6.4 turns; 64 x 4 cores = 256. */
const HOST = { memoryBytes: 16 * 1024 ** 3, cpus: 4 };

function writeConfig(name: string, content: unknown): string {
  const file = path.join(tmp, name);
  fs.writeFileSync(file, typeof content === 'string' ? content : JSON.stringify(content));
  return file;
}

function load(
  options: {
    file?: unknown;
    env?: NodeJS.ProcessEnv;
    overrides?: Parameters<typeof loadConfig>[0]['overrides'];
    installed?: boolean;
  } = {},
) {
  const configPath =
    options.file === undefined ? undefined : writeConfig(`c-${Math.random().toString(36).slice(2)}.json`, options.file);
  return loadConfig({
    configPath,
    env: options.env ?? {},
    overrides: options.overrides,
    installed: options.installed ?? false,
    cwd,
    host: HOST,
  });
}

function refusal(result: ReturnType<typeof loadConfig>): string {
  if (result.ok) throw new Error('expected a refusal');
  return result.detail;
}

t.test('defaults: every key, dev data dir under the working directory', async (t) => {
  const result = load();
  t.ok(result.ok);
  if (!result.ok) return;
  // turns.maxConcurrent, unconfigured, is derived from the host: min(floor(6.4), 256).
  const defaults = defaultConfig({ installed: false, cwd });
  t.same(result.config, { ...defaults, turns: { ...defaults.turns, maxConcurrent: 6 } });
  t.equal(result.config.dataDir, path.join(cwd, '.turnhost-dev'));
  t.equal(result.config.listen.tcp, '127.0.0.1:7707');
  t.equal(result.config.listen.socket, null);
  t.equal(result.config.logLevel, 'info');
  t.match(result.sources, { file: null, env: [], cli: [], installed: false, capacity: { source: 'derived' } });
  t.same(result.sources.capacity.derived, {
    value: 6,
    memoryBound: 6,
    cpuBound: 256,
    host: HOST,
    memoryLimitBytes: 2 * 1024 ** 3,
  });
});

t.test('turns.maxConcurrent: derived unless the file or the environment sets it', async (t) => {
  const small = load({ file: { limits: { memory: '4G' } } });
  t.ok(small.ok);
  if (!small.ok) return;
  t.equal(small.config.turns.maxConcurrent, 3, 'the memory term follows limits.memory: floor(0.8 x 16 / 4)');
  t.equal(small.sources.capacity.source, 'derived');

  const unlimited = load({ file: { limitsDisabled: ['memory'] } });
  t.ok(unlimited.ok);
  if (!unlimited.ok) return;
  t.equal(unlimited.config.turns.maxConcurrent, 256, 'without a memory limit only the cores term bounds it');
  t.equal(unlimited.sources.capacity.derived.memoryBound, null);

  const configured = load({ file: { turns: { maxConcurrent: 40 } } });
  t.ok(configured.ok);
  if (!configured.ok) return;
  t.equal(configured.config.turns.maxConcurrent, 40, 'a configured value stands, above the derived one too');
  t.equal(configured.sources.capacity.source, 'configured');
  t.equal(configured.sources.capacity.derived.value, 6, 'the derived value is still reported next to it');

  const fromEnv = load({ env: { TURNHOST_MAX_CONCURRENT_TURNS: '2' } });
  t.ok(fromEnv.ok);
  if (!fromEnv.ok) return;
  t.equal(fromEnv.config.turns.maxConcurrent, 2);
  t.equal(fromEnv.sources.capacity.source, 'configured');
});

t.test('installed layout: /var/lib/turnhost and no dev workspace roots', async (t) => {
  const config = defaultConfig({ installed: true, cwd });
  t.equal(config.dataDir, '/var/lib/turnhost');
  t.same(config.turns.workspaceRoots, []);
  t.equal(isInstalledLayout('file:///usr/lib/turnhost/dist/supervisor/config/load.js'), true);
  t.equal(isInstalledLayout('file:///usr/lib/turnhostx/dist/supervisor/config/load.js'), false);
  t.equal(isInstalledLayout('file:///home/dev/turnhost/supervisor/config/load.ts'), false);
});

t.test('file values merge over defaults, nested objects key by key', async (t) => {
  const result = load({
    file: {
      logLevel: 'debug',
      egress: { maxConnections: 8 },
      limits: { memory: '512M' },
      modes: { restricted: { enabled: true } },
    },
  });
  t.ok(result.ok);
  if (!result.ok) return;
  t.equal(result.config.logLevel, 'debug');
  t.equal(result.config.egress.maxConnections, 8);
  t.equal(result.config.egress.idleTimeoutMs, 60_000, 'sibling keys keep their defaults');
  t.equal(result.config.limits.memory, '512M');
  t.equal(result.config.limits.pids, 512, 'other limits keep their defaults');
  t.equal(result.config.modes.restricted.enabled, true);
  t.match(result.sources.file, /c-.*\.json$/);
});

t.test('an explicitly named missing file is an error; TURNHOST_CONFIG names a file too', async (t) => {
  const missing = path.join(tmp, 'absent.json');
  t.match(
    refusal(loadConfig({ configPath: missing, env: {}, installed: false, cwd })),
    /absent\.json: cannot read the configuration file \(ENOENT\)/,
  );
  t.match(refusal(loadConfig({ env: { TURNHOST_CONFIG: missing }, installed: false, cwd })), /ENOENT/);
  const file = writeConfig('from-env.json', { logLevel: 'warn' });
  const result = loadConfig({ env: { TURNHOST_CONFIG: file }, installed: false, cwd });
  t.ok(result.ok && result.config.logLevel === 'warn');
});

t.test('malformed files are refused', async (t) => {
  t.match(refusal(load({ file: '{ not json' })), /not valid JSON/);
  t.match(refusal(load({ file: '[1,2]' })), /expected a JSON object at the top level/);
});

t.test('environment overrides apply over the file and are named in sources', async (t) => {
  const result = load({
    file: { logLevel: 'debug' },
    env: {
      TURNHOST_DATA_DIR: '/srv/th',
      TURNHOST_LISTEN: '127.0.0.1:9000',
      TURNHOST_SOCKET: '/run/turnhost/api.sock',
      TURNHOST_API_TOKEN: 'a-token-of-sufficient-length',
      TURNHOST_LOG_LEVEL: 'error',
      TURNHOST_IDENTITY_HELPER: '/usr/lib/turnhost/identity-helper',
      TURNHOST_IDENTITY_HELPER_CONFIG: '/etc/turnhost/helper.conf',
      TURNHOST_RESTRICTED_ENABLED: 'true',
      TURNHOST_UNBOUND_RETENTION_DAYS: '7',
      TURNHOST_MAX_CONCURRENT_TURNS: '2',
      TURNHOST_WORKSPACE_ROOTS: '/srv/a:/srv/b',
      TURNHOST_WORKER_LIMITS: 'this is not read by configuration loading',
    },
  });
  t.ok(result.ok, result.ok ? '' : result.detail);
  if (!result.ok) return;
  const c = result.config;
  t.equal(c.dataDir, '/srv/th');
  t.equal(c.listen.tcp, '127.0.0.1:9000');
  t.equal(c.listen.socket, '/run/turnhost/api.sock');
  t.equal(c.apiToken, 'a-token-of-sufficient-length');
  t.equal(c.logLevel, 'error');
  t.equal(c.identityHelper.path, '/usr/lib/turnhost/identity-helper');
  t.equal(c.identityHelper.configPath, '/etc/turnhost/helper.conf');
  t.equal(c.modes.restricted.enabled, true);
  t.equal(c.events.unboundRetentionDays, 7);
  t.equal(c.turns.maxConcurrent, 2);
  t.same(c.turns.workspaceRoots, ['/srv/a', '/srv/b']);
  t.notOk(result.sources.env.includes('TURNHOST_WORKER_LIMITS'));
  t.ok(result.sources.env.includes('TURNHOST_LISTEN'));
});

t.test('TURNHOST_LISTEN=none disables TCP when a socket is configured', async (t) => {
  const result = load({ env: { TURNHOST_LISTEN: 'none', TURNHOST_SOCKET: '/run/x.sock' } });
  t.ok(result.ok && result.config.listen.tcp === null);
  t.match(refusal(load({ env: { TURNHOST_LISTEN: 'none' } })), /at least one of listen\.tcp and listen\.socket/);
});

t.test('environment errors name the variable', async (t) => {
  t.match(
    refusal(load({ env: { TURNHOST_RESTRICTED_ENABLED: 'maybe' } })),
    /^TURNHOST_RESTRICTED_ENABLED: expected true\/false/,
  );
  t.match(refusal(load({ env: { TURNHOST_LOG_LEVEL: 'loud' } })), /^TURNHOST_LOG_LEVEL \(logLevel: expected one of/);
  t.match(refusal(load({ env: { TURNHOST_LISTEN: 'nope' } })), /^TURNHOST_LISTEN \(listen\.tcp: expected "HOST:PORT"/);
  t.match(
    refusal(load({ env: { TURNHOST_MAX_CONCURRENT_TURNS: '-1' } })),
    /^TURNHOST_MAX_CONCURRENT_TURNS: expected an integer/,
  );
  t.match(
    refusal(load({ env: { TURNHOST_MAX_CONCURRENT_TURNS: '0' } })),
    /^TURNHOST_MAX_CONCURRENT_TURNS \(turns\.maxConcurrent: expected a positive integer/,
  );
  t.match(
    refusal(load({ env: { TURNHOST_IDENTITY_HELPER: 'relative/helper' } })),
    /^TURNHOST_IDENTITY_HELPER \(identityHelper\.path: expected a normalised absolute path/,
  );
  t.match(refusal(load({ env: { TURNHOST_API_TOKEN: 'short' } })), /^TURNHOST_API_TOKEN \(apiToken: expected 16-512/);
});

t.test('command-line flags apply last', async (t) => {
  const result = load({
    file: { listen: { tcp: '127.0.0.1:1000' } },
    env: { TURNHOST_LISTEN: '127.0.0.1:2000', TURNHOST_DATA_DIR: '/srv/env' },
    overrides: { listen: '127.0.0.1:3000', dataDir: 'relative-data', socket: '/tmp/s.sock', logLevel: 'warn' },
  });
  t.ok(result.ok);
  if (!result.ok) return;
  t.equal(result.config.listen.tcp, '127.0.0.1:3000');
  t.equal(
    result.config.dataDir,
    path.join(cwd, 'relative-data'),
    'a relative --data-dir resolves against the working directory',
  );
  t.equal(result.config.listen.socket, '/tmp/s.sock');
  t.equal(result.config.logLevel, 'warn');
  t.same(result.sources.cli, ['--data-dir', '--listen', '--socket', '--log-level']);
  t.match(refusal(load({ overrides: { listen: 'x' } })), /^--listen \(listen\.tcp: expected "HOST:PORT"/);
  t.match(refusal(load({ overrides: { logLevel: 'trace' } })), /^--log-level \(logLevel:/);
});

t.test('each validation error names its key path', async (t) => {
  const cases: Array<[unknown, RegExp]> = [
    [{ dataDir: 'relative' }, /: dataDir: expected a normalised absolute path$/],
    [{ dataDir: '/a/../b' }, /: dataDir: expected a normalised absolute path$/],
    [{ listen: { tcp: 7707 } }, /: listen\.tcp: expected "HOST:PORT" or null$/],
    [{ listen: { allowNonLoopback: 'yes' } }, /: listen\.allowNonLoopback: expected true or false$/],
    [{ apiToken: 5 }, /: apiToken: expected 16-512/],
    [{ logLevel: 'verbose' }, /: logLevel: expected one of 'debug', 'info', 'warn', 'error'$/],
    [{ events: { unboundRetentionDays: 0 } }, /: events\.unboundRetentionDays: expected a positive integer$/],
    [{ events: { sessionRetentionDays: -1 } }, /: events\.sessionRetentionDays: expected a non-negative integer$/],
    [{ events: { sessionRetentionDays: 1.5 } }, /: events\.sessionRetentionDays: expected a non-negative integer$/],
    [{ events: { sessionRetentionDays: '7' } }, /: events\.sessionRetentionDays: expected a non-negative integer$/],
    [{ identityHelper: { path: 'helper' } }, /: identityHelper\.path: expected a normalised absolute path or null$/],
    [{ modes: { restricted: { enabled: 1 } } }, /: modes\.restricted\.enabled: expected true or false$/],
    [{ limits: { memory: 'lots' } }, /: limits\.memory: expected a positive number or a string such as "512M"$/],
    [{ limits: { memory: -1 } }, /: limits\.memory: expected a positive number/],
    [{ limits: { disk: 5 } }, /: limits\.disk: unknown limit/],
    [{ limitsDisabled: ['memory', 'memory'] }, /: limitsDisabled: expected an array of distinct limit names$/],
    [{ limitsDisabled: ['swap'] }, /: limitsDisabled\[0\]: expected one of/],
    [{ egress: { maxConnections: 1.5 } }, /: egress\.maxConnections: expected a positive integer$/],
    [{ egress: { maxConnections: '10' } }, /: egress\.maxConnections: expected a positive integer$/],
    [{ egress: { allowlist: ['ok.example', 'bad host'] } }, /: egress\.allowlist\[1\]: expected a host pattern/],
    [{ egress: { allowAddressRanges: ['10.0.0.0/33'] } }, /: egress\.allowAddressRanges\[0\]: expected a CIDR/],
    [{ egress: { allowlist: 'example.com' } }, /: egress\.allowlist: expected an array$/],
    [{ fs: { scratch: { capBytes: 0 } } }, /: fs\.scratch\.capBytes: expected a positive integer$/],
    [
      { fs: { protectedPaths: [{ root: '/w', path: '../etc', mode: 'read_only', reason: 'x' }] } },
      /: fs\.protectedPaths\[0\]\.path: expected a relative path without "\.\."$/,
    ],
    [
      { fs: { protectedPaths: [{ root: '/w', path: '.git', mode: 'hide', reason: 'x' }] } },
      /: fs\.protectedPaths\[0\]\.mode: expected one of 'read_only', 'mask_file', 'mask_directory'$/,
    ],
    [
      { turns: { workspaceRoots: ['/ok', 'rel'] } },
      /: turns\.workspaceRoots\[1\]: expected a normalised absolute path$/,
    ],
    [
      { turns: { defaultTimeoutSeconds: 100, maxTimeoutSeconds: 10 } },
      /^turns\.defaultTimeoutSeconds: must not exceed turns\.maxTimeoutSeconds$/,
    ],
    [{ probeRoots: { proc: 5 } }, /: probeRoots\.proc: expected a normalised absolute path$/],
    [{ egress: 'none' }, /: egress: expected an object$/],
  ];
  for (const [file, expected] of cases) t.match(refusal(load({ file })), expected, JSON.stringify(file));
});

t.test('unknown keys are refused at every depth', async (t) => {
  t.match(refusal(load({ file: { dataDirectory: '/x' } })), /: dataDirectory: unknown key$/);
  t.match(refusal(load({ file: { egress: { maxConection: 3 } } })), /: egress\.maxConection: unknown key$/);
  t.match(
    refusal(load({ file: { modes: { restricted: { enabled: true, extra: 1 } } } })),
    /: modes\.restricted\.extra: unknown key$/,
  );
  t.match(refusal(load({ file: '{"__proto__": {"polluted": true}}' })), /: __proto__: unknown key$/);
  t.match(refusal(load({ file: { constructor: 1 } })), /: constructor: unknown key$/);
});

t.test('a retired key is refused with why it went and what replaces it', async (t) => {
  t.match(
    refusal(load({ file: { turns: { tempRoot: '/run/turnhost/turn-temp' } } })),
    /: turns\.tempRoot: no longer read: each turn's \/tmp is a tmpfs of its own in its view, sized by limits\.tmp_size; remove it$/,
  );
  t.match(
    refusal(load({ file: { turns: { envExtra: ['FOO'] } } })),
    /: turns\.envExtra: no longer read: every variable a turn request names reaches its command, except the names the boundary owns \(docs\/http-api\.md\); remove it$/,
  );
  t.match(
    refusal(load({ file: { egress: { inferenceHosts: ['api.anthropic.com'] } } })),
    /: egress\.inferenceHosts: no longer read: .*per-turn relay that holds the credential.*egress\.inference\.providers/,
  );
});

t.test('inference providers and brokered credentials: each bad field is named', async (t) => {
  const provider = {
    name: 'claude',
    kind: 'anthropic',
    baseUrl: 'https://api.anthropic.com',
    secret: { env: 'ANTHROPIC_API_KEY' },
  };
  const credential = {
    name: 'tracker',
    baseUrl: 'https://tracker.example',
    secret: { file: '/etc/turnhost/tracker' },
    header: 'authorization',
    format: 'Bearer {secret}',
  };
  const withProviders = (...providers: unknown[]) => ({ egress: { inference: { providers } } });
  t.ok(load({ file: { egress: { inference: { providers: [provider] }, credentials: [credential] } } }).ok);
  const cases: Array<[unknown, RegExp]> = [
    [withProviders({ ...provider, kind: 'gemini' }), /egress\.inference\.providers\[0\]\.kind/],
    [withProviders({ ...provider, baseUrl: 'http://api.anthropic.com' }), /providers\[0\]\.baseUrl/],
    [withProviders({ ...provider, baseUrl: 'https://user:pw@api.anthropic.com' }), /providers\[0\]\.baseUrl/],
    [withProviders({ ...provider, baseUrl: 'https://api.anthropic.com/?x=1' }), /providers\[0\]\.baseUrl/],
    [withProviders({ ...provider, baseUrl: 'https://api.anthropic.com/#f' }), /providers\[0\]\.baseUrl/],
    [withProviders({ ...provider, secret: 'sk-inline' }), /providers\[0\]\.secret/],
    [withProviders({ ...provider, secret: { file: 'relative' } }), /providers\[0\]\.secret/],
    [withProviders({ ...provider, routes: ['/v1/../admin'] }), /providers\[0\]\.routes/],
    [withProviders({ ...provider, name: 'Bad Name' }), /providers\[0\]\.name/],
    [withProviders(provider, provider), /providers\[1\]\.name: "claude" is already the name of/],
    [{ egress: { credentials: [{ ...credential, format: 'Bearer' }] } }, /credentials\[0\]\.format/],
    [{ egress: { credentials: [{ ...credential, header: 'X Bad' }] } }, /credentials\[0\]\.header/],
    [{ egress: { credentials: [{ ...credential, methods: ['TRACE'] }] } }, /credentials\[0\]\.methods/],
    [{ egress: { credentials: [{ ...credential, gitHost: 'https://git.example/' }] } }, /credentials\[0\]\.gitHost/],
    [
      {
        egress: {
          credentials: [
            { ...credential, gitHost: 'git.example' },
            { ...credential, name: 'b', gitHost: 'git.example' },
          ],
        },
      },
      /credentials\[1\]\.gitHost: git\.example is brokered by egress\.credentials\[0\]/,
    ],
  ];
  for (const [file, field] of cases) t.match(refusal(load({ file })), field, JSON.stringify(file));
  t.ok(
    load({ file: withProviders({ ...provider, baseUrl: 'http://127.0.0.1:8080/base' }) }).ok,
    'plain http on loopback, for tests',
  );
});

t.test("tmp_size cannot be disabled: the turn's /tmp always has a size", async (t) => {
  t.match(refusal(load({ file: { limitsDisabled: ['tmp_size'] } })), /limitsDisabled: tmp_size cannot be disabled/);
  t.match(refusal(load({ file: { limits: { tmp_size: 'lots' } } })), /limits\.tmp_size/);
});

t.test('a non-loopback listen address needs listen.allowNonLoopback', async (t) => {
  t.match(
    refusal(load({ file: { listen: { tcp: '0.0.0.0:7707' } } })),
    /listen\.tcp: 0\.0\.0\.0:7707 is not a loopback address; set listen\.allowNonLoopback/,
  );
  t.match(refusal(load({ overrides: { listen: '192.168.1.5:80' } })), /not a loopback address/);
  t.ok(load({ file: { listen: { tcp: '0.0.0.0:7707', allowNonLoopback: true } } }).ok);
  for (const loopback of ['127.0.0.1:1', '127.5.6.7:80', 'localhost:0', '[::1]:7707'])
    t.ok(load({ overrides: { listen: loopback } }).ok, loopback);
});

t.test('parseHostPort', async (t) => {
  t.same(parseHostPort('127.0.0.1:7707'), { host: '127.0.0.1', port: 7707 });
  t.same(parseHostPort('[::1]:0'), { host: '::1', port: 0 });
  t.equal(parseHostPort('127.0.0.1:65536'), null);
  t.equal(parseHostPort('127.0.0.1'), null);
  t.equal(parseHostPort('[nothex]:1'), null);
});

t.test('workspaces: off by default in a checkout, packaged root when installed, refusals name the key', async (t) => {
  t.equal(defaultConfig({ installed: false, cwd }).workspaces.root, null);
  t.equal(defaultConfig({ installed: true, cwd }).workspaces.root, '/var/lib/turnhost-workspaces');
  t.equal(defaultConfig({ installed: true, cwd }).workspaces.maxBytes, null, 'no cap unless set');
  const ok = load({ file: { workspaces: { root: '/srv/workspaces', maxBytes: 1048576, maxFiles: 100 } } });
  t.ok(ok.ok && ok.config.workspaces.maxBytes === 1048576 && ok.config.workspaces.maxFiles === 100);
  t.match(refusal(load({ file: { workspaces: { maxBytes: 1024 } } })), /^workspaces\.maxBytes: at least 1048576/);
  t.match(
    refusal(load({ file: { workspaces: { maxFiles: 10 } } })),
    /^workspaces\.maxFiles: needs workspaces\.maxBytes/,
  );
  t.match(refusal(load({ file: { workspaces: { root: 'relative' } } })), /workspaces\.root: expected/);
  t.match(
    refusal(load({ file: { workspaces: { maxBytes: 0 } } })),
    /workspaces\.maxBytes: expected a positive integer or null/,
  );
  t.match(refusal(load({ file: { workspaces: { root: '/' } } })), /^workspaces\.root: must not be \//);
  t.match(
    refusal(load({ file: { dataDir: '/srv/w/data', workspaces: { root: '/srv/w' } } })),
    /^workspaces\.root: must not contain the data directory/,
  );
  t.match(
    refusal(load({ file: { dataDir: '/srv/data', workspaces: { root: '/srv/data/ws' } } })),
    /^workspaces\.root: must not lie inside the data directory/,
  );
});

t.test('a file with several problems reports every one, in key order', async (t) => {
  const detail = refusal(
    load({ file: { dataDir: 'relative', logLevel: 'verbose', events: { sessionRetentionDays: -1 }, colour: 'red' } }),
  );
  t.match(detail, /: dataDir: expected a normalised absolute path; /);
  t.match(detail, /; logLevel: expected one of 'debug', 'info', 'warn', 'error'; /);
  t.match(detail, /; events\.sessionRetentionDays: expected a non-negative integer; /);
  t.match(detail, /; colour: unknown key$/);
});

t.test('a protected-path rule lacking a key names it', async (t) => {
  t.match(
    refusal(load({ file: { fs: { protectedPaths: [{ root: '/w', path: '.git', mode: 'read_only' }] } } })),
    /: fs\.protectedPaths\[0\]\.reason: missing$/,
  );
  t.match(
    refusal(
      load({ file: { fs: { protectedPaths: [{ root: '/w', path: '.git', mode: 'read_only', reason: 'r', x: 1 }] } } }),
    ),
    /: fs\.protectedPaths\[0\]\.x: unknown key$/,
  );
});

t.test('$schema names the schema for editors and is not configuration', async (t) => {
  const result = load({ file: { $schema: 'file:///usr/share/turnhost/config.schema.json', logLevel: 'warn' } });
  t.ok(result.ok);
  if (!result.ok) return;
  t.equal(result.config.logLevel, 'warn');
  t.notOk('$schema' in result.config, 'the loaded configuration has no $schema key');
  t.match(refusal(load({ file: { $schema: 5 } })), /: \$schema: expected a string$/);
  t.match(refusal(load({ file: { egress: { $schema: 'x' } } })), /: egress\.\$schema: unknown key$/);
});

t.test('an override is checked by its key, naming the variable or flag', async (t) => {
  t.match(
    refusal(load({ env: { TURNHOST_WORKSPACE_ROOTS: '/ok:relative' } })),
    /^TURNHOST_WORKSPACE_ROOTS \(turns\.workspaceRoots\[1\]: expected a normalised absolute path\)$/,
  );
  t.match(
    refusal(load({ env: { TURNHOST_MAX_CONCURRENT_TURNS: '0' } })),
    /^TURNHOST_MAX_CONCURRENT_TURNS \(turns\.maxConcurrent: expected a positive integer\)$/,
  );
  t.match(refusal(load({ overrides: { socket: 'rel.sock' } })), /^--socket \(listen\.socket: expected a normalised/);
});

t.test('every refused variable and flag at once, and every cross-key problem', async (t) => {
  const detail = refusal(
    load({ env: { TURNHOST_LOG_LEVEL: 'loud', TURNHOST_EVENTS_JOURNAL: 'maybe' }, overrides: { listen: 'x' } }),
  );
  t.match(detail, /TURNHOST_LOG_LEVEL \(logLevel: /);
  t.match(detail, /TURNHOST_EVENTS_JOURNAL: expected true\/false\/1\/0/);
  t.match(detail, /--listen \(listen\.tcp: /);
  const combined = refusal(
    load({
      file: {
        listen: { tcp: '0.0.0.0:1' },
        turns: { defaultTimeoutSeconds: 100, maxTimeoutSeconds: 10 },
        limitsDisabled: ['tmp_size'],
      },
    }),
  );
  t.match(combined, /listen\.tcp: 0\.0\.0\.0:1 is not a loopback address/);
  t.match(combined, /turns\.defaultTimeoutSeconds: must not exceed/);
  t.match(combined, /limitsDisabled: tmp_size cannot be disabled/);
});

t.test("a refused file's problems come with those of the variables and flags", async (t) => {
  const detail = refusal(
    load({
      file: { logLevel: 'loud', bogus: 1 },
      env: { TURNHOST_EVENTS_JOURNAL: 'maybe' },
      overrides: { listen: 'x' },
    }),
  );
  const parts = detail.split('; ');
  t.match(parts, [/logLevel: /, /bogus: unknown key/, /^TURNHOST_EVENTS_JOURNAL: /, /^--listen \(listen\.tcp: /]);
  t.equal(parts.length, 4, 'each problem once');
  const unparsable = refusal(load({ file: '{ not json', env: { TURNHOST_EVENTS_JOURNAL: 'maybe' } }));
  t.match(unparsable, /not valid JSON/);
  t.notMatch(unparsable, /TURNHOST_EVENTS_JOURNAL/, 'a file that does not parse is refused alone');
});

t.test('nested problems follow the document order', async (t) => {
  const detail = refusal(
    load({
      file: {
        turns: { maxConcurrent: 0, workspaceRoots: ['/a', 'b'] },
        egress: { maxBytes: 0, bogus: 1 },
        dataDir: 'x',
      },
    }),
  );
  t.equal(
    detail.replace(/^[^:]*: /, ''),
    'turns.maxConcurrent: expected a positive integer; turns.workspaceRoots[1]: expected a normalised absolute path; ' +
      'egress.maxBytes: expected a positive integer; egress.bogus: unknown key; dataDir: expected a normalised absolute path',
  );
});
