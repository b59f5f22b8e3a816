/**
 * The hosting template (packaging/hosting/cloud-init.yaml) without a VM: cloud-init's own schema
 * check accepts it (and refuses a broken copy), its apply script is valid shell, and the
 * configuration its variables render over the packaged one loads in the supervisor, changes
 * only what a variable changes, and refuses a bad variable by name. The VM tier
 * (make vm-hosting-test) runs the whole template on a booted guest.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { loadConfig } from '../../../supervisor/config/load.js';
import { REPO_ROOT } from '../../support/turn-harness.js';

const TEMPLATE = path.join(REPO_ROOT, 'packaging/hosting/cloud-init.yaml');
const PACKAGED_CONFIG = path.join(REPO_ROOT, 'packaging/turnhost.json');

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-hosting-'));
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));

/** The template's files by path, read with the YAML parser cloud-init itself uses (PyYAML). */
function templateFiles(template: string): Record<string, string> {
  const read = spawnSync(
    'python3',
    [
      '-c',
      'import json, sys, yaml\n' +
        'doc = yaml.safe_load(open(sys.argv[1]))\n' +
        'print(json.dumps({f["path"]: f["content"] for f in doc["write_files"]}))',
      template,
    ],
    { encoding: 'utf8' },
  );
  if (read.status !== 0) throw new Error(`reading the template: ${read.stderr}`);
  return JSON.parse(read.stdout) as Record<string, string>;
}

const files = templateFiles(TEMPLATE);
const script = path.join(dir, 'turnhost-hosting-apply');
fs.writeFileSync(script, files['/usr/local/sbin/turnhost-hosting-apply']!, { mode: 0o755 });
const defaultEnv = files['/etc/turnhost/hosting.env']!;

/** The variables file with `changes` replacing those variables' lines. */
function envFile(name: string, changes: Record<string, string> = {}): string {
  let text = defaultEnv;
  for (const [key, value] of Object.entries(changes)) {
    const line = new RegExp(`^${key}=.*$`, 'm');
    if (!line.test(text)) throw new Error(`the template has no variable ${key}`);
    text = text.replace(line, `${key}=${value}`);
  }
  const file = path.join(dir, name);
  fs.writeFileSync(file, text);
  return file;
}

function render(env: string, base: string): { status: number | null; stdout: string; stderr: string } {
  return spawnSync('sh', [script, 'render', base], {
    encoding: 'utf8',
    env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', TURNHOST_HOSTING_ENV: env },
  });
}

/** Every leaf that differs between two JSON documents, as dotted paths. */
function differences(a: unknown, b: unknown, at = ''): string[] {
  if (typeof a !== 'object' || typeof b !== 'object' || a === null || b === null || Array.isArray(a))
    return JSON.stringify(a) === JSON.stringify(b) ? [] : [at];
  const keys = new Set([...Object.keys(a), ...Object.keys(b)]);
  return [...keys].flatMap((key) =>
    differences((a as Record<string, unknown>)[key], (b as Record<string, unknown>)[key], at ? `${at}.${key}` : key),
  );
}

t.test('cloud-init schema accepts the template and refuses a broken copy', async (t) => {
  const valid = spawnSync('cloud-init', ['schema', '--config-file', TEMPLATE], { encoding: 'utf8' });
  t.equal(valid.status, 0, valid.stderr);
  t.match(valid.stdout, /Valid cloud-config/);
  // The same template with one file's mode as a YAML number: the check has teeth.
  const broken = path.join(dir, 'broken.yaml');
  fs.writeFileSync(broken, fs.readFileSync(TEMPLATE, 'utf8').replace("permissions: '0755'", 'permissions: 0755'));
  const refused = spawnSync('cloud-init', ['schema', '--config-file', broken], { encoding: 'utf8' });
  t.not(refused.status, 0);
  t.match(refused.stderr + refused.stdout, /permissions/);
  t.ok(fs.readFileSync(TEMPLATE, 'utf8').startsWith('#cloud-config\n'), 'cloud-config user-data');
});

t.test('the apply script is valid shell and refuses an unknown subcommand', async (t) => {
  const syntax = spawnSync('sh', ['-n', script], { encoding: 'utf8' });
  t.equal(syntax.status, 0, syntax.stderr);
  const usage = spawnSync('sh', [script, 'bogus'], {
    encoding: 'utf8',
    env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', TURNHOST_HOSTING_ENV: envFile('usage.env') },
  });
  t.equal(usage.status, 1);
  t.match(usage.stderr, /usage: turnhost-hosting-apply/);
});

