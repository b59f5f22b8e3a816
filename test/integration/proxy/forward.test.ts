/**
 * Forward requests whose bodies go through the kernel relay (proxy/forward.ts): every case runs
 * twice, with the kernel relay and in Node, and must come out the same (bytes, events, caps);
 * the kernel runs must really have relayed (the relay's adoption count).
 */
import crypto from 'node:crypto';
import http from 'node:http';
import net from 'node:net';
import t, { type Test } from 'tap';
import { FORWARD_RELAY_MIN_BYTES } from '../../../proxy/forward.js';
import { kernelRelay } from '../../../proxy/relay/kernel-relay.js';
import {
  exchange,
  ORIGIN_NAME,
  parseResponse,
  RELAY_MODES,
  startHarness,
  type ProxyHarness,
  type RelayMode,
} from './fixtures/harness.js';

const PATTERN = crypto.randomBytes(1 << 20);
const LARGE = 4 * 1024 * 1024 + 123;
const sha256 = (bytes: Buffer): string => crypto.createHash('sha256').update(bytes).digest('hex');

/** `n` bytes of the test pattern, as the origin sends them. */
function patternBytes(n: number): Buffer {
  const out = Buffer.alloc(n);
  for (let at = 0; at < n; at += PATTERN.length) PATTERN.copy(out, at, 0, Math.min(PATTERN.length, n - at));
  return out;
}

interface BulkOrigin {
  port: number;
  connections: number;
  /** Request lines the origin read, in order. */
  requests: string[];
  close(): Promise<void>;
}

/**
 * GET /bytes/<n>: n pattern bytes with a Content-Length; /slow/<n>: the same after 300 ms;
 * /chunked/<n>: the same, chunked;
 * /short/<n>: announces n, sends half, then closes. PUT or POST: `<length> <sha256>` of the
 * body; /reject answers 413 without reading it.
 */
async function startBulkOrigin(): Promise<BulkOrigin> {
  const origin: BulkOrigin = { port: 0, connections: 0, requests: [], close: async () => {} };
  const server = http.createServer((req, res) => {
    origin.requests.push(`${req.method} ${req.url}`);
    const [, route, size] = /^\/(\w+)(?:\/(\d+))?/.exec(req.url ?? '') ?? [];
    const n = Number(size ?? 0);
    if (req.method === 'GET' || req.method === 'HEAD') {
      if (route === 'slow') {
        setTimeout(() => {
          res.writeHead(200, { 'Content-Length': n });
          res.end(patternBytes(n));
        }, 300);
      } else if (route === 'chunked') {
        res.writeHead(200, { 'Content-Type': 'application/octet-stream' });
        res.end(patternBytes(n));
      } else if (route === 'short') {
        res.writeHead(200, { 'Content-Length': n });
        res.write(patternBytes(n >> 1), () => res.socket?.destroy());
      } else {
        res.writeHead(200, { 'Content-Length': n });
        res.end(req.method === 'HEAD' ? undefined : patternBytes(n));
      }
      return;
    }
    if (route === 'reject') {
      res.writeHead(413, { 'Content-Length': 8, Connection: 'close' });
      res.end('too big\n');
      return;
    }
    const hash = crypto.createHash('sha256');
    let length = 0;
    req.on('data', (chunk: Buffer) => {
      hash.update(chunk);
      length += chunk.length;
    });
    req.on('end', () => res.end(`${length} ${hash.digest('hex')}`));
  });
  server.keepAliveTimeout = 30_000;
  server.on('connection', () => origin.connections++);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  origin.port = (server.address() as net.AddressInfo).port;
  origin.close = () =>
    new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    });
  return origin;
}

async function setUp(t: Test, mode: RelayMode, caps: { maxBytes?: number } = {}) {
  const origin = await startBulkOrigin();
  const authority = `${ORIGIN_NAME}:${origin.port}`;
  const h = await startHarness({
    relay: mode,
    egress: { allowlist: [authority], allowAddressRanges: ['127.0.0.0/8'] },
    caps,
  });
  t.teardown(async () => {
    await h.close();
    await origin.close();
  });
  return { origin, authority, h };
}

const adopted = (): number => kernelRelay().report().adopted;

