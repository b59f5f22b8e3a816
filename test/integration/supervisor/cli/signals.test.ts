/**
 * `turnhost serve` and its signals, run as operators run it (a separate process): SIGHUP
 * reloads and keeps serving (it used to end the process with no log line and leave the socket
 * file behind), SIGTERM stops cleanly and removes the socket. Also the per-command help,
 * --version and the completion script of the same CLI.
 */
import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { until } from '../../../support/until.js';

const root = path.resolve(import.meta.dirname, '../../../..');
const main = path.join(root, 'supervisor/cli/main.ts');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-signals-'));
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }));
const cleanEnv = Object.fromEntries(
  Object.entries(process.env).filter(
    ([name]) => !name.startsWith('TURNHOST_') && !/^(NODE_OPTIONS|TAP|_TAPJS)/.test(name),
  ),
);
const cli = (args: string[]) =>
  spawnSync(process.execPath, ['--import', 'tsx', main, ...args], { cwd: root, env: cleanEnv, encoding: 'utf8' });

const answers = (socket: string): Promise<boolean> =>
  new Promise((resolve) => {
    const client = net.connect(socket, () => {
      client.destroy();
      resolve(true);
    });
    client.on('error', () => resolve(false));
  });

t.test('SIGHUP reloads and keeps serving; SIGTERM stops and removes the socket', async (t) => {
  const socket = path.join(tmp, 'api.sock');
  const config = path.join(tmp, 'turnhost.json');
  fs.writeFileSync(config, JSON.stringify({ listen: { tcp: null, socket }, dataDir: path.join(tmp, 'data') }));
  const log = path.join(tmp, 'serve.log');
  const logFd = fs.openSync(log, 'w');
  const child = spawn(process.execPath, ['--import', 'tsx', main, 'serve', '--config', config], {
    cwd: root,
    env: cleanEnv,
    stdio: ['ignore', 'ignore', logFd],
  });
  fs.closeSync(logFd);
  let exit: number | null | undefined;
  child.once('exit', (code) => (exit = code));
  t.teardown(() => {
    if (exit === undefined) child.kill('SIGKILL');
  });
  const text = (): string => fs.readFileSync(log, 'utf8');
  t.ok(await until(() => text().includes('"msg":"listening"') || exit !== undefined, 60_000), 'serve started');

  fs.writeFileSync(
    config,
    JSON.stringify({
      listen: { tcp: null, socket },
      dataDir: path.join(tmp, 'data'),
      egress: { allowlist: ['a.example'] },
    }),
  );
  child.kill('SIGHUP');
  t.ok(await until(() => text().includes('"msg":"configuration reloaded"'), 30_000), 'a reload log line');
  const reloaded = text()
    .split('\n')
    .filter((line) => line.includes('configuration reloaded'))
    .map((line) => JSON.parse(line))[0];
  t.same(reloaded.applied, ['egress.allowlist']);
  t.equal(exit, undefined, 'still running after SIGHUP');
  t.ok(await answers(socket), 'still answering on its socket');

  fs.writeFileSync(config, '{ not json');
  child.kill('SIGHUP');
  t.ok(await until(() => text().includes('configuration reload refused'), 30_000), 'a refused reload is logged');
  t.match(text(), /configuration reload refused.*not valid JSON/);
  t.equal(exit, undefined, 'a bad configuration does not stop it either');

  child.kill('SIGTERM');
  t.ok(await until(() => exit !== undefined, 30_000), 'SIGTERM stops it');
  t.equal(exit, 0, 'a clean exit');
  t.notOk(fs.existsSync(socket), 'the socket file is removed');
  t.match(text(), /"msg":"stopped"/);
});

t.test('per-command --help, --version, completion', async (t) => {
  const run = cli(['run', '--help']);
  t.equal(run.status, 0);
  t.match(run.stdout, /^usage: turnhost run \[options\] -- CMD ARGS/);
  t.match(run.stdout, /--limit NAME=VALUE/);
  t.notMatch(run.stdout, /turnhost serve/, 'only the command it was asked about');
  const events = cli(['events', '-h']);
  t.match(events.stdout, /^usage: turnhost events /);
  t.match(cli(['help', 'check']).stdout, /^usage: turnhost check/);
  const bad = cli(['events', '--bogus']);
  t.equal(bad.status, 2);
  t.match(bad.stderr, /usage: turnhost events/, 'a usage error shows that command');

  const version = cli(['--version']);
  t.equal(version.status, 0);
  t.match(version.stdout, /^turnhost 0\.1\.0 \(commit (?:[0-9a-f]{40}|unknown)\)\n$/);

  const completion = cli(['completion']);
  t.equal(completion.status, 0);
  const script = path.join(tmp, 'completion.bash');
  fs.writeFileSync(script, completion.stdout);
  const complete = (words: string[]): string[] => {
    const line = `source ${script}; COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}; _turnhost; printf '%s\\n' "\${COMPREPLY[@]}"`;
    return spawnSync('bash', ['-c', line], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean);
  };
  t.same(complete(['turnhost', 'st']), ['status']);
  t.same(complete(['turnhost', 'events', '--fo']), ['--follow']);
  t.same(complete(['turnhost', 'run', '--mode', 'r']), ['restricted']);
  t.ok(complete(['turnhost', 'events', '--kind', 'egress_']).includes('egress_denial'));
});
