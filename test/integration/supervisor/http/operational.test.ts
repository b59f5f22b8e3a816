import type http from 'node:http';
import t from 'tap';
import WebSocket from 'ws';
import { renderOpenApi } from '../../../../api/openapi.js';
import { contractProblems } from '../../../support/api-contract.js';
import { fakeStatus, startTestServer, TOKEN } from '../../../support/app-server.js';

const logLines = (lines: string[]): Record<string, unknown>[] => lines.map((l) => JSON.parse(l));

t.test('X-Request-Id: a valid one is echoed and carried by the access and error log lines', async (t) => {
  const s = await startTestServer({
    probes: async () => {
      throw new Error('probe exploded');
    },
  });
  t.teardown(() => s.close());
  const res = await s.request('POST', '/api/status/worker-host', { headers: { 'x-request-id': 'caller-1.a:b_c' } });
  t.equal(res.status, 500);
  t.equal(res.headers['x-request-id'], 'caller-1.a:b_c');
  const lines = logLines(s.lines).filter((l) => l['requestId'] === 'caller-1.a:b_c');
  t.same(lines.map((l) => l['msg']).sort(), ['http request', 'request failed'], 'the error and the access line');
});

t.test('X-Request-Id: generated when absent, one per request, also on 401 and 404', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.close());
  const a = await s.request('GET', '/api/status');
  const b = await s.request('GET', '/api/nothing');
  const c = await s.request('GET', '/api/status', { token: null });
  const ids = [a, b, c].map((r) => r.headers['x-request-id']);
  for (const id of ids) t.match(id, /^[A-Za-z0-9._:-]{1,128}$/);
  t.equal(new Set(ids).size, 3);
  const access = logLines(s.lines).filter((l) => l['msg'] === 'http request');
  t.same(
    access.map((l) => l['requestId']),
    ids,
    'each access line names its request',
  );
});

t.test('X-Request-Id: malformed values are refused naming the header, never echoed', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.close());
  for (const bad of ['', 'x'.repeat(129), 'has space', 'semi;colon', 'ünicode']) {
    const res = await s.request('GET', '/api/status', { headers: { 'x-request-id': bad } });
    t.equal(res.status, 400, JSON.stringify(bad));
    t.equal(res.json.code, 'invalid_request');
    t.equal(res.json.field, 'x-request-id');
    t.match(res.json.error, /^x-request-id: /);
    t.not(res.headers['x-request-id'], bad, 'a generated id is echoed instead');
    t.match(res.headers['x-request-id'], /^[0-9a-f-]{36}$/);
  }
  t.equal((await s.request('GET', '/api/status', { headers: { 'x-request-id': 'x'.repeat(128) } })).status, 200);
  t.notOk(s.lines.join('\n').includes('semi;colon'), 'the refused value is not logged');
});

t.test('X-Request-Id: lines logged far below the HTTP code carry it too', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.close());
  // The event store logs its own failure, with its own logger, handed no request.
  s.store.close();
  const res = await s.request('GET', '/api/governance/events', { headers: { 'x-request-id': 'deep-1' } });
  t.equal(res.status, 503);
  t.match(
    logLines(s.lines).filter((l) => l['msg'] === 'event query failed'),
    [{ requestId: 'deep-1' }],
    "the store's line names the request",
  );
});

t.test('X-Request-Id on WebSocket upgrades: validated, echoed on the 101 and on refusals, logged', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.close());
  const url = (path: string): string => `ws://127.0.0.1:${s.server.tcp!.port}${path}`;
  /** The upgrade's answer, the 101 or a refusal, checked against the API contract (a mismatch rejects). */
  const headersOf = (ws: WebSocket): Promise<{ status: number; headers: http.IncomingHttpHeaders; json?: any }> =>
    new Promise((resolve, reject) => {
      const checked = (status: number, headers: http.IncomingHttpHeaders, text: string): void => {
        const problems = contractProblems('GET', new URL(ws.url).pathname, status, headers, text);
        if (problems.length > 0) return reject(new Error(`contract: ${problems.join('; ')}`));
        resolve({ status, headers, ...(text === '' ? {} : { json: JSON.parse(text) }) });
      };
      ws.once('upgrade', (res) => checked(res.statusCode ?? 0, res.headers, ''));
      ws.once('unexpected-response', (_req, res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => checked(res.statusCode ?? 0, res.headers, Buffer.concat(chunks).toString('utf8')));
      });
      ws.once('error', reject);
    });
  const auth = { authorization: `Bearer ${TOKEN}` };

  const accepted = new WebSocket(url('/api/governance/events/stream'), {
    headers: { ...auth, 'x-request-id': 'ws-caller-1' },
  });
  const upgrade = await headersOf(accepted);
  t.equal(upgrade.status, 101);
  t.equal(upgrade.headers['x-request-id'], 'ws-caller-1', 'the 101 echoes the id the caller sent');
  accepted.close();

  const malformed = await headersOf(
    new WebSocket(url('/api/governance/events/stream'), { headers: { ...auth, 'x-request-id': 'has space' } }),
  );
  t.equal(malformed.status, 400);
  t.match(malformed.json, { code: 'invalid_request', field: 'x-request-id', error: /^x-request-id: / });
  t.match(malformed.headers['x-request-id'], /^[0-9a-f-]{36}$/, 'a generated id is echoed instead');

  const unauthenticated = await headersOf(new WebSocket(url('/api/governance/events/stream')));
  t.equal(unauthenticated.status, 401);
  const refusedId = unauthenticated.headers['x-request-id'];
  t.match(refusedId, /^[0-9a-f-]{36}$/, 'a refusal carries a generated id');

  const upgrades = logLines(s.lines).filter((l) => l['msg'] === 'websocket upgrade');
  t.match(
    upgrades.map((l) => [l['requestId'], l['status']]),
    [
      ['ws-caller-1', 101],
      [malformed.headers['x-request-id'], 400],
      [refusedId, 401],
    ],
    'each upgrade is logged under its id',
  );
  t.notOk(s.lines.join('\n').includes('has space'), 'the refused value is not logged');
});

