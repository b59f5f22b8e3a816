/**
 * The Debian package (packaging/, docs/packaging.md): it builds, lintian reports nothing
 * (every remaining tag is overridden with a reason), the unit verifies and keeps the helper's
 * setuid bit usable, and contents, modes and conffiles are as documented.
 *
 * TURNHOST_DEB=<path> tests an already built package (CI may build it with `make deb` first);
 * otherwise fixture.ts builds one with packaging/build-deb.sh (~40 s with reused addons).
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { publishedConfigSchema } from '../../../supervisor/config/load.js';
import { loadConfig } from '../../../supervisor/config/load.js';
import { packageUnderTest } from './fixture.js';

const HELPER = '/usr/lib/turnhost/identity-helper';
const UNIT = '/lib/systemd/system/turnhost.service';
const CONFFILES = ['/etc/turnhost/turnhost.json', '/etc/turnhost/identity-helper.conf'];

/** Unit options that imply no_new_privs for a non-root User= (systemd.exec(5)), which would make the setuid helper inert. */
const NNP_IMPLYING_OPTIONS = [
  'NoNewPrivileges',
  'SystemCallFilter',
  'SystemCallArchitectures',
  'SystemCallLog',
  'RestrictNamespaces',
  'RestrictAddressFamilies',
  'MemoryDenyWriteExecute',
  'LockPersonality',
  'RestrictRealtime',
  'RestrictSUIDSGID',
  'PrivateDevices',
  'ProtectClock',
  'ProtectHostname',
  'ProtectKernelTunables',
  'ProtectKernelModules',
  'ProtectKernelLogs',
  'DynamicUser',
];
/** Options that would break delegation, uid mapping or the helper's namespaces and cgroup join. */
const HELPER_BREAKING_OPTIONS = ['ProtectControlGroups', 'PrivateUsers', 'PrivateNetwork', 'ProcSubset', 'ProtectProc'];
/** What the setuid helper needs in the bounding set (docs/packaging.md). */
const HELPER_CAPABILITIES = [
  'CAP_SETUID',
  'CAP_SETGID',
  'CAP_SETPCAP',
  'CAP_SYS_ADMIN',
  'CAP_NET_ADMIN',
  'CAP_DAC_OVERRIDE',
  'CAP_KILL',
];

function run(command: string, args: string[], options: { env?: NodeJS.ProcessEnv; cwd?: string } = {}) {
  const result = spawnSync(command, args, { encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, ...options });
  if (result.error !== undefined) throw new Error(`${command}: ${result.error.message} (is it installed?)`);
  return { code: result.status, stdout: result.stdout, stderr: result.stderr };
}

interface Entry {
  mode: string;
  owner: string;
  path: string;
  target: string | null;
}

function listContents(deb: string): Map<string, Entry> {
  const entries = new Map<string, Entry>();
  for (const line of run('dpkg-deb', ['-c', deb]).stdout.split('\n')) {
    const match = /^(\S+) (\S+)\s+\d+ \S+ \S+ \.(\/\S*?)\/?(?: -> (\S+))?$/.exec(line);
    if (match === null) continue;
    const [, mode = '', owner = '', file = '', target] = match;
    entries.set(file === '' ? '/' : file, { mode, owner, path: file, target: target ?? null });
  }
  return entries;
}

/** The [Service] settings of a unit file, key → every value given. */
function unitSettings(text: string): Map<string, string[]> {
  const settings = new Map<string, string[]>();
  for (const line of text.split('\n')) {
    const match = /^([A-Za-z]+)=(.*)$/.exec(line.trim());
    if (match === null) continue;
    const [, key = '', value = ''] = match;
    settings.set(key, [...(settings.get(key) ?? []), value]);
  }
  return settings;
}

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-deb-test-'));
t.teardown(() => fs.rmSync(scratch, { recursive: true, force: true }));
// A private copy: a rebuild by another test file cannot change the package under this one.
const built = packageUnderTest();
const deb = path.join(scratch, path.basename(built));
fs.copyFileSync(built, deb);
const tree = path.join(scratch, 'root');
const control = path.join(scratch, 'DEBIAN');
execFileSync('dpkg-deb', ['-x', deb, tree]);
execFileSync('dpkg-deb', ['-e', deb, control]);
const contents = listContents(deb);

