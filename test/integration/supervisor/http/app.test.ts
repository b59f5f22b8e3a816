import net from 'node:net';
import t from 'tap';
import {
  event,
  fakeStatus,
  nextMessages,
  opened,
  startTestServer,
  TOKEN,
  upgradeRefusal,
} from '../../../support/app-server.js';

t.test('auth: health is public; everything else needs the right bearer token', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.close());
  const health = await s.request('GET', '/api/health', { token: null });
  t.equal(health.status, 200);
  t.equal(health.json.status, 'ok');
  t.type(health.json.uptime, 'number');
  t.ok(!Number.isNaN(Date.parse(health.json.timestamp)));

  for (const [label, token] of [
    ['missing', null],
    ['wrong, same length', TOKEN.replace(/.$/, 'X')],
    ['wrong, shorter', 'short'],
    ['empty', ''],
  ] as const) {
    const res = await s.request('GET', '/api/status', { token });
    t.equal(res.status, 401, label);
    t.same(res.json, { error: res.json.error, code: 'unauthenticated' }, label);
    t.equal(res.headers['www-authenticate'], 'Bearer');
  }
  const basic = await s.request('GET', '/api/status', { token: null, headers: { authorization: `Basic ${TOKEN}` } });
  t.equal(basic.status, 401, 'a non-Bearer scheme is refused');
  const lower = await s.request('GET', '/api/status', { token: null, headers: { authorization: `Bearer  ${TOKEN}` } });
  t.equal(lower.status, 401, 'malformed header is refused');
  t.equal((await s.request('GET', '/api/status')).status, 200);
  t.equal(
    (await s.request('GET', '/api/nothing', { token: null })).status,
    401,
    'unknown routes do not answer before auth',
  );
});

t.test('status, worker-host check and their shapes', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.close());
  const status = await s.request('GET', '/api/status');
  t.equal(status.status, 200);
  t.same(status.json.software, { release: '0.1.0', sourceCommit: 'abc123' });
  t.same(status.json.host, { kernel: '6.1.0', distro: 'Debian 12', cpus: 2, memoryBytes: 8 * 2 ** 30 });
  t.equal(status.json.runtime.workerHost.ordinary.trigger, 'boot');
  t.match(status.json.runtime.events, { databasePath: String, fallbackActive: false });
  t.type(status.json.uptime, 'number');

  const check = await s.request('POST', '/api/status/worker-host');
  t.equal(check.status, 200);
  t.equal(check.json.ordinary.trigger, 'check');
  t.same(Object.keys(check.json).sort(), Object.keys(fakeStatus()).sort());
  t.equal(s.probeCalls(), 1);
  const after = await s.request('GET', '/api/status');
  t.equal(after.json.runtime.workerHost.ordinary.trigger, 'check', 'status shows the latest probe');

  // The body is optional: an empty JSON object is the plain check.
  const json = { 'content-type': 'application/json' };
  const emptyBody = await s.request('POST', '/api/status/worker-host', { body: '{}', headers: json });
  t.equal(emptyBody.status, 200);
  t.equal(emptyBody.json.ordinary.trigger, 'check');
  t.equal(s.probeCalls(), 2);
  const refusals: Array<[string, Record<string, string>, string, string]> = [
    ['{"attack":"yes"}', json, 'attack', 'attack: expected a boolean'],
    ['{"attack":true,"nope":1}', json, 'nope', 'nope: unknown field'],
    ['[]', json, 'body', 'body: expected a JSON object'],
    ['attack', { 'content-type': 'text/plain' }, 'body', 'body: expected an application/json object'],
  ];
  for (const [body, headers, field, error] of refusals) {
    const refused = await s.request('POST', '/api/status/worker-host', { body, headers });
    t.equal(refused.status, 400, body);
    t.match(refused.json, { code: 'invalid_request', field, error }, body);
  }
  const chunked = await s.request('POST', '/api/status/worker-host', {
    body: 'x',
    headers: { 'transfer-encoding': 'chunked' },
  });
  t.equal(chunked.status, 400, 'a chunked body counts as a body, and it is not JSON');
  t.equal(chunked.json.field, 'body');
  // This server has no turn manager: nothing can run the battery, and the refusal says so.
  const attack = await s.request('POST', '/api/status/worker-host', { body: '{"attack":true}', headers: json });
  t.equal(attack.status, 503);
  t.match(attack.json, { code: 'worker_host_unsupported', error: /attack: the attack battery needs the turn manager/ });
  t.equal(s.probeCalls(), 2, 'refused checks run no probe');
});