/** A request head for `authority`. */
function head(method: string, authority: string, path: string, extra = ''): string {
  return `${method} http://${authority}${path} HTTP/1.1\r\nHost: ${authority}\r\n${extra}\r\n`;
}

/** Reads responses off one connection (Content-Length framed), as a keep-alive client does. */
class ResponseReader {
  private buffered = Buffer.alloc(0);
  private waiting: (() => void) | null = null;
  closed = false;

  constructor(readonly socket: net.Socket) {
    socket.on('data', (chunk: Buffer) => {
      this.buffered = Buffer.concat([this.buffered, chunk]);
      this.waiting?.();
    });
    socket.on('close', () => {
      this.closed = true;
      this.waiting?.();
    });
  }

  async next(): Promise<{ status: number; headers: Record<string, string>; body: Buffer } | null> {
    for (;;) {
      const end = this.buffered.indexOf('\r\n\r\n');
      if (end >= 0) {
        const parsed = parseResponse(this.buffered.subarray(0, end + 4).toString('latin1'));
        const length = Number(parsed.headers['content-length'] ?? 0);
        if (this.buffered.length >= end + 4 + length) {
          const body = this.buffered.subarray(end + 4, end + 4 + length);
          this.buffered = this.buffered.subarray(end + 4 + length);
          return { status: parsed.status, headers: parsed.headers, body };
        }
      }
      if (this.closed) return null;
      await new Promise<void>((resolve) => (this.waiting = resolve));
      this.waiting = null;
    }
  }
}

function connectTo(h: ProxyHarness): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ path: h.socketPath });
    socket.once('connect', () => resolve(socket));
    socket.once('error', reject);
  });
}

