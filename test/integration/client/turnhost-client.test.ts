/**
 * The typed client against a real `turnhost serve` on its unix socket: every method, refusals
 * as TurnhostApiError, and that loading it pulls in no daemon module or native addon.
 */
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { createClient, TurnhostApiError, type AttachError, type GovernanceEvent } from '../../../client/index.js';
import { serveForTest } from '../../support/served-supervisor.js';
import { REPO_ROOT } from '../../support/turn-harness.js';

t.test('the compiled client imports only itself, the schema and node builtins or ws', async (t) => {
  const seen = new Set<string>();
  const outside: string[] = [];
  const walk = (file: string): void => {
    if (seen.has(file)) return;
    seen.add(file);
    const text = fs.readFileSync(file, 'utf8');
    for (const match of text.matchAll(/^\s*(?:import|export)\s[^'"]*?from\s+['"]([^'"]+)['"]/gm)) {
      const spec = match[1]!;
      if (spec.startsWith('.')) walk(path.resolve(path.dirname(file), spec));
      else if (!spec.startsWith('node:') && spec !== 'ws' && spec !== '@sinclair/typebox') outside.push(spec);
    }
  };
  walk(path.join(REPO_ROOT, 'dist/client/index.js'));
  t.same(outside, [], 'no package other than ws and typebox');
  const ours = [...seen].map((file) => path.relative(path.join(REPO_ROOT, 'dist'), file));
  t.same(
    ours.filter((file) => !/^(client|api)\//.test(file)),
    [],
    'only client/ and api/ modules',
  );
  t.ok(
    ours.every((file) => file.endsWith('.js')),
    'no native addon',
  );
});

t.test('every method against a real supervisor', async (t) => {
  const served = await serveForTest(t, { name: 'client', workspaces: true });
  const { token } = served;
  let n = 0;
  const client = createClient({ target: { kind: 'unix', path: served.socket }, token, requestId: () => `c-${++n}` });

  t.equal((await client.health()).status, 'ok');
  t.equal((await client.ready()).status, 'ready');
  const status = await client.status();
  t.type(status.software.release, 'string');
  const checked = await client.checkWorkerHost();
  t.equal(checked.ordinary?.trigger, 'check');
  t.equal(((await client.openapi()) as { openapi: string }).openapi, '3.1.0');

  const created = await client.createTurn({
    sessionId: 'client-session',
    turnId: 'client-one',
    mode: 'ordinary',
    argv: ['/bin/sh', '-c', 'read line; echo "got $line"; echo err >&2'],
    cwd: served.workspace,
  });
  t.equal(created.id, 'client-one');
  const attached = await client.attachTurn(created.id);
  const refusedResize = new Promise<AttachError>((resolve) => attached.onError(resolve));
  attached.resize(0, 5000);
  t.same(
    await refusedResize,
    {
      code: 'invalid_request',
      error: 'cols: expected an integer 1-1000',
      field: 'cols',
      errors: [
        { field: 'cols', detail: 'expected an integer 1-1000' },
        { field: 'rows', detail: 'expected an integer 1-1000' },
      ],
    },
    "a refused message's every field reaches onError",
  );
  attached.write('hello\n');
  let stdout = '';
  let stderr = '';
  for await (const chunk of attached.output)
    if (chunk.stream === 'stderr') stderr += chunk.data.toString();
    else stdout += chunk.data.toString();
  const result = await attached.result;
  t.equal(result?.status, 'ok');
  t.equal(stdout, 'got hello\n');
  t.equal(stderr, 'err\n');
  t.equal((await client.getTurn('client-one')).state, 'finished');
  const listed = await client.listTurns({ session: 'client-session' });
  t.ok(listed.turns.some((turn) => turn.id === 'client-one'));
  t.equal(listed.nextAfter, null);

  // End of input: eof closes the command's stdin, so `wc -l` ends with its count.
  const counting = await client.createTurn({
    sessionId: 'client-session',
    mode: 'ordinary',
    argv: ['wc', '-l'],
    cwd: served.workspace,
  });
  const counter = await client.attachTurn(counting.id);
  counter.write('a\nb\n');
  counter.eof();
  let counted = '';
  for await (const chunk of counter.output) counted += chunk.data.toString();
  t.equal(counted.trim(), '2');
  t.equal((await counter.result)?.status, 'ok');

  // Paging: one turn per page, every turn of the session once, newest first.
  const firstPage = await client.listTurns({ session: 'client-session', limit: 1 });
  t.equal(firstPage.turns[0]?.id, counting.id);
  t.type(firstPage.nextAfter, 'string');
  const all: string[] = [];
  for await (const turn of client.allTurns({ session: 'client-session', limit: 1 })) all.push(turn.id);
  t.same(all, [counting.id, 'client-one']);

  // Workspaces: create, write, run in it, read back, list, show, delete.
  const workspace = await client.createWorkspace({ id: 'client-ws', sessionId: 'client-ws-session' });
  t.equal(workspace.id, 'client-ws');
  t.equal((await client.writeWorkspaceFile('client-ws', { path: 'in.txt' }, 'from host\n')).bytes, 10);
  const inWorkspace = await client.createTurn({
    sessionId: 'client-ws-session',
    mode: 'ordinary',
    workspace: 'client-ws',
    argv: ['/bin/sh', '-c', 'cat in.txt > out.txt && echo turn >> out.txt'],
  });
  const wsAttached = await client.attachTurn(inWorkspace.id);
  const wsOutput: Buffer[] = [];
  for await (const chunk of wsAttached.output) wsOutput.push(chunk.data);
  t.equal(Buffer.concat(wsOutput).length, 0, 'the turn wrote only to its file');
  t.equal((await wsAttached.result)?.status, 'ok');
  const read = await client.readWorkspaceFile('client-ws', 'out.txt');
  if (read.kind !== 'file') throw new Error('out.txt read as a directory');
  t.equal(read.data.toString(), 'from host\nturn\n');
  t.match(read.sha256, /^[0-9a-f]{64}$/);
  t.same(await client.makeWorkspaceDirectory('client-ws', 'made/deep'), { path: 'made/deep', made: 2 });
  const top = await client.readWorkspaceFile('client-ws', '.');
  t.same(top.kind === 'directory' ? top.entries.map((e) => e.name) : top, ['in.txt', 'made', 'out.txt']);
  t.match(await client.deleteWorkspaceFile('client-ws', 'made', { recursive: true }), { directories: 2 });
  t.same(
    (await client.listWorkspaces({ session: 'client-ws-session' })).map((w) => w.id),
    ['client-ws'],
  );
  t.ok(((await client.getWorkspace('client-ws')).files ?? 0) >= 2, 'usage is measured');
  t.same(
    (await client.listTurns({ workspace: 'client-ws' })).turns.map((turn) => turn.id),
    [inWorkspace.id],
  );
  const sessionDeleted = await client.deleteSession('client-ws-session');
  t.match(sessionDeleted, { sessionId: 'client-ws-session', turns: 1, workspaces: 1 });
  t.same(await client.listWorkspaces(), [], 'the session took its workspace');
  const again = await client.createWorkspace();
  t.match((await client.deleteWorkspace(again.id, { cancel: true })).deleted, again.id);

  const page = await client.events({ turn: 'client-one', limit: 1000 });
  t.ok(page.events.length > 0, 'the turn left events');
  t.ok(page.events.length >= 2, `several events (${page.events.map((e) => e.kind).join(', ')})`);
  const first = page.events[0]!;
  const streamed: GovernanceEvent[] = [];
  const abort = new AbortController();
  for await (const event of client.streamEvents({ turn: 'client-one', after: first.id, signal: abort.signal })) {
    streamed.push(event);
    if (streamed.length >= page.events.length - 1) abort.abort();
  }
  t.same(
    streamed.map((e) => e.id),
    page.events.slice(1).map((e) => e.id),
    'the stream resumes after the given id, in order',
  );

  const sleeper = await client.createTurn({
    sessionId: 'client-session',
    mode: 'ordinary',
    argv: ['/bin/sh', '-c', 'while [ ! -f done.txt ]; do sleep 0.05; done; cat done.txt'],
    cwd: served.workspace,
  });
  const watched = await client.attachTurn(sleeper.id);
  const written = await client.writeHostFile(sleeper.id, { path: 'done.txt', mode: 'create' }, 'written by the host');
  t.same(written.replaced, false);
  t.equal(written.bytes, 19);
  let out = '';
  for await (const chunk of watched.output) out += chunk.data.toString();
  t.match(out, /written by the host/);

  const long = await client.createTurn({
    sessionId: 'client-session',
    mode: 'ordinary',
    argv: ['/bin/sleep', '60'],
    cwd: served.workspace,
  });
  t.equal((await client.cancelTurn(long.id)).id, long.id);

  const refusal = async (call: () => Promise<unknown>): Promise<TurnhostApiError> => {
    try {
      await call();
    } catch (error) {
      if (error instanceof TurnhostApiError) return error;
      throw error;
    }
    throw new Error('expected a refusal');
  };
  const missing = await refusal(() => client.getTurn('no-such-turn'));
  t.match(missing, { status: 404, code: 'not_found' });
  const invalid = await refusal(() =>
    client.createTurn({ sessionId: '', mode: 'ordinary', argv: [], cwd: served.workspace }),
  );
  t.match(invalid, { status: 400, code: 'invalid_request', field: 'sessionId' });
  t.same(
    invalid.errors?.map((e) => e.field),
    ['sessionId', 'argv'],
  );
  t.match(await refusal(() => client.getWorkspace('no-such-workspace')), { status: 404, code: 'workspace_not_found' });
  t.match(await refusal(() => client.deleteSession('no-such-session')), { status: 404, code: 'not_found' });
  t.match(await refusal(() => client.listTurns({ limit: 0 })), {
    status: 400,
    code: 'invalid_request',
    field: 'limit',
  });
  const noAttach = await refusal(() => client.attachTurn('no-such-turn'));
  t.match(noAttach, { status: 404, code: 'not_found' });
  const wrongToken = createClient({ target: { kind: 'unix', path: served.socket }, token: 'wrong' });
  t.match(await refusal(() => wrongToken.status()), { status: 401, code: 'unauthenticated' });
  const nobody = createClient({ target: { kind: 'unix', path: path.join(served.dataDir, 'none.sock') }, token });
  t.match(await refusal(() => nobody.status()), { status: 0, code: 'unreachable', errno: 'ENOENT' });
});