t.test('404, 405, 413', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.close());
  const missing = await s.request('GET', '/api/nope');
  t.equal(missing.status, 404);
  t.equal(missing.json.code, 'not_found');
  t.equal((await s.request('GET', '/')).status, 404);

  const wrongMethod = await s.request('DELETE', '/api/status');
  t.equal(wrongMethod.status, 405);
  t.equal(wrongMethod.json.code, 'method_not_allowed');
  t.equal(wrongMethod.headers['allow'], 'GET, HEAD');
  const getCheck = await s.request('GET', '/api/status/worker-host');
  t.equal(getCheck.status, 405);
  t.equal(getCheck.headers['allow'], 'POST');
  const postHealth = await s.request('POST', '/api/health', { token: null });
  t.equal(postHealth.status, 405);

  const big = Buffer.alloc(1024 * 1024 + 1, 'a');
  const tooLarge = await s.request('POST', '/api/status/worker-host', {
    body: big,
    headers: { 'content-type': 'application/json' },
  });
  t.equal(tooLarge.status, 413);
  t.same(tooLarge.json, { error: 'body: larger than 1048576 bytes', code: 'body_too_large' });
  t.equal(s.probeCalls(), 0);
  // The cap stands ahead of every authenticated route, reads included; the answer is documented.
  for (const path of ['/api/status', '/api/governance/events', '/api/openapi.json']) {
    // A GET body is sent only with a length (node does not chunk a GET).
    const tooLargeRead = await s.request('GET', path, {
      body: big,
      headers: { 'content-length': String(big.length) },
    });
    t.equal(tooLargeRead.status, 413, path);
    t.equal(tooLargeRead.json.code, 'body_too_large', path);
  }
});

t.test('500 hides internals and logs the stack; logs never carry tokens, queries or bodies', async (t) => {
  const s = await startTestServer({
    probes: async () => {
      throw new Error('secret internal detail /var/lib/turnhost/private');
    },
  });
  t.teardown(() => s.close());
  const res = await s.request('POST', '/api/status/worker-host');
  t.equal(res.status, 500);
  t.same(res.json, { error: 'internal error; the supervisor log has the details', code: 'internal_error' });
  t.notMatch(res.text, /secret|private|Error:|at /);
  const logged = s.lines.map((l) => JSON.parse(l)).find((l) => l.msg === 'request failed');
  t.match(logged?.error, /secret internal detail[\s\S]*at /, 'the stack is logged');

  await s.request('GET', '/api/governance/events?session=QUERYSECRET', { headers: { 'x-custom': 'HEADERSECRET' } });
  await s.request('POST', '/api/status/worker-host', { body: 'BODYSECRET' });
  const all = s.lines.join('\n');
  for (const secret of [TOKEN, 'QUERYSECRET', 'HEADERSECRET', 'BODYSECRET'])
    t.notOk(all.includes(secret), `log does not contain ${secret}`);
  t.ok(all.includes('/api/governance/events'), 'the path is logged');
});

