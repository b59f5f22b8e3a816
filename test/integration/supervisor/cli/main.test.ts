/**
 * The real CLI, compiled by tsc, against a real `serve` in a temporary data directory
 * (TCP on 127.0.0.1:0 and a unix socket).
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createMemoryLogger } from '../../../../core/log.js';
import t from 'tap';
import { openEventStore } from '../../../../supervisor/events/store.js';
import { startContractProxy } from '../../../support/contract-proxy.js';
import { stopTapInjectingIntoChildren } from '../../../support/no-tap-inject.js';

// The server started here spawns workers; tap's hook must not reach them (no-tap-inject.ts).
stopTapInjectingIntoChildren();
const root = path.resolve(import.meta.dirname, '../../../..');
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-cli-'));
// Compiled inside the checkout so the output resolves node_modules and package.json.
const outDir = fs.mkdtempSync(path.join(root, '.tap', 'cli-dist-'));
t.teardown(() => {
  fs.rmSync(tmp, { recursive: true, force: true });
  fs.rmSync(outDir, { recursive: true, force: true });
});
// Type errors elsewhere in the tree do not stop tsc from emitting; the CLI's own output must exist.
spawnSync('npx', ['tsc', '-p', 'tsconfig.json', '--outDir', outDir], { cwd: root, stdio: 'ignore' });
const cli = path.join(outDir, 'supervisor', 'cli', 'main.js');
if (!fs.existsSync(cli)) throw new Error(`tsc did not produce ${cli}`);

const dataDir = path.join(tmp, 'data');
// The turns' workspace root: beside the data directory, never around it.
const workspace = path.join(tmp, 'workspace');
fs.mkdirSync(workspace, { mode: 0o777 });
fs.chmodSync(workspace, 0o777);
const socket = path.join(tmp, 'api.sock');
// The CLI runs as operators run it: without tap's loader options (NODE_OPTIONS) or TURNHOST_* settings.
const cleanEnv = Object.fromEntries(
  Object.entries(process.env).filter(
    ([name]) => !name.startsWith('TURNHOST_') && !/^(NODE_OPTIONS|TAP|_TAPJS)/.test(name),
  ),
);
cleanEnv.TURNHOST_WORKSPACE_ROOTS = workspace;

/**
 * The CLI, without blocking this process: its answers pass through the contract proxies below,
 * which run here.
 */
function turnhost(
  args: string[],
  options: { input?: string } = {},
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, [cli, ...args], { cwd: tmp, env: cleanEnv, timeout: 60_000 });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString('utf8')));
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
  child.stdin.end(options.input ?? '');
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

interface Served {
  child: ChildProcess;
  port: number;
  stderr: () => string;
  exited: Promise<number | null>;
}