t.test('the package builds with the documented control fields', async (t) => {
  t.ok(fs.existsSync(deb), `${deb} exists`);
  const fields = run('dpkg-deb', ['-f', deb, 'Package', 'Architecture', 'Depends']).stdout;
  t.match(fields, /^Package: turnhost$/m);
  t.match(fields, /^Depends: .*nodejs \(>= 20\)/m, 'depends on Debian nodejs 20');
  t.match(fields, /^Depends: .*adduser/m);
  t.match(fields, /^Depends: .*systemd \(>= 254\)/m, 'systemd with DelegateSubgroup= (the unit needs it)');
  t.match(fields, /^Depends: .*libc6 \(>= /m, 'shared-library dependencies from dpkg-shlibdeps');
});

t.test('lintian reports no errors and no warnings', async (t) => {
  const lint = run('lintian', ['--pedantic', '--display-info', deb]);
  const tags = lint.stdout.split('\n').filter((line) => /^[EWIPX]: /.test(line));
  t.same(
    tags.filter((line) => /^[EW]: /.test(line)),
    [],
    'no E: or W: tags',
  );
  t.same(tags, [], 'no info or pedantic tags either (each is fixed or overridden with a reason)');
});

t.test('files, owners and modes', async (t) => {
  const mustExist = [
    '/usr/lib/turnhost/package.json',
    '/usr/lib/turnhost/dist/supervisor/cli/main.js',
    '/usr/lib/turnhost/turnhost-worker',
    '/usr/lib/turnhost/node_modules/better-sqlite3/build/Release/better_sqlite3.node',
    '/usr/lib/turnhost/node_modules/koffi/package.json',
    HELPER,
    UNIT,
    ...CONFFILES,
    '/usr/share/man/man8/turnhost.8.gz',
    '/usr/share/doc/turnhost/copyright',
    '/usr/share/doc/turnhost/changelog.Debian.gz',
    '/usr/share/bash-completion/completions/turnhost',
    '/usr/share/turnhost/config.schema.json',
    '/usr/lib/turnhost/ui/index.html',
    '/usr/lib/turnhost/ui/login.html',
    '/usr/lib/turnhost/ui/app.js',
    '/usr/lib/turnhost/ui/login.js',
    '/usr/lib/turnhost/ui/app.css',
    '/usr/lib/turnhost/node_modules/prom-client/package.json',
    '/usr/lib/tmpfiles.d/turnhost.conf',
  ];
  for (const file of mustExist) t.ok(contents.has(file), `${file} is shipped`);

  // Group turnhost does not exist at unpack time: the archive carries 0755 root:root and
  // postinst registers root:turnhost 4750 with dpkg-statoverride.
  t.equal(contents.get(HELPER)?.mode, '-rwxr-xr-x', 'helper is 0755 in the archive');
  // Executed by the supervisor (the worker through the helper, the battery as check --attack's
  // control and as a turn's command): a 0644 copy fails only on the host, as EACCES.
  for (const program of ['/usr/lib/turnhost/turnhost-worker', '/usr/lib/turnhost/attack/build/attack-battery'])
    t.equal(contents.get(program)?.mode, '-rwxr-xr-x', `${program} is 0755`);
  t.ok(
    fs.readFileSync(path.join(tree, HELPER)).includes('/etc/turnhost/identity-helper.conf\0'),
    'helper reads the packaged config path',
  );
  t.equal(
    contents.get('/usr/bin/turnhost')?.target,
    '../lib/turnhost/bin/turnhost',
    '/usr/bin/turnhost is the launcher',
  );
  t.match(fs.readFileSync(path.join(tree, 'usr/lib/turnhost/bin/turnhost'), 'utf8'), /^#!\/usr\/bin\/node\n/);
  for (const file of [UNIT, ...CONFFILES]) t.equal(contents.get(file)?.mode, '-rw-r--r--', `${file} is 0644`);

  const strays = [...contents.values()].filter(
    (entry) =>
      entry.owner !== 'root/root' ||
      (entry.target === null && /^.{8}w/.test(entry.mode)) ||
      /[sS]/.test(entry.mode) ||
      (/\.(ts|map)$/.test(entry.path) && !entry.path.endsWith('.d.ts')) ||
      entry.path.startsWith('/usr/lib/turnhost/dist/bench') ||
      /\/node_modules\/(typescript|tap|tsx|@types)\//.test(entry.path + '/'),
  );
  t.same(
    strays.map((entry) => `${entry.mode} ${entry.owner} ${entry.path}`),
    [],
    'no foreign owners, world-writable, setid, TypeScript, bench or dev modules',
  );
});

t.test('conffiles and maintainer scripts', async (t) => {
  t.same(fs.readFileSync(path.join(control, 'conffiles'), 'utf8').trim().split('\n'), CONFFILES);
  const postinst = fs.readFileSync(path.join(control, 'postinst'), 'utf8');
  t.match(
    postinst,
    /dpkg-statoverride --update --add root "\$USER_NAME" 4750 "\$HELPER"/,
    'helper root:turnhost 4750 via statoverride',
  );
  t.match(postinst, /usermod --add-subuids/, 'reserves a worker uid range in /etc/subuid');
  t.match(postinst, /-m 0750 "\$STATE_DIR"/, 'state directory 0750');
  t.match(postinst, /umask 077/, 'token created private');
  const postrm = fs.readFileSync(path.join(control, 'postrm'), 'utf8');
  t.match(
    postrm,
    /purge\)[\s\S]*dpkg-statoverride --remove[\s\S]*rm -rf \/var\/lib\/turnhost[\s\S]*deluser/,
    'purge removes override, data and user',
  );
  for (const script of ['postinst', 'prerm', 'postrm']) {
    t.equal(run('sh', ['-n', path.join(control, script)]).code, 0, `${script} parses`);
    t.equal(fs.statSync(path.join(control, script)).mode & 0o777, 0o755, `${script} is 0755`);
  }
});

t.test('the shipped supervisor configuration loads and points at the shipped helper', async (t) => {
  const loaded = loadConfig({ configPath: path.join(tree, 'etc/turnhost/turnhost.json'), env: {}, installed: true });
  if (!loaded.ok) throw new Error(loaded.detail);
  t.equal(loaded.config.identityHelper.path, HELPER);
  t.ok(contents.has(loaded.config.identityHelper.path ?? ''), 'that helper is in the package');
  t.equal(loaded.config.dataDir, '/var/lib/turnhost');
  const shipped = JSON.parse(fs.readFileSync(path.join(tree, 'etc/turnhost/turnhost.json'), 'utf8')) as {
    $schema: string;
  };
  t.equal(shipped.$schema, 'file:///usr/share/turnhost/config.schema.json', 'the file names its schema');
  t.equal(
    fs.readFileSync(path.join(tree, 'usr/share/turnhost/config.schema.json'), 'utf8'),
    publishedConfigSchema(),
    'the schema it names is shipped, and is the one the loader checks with',
  );
  const helperConf = fs.readFileSync(path.join(tree, 'etc/turnhost/identity-helper.conf'), 'utf8');
  t.match(helperConf, /^uid_range_subuid turnhost$/m);
  t.match(helperConf, /^caller_group turnhost$/m);
  t.match(helperConf, /^cgroup_root \/sys\/fs\/cgroup\/system\.slice\/turnhost\.service\/turns$/m);
  t.match(helperConf, /^uid_lease_dir \/var\/lib\/turnhost-uid-leases$/m);
  t.equal(loaded.config.workspaces.root, '/var/lib/turnhost-workspaces');
  t.match(
    helperConf,
    /^workspace_root \/var\/lib\/turnhost-workspaces$/m,
    "the helper's workspace_root is the supervisor's workspaces.root",
  );
  const workerExec = /^worker_exec (\S+)$/m.exec(helperConf)?.[1] ?? '';
  t.ok(contents.has(workerExec), `worker program ${workerExec} is in the package`);
  t.notMatch(helperConf, /^worker_arg /m, 'the native worker takes no arguments');
});

t.test('the launcher runs from the unpacked tree', async (t) => {
  // env -i: the test runner instruments child processes (NODE_OPTIONS loaders) that would
  // load this extensionless ES module as CommonJS.
  const help = run('env', [
    '-i',
    'PATH=/usr/bin:/bin',
    process.execPath,
    path.join(tree, 'usr/lib/turnhost/bin/turnhost'),
    '--help',
  ]);
  t.equal(help.code, 0, help.stderr);
  t.match(help.stdout, /usage: turnhost <command>/);
});

t.test('the shipped bash completion completes commands and options', async (t) => {
  const script = path.join(tree, 'usr/share/bash-completion/completions/turnhost');
  const complete = (words: string[]): string[] =>
    run('bash', [
      '-c',
      `source ${script}; COMP_WORDS=(${words.join(' ')}); COMP_CWORD=${words.length - 1}; _turnhost; printf '%s\\n' "\${COMPREPLY[@]}"`,
    ])
      .stdout.split('\n')
      .filter(Boolean);
  t.same(complete(['turnhost', 'ch']), ['check']);
  t.same(complete(['turnhost', 'serve', '--log-l']), ['--log-level']);
});

t.test('the man page renders without warnings', async (t) => {
  const man = run('man', ['--warnings', '-l', path.join(tree, 'usr/share/man/man8/turnhost.8.gz')], {
    env: { ...process.env, MANWIDTH: '80', LC_ALL: 'C.UTF-8' },
  });
  t.equal(man.code, 0);
  t.equal(man.stderr, '', 'no groff warnings');
  t.match(man.stdout, /turnhost check/);
});

t.test('systemd-analyze verify accepts the unit', async (t) => {
  // verify checks that ExecStart exists on this host: point it at the unpacked launcher.
  const unitDir = path.join(scratch, 'unit');
  fs.mkdirSync(unitDir);
  const unit = fs.readFileSync(path.join(tree, UNIT), 'utf8');
  const launcher = path.join(tree, 'usr/lib/turnhost/bin/turnhost');
  fs.writeFileSync(
    path.join(unitDir, 'turnhost.service'),
    unit.replace(/^ExecStart=\/usr\/bin\/turnhost /m, `ExecStart=${launcher} `),
  );
  const verify = run('systemd-analyze', ['verify', path.join(unitDir, 'turnhost.service')], {
    env: { ...process.env, MANPATH: path.join(tree, 'usr/share/man') },
  });
  t.equal(verify.code, 0, verify.stderr);
  // DelegateSubgroup= needs systemd >= 254 (Debian 13 has 257); an older build host's systemd
  // only does not know the key, which it ignores.
  const systemdVersion = Number(/^systemd (\d+)/.exec(run('systemctl', ['--version']).stdout)?.[1] ?? 0);
  const warnings = verify.stderr
    .split('\n')
    .filter((line) => line !== '' && !(systemdVersion < 254 && /Unknown key '?DelegateSubgroup'?/.test(line)));
  t.same(warnings, [], 'no warnings (unknown keys, bad values, missing man page)');
});

t.test('the unit is hardened without disabling the setuid helper', async (t) => {
  const unit = unitSettings(fs.readFileSync(path.join(tree, UNIT), 'utf8'));
  const required: Record<string, string> = {
    Type: 'notify',
    NotifyAccess: 'main',
    ExecReload: '/bin/kill -HUP $MAINPID',
    WatchdogSec: '60s',
    User: 'turnhost',
    Group: 'turnhost',
    Delegate: 'yes',
    DelegateSubgroup: 'supervisor',
    StateDirectory: 'turnhost',
    StateDirectoryMode: '0750',
    RuntimeDirectory: 'turnhost',
    Restart: 'on-failure',
    ProtectSystem: 'strict',
    PrivateTmp: 'yes',
    DevicePolicy: 'closed',
  };
  for (const [key, value] of Object.entries(required)) t.same(unit.get(key), [value], `${key}=${value}`);
  for (const key of NNP_IMPLYING_OPTIONS) {
    const values = unit.get(key) ?? [];
    const harmless = key === 'NoNewPrivileges' && values.every((value) => value === 'no');
    t.ok(values.length === 0 || harmless, `${key} is not set (it implies no_new_privs)`);
  }
  for (const key of HELPER_BREAKING_OPTIONS)
    t.notOk(unit.has(key), `${key} is not set (it breaks the helper or delegation)`);
  const bounding = (unit.get('CapabilityBoundingSet') ?? []).join(' ').split(/\s+/);
  for (const cap of HELPER_CAPABILITIES) t.ok(bounding.includes(cap), `bounding set keeps ${cap} for the helper`);
  for (const cap of [
    'CAP_SYS_PTRACE',
    'CAP_SYS_MODULE',
    'CAP_SYS_RAWIO',
    'CAP_NET_RAW',
    'CAP_SYS_RESOURCE',
    'CAP_MKNOD',
  ])
    t.notOk(bounding.includes(cap), `bounding set drops ${cap}`);
  t.same(unit.get('ProtectHome'), ['read-only'], 'homes stay reachable read-only for workspaces');
});

t.test('systemd-analyze security reports the documented exposure', async (t) => {
  const security = run('systemd-analyze', ['security', '--offline=true', path.join(tree, UNIT)]);
  const exposure = /Overall exposure level for turnhost\.service: ([0-9.]+)/.exec(security.stdout)?.[1];
  t.ok(exposure !== undefined, `an exposure level is reported: ${security.stderr}`);
  t.ok(Number(exposure) <= 7.3, `exposure ${exposure} is at most 7.3 (docs/packaging.md)`);
});