t.test('governance events: filters, paging, parameter errors', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.close());
  s.store.appendBatch([
    event('egress_denial', 's1', 't1'),
    event('host_write_refused', 's1', 't2'),
    event('egress_denial', 's2', 't3'),
    event('egress_denial', null),
    event('egress_denial', 's1', 't1'),
  ]);
  const all = await s.request('GET', '/api/governance/events');
  t.equal(all.status, 200);
  t.equal(all.json.events.length, 5);
  t.equal(all.json.nextAfter, null);
  const ids = all.json.events.map((e: { id: number }) => e.id);
  t.same(
    ids,
    [...ids].sort((a: number, b: number) => a - b),
    'id order',
  );
  t.match(all.json.events[0], {
    id: Number,
    sessionId: 's1',
    turnId: 't1',
    at: String,
    kind: 'egress_denial',
    schemaVersion: 1,
    actor: 'server',
    model: null,
    profile: null,
    payload: { host: 'blocked.example' },
  });

  const s1 = await s.request('GET', '/api/governance/events?session=s1');
  t.equal(s1.json.events.length, 3);
  const t1 = await s.request('GET', '/api/governance/events?turn=t1&kind=egress_denial');
  t.equal(t1.json.events.length, 2);

  const first = await s.request('GET', '/api/governance/events?limit=2');
  t.equal(first.json.events.length, 2);
  t.equal(first.json.nextAfter, ids[1]);
  const second = await s.request('GET', `/api/governance/events?limit=2&after=${first.json.nextAfter}`);
  t.same(
    second.json.events.map((e: { id: number }) => e.id),
    ids.slice(2, 4),
  );
  const last = await s.request('GET', `/api/governance/events?limit=2&after=${second.json.nextAfter}`);
  t.same(
    last.json.events.map((e: { id: number }) => e.id),
    ids.slice(4),
  );
  t.equal(last.json.nextAfter, null);

  const bad: Array<[string, string]> = [
    ['after=-1', 'after'],
    ['after=abc', 'after'],
    ['limit=0', 'limit'],
    ['limit=1001', 'limit'],
    ['limit=1.5', 'limit'],
    ['colour=red', 'colour'],
    ['session=a&session=b', 'session'],
    ['session=', 'session'],
    ['kind=%00', 'kind'],
  ];
  for (const [query, name] of bad) {
    const res = await s.request('GET', `/api/governance/events?${query}`);
    t.equal(res.status, 400, query);
    t.equal(res.json.code, 'invalid_request');
    t.match(res.json.error, new RegExp(`^${name}: `), `${query} names ${name}`);
  }
});

t.test('event stream: live events after connecting, filtered', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.close());
  s.store.append(event('egress_denial', 's1'));
  const ws = s.ws('/api/governance/events/stream?session=s1');
  await opened(ws);
  const messages = nextMessages(ws, 2, (m) => m.type === 'event');
  s.store.append(event('egress_denial', 'other'));
  s.store.append(event('egress_denial', 's1', 'a'));
  s.store.appendBatch([event('host_write_refused', 's1', 'b'), event('egress_denial', 'other')]);
  const got = await messages;
  t.same(
    got.map((m) => m.event.turnId),
    ['a', 'b'],
    'only matching events appended after connecting',
  );
  ws.close();
});

t.test('event stream: replay after `after`, then live, no gaps and no duplicates', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.close());
  const stored = s.store.appendBatch(Array.from({ length: 2500 }, (_, i) => event('egress_denial', 's', `t${i}`)));
  if (!stored.ok || stored.stored !== 'database') throw new Error('store failed');
  const from = stored.ids[9]!;
  const ws = s.ws(`/api/governance/events/stream?after=${from}`);
  const all = nextMessages(ws, 2500 - 10 + 3, (m) => m.type === 'event');
  await opened(ws);
  s.store.append(event('egress_denial', 's', 'live1'));
  s.store.appendBatch([event('egress_denial', 's', 'live2'), event('host_write_refused', 's', 'live3')]);
  const got = await all;
  const ids = got.map((m) => m.event.id as number);
  t.equal(new Set(ids).size, ids.length, 'no duplicates');
  t.equal(ids[0], from + 1, 'starts right after `after`');
  t.ok(
    ids.every((id, i) => i === 0 || id === ids[i - 1]! + 1),
    'no gaps',
  );
  t.same(
    got.slice(-3).map((m) => m.event.turnId),
    ['live1', 'live2', 'live3'],
  );
  ws.close();
});

