/**
 * A checking proxy in front of a served supervisor, for clients a test does not hold the
 * answers of (the CLI binary, the typed client, the example): they connect to it as they would
 * to the supervisor, it forwards each request to the supervisor's own listener and passes each
 * answer back unchanged, and checks every complete answer against the OpenAPI document
 * (api-contract.ts): HTTP answers, the answer to a WebSocket upgrade (the 101 or its refusal)
 * and every message the server sends on an upgraded socket. Mismatches are kept in `problems`;
 * whoever started the proxy fails the test when any was recorded (served-supervisor.ts does
 * in `stop`).
 *
 * The proxy runs in the test's own process: the test must not block it (spawnSync of a
 * client) while that client waits for an answer.
 */
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import type { ServerTarget } from '../../client/index.js';
import { contractProblems, messageProblems } from './api-contract.js';

type Listen = { kind: 'unix'; path: string } | { kind: 'tcp' };
/** The address a listener gets: its socket, or 127.0.0.1 and the port picked. */
type Bound<L extends Listen> = Extract<ServerTarget, { kind: L['kind'] }>;

export interface ContractProxy<Target extends ServerTarget = ServerTarget> {
  /** Where clients connect instead of the supervisor. */
  target: Target;
  /** Every mismatch so far, each naming its request. */
  problems: string[];
  /** Stops listening and cuts the connections still open. */
  close(): Promise<void>;
  /** Throws naming every mismatch, when there was one: a test's teardown fails with it. */
  assertConforming(label?: string): void;
}

/** Headers that describe one connection, not the message: each side of the proxy has its own. */
const HOP_BY_HOP = new Set(['connection', 'keep-alive']);

function endToEnd(raw: string[]): string[] {
  const kept: string[] = [];
  for (let i = 0; i + 1 < raw.length; i += 2)
    if (!HOP_BY_HOP.has(raw[i]!.toLowerCase())) kept.push(raw[i]!, raw[i + 1]!);
  return kept;
}

function dial(target: ServerTarget): net.Socket {
  return target.kind === 'unix' ? net.connect(target.path) : net.connect(target.port, target.host);
}

/**
 * Reads, without changing them, the bytes a server answers an upgrade with: the answer's head,
 * then the refusal's body, or after a 101 the WebSocket frames it sends (RFC 6455 section 5).
 */
class UpgradeAnswer {
  private pending: Buffer = Buffer.alloc(0);
  private state: 'head' | 'body' | 'frames' | 'done' = 'head';
  private status = 0;
  private headers: http.IncomingHttpHeaders = {};
  private bodyLength: number | null = null;
  private fragments: Buffer[] = [];
  private fragmentText = false;

  constructor(
    private readonly method: string,
    private readonly url: string,
    private readonly record: (problems: string[]) => void,
  ) {}

  push(chunk: Buffer): void {
    if (this.state === 'done') return;
    this.pending = this.pending.length === 0 ? chunk : Buffer.concat([this.pending, chunk]);
    if (this.state === 'head') this.readHead();
    if (this.state === 'body') this.readBody(false);
    if (this.state === 'frames') this.readFrames();
  }

  /** The server closed its side: a refusal without a length ends here. */
  end(): void {
    if (this.state === 'body') this.readBody(true);
    this.state = 'done';
  }

  private readHead(): void {
    const at = this.pending.indexOf('\r\n\r\n');
    if (at < 0) return;
    const [statusLine = '', ...lines] = this.pending.subarray(0, at).toString('latin1').split('\r\n');
    this.pending = this.pending.subarray(at + 4);
    this.status = Number(/^HTTP\/1\.[01] ([0-9]{3})/.exec(statusLine)?.[1] ?? 0);
    for (const line of lines) {
      const colon = line.indexOf(':');
      const name = line.slice(0, colon).trim().toLowerCase();
      const value = line.slice(colon + 1).trim();
      const seen = this.headers[name];
      this.headers[name] = seen === undefined ? value : `${String(seen)}, ${value}`;
    }
    if (this.status === 101) {
      this.record(contractProblems(this.method, this.url, 101, this.headers, ''));
      this.state = 'frames';
      return;
    }
    const length = this.headers['content-length'];
    this.bodyLength = length === undefined ? null : Number(length);
    this.state = 'body';
  }

  private readBody(ended: boolean): void {
    const complete = this.bodyLength === null ? ended : this.pending.length >= this.bodyLength;
    if (!complete) return;
    const body = this.pending.subarray(0, this.bodyLength ?? this.pending.length).toString('utf8');
    this.record(contractProblems(this.method, this.url, this.status, this.headers, body));
    this.state = 'done';
  }