/** The server logs to a file, not a pipe: a full pipe would block the server while nothing reads it. */
async function serve(args: string[]): Promise<Served> {
  const logFile = path.join(tmp, `serve-${Date.now()}.log`);
  const log = fs.openSync(logFile, 'w');
  const child = spawn(process.execPath, [cli, 'serve', ...args], {
    cwd: tmp,
    env: cleanEnv,
    stdio: ['ignore', 'ignore', log],
  });
  fs.closeSync(log);
  let exitCode: number | null | undefined;
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve((exitCode = code))));
  const stderr = (): string => fs.readFileSync(logFile, 'utf8');
  for (;;) {
    const line = stderr()
      .split('\n')
      .find((l) => l.includes('"msg":"listening"'));
    if (line) return { child, port: JSON.parse(line).tcp?.port ?? 0, stderr, exited };
    if (exitCode !== undefined) throw new Error(`serve exited ${exitCode}: ${stderr()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

const served = await serve(['--data-dir', dataDir, '--listen', '127.0.0.1:0', '--socket', socket]);
// The CLI talks to the server through contract proxies, one per listener: every answer it gets
// is checked against the OpenAPI document, and the file fails when one broke it.
const checkedSocket = await startContractProxy(
  { kind: 'unix', path: socket },
  { kind: 'unix', path: path.join(tmp, 'checked-api.sock') },
);
const checkedTcp = await startContractProxy({ kind: 'tcp', host: '127.0.0.1', port: served.port }, { kind: 'tcp' });
const server = `unix:${checkedSocket.target.path}`;
const tcpServer = `http://127.0.0.1:${checkedTcp.target.port}`;
t.teardown(async () => {
  if (served.child.exitCode === null) {
    served.child.kill('SIGTERM');
    await served.exited;
  }
  await checkedSocket.close();
  await checkedTcp.close();
  checkedSocket.assertConforming('serve on its unix socket');
  checkedTcp.assertConforming('serve on TCP');
});

t.test('serve creates a private data dir and token file', async (t) => {
  t.equal(fs.statSync(dataDir).mode & 0o777, 0o700);
  const token = fs.statSync(path.join(dataDir, 'api-token'));
  t.equal(token.mode & 0o777, 0o600);
  t.equal(fs.statSync(socket).mode & 0o777, 0o660);
});

t.test('status --json shows a workerHost for this machine', async (t) => {
  const result = await turnhost(['status', '--json', '--server', server, '--data-dir', dataDir]);
  t.equal(result.code, 0, result.stderr);
  const status = JSON.parse(result.stdout);
  t.match(status.software, { release: String, sourceCommit: String });
  t.match(status.host, { kernel: String, distro: String, cpus: Number, memoryBytes: Number });
  t.match(status.runtime.workerHost, {
    ordinary: { available: Boolean, trigger: 'boot' },
    identity: String,
    limits: { enforced: Array, absent: Array },
  });
  t.match(status.runtime.workerHost.boundary.cgroup.layout, /^(v2|hybrid|v1|none)$/);
  t.same(status.runtime.preparedWorkers, { ready: 0, starting: 0 }, 'no worker is prepared before a turn ran');
  t.equal(status.runtime.egressRelay, null, 'no turn proxy has started the kernel relay');
  if (process.getuid?.() === 0)
    t.match(status.runtime.workerHost.rootServer, { warning: String }, 'root server warning while running as root');
  t.match(served.stderr(), /"level":"warn".*runs as root/, 'one WARN line at boot');
});

t.test('status (human) over TCP', async (t) => {
  const result = await turnhost(['status', '--server', tcpServer, '--data-dir', dataDir]);
  t.equal(result.code, 0, result.stderr);
  t.match(result.stdout, /^software\s+turnhost /m);
  t.match(result.stdout, /^ordinary\s+(available|UNAVAILABLE)/m);
  t.match(result.stdout, /^identity\s+(shared_uid|separate_uid)/m);
});

t.test('check re-runs the probes; exit code follows ordinary', async (t) => {
  const result = await turnhost(['check', '--json', '--server', server, '--data-dir', dataDir]);
  const status = JSON.parse(result.stdout);
  t.equal(status.ordinary.trigger, 'check');
  t.equal(result.code, status.ordinary.available ? 0 : 4);
  const human = await turnhost(['check', '--server', server, '--data-dir', dataDir]);
  t.equal(human.code, result.code);
  t.match(human.stdout, /^ordinary\s+/m);
  t.match(
    human.stdout,
    /^egress\s+per-turn egress proxy.*an allow entry without a port allows ports 80 and 443 only; a deny entry without a port denies every port/m,
    'the two port rules side by side',
  );
});

t.test('events --json, filters, paging, errors', async (t) => {
  const { logger } = createMemoryLogger();
  const store = openEventStore({
    databasePath: path.join(dataDir, 'turnhost.db'),
    fallbackLogPath: path.join(tmp, 'fallback.log'),
    unboundRetentionDays: 30,
    logger,
  });
  const base = { turnId: null, actor: 'server' as const, model: null, profile: null };
  store.appendBatch([
    {
      ...base,
      sessionId: 'cli-s1',
      kind: 'egress_denial',
      payload: { host: 'a.example', port: 443, reason: 'not allowed' },
    },
    {
      ...base,
      sessionId: 'cli-s2',
      kind: 'egress_denial',
      payload: { host: 'b.example', port: 443, reason: 'not allowed' },
    },
    { ...base, sessionId: 'cli-s1', kind: 'host_write_refused', payload: { path: 'x', reason: 'alias_denied' } },
  ]);
  store.close();

  const all = await turnhost(['events', '--json', '--server', server, '--data-dir', dataDir, '--session', 'cli-s1']);
  t.equal(all.code, 0, all.stderr);
  const page = JSON.parse(all.stdout);
  t.same(
    page.events.map((e: { kind: string }) => e.kind),
    ['egress_denial', 'host_write_refused'],
  );
  t.equal(page.nextAfter, null);

  const first = JSON.parse(
    (await turnhost(['events', '--json', '--server', server, '--data-dir', dataDir, '--limit', '1'])).stdout,
  );
  t.equal(first.events.length, 1);
  t.equal(first.nextAfter, first.events[0].id);

  const human = await turnhost(['events', '--server', server, '--data-dir', dataDir, '--kind', 'egress_denial']);
  t.equal(human.code, 0);
  t.equal(human.stdout.trim().split('\n').length, 2);
  t.match(human.stdout, /egress_denial v1\tcli-s1\/-/);

  const bad = await turnhost(['events', '--server', server, '--data-dir', dataDir, '--limit', '0']);
  t.equal(bad.code, 2);
  t.match(bad.stderr, /limit: expected an integer/);
});

t.test('events --follow replays after --after, then ends cleanly on SIGINT', async (t) => {
  const child = spawn(
    process.execPath,
    [
      cli,
      'events',
      '--follow',
      '--json',
      '--after',
      '0',
      '--session',
      'cli-s1',
      '--server',
      server,
      '--data-dir',
      dataDir,
    ],
    { cwd: tmp, env: cleanEnv },
  );
  t.teardown(() => {
    if (child.exitCode === null) child.kill('SIGKILL');
  });
  let out = '';
  let err = '';
  child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
  await new Promise<void>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.trim().split('\n').length >= 2) resolve();
    });
    child.once('exit', (code) => reject(new Error(`events --follow exited ${code}: ${err}`)));
  });
  const lines = out
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  t.same(
    lines.map((e) => e.sessionId),
    ['cli-s1', 'cli-s1'],
  );
  const code = new Promise<number | null>((resolve) => child.once('exit', resolve));
  child.kill('SIGINT');
  t.equal(await code, 0);
});