t.test('GET /api/ready: public; 200 when ordinary is available, 503 naming the requirement otherwise', async (t) => {
  let available = true;
  const s = await startTestServer({
    probes: async () => {
      const status = fakeStatus('check');
      if (!available) status.ordinary = { ...status.ordinary!, available: false, requirement: 'seccomp: missing' };
      return status;
    },
  });
  t.teardown(() => s.close());
  const ready = await s.request('GET', '/api/ready', { token: null });
  t.equal(ready.status, 200);
  t.equal(ready.json.status, 'ready');
  available = false;
  await s.request('POST', '/api/status/worker-host');
  const notReady = await s.request('GET', '/api/ready', { token: null });
  t.equal(notReady.status, 503);
  t.equal(notReady.json.code, 'not_ready');
  t.equal(notReady.json.requirement, 'seccomp: missing');
  available = true;
  await s.request('POST', '/api/status/worker-host');
  t.equal((await s.request('GET', '/api/ready', { token: null })).status, 200, 'follows the latest probe');
  t.equal((await s.request('POST', '/api/ready', { token: null })).status, 405);
});

t.test('no CORS: no Access-Control-* header on any answer; preflights get 405 or 404', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.close());
  const origin = { origin: 'https://evil.example', 'access-control-request-method': 'POST' };
  const answers = [
    await s.request('GET', '/api/status', { headers: { origin: 'https://evil.example' } }),
    await s.request('GET', '/api/health', { token: null, headers: { origin: 'https://evil.example' } }),
    await s.request('GET', '/api/status', { token: null, headers: { origin: 'https://evil.example' } }),
  ];
  for (const path of ['/api/status', '/api/health', '/api/status/worker-host', '/api/governance/events']) {
    const preflight = await s.request('OPTIONS', path, { token: null, headers: origin });
    t.equal(preflight.status, 405, `OPTIONS ${path}`);
    t.equal(preflight.json.code, 'method_not_allowed');
    t.notMatch(preflight.headers['allow'] ?? '', /OPTIONS/);
    t.notOk('runtime' in preflight.json, 'a preflight reads no data');
    answers.push(preflight);
  }
  const unknown = await s.request('OPTIONS', '/api/nothing', { token: null, headers: origin });
  t.equal(unknown.status, 404);
  answers.push(unknown);
  for (const res of answers)
    t.same(
      Object.keys(res.headers).filter((h) => h.startsWith('access-control-')),
      [],
      'no Access-Control-* headers',
    );
});

t.test('GET /api/openapi.json serves the generated document, with the token', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.close());
  const res = await s.request('GET', '/api/openapi.json');
  t.equal(res.status, 200);
  t.match(res.headers['content-type'], /^application\/json/);
  t.equal(res.json.openapi, '3.1.0');
  t.equal(res.json.info.version, '0.1.0', 'the served release');
  t.same(res.json, JSON.parse(renderOpenApi('0.1.0')));
  t.equal((await s.request('GET', '/api/openapi.json', { token: null })).status, 401);
});

t.test('a content-encoded body is refused 415 naming the header on every route, never a 500', async (t) => {
  // The fixture checks every answer against the document.
  const s = await startTestServer();
  t.teardown(() => s.close());
  const garbage = Buffer.from('definitely not brotli, gzip or deflate');
  for (const encoding of ['br', 'gzip', 'deflate', 'x-unknown']) {
    for (const [method, path] of [
      ['POST', '/api/status/worker-host'],
      ['GET', '/api/status'],
      ['GET', '/api/governance/events'],
    ] as const) {
      const res = await s.request(method, path, { body: garbage, headers: { 'content-encoding': encoding } });
      t.equal(res.status, 415, `${method} ${path} with ${encoding}`);
      t.equal(res.json.code, 'unsupported_media_type');
      t.equal(res.json.field, 'content-encoding');
    }
  }
  const identity = await s.request('GET', '/api/status', { headers: { 'content-encoding': 'identity' } });
  t.equal(identity.status, 200, 'identity is no encoding');
  const unauthenticated = await s.request('GET', '/api/status', { token: null, headers: { 'content-encoding': 'br' } });
  t.equal(unauthenticated.status, 401, 'authentication comes first');
  t.notOk(
    logLines(s.lines).some((l) => l['msg'] === 'request failed'),
    'no request failed inside the server',
  );
});
