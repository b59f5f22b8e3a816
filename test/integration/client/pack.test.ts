/**
 * The client package as a host application gets it: `make client-pack` builds
 * dist/turnhost-client-VERSION.tgz; a scratch project outside the checkout installs it offline
 * (`npm install --offline` with an empty cache, ws given as a tarball packed from our
 * node_modules), stays under 10 MB with ws as its only dependency, type-checks a program calling
 * every client method against the installed declarations (and refuses a wrong argument), and
 * calls a real served supervisor through the installed package, reading TURNHOST_URL and
 * TURNHOST_TOKEN.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { startSupervisor } from '../../support/served-supervisor.js';
import { REPO_ROOT } from '../../support/turn-harness.js';

const TSC = path.join(REPO_ROOT, 'node_modules/typescript/bin/tsc');
const TEN_MB = 10 * 1024 * 1024;
// A build, two type-checks of a scratch project and a served supervisor: more than the suite's
// default per-file time on a loaded machine.
t.setTimeout(600_000);

/** Every method of TurnhostClient, called once; `satisfies` fails when a method is missing here. */
const EVERY_METHOD = `
import { createClient, HostPool, NoHostReadyError, TurnhostApiError, type TurnhostClient } from '@turnhost/client';

export async function everyMethod(client: TurnhostClient): Promise<void> {
  const calls = {
    health: () => client.health(),
    ready: async () => (await client.ready()).capacity?.freeSlots,
    drain: async () => (await client.drain({ draining: false })).capacity.draining,
    status: () => client.status(),
    checkWorkerHost: () => client.checkWorkerHost(),
    openapi: () => client.openapi(),
    events: () => client.events({ session: 's', after: 1, limit: 10 }),
    streamEvents: () => client.streamEvents({ turn: 't', after: 0, maxReconnects: 3 }),
    createTurn: () =>
      client.createTurn({ sessionId: 's', mode: 'ordinary', argv: ['wc', '-l'], workspace: 'w', stdin: 'a\\n' }),
    getTurn: () => client.getTurn('t'),
    listTurns: () => client.listTurns({ session: 's', workspace: 'w', state: 'finished', after: '1', limit: 5 }),
    allTurns: () => client.allTurns({ workspace: 'w' }),
    cancelTurn: () => client.cancelTurn('t', { wait: 5 }),
    output: async () => (await client.output('t', { stream: 'stderr', offset: 0 })).data.byteLength,
    run: async () => (await client.run(['true'], { sessionId: 's' })).exitCode,
    listSessions: async () => (await client.listSessions()).sessions.length,
    activity: async () => (await client.activity()).runningTurns.length,
    metrics: async () => (await client.metrics()).length,
    attachTurn: async () => {
      const attached = await client.attachTurn('t');
      attached.write('x');
      attached.eof();
      attached.resize(80, 24);
      attached.signal('SIGINT');
      for await (const chunk of attached.output) chunk.data.byteLength satisfies number;
      return (await attached.result)?.exitCode;
    },
    writeHostFile: () => client.writeHostFile('t', { path: 'a', mode: 'create' }, 'x'),
    deleteSession: async () => (await client.deleteSession('s')).workspaces,
    createWorkspace: async () => (await client.createWorkspace({ sessionId: 's' })).uid,
    listWorkspaces: () => client.listWorkspaces({ session: 's' }),
    getWorkspace: async () => (await client.getWorkspace('w')).bytes,
    deleteWorkspace: async () => (await client.deleteWorkspace('w', { cancel: true })).bytesRemoved,
    writeWorkspaceFile: () => client.writeWorkspaceFile('w', { path: 'a', mode: 'replace' }, Buffer.from('x')),
    readWorkspaceFile: async () => (await client.readWorkspaceFile('w', 'a')).kind,
    makeWorkspaceDirectory: async () => (await client.makeWorkspaceDirectory('w', 'a')).made,
    deleteWorkspaceFile: async () => (await client.deleteWorkspaceFile('w', 'a', { recursive: true })).files,
    putArchive: async () => (await client.putArchive('w', 'src', Buffer.alloc(1024))).files,
    getArchive: async () => (await client.getArchive('w', 'src')).length,
  } satisfies Record<keyof TurnhostClient, () => unknown>;
  const pool = new HostPool({ only: client });
  try {
    (await pool.place('s')).host satisfies string;
  } catch (error) {
    if (error instanceof NoHostReadyError) console.log(error.code, error.hosts.length);
  }
  for (const call of Object.values(calls)) {
    try {
      await call();
    } catch (error) {
      if (error instanceof TurnhostApiError) console.log(error.status, error.code, error.field);
    }
  }
}

export const client = createClient({ target: { kind: 'unix', path: '/run/turnhost/api.sock' }, token: 't' });
export const byUrl = createClient({ server: 'http://127.0.0.1:7707', token: 't' });
export const fromEnvironment = createClient();
`;

/** A program run in the scratch project: the installed client against the served supervisor. */
const AGAINST_SERVER = `
import { createClient } from '@turnhost/client';
const client = createClient();
const health = await client.health();
const status = await client.status();
const turn = await client.createTurn({ sessionId: 'pack-session', mode: 'ordinary', argv: ['/bin/true'], cwd: process.argv[2] });
const attached = await client.attachTurn(turn.id);
for await (const _ of attached.output);
const result = await attached.result;
const ran = await client.run(['/bin/sh', '-c', 'echo out; echo err >&2; exit 3'], { cwd: process.argv[2] });
console.log(JSON.stringify({
  health: health.status,
  release: status.software.release,
  exitCode: result?.exitCode,
  run: { exitCode: ran.exitCode, stdout: ran.stdout.toString(), stderr: ran.stderr.toString() },
}));
`;

