/**
 * The inference relay and the brokered credentials on a turn proxy (proxy/brokers.ts,
 * proxy/broker-relay.ts), against fake upstreams on loopback over TLS with a test CA: the
 * upstream gets the real secret and never the placeholder, an event stream arrives chunk by
 * chunk, every refusal names its reason, and the secret is in no event, log line or database
 * byte.
 */
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type net from 'node:net';
import path from 'node:path';
import t from 'tap';
import { compileBrokers, type BrokerSpecs } from '../../../proxy/brokers.js';
import { makeTestCa } from '../../support/test-ca.js';
import { mapResolver, startHarness, type ProxyHarness } from './fixtures/harness.js';

const SECRET = 'sk-real-secret-7f3a9c1e5b';
const TRACKER_SECRET = 'tracker-token-c0ffee42';
const PLACEHOLDER = 'turnhost-relay-placeholder';
const MODEL_HOST = 'api.model.test';
const TRACKER_HOST = 'tracker.test';

interface Received {
  method: string;
  url: string;
  headers: http.IncomingHttpHeaders;
  body: Buffer;
}

const ca = makeTestCa([MODEL_HOST, TRACKER_HOST]);
t.teardown(() => ca.remove());

const received: Received[] = [];
/** Resolves the stream's next chunk: the upstream sends it only once the client has read the one before. */
let nextChunk: (() => void) | null = null;

const upstream = https.createServer({ key: ca.key, cert: ca.cert }, (req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    received.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body: Buffer.concat(chunks) });
    if (req.url === '/redirect/v1/messages') {
      res.writeHead(307, { location: 'https://elsewhere.test/v1/messages' });
      res.end();
      return;
    }
    if (req.url?.startsWith('/base/v1/messages?') && req.headers.accept === 'text/event-stream') {
      res.writeHead(200, { 'content-type': 'text/event-stream', 'set-cookie': 'upstream=1' });
      let sent = 0;
      const send = (): void => {
        sent++;
        if (sent > 3) {
          res.end('event: message_stop\ndata: {}\n\n');
          return;
        }
        res.write(`event: delta\ndata: {"n":${sent}}\n\n`);
        nextChunk = send;
      };
      send();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/json', 'set-cookie': 'upstream=1' });
    res.end(JSON.stringify({ ok: true, url: req.url }));
  });
});

let port = 0;
let h: ProxyHarness;

function specs(maxRequestBytes = 4096): BrokerSpecs {
  return {
    providers: [
      { name: 'claude', kind: 'anthropic', baseUrl: `https://${MODEL_HOST}:${port}/base`, secret: SECRET, ca: ca.ca },
      { name: 'gpt', kind: 'openai', baseUrl: `https://${MODEL_HOST}:${port}/base`, secret: SECRET, ca: ca.ca },
      {
        name: 'bouncer',
        kind: 'anthropic',
        baseUrl: `https://${MODEL_HOST}:${port}/redirect`,
        secret: SECRET,
        ca: ca.ca,
      },
      { name: 'untrusted', kind: 'anthropic', baseUrl: `https://${MODEL_HOST}:${port}/base`, secret: SECRET, ca: null },
    ],
    credentials: [
      {
        name: 'tracker',
        baseUrl: `https://${TRACKER_HOST}:${port}/api`,
        secret: TRACKER_SECRET,
        header: 'authorization',
        format: 'Bearer {secret}',
        methods: ['GET', 'POST'],
        pathPrefixes: ['/issues'],
        ca: ca.ca,
      },
    ],
    maxRequestBytes,
  };
}

t.before(async () => {
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  port = (upstream.address() as net.AddressInfo).port;
  const compiled = compileBrokers(specs());
  if (!compiled.ok) throw new Error(compiled.detail);
  h = await startHarness({
    // The brokered upstreams need no allowlist entry; loopback is lifted for the fakes.
    egress: { allowlist: [], allowAddressRanges: ['127.0.0.0/8'] },
    resolver: mapResolver({ [MODEL_HOST]: ['127.0.0.1'], [TRACKER_HOST]: ['127.0.0.1'] }),
    brokers: compiled.brokers,
    relay: 'node',
  });
});

t.teardown(async () => {
  await h.close();
  upstream.closeAllConnections();
  await new Promise<void>((resolve) => upstream.close(() => resolve()));
});

