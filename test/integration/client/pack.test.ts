/**
 * The package as a host application gets it: `npm pack`, then `npm install --ignore-scripts` of
 * the tarball into a scratch project (no native addon is built), a TypeScript program there that
 * calls every client method type-checks against the installed declarations, a call with a wrong
 * argument does not, and importing `turnhost/client` at run time works without any addon.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { REPO_ROOT } from '../../support/turn-harness.js';

const TSC = path.join(REPO_ROOT, 'node_modules/typescript/bin/tsc');

/** Every method of TurnhostClient, called once; `satisfies` fails when a method is missing here. */
const EVERY_METHOD = `
import { createClient, TurnhostApiError, type TurnhostClient } from 'turnhost/client';

export async function everyMethod(client: TurnhostClient): Promise<void> {
  const calls = {
    health: () => client.health(),
    ready: () => client.ready(),
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
    cancelTurn: () => client.cancelTurn('t'),
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
  } satisfies Record<keyof TurnhostClient, () => unknown>;
  for (const call of Object.values(calls)) {
    try {
      await call();
    } catch (error) {
      if (error instanceof TurnhostApiError) console.log(error.status, error.code, error.field);
    }
  }
}

export const client = createClient({ target: { kind: 'unix', path: '/run/turnhost/api.sock' }, token: 't' });
`;

t.test('npm pack installs into a scratch project, types and all, without native builds', async (t) => {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-pack-'));
  t.teardown(() => fs.rmSync(scratch, { recursive: true, force: true }));
  const packed = JSON.parse(
    execFileSync('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', scratch], {
      cwd: REPO_ROOT,
      encoding: 'utf8',
    }),
  ) as Array<{ filename: string; files: Array<{ path: string }> }>;
  const tarball = path.join(scratch, packed[0]!.filename);
  const files = packed[0]!.files.map((f) => f.path);
  t.ok(files.includes('dist/client/index.js') && files.includes('dist/client/index.d.ts'), 'client and types packed');
  t.ok(files.includes('dist/api/schema/index.d.ts'), 'the schema types packed');

  const project = path.join(scratch, 'host');
  fs.mkdirSync(project);
  fs.writeFileSync(path.join(project, 'package.json'), JSON.stringify({ name: 'host', private: true, type: 'module' }));
  execFileSync(
    'npm',
    ['install', '--ignore-scripts', '--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error', tarball],
    { cwd: project, stdio: 'pipe' },
  );
  t.notOk(
    fs.existsSync(path.join(project, 'node_modules/better-sqlite3/build')),
    'no native addon was built (--ignore-scripts)',
  );

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

  const loaded = spawnSync(
    process.execPath,
    [
      '--input-type=module',
      '-e',
      "const m = await import('turnhost/client'); console.log(typeof m.createClient, typeof m.TurnhostApiError);",
    ],
    { cwd: project, encoding: 'utf8' },
  );
  t.equal(loaded.stdout.trim(), 'function function', `the installed client loads: ${loaded.stderr}`);
});