for (const mode of RELAY_MODES) {
  t.test(`${mode}: a large answer arrives byte-exact; the connection serves the next request`, async (t) => {
    const { origin, authority, h } = await setUp(t, mode);
    const before = adopted();
    const client = await connectTo(h);
    const reader = new ResponseReader(client);
    client.write(head('GET', authority, `/bytes/${LARGE}`));
    const first = await reader.next();
    t.equal(first?.status, 200);
    t.equal(first?.body.length, LARGE);
    t.equal(sha256(first!.body), sha256(patternBytes(LARGE)), 'byte-exact');
    t.not(first?.headers.connection, 'close', 'the client connection stays open');
    client.write(head('GET', authority, '/bytes/10'));
    const second = await reader.next();
    t.same(second?.body, patternBytes(10), 'the next request on the same connection');
    client.end();
    t.equal(
      adopted() - before,
      mode === 'kernel' ? 1 : 0,
      mode === 'kernel' ? 'the body went through the relay' : 'in Node',
    );
    t.equal(origin.connections, mode === 'kernel' ? 2 : 1, 'a relayed answer closes its upstream connection');
    const events = await h.eventsOnceStored('egress_connection', 2);
    t.match(events[0]!.payload, { method: 'GET', path: `/bytes/${LARGE}`, outcome: 'ok' });
    t.ok((events[0]!.payload.bytesDown as number) > LARGE, 'bytesDown counts the head and the whole body');
    t.ok((events[0]!.payload.bytesDown as number) < LARGE + 300, 'and no more');
  });

  t.test(`${mode}: a pipelined request behind a large answer is answered after it, in order`, async (t) => {
    const { authority, h } = await setUp(t, mode);
    const client = await connectTo(h);
    const reader = new ResponseReader(client);
    client.write(head('GET', authority, `/bytes/${LARGE}`) + head('GET', authority, '/bytes/7'));
    const first = await reader.next();
    const second = await reader.next();
    t.equal(sha256(first!.body), sha256(patternBytes(LARGE)));
    t.same(second?.body, patternBytes(7));
    client.destroy();
  });

  t.test(`${mode}: a large answer queued behind a slower pipelined one waits for it`, async (t) => {
    const { authority, h } = await setUp(t, mode);
    const client = await connectTo(h);
    const reader = new ResponseReader(client);
    client.write(head('GET', authority, '/slow/11') + head('GET', authority, `/bytes/${LARGE}`));
    const first = await reader.next();
    const second = await reader.next();
    t.same(first?.body, patternBytes(11), 'the slow answer first');
    t.equal(second && sha256(second.body), sha256(patternBytes(LARGE)), 'then the large one, intact');
    client.destroy();
  });

  t.test(`${mode}: a large request body behind a slower pipelined request leaves that answer whole`, async (t) => {
    const { authority, h } = await setUp(t, mode);
    const body = crypto.randomBytes(LARGE);
    const client = await connectTo(h);
    const reader = new ResponseReader(client);
    client.write(
      Buffer.concat([
        Buffer.from(head('GET', authority, '/slow/11')),
        Buffer.from(head('PUT', authority, '/upload', `Content-Length: ${body.length}\r\n`)),
        body,
      ]),
    );
    const first = await reader.next();
    const second = await reader.next();
    t.same(first?.body, patternBytes(11), 'the slow answer, whole');
    t.equal(second?.body.toString(), `${body.length} ${sha256(body)}`, 'then the upload, byte-exact');
    client.destroy();
  });

  t.test(`${mode}: small, chunked and HEAD answers stay in Node`, async (t) => {
    const { authority, h } = await setUp(t, mode);
    const before = adopted();
    const small = await exchange(
      { path: h.socketPath },
      head('GET', authority, `/bytes/${FORWARD_RELAY_MIN_BYTES - 1}`, 'Connection: close\r\n'),
    );
    t.equal(small.body.length, FORWARD_RELAY_MIN_BYTES - 1);
    const chunked = await exchange(
      { path: h.socketPath },
      head('GET', authority, `/chunked/${LARGE}`, 'Connection: close\r\n'),
    );
    t.equal(sha256(Buffer.from(chunked.body, 'latin1')), sha256(patternBytes(LARGE)));
    const headOnly = await exchange(
      { path: h.socketPath },
      head('HEAD', authority, `/bytes/${LARGE}`, 'Connection: close\r\n'),
    );
    t.equal(headOnly.headers['content-length'], String(LARGE));
    t.equal(headOnly.body, '');
    t.equal(adopted(), before, 'nothing was relayed');
  });

  t.test(`${mode}: an upstream that closes inside its body is upstream_error; the client sees the cut`, async (t) => {
    const { authority, h } = await setUp(t, mode);
    const answer = await exchange({ path: h.socketPath }, head('GET', authority, `/short/${LARGE}`));
    t.equal(answer.status, 200);
    t.ok(answer.body.length < LARGE, 'the body is short');
    const [event] = await h.eventsOnceStored('egress_connection');
    t.equal(event!.payload.outcome, 'upstream_error');
  });

  t.test(`${mode}: the byte cap cuts a large answer; nothing past it is delivered`, async (t) => {
    const cap = 2 * 1024 * 1024;
    const { authority, h } = await setUp(t, mode, { maxBytes: cap });
    const answer = await exchange({ path: h.socketPath }, head('GET', authority, `/bytes/${LARGE}`));
    t.ok(answer.body.length < cap, `the client got ${answer.body.length} bytes, under the cap`);
    const [event] = await h.eventsOnceStored('egress_connection');
    t.equal(event!.payload.outcome, 'cap_exceeded');
    t.ok(h.proxy.stats().totalBytes > cap, 'the charge shows the crossing');
  });

  t.test(`${mode}: a client that leaves inside a large answer is client_error`, async (t) => {
    const { authority, h } = await setUp(t, mode);
    const client = await connectTo(h);
    client.write(head('GET', authority, `/bytes/${64 * 1024 * 1024}`));
    await new Promise<void>((resolve) => client.once('data', () => resolve()));
    client.destroy();
    const [event] = await h.eventsOnceStored('egress_connection');
    t.equal(event!.payload.outcome, 'client_error');
  });

  t.test(`${mode}: a large request body arrives byte-exact; the upstream connection is reused after`, async (t) => {
    const { origin, authority, h } = await setUp(t, mode);
    const before = adopted();
    const body = crypto.randomBytes(LARGE);
    const answer = await exchange(
      { path: h.socketPath },
      Buffer.concat([
        Buffer.from(head('PUT', authority, '/upload', `Content-Length: ${body.length}\r\nConnection: close\r\n`)),
        body,
      ]),
    );
    t.equal(answer.status, 200);
    t.equal(answer.body, `${body.length} ${sha256(body)}`, 'the origin received the body byte-exact');
    t.equal(answer.headers.connection, 'close', 'the answer closes the connection the client asked to close');
    t.equal(adopted() - before, mode === 'kernel' ? 1 : 0);
    const next = await exchange({ path: h.socketPath }, head('GET', authority, '/bytes/5', 'Connection: close\r\n'));
    t.same(Buffer.from(next.body, 'latin1'), patternBytes(5));
    t.equal(origin.connections, 1, 'the upstream connection went back to the pool and served the next request');
    const [event] = await h.eventsOnceStored('egress_connection');
    t.match(event!.payload, { method: 'PUT', path: '/upload', outcome: 'ok' });
    t.ok(
      (event!.payload.bytesUp as number) > body.length && (event!.payload.bytesUp as number) < body.length + 400,
      'bytesUp: the head and the body',
    );
  });

  t.test(`${mode}: bytes after a large request body never reach the upstream as a request`, async (t) => {
    const { origin, authority, h } = await setUp(t, mode);
    const body = crypto.randomBytes(LARGE);
    const smuggled = head('GET', authority, '/bytes/3');
    const client = await connectTo(h);
    const reader = new ResponseReader(client);
    client.write(
      Buffer.concat([
        Buffer.from(head('POST', authority, '/upload', `Content-Length: ${body.length}\r\n`)),
        body,
        Buffer.from(smuggled),
      ]),
    );
    const first = await reader.next();
    t.equal(first?.body.toString(), `${body.length} ${sha256(body)}`);
    const second = await reader.next();
    if (mode === 'kernel') {
      t.equal(second, null, 'the relayed request closed the connection: the pipelined request is unanswered');
      t.same(origin.requests, ['POST /upload'], 'and it never reached the origin');
    } else {
      t.same(second?.body, patternBytes(3), 'in Node, a pipelined request is served after');
    }
    client.destroy();
  });

  t.test(`${mode}: an answer that comes before the whole request body is delivered`, async (t) => {
    const { authority, h } = await setUp(t, mode);
    const client = await connectTo(h);
    const reader = new ResponseReader(client);
    client.on('error', () => {});
    // The head and a first part of the body; the rest is never sent.
    client.write(
      Buffer.concat([
        Buffer.from(head('POST', authority, '/reject', `Content-Length: ${LARGE}\r\n`)),
        Buffer.alloc(64 * 1024),
      ]),
    );
    const answer = await reader.next();
    t.equal(answer?.status, 413);
    t.equal(answer?.body.toString(), 'too big\n');
    client.destroy();
    const [event] = await h.eventsOnceStored('egress_connection');
    t.equal(event!.payload.method, 'POST');
  });

  t.test(`${mode}: the byte cap cuts a large request body; the origin gets no byte past it`, async (t) => {
    const cap = 2 * 1024 * 1024;
    const { authority, h } = await setUp(t, mode, { maxBytes: cap });
    const body = crypto.randomBytes(LARGE);
    const client = await connectTo(h);
    client.on('error', () => {});
    const closed = new Promise((resolve) => client.once('close', resolve));
    client.write(
      Buffer.concat([Buffer.from(head('PUT', authority, '/upload', `Content-Length: ${body.length}\r\n`)), body]),
    );
    const [event] = await h.eventsOnceStored('egress_connection');
    t.equal(event!.payload.outcome, 'cap_exceeded');
    t.ok((event!.payload.bytesUp as number) <= cap, `bytesUp ${String(event!.payload.bytesUp)} within the cap`);
    client.destroy();
    await closed;
  });

  t.test(`${mode}: the end of the turn cuts a relayed body; its event is stored when close() resolves`, async (t) => {
    const { authority, h } = await setUp(t, mode);
    const client = await connectTo(h);
    client.on('error', () => {});
    client.write(head('GET', authority, `/bytes/${512 * 1024 * 1024}`));
    await new Promise<void>((resolve) => client.once('data', () => resolve()));
    client.pause();
    await h.proxy.close();
    const page = h.store.query({ turn: 'turn-proxy', kind: 'egress_connection', limit: 10 });
    t.match(page.ok && page.events.map((e) => e.payload.outcome), ['turn_ended']);
    client.destroy();
  });
}