t.test('no server: exit 5 with the hint', async (t) => {
  const viaSocket = await turnhost([
    'status',
    '--server',
    `unix:${path.join(tmp, 'absent.sock')}`,
    '--data-dir',
    dataDir,
  ]);
  t.equal(viaSocket.code, 5);
  t.match(viaSocket.stderr, /no server answers at unix:.*absent\.sock.*turnhost serve.*make run/);
  const noToken = await turnhost(['status', '--data-dir', path.join(tmp, 'never-served')]);
  t.equal(noToken.code, 5);
  t.match(noToken.stderr, /turnhost serve/);
});

t.test('a wrong token: exit 4', async (t) => {
  const other = path.join(tmp, 'other-data');
  fs.mkdirSync(other, { mode: 0o700 });
  fs.writeFileSync(path.join(other, 'api-token'), 'not-the-right-token-at-all\n', { mode: 0o600 });
  const result = await turnhost(['status', '--server', server, '--data-dir', other]);
  t.equal(result.code, 4);
  t.match(result.stderr, /unauthenticated/);
  fs.chmodSync(path.join(other, 'api-token'), 0o644);
  const loose = await turnhost(['status', '--server', server, '--data-dir', other]);
  t.equal(loose.code, 4, 'a token file readable by others is refused');
  t.match(loose.stderr, /chmod 600/);
});

t.test('bad usage: exit 2', async (t) => {
  for (const args of [
    [],
    ['frobnicate'],
    ['status', '--frob'],
    ['status', 'extra-positional'],
    ['events', '--follow', '--limit', '3'],
    ['run'],
    ['run', '--timeout', 'soon', '--', '/bin/true'],
    ['run', '--env', 'NOEQUALS', '--', '/bin/true'],
    ['run', '--mode', 'fast', '--', '/bin/true'],
    ['status', '--server', 'ftp://x'],
  ]) {
    const result = await turnhost([
      ...args,
      ...(args[0] === 'events' ? ['--server', server, '--data-dir', dataDir] : []),
    ]);
    t.equal(result.code, 2, args.join(' ') || '(no arguments)');
  }
});

t.test('serve refuses an invalid configuration naming the key: exit 2', async (t) => {
  const config = path.join(tmp, 'bad.json');
  fs.writeFileSync(config, JSON.stringify({ egress: { maxConnections: 0 } }));
  const result = await turnhost(['serve', '--config', config, '--data-dir', path.join(tmp, 'bad-data')]);
  t.equal(result.code, 2);
  t.match(result.stderr, /egress\.maxConnections: expected a positive integer/);
  const missing = await turnhost(['serve', '--config', path.join(tmp, 'missing.json')]);
  t.equal(missing.code, 2);
  t.match(missing.stderr, /missing\.json: cannot read the configuration file \(ENOENT\)/);
  const exposed = await turnhost(['serve', '--listen', '0.0.0.0:0', '--data-dir', path.join(tmp, 'bad-data')]);
  t.equal(exposed.code, 2);
  t.match(exposed.stderr, /not a loopback address/);
});