interface Answer {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

function request(
  method: string,
  target: string,
  headers: Record<string, string> = {},
  body?: string | Buffer,
  onChunk?: (chunk: string) => void,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath: h.socketPath, method, path: target, headers, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        text += chunk;
        onChunk?.(chunk);
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

const clientHeaders = {
  host: 'whatever.test',
  'x-api-key': PLACEHOLDER,
  authorization: `Bearer ${PLACEHOLDER}`,
  cookie: 'session=turn',
  'x-forwarded-for': '10.9.9.9',
  forwarded: 'for=10.9.9.9',
  'proxy-authorization': 'Basic eDp5',
  'accept-encoding': 'gzip, br',
  'anthropic-version': '2023-06-01',
  'content-type': 'application/json',
};

t.test('a streamed inference request carries the real secret and its chunks arrive as they are sent', async (t) => {
  received.length = 0;
  const seen: string[] = [];
  const answer = await request(
    'POST',
    '/inference/claude/v1/messages?beta=true',
    { ...clientHeaders, accept: 'text/event-stream' },
    '{"stream":true}',
    (chunk) => {
      seen.push(chunk);
      // The upstream sends the next chunk only now: had the relay buffered, this never happens.
      const send = nextChunk;
      nextChunk = null;
      send?.();
    },
  );
  t.equal(answer.status, 200);
  t.ok(seen.length >= 4, 'the chunks came one by one');
  t.match(answer.body, /"n":1[\s\S]*"n":2[\s\S]*"n":3[\s\S]*message_stop/);
  t.equal(answer.headers['set-cookie'], undefined, 'set-cookie is stripped from the answer');
  const [got] = received;
  t.equal(got?.url, '/base/v1/messages?beta=true');
  t.equal(got?.headers['x-api-key'], SECRET, 'the real secret reaches the upstream');
  t.equal(got?.headers.host, `${MODEL_HOST}:${port}`);
  t.equal(got?.headers['anthropic-version'], '2023-06-01', 'other headers pass');
  for (const name of [
    'authorization',
    'cookie',
    'x-forwarded-for',
    'forwarded',
    'proxy-authorization',
    'accept-encoding',
  ])
    t.equal(got?.headers[name], undefined, `${name} is stripped`);
  t.notMatch(JSON.stringify(got?.headers), PLACEHOLDER, 'the placeholder never reaches the upstream');
  t.equal(got?.body.toString(), '{"stream":true}');
});

t.test('an openai provider sets Authorization: Bearer', async (t) => {
  received.length = 0;
  const answer = await request('POST', '/inference/gpt/v1/chat/completions', clientHeaders, '{}');
  t.equal(answer.status, 200);
  t.equal(received[0]?.headers.authorization, `Bearer ${SECRET}`);
  t.equal(received[0]?.headers['x-api-key'], undefined);
});

t.test('other methods, routes, providers, sizes and redirects are refused with their reasons', async (t) => {
  received.length = 0;
  const cases: Array<[string, string, string | undefined, Record<string, string>, number, string]> = [
    ['GET', '/inference/claude/v1/messages', undefined, {}, 405, 'relay_method_refused'],
    ['POST', '/inference/claude/v1/models', '{}', {}, 403, 'relay_route_refused'],
    ['POST', '/inference/claude/v1/messages/../complete', '{}', {}, 403, 'relay_route_refused'],
    ['POST', '/inference/gpt/v1/messages', '{}', {}, 403, 'relay_route_refused'],
    ['POST', '/inference/nobody/v1/messages', '{}', {}, 403, 'relay_route_refused'],
    ['POST', '/inference/claude/v1/messages', 'x'.repeat(5000), {}, 413, 'relay_request_too_large'],
    [
      'POST',
      '/inference/claude/v1/messages',
      'x'.repeat(5000),
      { 'transfer-encoding': 'chunked' },
      413,
      'relay_request_too_large',
    ],
    ['POST', '/inference/bouncer/v1/messages', '{}', {}, 502, 'relay_redirect_refused'],
    ['POST', '/inference/untrusted/v1/messages', '{}', {}, 502, 'relay_upstream_failed'],
    ['DELETE', '/credentials/tracker/issues/1', undefined, {}, 405, 'relay_method_refused'],
    ['GET', '/credentials/tracker/admin', undefined, {}, 403, 'relay_route_refused'],
    ['GET', '/credentials/tracker/issues/%2e%2e/admin', undefined, {}, 403, 'relay_route_refused'],
    ['GET', '/credentials/tracker/issues%2f..%2fadmin', undefined, {}, 403, 'relay_route_refused'],
  ];
  for (const [method, target, body, headers, status, type] of cases) {
    const answer = await request(method, target, headers, body);
    t.equal(answer.status, status, `${method} ${target}`);
    t.match(answer.headers['content-type'], 'application/json');
    t.match(JSON.parse(answer.body), { type: 'error', error: { type } }, `${method} ${target}: ${type}`);
  }
  const reached = received.map((r) => r.url);
  t.same(
    reached,
    ['/redirect/v1/messages'],
    'only the redirecting upstream was reached (and its redirect not followed)',
  );
  const denials = (await h.events('egress_denial')).map((e) => e.payload.reason);
  t.ok(denials.includes('relay_method_refused') && denials.includes('relay_route_refused'));
  t.ok(denials.includes('relay_request_too_large'));
});

t.test('a brokered credential forwards matching requests with the credential added', async (t) => {
  received.length = 0;
  const answer = await request('GET', '/credentials/tracker/issues/7?fields=title', {
    authorization: 'Bearer turn-supplied',
    cookie: 'a=b',
  });
  t.equal(answer.status, 200);
  t.equal(received[0]?.url, '/api/issues/7?fields=title');
  t.equal(received[0]?.headers.authorization, `Bearer ${TRACKER_SECRET}`, 'the turn-supplied value is replaced');
  t.equal(received[0]?.headers.cookie, undefined);
  const posted = await request(
    'POST',
    '/credentials/tracker/issues',
    { 'content-type': 'application/json' },
    '{"t":1}',
  );
  t.equal(posted.status, 200);
  t.equal(received[1]?.body.toString(), '{"t":1}');
});

t.test(
  'events: the inference tag comes from the relay, with provider, method, path without query and status',
  async (t) => {
    const connections = (await h.events('egress_connection')).map((e) => e.payload);
    const streamed = connections.find((p) => p.broker === 'claude' && p.status === 200);
    t.match(streamed, {
      host: MODEL_HOST,
      port,
      method: 'POST',
      path: '/base/v1/messages',
      scope: 'inference',
      inference: true,
      outcome: 'ok',
    });
    t.ok((streamed?.bytesDown as number) > 0 && (streamed?.bytesUp as number) > 0);
    t.match(
      connections.find((p) => p.broker === 'tracker'),
      { scope: 'credential', inference: false, path: '/api/issues/7', status: 200 },
    );
    t.match(
      connections.find((p) => p.broker === 'bouncer'),
      { outcome: 'redirect_refused', status: 307 },
    );
    for (const p of connections) t.notMatch(String(p.path), /\?/, 'no query is recorded');
  },
);

t.test('the upstream reached straight through the general proxy is refused', async (t) => {
  const refused = await new Promise<string>((resolve, reject) => {
    const req = http.request({
      socketPath: h.socketPath,
      method: 'CONNECT',
      path: `${MODEL_HOST}:${port}`,
      headers: { host: `${MODEL_HOST}:${port}`, 'x-api-key': PLACEHOLDER },
    });
    req.on('connect', (res, socket) => {
      socket.destroy();
      resolve(String(res.headers['x-turnhost-denial']));
    });
    req.on('response', (res) => {
      res.resume();
      resolve(String(res.headers['x-turnhost-denial']));
    });
    req.on('error', reject);
    req.end();
  });
  t.equal(refused, 'not_allowlisted', 'a brokered host has no allowlist entry: the placeholder is useless elsewhere');
  const forward = await request(
    'POST',
    `http://${MODEL_HOST}:${port}/base/v1/messages`,
    { host: `${MODEL_HOST}:${port}`, 'x-api-key': PLACEHOLDER },
    '{}',
  );
  t.equal(forward.headers['x-turnhost-denial'], 'not_allowlisted');
});

t.test('no secret in any event, log line or database byte', async (t) => {
  const events = await h.events();
  t.ok(events.length > 10);
  const everything = [JSON.stringify(events), ...h.logLines].join('\n');
  for (const secret of [SECRET, TRACKER_SECRET]) {
    t.notMatch(everything, secret, 'events and log lines');
    for (const name of fs.readdirSync(h.dir)) {
      const file = path.join(h.dir, name);
      if (fs.statSync(file).isFile()) t.equal(fs.readFileSync(file).indexOf(secret), -1, `${name} bytes`);
    }
  }
});

t.test("the turn's end cuts a stream in flight, and its event is recorded before the events close", async (t) => {
  const compiled = compileBrokers(specs());
  if (!compiled.ok) throw new Error(compiled.detail);
  const h2 = await startHarness({
    egress: { allowlist: [], allowAddressRanges: ['127.0.0.0/8'] },
    resolver: mapResolver({ [MODEL_HOST]: ['127.0.0.1'] }),
    brokers: compiled.brokers,
    relay: 'node',
  });
  t.teardown(() => h2.close());
  const cut = await new Promise<string>((resolve) => {
    const req = http.request(
      {
        socketPath: h2.socketPath,
        method: 'POST',
        path: '/inference/claude/v1/messages?stream=1',
        headers: { accept: 'text/event-stream' },
        agent: false,
      },
      (res) => {
        res.once('data', () => void h2.proxy.close());
        res.on('error', () => resolve('cut'));
        res.on('close', () => resolve(res.complete ? 'complete' : 'cut'));
      },
    );
    req.on('error', () => resolve('cut'));
    req.end('{}');
  });
  nextChunk = null;
  t.equal(cut, 'cut', 'the stream did not run to its end');
  const connections = await h2.events('egress_connection');
  t.match(
    connections.map((e) => e.payload),
    [{ broker: 'claude', outcome: 'turn_ended', status: 200 }],
  );
});