function du(dir: string): number {
  return Number(execFileSync('du', ['-sb', dir], { encoding: 'utf8' }).split('\t')[0]);
}

t.test('the client package installs offline into a scratch project, small, typed, and calls a server', async (t) => {
  const version = (JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string })
    .version;
  // -o: the dependency install is the deps step's business, never this test's.
  execFileSync('make', ['--no-print-directory', '-o', 'node_modules/.package-lock.json', 'client-pack'], {
    cwd: REPO_ROOT,
    stdio: 'pipe',
  });
  const built = path.join(REPO_ROOT, `dist/turnhost-client-${version}.tgz`);

  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-client-pack-'));
  t.teardown(() => fs.rmSync(scratch, { recursive: true, force: true }));
  const tarball = path.join(scratch, path.basename(built));
  fs.copyFileSync(built, tarball);
  const packedBytes = fs.statSync(tarball).size;
  const files = execFileSync('tar', ['tzf', tarball], { encoding: 'utf8' }).trim().split('\n').sort();
  t.same(
    files.filter((file) => !/^package\/dist\/client\/[a-z-]+\.(js|d\.ts)$/.test(file)),
    ['package/README.md', 'package/dist/api/schema/index.d.ts', 'package/package.json'],
    'the package holds the client, its declarations and the schema types: no daemon or schema code',
  );
  const manifest = JSON.parse(execFileSync('tar', ['xzOf', tarball, 'package/package.json'], { encoding: 'utf8' })) as {
    name: string;
    version: string;
    dependencies: Record<string, string>;
  };
  t.same([manifest.name, manifest.version, Object.keys(manifest.dependencies)], ['@turnhost/client', version, ['ws']]);
  execFileSync('npm', [
    'pack',
    '--silent',
    '--ignore-scripts',
    '--pack-destination',
    scratch,
    path.join(REPO_ROOT, 'node_modules/ws'),
  ]);
  const ws = fs.readdirSync(scratch).find((name) => name.startsWith('ws-'))!;

  const project = path.join(scratch, 'host');
  fs.mkdirSync(project);
  fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'host', private: true, type: 'module' }));
  const npmEnv = { ...process.env, npm_config_cache: path.join(scratch, 'npm-cache'), npm_config_offline: 'true' };
  execFileSync(
    'npm',
    [
      'install',
      '--offline',
      '--ignore-scripts',
      '--no-audit',
      '--no-fund',
      '--loglevel=error',
      `../${ws}`,
      `../${path.basename(tarball)}`,
    ],
    { cwd: project, stdio: 'pipe', env: npmEnv },
  );
  const modules = path.join(project, 'node_modules');
  t.same(
    fs
      .readdirSync(modules)
      .filter((name) => !name.startsWith('.'))
      .sort(),
    ['@turnhost', 'ws'],
    'ws is the only dependency',
  );
  const installedBytes = du(modules);
  t.ok(installedBytes < TEN_MB, `installed size ${installedBytes} bytes is under 10 MB`);
  t.comment(`packed ${packedBytes} bytes, installed ${installedBytes} bytes`);

  fs.writeFileSync(path.join(project, 'every-method.ts'), EVERY_METHOD);
  fs.writeFileSync(
    path.join(project, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        module: 'nodenext',
        moduleResolution: 'nodenext',
        target: 'es2022',
        strict: true,
        noEmit: true,
        skipLibCheck: false,
        typeRoots: [path.join(REPO_ROOT, 'node_modules/@types')],
        types: ['node'],
      },
      files: ['every-method.ts'],
    }),
  );
  const checked = spawnSync(process.execPath, [TSC, '-p', project], { encoding: 'utf8' });
  t.equal(checked.status, 0, `every method type-checks: ${checked.stdout}${checked.stderr}`);
  // The check can fail: a wrong argument type is an error against the installed declarations.
  fs.writeFileSync(
    path.join(project, 'every-method.ts'),
    EVERY_METHOD.replace("client.getTurn('t')", 'client.getTurn(42)'),
  );
  const wrong = spawnSync(process.execPath, [TSC, '-p', project], { encoding: 'utf8' });
  t.not(wrong.status, 0, 'a call with a wrong argument does not type-check');
  t.match(wrong.stdout, /every-method\.ts.*TS2345/);

  const served = await startSupervisor({ name: 'client-pack' });
  t.teardown(() => served.stop());
  const token = fs.readFileSync(path.join(served.dataDir, 'api-token'), 'utf8').trim();
  fs.writeFileSync(path.join(project, 'against-server.mjs'), AGAINST_SERVER);
  // Asynchronously: the contract-checking proxy in front of the server runs in this process.
  const child = spawn(process.execPath, ['against-server.mjs', served.workspace], {
    cwd: project,
    env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', TURNHOST_URL: `unix:${served.socket}`, TURNHOST_TOKEN: token },
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  t.equal(code, 0, stderr);
  t.same(
    JSON.parse(stdout),
    {
      health: 'ok',
      release: version,
      exitCode: 0,
      run: { exitCode: 3, stdout: 'out\n', stderr: 'err\n' },
    },
    'run() answers the exit code and both streams in one call',
  );
});