t.test('a second serve is refused: same data dir, or same socket', async (t) => {
  const sameDir = await turnhost([
    'serve',
    '--data-dir',
    dataDir,
    '--listen',
    'none',
    '--socket',
    path.join(tmp, 'other.sock'),
  ]);
  t.equal(sameDir.code, 1);
  t.match(sameDir.stderr, /data_dir_in_use: .* another turnhost supervisor uses this data directory/);
  const local = await turnhost(['run', '--local', '--data-dir', dataDir, '--cwd', workspace, '--', '/bin/true']);
  t.equal(local.code, 1, 'run --local refuses a data dir a server holds');
  t.match(local.stderr, /another turnhost supervisor/);
  const sameSocket = await turnhost([
    'serve',
    '--data-dir',
    path.join(tmp, 'second-data'),
    '--listen',
    'none',
    '--socket',
    socket,
  ]);
  t.equal(sameSocket.code, 1);
  t.match(sameSocket.stderr, /socket_in_use/);
  t.ok(fs.statSync(socket).isSocket(), 'the live socket is left alone');
});

t.test('run through the server and --local', async (t) => {
  const run = (args: string[], input?: string) =>
    turnhost(['run', '--server', server, '--data-dir', dataDir, '--cwd', workspace, ...args], { input });

  // The command waits a little so the attach stream is up before it prints.
  const echo = await run(['--', '/bin/sh', '-c', 'sleep 1; echo hello from a turn']);
  t.equal(echo.code, 0, echo.stderr);
  t.equal(echo.stdout, 'hello from a turn\n');
  const failing = await run(['--json', '--', '/bin/sh', '-c', 'exit 3']);
  t.equal(failing.code, 3, failing.stderr);
  t.match(JSON.parse(failing.stdout), { status: 'nonzero_exit', exitCode: 3 });
  const signalled = await run(['--', '/bin/sh', '-c', 'kill -TERM $$']);
  t.equal(signalled.code, 128 + 15, signalled.stderr);
  const stdin = await run(['--', '/bin/sh', '-c', 'head -c 5'], 'abcdefgh');
  t.equal(stdin.stdout, 'abcde', 'input reaches the command');
  const timeout = await run(['--timeout', '1', '--', '/bin/sleep', '30']);
  t.equal(timeout.code, 124, timeout.stderr);

  const refused = await turnhost([
    'run',
    '--server',
    server,
    '--data-dir',
    dataDir,
    '--cwd',
    '/etc',
    '--',
    '/bin/true',
  ]);
  t.equal(refused.code, 2, 'a cwd outside the workspace roots is a usage error');
  t.match(refused.stderr, /cwd: must lie beneath/);
  const missing = await turnhost([
    'run',
    '--server',
    server,
    '--data-dir',
    dataDir,
    '--cwd',
    workspace,
    '--turn-id',
    'bad id!',
    '--',
    '/bin/true',
  ]);
  t.equal(missing.code, 2);
  t.match(missing.stderr, /turnId: /);

  const local = await turnhost([
    'run',
    '--local',
    '--data-dir',
    path.join(tmp, 'local-data'),
    '--cwd',
    workspace,
    '--',
    '/bin/sh',
    '-c',
    'echo local; exit 7',
  ]);
  t.equal(local.code, 7, local.stderr);
  t.equal(local.stdout, 'local\n');

  // After those turns the server holds one worker prepared for the next turn like them.
  let prepared: unknown;
  for (let attempt = 0; attempt < 150; attempt++) {
    prepared = JSON.parse((await turnhost(['status', '--json', '--server', server, '--data-dir', dataDir])).stdout)
      .runtime.preparedWorkers;
    if ((prepared as { ready: number }).ready === 1) break;
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  t.same(prepared, { ready: 1, starting: 0 }, 'status shows the prepared worker');
  t.match(
    (await turnhost(['status', '--server', server, '--data-dir', dataDir])).stdout,
    /prepared workers\s+1 ready, 0 starting/,
  );
  // The turns' proxies started the kernel relay; none of those commands opened a tunnel.
  const relay = JSON.parse((await turnhost(['status', '--json', '--server', server, '--data-dir', dataDir])).stdout)
    .runtime.egressRelay;
  t.same(relay, {
    state: 'ready',
    failure: null,
    adopted: 0,
    open: 0,
    refused: { relay_not_ready: 0, not_adoptable: 0 },
  });
  t.match(
    (await turnhost(['status', '--server', server, '--data-dir', dataDir])).stdout,
    /^egress relay\s+ready, 0 spliced \(tunnels and forward bodies\), 0 open$/m,
  );
});

t.test('SIGTERM stops serve cleanly and removes its socket', async (t) => {
  served.child.kill('SIGTERM');
  t.equal(await served.exited, 0);
  t.notOk(fs.existsSync(socket));
  t.match(served.stderr(), /"msg":"stopped"/);
});