  private readFrames(): void {
    for (;;) {
      const frame = this.pending;
      if (frame.length < 2) return;
      const fin = (frame[0]! & 0x80) !== 0;
      const reserved = frame[0]! & 0x70;
      const opcode = frame[0]! & 0x0f;
      const masked = (frame[1]! & 0x80) !== 0;
      let length = frame[1]! & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (frame.length < 4) return;
        length = frame.readUInt16BE(2);
        offset = 4;
      } else if (length === 127) {
        if (frame.length < 10) return;
        length = Number(frame.readBigUInt64BE(2));
        offset = 10;
      }
      const mask = masked ? frame.subarray(offset, offset + 4) : null;
      if (masked) offset += 4;
      if (frame.length < offset + length) return;
      const payload = Buffer.from(frame.subarray(offset, offset + length));
      if (mask !== null) for (let i = 0; i < payload.length; i++) payload[i]! ^= mask[i % 4]!;
      this.pending = frame.subarray(offset + length);
      if (reserved !== 0) {
        // An extension (permessage-deflate) changes the payload; what it carries cannot be read here.
        this.record([`WebSocket ${this.url}: a frame with reserved bits set cannot be checked`]);
        this.state = 'done';
        return;
      }
      if (opcode >= 0x8) continue;
      if (opcode !== 0x0) {
        this.fragments = [];
        this.fragmentText = opcode === 0x1;
      }
      this.fragments.push(payload);
      if (!fin) continue;
      const message = Buffer.concat(this.fragments);
      this.fragments = [];
      this.record(
        this.fragmentText
          ? messageProblems(this.url, message.toString('utf8'))
          : [`WebSocket ${this.url}: a binary message (the API sends JSON text frames)`],
      );
    }
  }
}

/**
 * A proxy to `upstream` listening on `listen` (a unix socket, made reachable by this uid only,
 * or 127.0.0.1 on a free port).
 */
export async function startContractProxy<L extends Listen>(
  upstream: ServerTarget,
  listen: L,
): Promise<ContractProxy<Bound<L>>> {
  const problems: string[] = [];
  const record = (found: string[]): void => void problems.push(...found);
  const agent = new http.Agent({ keepAlive: true });
  const where = upstream.kind === 'unix' ? { socketPath: upstream.path } : { host: upstream.host, port: upstream.port };
  const open = new Set<net.Socket>();
  const track = (socket: net.Socket): void => {
    open.add(socket);
    socket.once('close', () => open.delete(socket));
  };

  const server = http.createServer((req, res) => {
    // The answer's own Date reaches the client, not one of the proxy's.
    res.sendDate = false;
    const method = req.method ?? 'GET';
    const url = req.url ?? '/';
    const forwarded = http.request(
      { ...where, agent, method, path: url, headers: endToEnd(req.rawHeaders) },
      (answer) => {
        const chunks: Buffer[] = [];
        answer.on('data', (chunk: Buffer) => chunks.push(chunk));
        answer.on('end', () =>
          record(
            contractProblems(method, url, answer.statusCode ?? 0, answer.headers, Buffer.concat(chunks).toString()),
          ),
        );
        // A server that stops mid-answer: the client sees its connection cut, as without the proxy.
        answer.on('error', () => res.destroy());
        res.writeHead(answer.statusCode ?? 0, answer.statusMessage, endToEnd(answer.rawHeaders));
        answer.pipe(res);
      },
    );
    // No server, or one that closed while the body was still coming: an answer already begun
    // goes on; otherwise the client sees what it would have seen, a connection that ends.
    forwarded.on('error', () => {
      if (!res.headersSent) res.destroy();
    });
    res.on('close', () => {
      if (!res.writableFinished) forwarded.destroy();
    });
    req.pipe(forwarded);
  });

  // Upgrades pass as bytes both ways; a reader beside them checks what the server sent.
  server.on('upgrade', (req: http.IncomingMessage, socket: net.Socket, head: Buffer) => {
    const method = req.method ?? 'GET';
    const url = req.url ?? '/';
    const toServer = dial(upstream);
    track(toServer);
    socket.on('error', () => toServer.destroy());
    toServer.on('error', () => socket.destroy());
    const lines = [`${method} ${url} HTTP/${req.httpVersion}`];
    for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) lines.push(`${req.rawHeaders[i]}: ${req.rawHeaders[i + 1]}`);
    toServer.write(`${lines.join('\r\n')}\r\n\r\n`);
    if (head.length > 0) toServer.write(head);
    const answer = new UpgradeAnswer(method, url, record);
    toServer.on('data', (chunk: Buffer) => answer.push(chunk));
    toServer.on('end', () => answer.end());
    toServer.pipe(socket);
    socket.pipe(toServer);
  });
  server.on('connection', track);

  if (listen.kind === 'unix') fs.rmSync(listen.path, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    if (listen.kind === 'unix') server.listen(listen.path, () => resolve());
    else server.listen(0, '127.0.0.1', () => resolve());
  });
  // Only this uid: a turn must not reach the API through a socket wider than the server's own.
  if (listen.kind === 'unix') fs.chmodSync(listen.path, 0o600);
  const target = (
    listen.kind === 'unix'
      ? { kind: 'unix', path: listen.path }
      : { kind: 'tcp', host: '127.0.0.1', port: (server.address() as net.AddressInfo).port }
  ) as Bound<L>;

  return {
    target,
    problems,
    async close() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      for (const socket of open) socket.destroy();
      agent.destroy();
      await closed;
    },
    assertConforming(label = 'the proxied server') {
      if (problems.length > 0)
        throw new Error(`${label}: answers that break the API contract:\n${problems.join('\n')}`);
    },
  };
}