t.test('WebSocket upgrades are authenticated and validated', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.close());
  const none = await upgradeRefusal(s.ws('/api/governance/events/stream', null));
  t.equal(none.status, 401);
  t.equal(none.json.code, 'unauthenticated');
  const wrong = await upgradeRefusal(s.ws('/api/governance/events/stream', 'x'.repeat(TOKEN.length)));
  t.equal(wrong.status, 401);
  const bad = await upgradeRefusal(s.ws('/api/governance/events/stream?after=x'));
  t.equal(bad.status, 400);
  t.match(bad.json.error, /^after: /);
  const limit = await upgradeRefusal(s.ws('/api/governance/events/stream?limit=5'));
  t.match(limit.json.error, /^limit: unknown parameter/);
  const nowhere = await upgradeRefusal(s.ws('/api/elsewhere'));
  t.equal(nowhere.status, 404);
  const plain = await s.request('GET', '/api/governance/events/stream');
  t.equal(plain.status, 426, 'plain HTTP on a WebSocket path');
});

t.test('unix socket listener: mode 0660, same API, stale socket replaced', async (t) => {
  const s = await startTestServer({ socket: true, tcp: false });
  t.teardown(() => s.close());
  t.equal(s.server.tcp, null);
  const fs = await import('node:fs');
  const stat = fs.statSync(s.server.socket!);
  t.ok(stat.isSocket());
  t.equal(stat.mode & 0o777, 0o660);
  t.equal((await s.request('GET', '/api/health', { token: null })).status, 200);
  t.equal((await s.request('GET', '/api/status', { token: null })).status, 401);
  t.equal((await s.request('GET', '/api/status')).json.software.release, '0.1.0');
  s.store.append(event('egress_denial', 'u'));
  const ws = s.ws('/api/governance/events/stream?after=0');
  const [first] = await nextMessages(ws, 1, (m) => m.type === 'event');
  t.equal(first.event.sessionId, 'u');
  ws.close();
});

t.test('socket path safety: stale sockets are removed, live ones and other files refused', async (t) => {
  const fs = await import('node:fs');
  const path = await import('node:path');
  const { clearStaleSocket } = await import('../../../../supervisor/http/server.js');
  const { execFileSync } = await import('node:child_process');
  const dir = fs.mkdtempSync(path.join((await import('node:os')).tmpdir(), 'turnhost-sock-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));

  const stale = path.join(dir, 'stale.sock');
  execFileSync('python3', ['-c', `import socket; s=socket.socket(socket.AF_UNIX); s.bind(${JSON.stringify(stale)})`]);
  t.ok(fs.lstatSync(stale).isSocket());
  t.ok((await clearStaleSocket(stale)).ok);
  t.notOk(fs.existsSync(stale), 'stale socket removed');

  const regular = path.join(dir, 'file');
  fs.writeFileSync(regular, 'keep me');
  const refused = await clearStaleSocket(regular);
  t.match(refused, { ok: false, reason: 'listen_failed', detail: /is not a socket; refusing to remove it/ });
  t.equal(fs.readFileSync(regular, 'utf8'), 'keep me');

  const link = path.join(dir, 'link.sock');
  fs.symlinkSync(regular, link);
  t.match(await clearStaleSocket(link), { ok: false, detail: /is not a socket/ }, 'a symlink is not followed');
  t.ok(fs.existsSync(regular));

  const live = path.join(dir, 'live.sock');
  const server = net.createServer().listen(live);
  await new Promise((r) => server.once('listening', r));
  t.match(await clearStaleSocket(live), { ok: false, reason: 'socket_in_use' });
  t.ok(fs.existsSync(live));
  await new Promise((r) => server.close(r));
});