t.test('the default variables render a configuration the supervisor loads', async (t) => {
  const first = render(envFile('default.env'), PACKAGED_CONFIG);
  t.equal(first.status, 0, first.stderr);
  const configPath = path.join(dir, 'turnhost.json');
  fs.writeFileSync(configPath, first.stdout);
  const loaded = loadConfig({ configPath, env: {}, installed: true });
  if (!loaded.ok) throw new Error(loaded.detail);
  const config = loaded.config;
  t.same(config.listen, { tcp: '127.0.0.1:7707', socket: null, allowNonLoopback: false });
  t.equal(loaded.sources.capacity.source, 'derived', 'auto leaves turns.maxConcurrent derived from the host');
  t.equal(config.workspaces.root, '/var/lib/turnhost-workspaces');
  t.equal(config.workspaces.maxBytes, 10737418240);
  t.equal(config.events.journal, true);
  t.equal(config.metrics.listen, '127.0.0.1:9707');
  t.same(
    differences(JSON.parse(fs.readFileSync(PACKAGED_CONFIG, 'utf8')), JSON.parse(first.stdout)).sort(),
    ['events', 'metrics'],
    'over the packaged configuration, the defaults add only the journal and the metrics listener',
  );
  const again = render(envFile('default.env'), configPath);
  t.equal(again.stdout, first.stdout, 're-rendering over its own output changes nothing');
});

const PROVIDER = {
  name: 'anthropic',
  kind: 'anthropic',
  baseUrl: 'https://api.anthropic.com',
  secret: { file: '/run/turnhost-secrets/anthropic' },
};
const CREDENTIAL = {
  name: 'git',
  baseUrl: 'https://git.example.com',
  secret: { file: '/run/turnhost-secrets/git' },
  header: 'authorization',
  format: 'Bearer {secret}',
};

t.test('a changed variable changes only its keys', async (t) => {
  const before = render(envFile('before.env'), PACKAGED_CONFIG);
  const base = path.join(dir, 'before.json');
  fs.writeFileSync(base, before.stdout);
  const cases: Array<[Record<string, string>, string[]]> = [
    [{ TURNHOST_MAX_TURNS: '9' }, ['turns.maxConcurrent']],
    [{ TURNHOST_EGRESS_ALLOW: "'api.example.com, *.pypi.org'" }, ['egress.allowlist']],
    [{ TURNHOST_LISTEN: 'none', TURNHOST_SOCKET: '/run/turnhost/api.sock' }, ['listen.socket', 'listen.tcp']],
    [{ TURNHOST_LIMITS: `'{"memory":"4G"}'` }, ['limits.memory']],
    [{ TURNHOST_WORKSPACE_ROOT: '/srv/workspaces' }, ['workspaces.root']],
    [{ TURNHOST_WORKSPACE_MAX_BYTES: 'none' }, ['workspaces.maxBytes']],
    [{ TURNHOST_INFERENCE_PROVIDERS: `'${JSON.stringify([PROVIDER])}'` }, ['egress.inference.providers']],
    [{ TURNHOST_CREDENTIALS: `'${JSON.stringify([CREDENTIAL])}'` }, ['egress.credentials']],
  ];
  for (const [changes, keys] of cases) {
    const after = render(envFile('after.env', changes), base);
    t.equal(after.status, 0, after.stderr);
    t.same(differences(JSON.parse(before.stdout), JSON.parse(after.stdout)).sort(), keys, JSON.stringify(changes));
    const configPath = path.join(dir, 'after.json');
    fs.writeFileSync(configPath, after.stdout);
    const loaded = loadConfig({ configPath, env: {}, installed: true });
    t.ok(loaded.ok, `the supervisor loads it: ${loaded.ok ? '' : loaded.detail}`);
  }
  const allow = render(envFile('allow.env', { TURNHOST_EGRESS_ALLOW: "'api.example.com, *.pypi.org'" }), base);
  t.same(JSON.parse(allow.stdout).egress.allowlist, ['api.example.com', '*.pypi.org']);
});

t.test('a bad variable fails the render, naming the variable', async (t) => {
  const cases: Array<[Record<string, string>, RegExp]> = [
    [{ TURNHOST_MAX_TURNS: 'four' }, /TURNHOST_MAX_TURNS: expected an integer/],
    [{ TURNHOST_LIMITS: "'{memory: 2G'" }, /TURNHOST_LIMITS: expected a JSON object/],
    [{ TURNHOST_LIMITS: `'["2G"]'` }, /TURNHOST_LIMITS: expected a JSON object/],
    [{ TURNHOST_WORKSPACE_ROOT: 'workspaces' }, /TURNHOST_WORKSPACE_ROOT: expected an absolute path/],
    [{ TURNHOST_EVENTS_JOURNAL: 'yes' }, /TURNHOST_EVENTS_JOURNAL: expected true or false/],
    [{ TURNHOST_INFERENCE_PROVIDERS: "'{}'" }, /TURNHOST_INFERENCE_PROVIDERS: expected a JSON array/],
    [{ TURNHOST_CREDENTIALS: "'[oops'" }, /TURNHOST_CREDENTIALS: expected a JSON array/],
  ];
  for (const [changes, message] of cases) {
    const refused = render(envFile('bad.env', changes), PACKAGED_CONFIG);
    t.equal(refused.status, 1, JSON.stringify(changes));
    t.match(refused.stderr, message);
    t.equal(refused.stdout, '', 'no configuration is printed');
  }
});
