/**
 * The typed client against a real `turnhost serve` on its unix socket: every method, refusals
 * as TurnhostApiError, and that loading it pulls in no daemon module or native addon.
 */
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { createClient, TurnhostApiError, type GovernanceEvent } from '../../../client/index.js';
import { startSupervisor } from '../../support/served-supervisor.js';
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
  const served = await startSupervisor({ name: 'client' });
  t.teardown(() => served.stop());
  const token = fs.readFileSync(path.join(served.dataDir, 'api-token'), 'utf8').trim();
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
  const attached = await client.attach(created.id);
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
  t.ok((await client.listTurns({ session: 'client-session' })).some((turn) => turn.id === 'client-one'));

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
  const watched = await client.attach(sleeper.id);
  const written = await client.writeFile(sleeper.id, { path: 'done.txt', mode: 'create' }, 'written by the host');
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
  const noAttach = await refusal(() => client.attach('no-such-turn'));
  t.match(noAttach, { status: 404, code: 'not_found' });
  const wrongToken = createClient({ target: { kind: 'unix', path: served.socket }, token: 'wrong' });
  t.match(await refusal(() => wrongToken.status()), { status: 401, code: 'unauthenticated' });
  const nobody = createClient({ target: { kind: 'unix', path: path.join(served.dataDir, 'none.sock') }, token });
  t.match(await refusal(() => nobody.status()), { status: 0, code: 'unreachable', errno: 'ENOENT' });
});
