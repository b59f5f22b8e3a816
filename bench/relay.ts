/**
 * Inference relay benchmark: time to first byte and throughput of a streamed (SSE) answer,
 * direct to a TLS upstream on loopback and through a turn proxy's inference relay
 * (proxy/broker-relay.ts), interleaved round by round in one run:
 *   direct   client -> TLS -> upstream                                    (what a turn holding the key does)
 *   relay    client -> unix socket -> relay (credential set) -> TLS -> upstream
 * Time to first byte: from the request's start to the first body byte of the answer, with a
 * fresh connection each time on both sides (the relay opens one upstream connection per
 * request), and TLS sessions resumed on both (the relay keeps one per broker). Throughput: one answer of BENCH_STREAM_BYTES as a stream of 16 KiB events.
 * The upstream, the proxy (with a real event store, SQLite synchronous = FULL) and the client
 * share this process, so both paths pay the same event-loop sharing.
 * Goal: added time to first byte (relay p50 - direct p50) <= 1 ms.
 * Run: npx tsx bench/relay.ts   (BENCH_REQUESTS, BENCH_STREAM_BYTES, BENCH_ROUNDS size it)
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import type net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { createLogger } from '../core/log.js';
import { compileBrokers } from '../proxy/brokers.js';
import { buildTurnPolicy } from '../proxy/policy.js';
import { startTurnProxy } from '../proxy/server.js';
import { openEventStore } from '../supervisor/events/store.js';

const REQUESTS = Number(process.env.BENCH_REQUESTS ?? 400);
const STREAM_BYTES = Number(process.env.BENCH_STREAM_BYTES ?? 64 * 1024 * 1024);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const SECRET = 'sk-bench-secret';
const EVENT = Buffer.from(`event: delta\ndata: ${'x'.repeat(16 * 1024 - 28)}\n\n`);

function makeCa(dir: string): { ca: string; key: string; cert: string } {
  const run = (args: string[]): void => void execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  const ec = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];
  run(['req', '-x509', ...ec, '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '1', '-subj', '/CN=bench CA']);
  run(['req', ...ec, '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=localhost']);
  fs.writeFileSync(path.join(dir, 'ext.cnf'), 'subjectAltName=DNS:localhost,IP:127.0.0.1\n');
  run(
    ['x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial'].concat([
      '-out',
      'server.pem',
      '-days',
      '1',
      '-extfile',
      'ext.cnf',
    ]),
  );
  const read = (name: string): string => fs.readFileSync(path.join(dir, name), 'utf8');
  return { ca: read('ca.pem'), key: read('server.key'), cert: read('server.pem') };
}

/** Answers a short event stream, or STREAM_BYTES of events for /v1/messages/count_tokens (the bulk run's route). */
function startUpstream(tls: { key: string; cert: string }): Promise<https.Server> {
  const server = https.createServer(tls, (req, res) => {
    req.resume();
    req.on('end', () => {
      if (req.headers['x-api-key'] !== SECRET) {
        res.writeHead(401);
        res.end();
        return;
      }
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      if (req.url !== '/v1/messages/count_tokens') {
        res.end(EVENT.subarray(0, 64));
        return;
      }
      let left = STREAM_BYTES;
      const pump = (): void => {
        while (left > 0) {
          left -= EVENT.length;
          if (!res.write(EVENT)) return void res.once('drain', pump);
        }
        res.end();
      };
      pump();
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

interface Timing {
  ttfbMs: number;
  bytes: number;
  totalMs: number;
}

function timed(request: () => http.ClientRequest): Promise<Timing> {
  return new Promise((resolve, reject) => {
    const start = performance.now();
    let first = 0;
    let bytes = 0;
    const req = request();
    req.on('response', (res) => {
      if (res.statusCode !== 200) reject(new Error(`status ${res.statusCode}`));
      res.on('data', (chunk: Buffer) => {
        if (bytes === 0) first = performance.now();
        bytes += chunk.length;
      });
      res.on('end', () => resolve({ ttfbMs: first - start, bytes, totalMs: performance.now() - start }));
    });
    req.on('error', reject);
    req.end('{"stream":true}');
  });
}

const percentile = (values: number[], p: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
};

async function main(): Promise<void> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-bench-relay-'));
  const tls = makeCa(dir);
  const upstream = await startUpstream(tls);
  const port = (upstream.address() as net.AddressInfo).port;
  const logger = createLogger({ level: 'warn' });
  const store = openEventStore({
    databasePath: path.join(dir, 'events.db'),
    fallbackLogPath: path.join(dir, 'events.fallback.log'),
    unboundRetentionDays: 30,
    logger,
  });
  const policy = buildTurnPolicy(
    { allowlist: [], denylist: [], allowAddressRanges: ['127.0.0.0/8'], turnAdditionsAllowed: [] },
    { mode: 'restricted' },
  );
  const brokers = compileBrokers({
    providers: [{ name: 'bench', kind: 'anthropic', baseUrl: `https://127.0.0.1:${port}`, secret: SECRET, ca: tls.ca }],
    credentials: [],
    maxRequestBytes: 1 << 20,
  });
  if (!policy.ok || !brokers.ok) throw new Error('bench setup');
  const socketPath = path.join(dir, 'proxy.sock');
  const proxy = await startTurnProxy({
    socketPath,
    allowedPeerUid: process.getuid?.() ?? 0,
    policy: policy.policy,
    brokers: brokers.brokers,
    caps: { maxConnections: 1024, maxBytes: Number.MAX_SAFE_INTEGER, idleTimeoutMs: 60_000 },
    sink: store,
    turn: { sessionId: 'bench', turnId: 'bench', profile: 'strict', model: null },
    logger,
  });
  if (!proxy.ok) throw new Error(proxy.detail);
  const headers = { 'content-type': 'application/json', accept: 'text/event-stream' };
  // The direct client resumes TLS sessions as the relay does: a fresh connection per request, no keep-alive.
  const directAgent = new https.Agent({ keepAlive: false, maxCachedSessions: 16 });
  const direct = (route: string) => () =>
    https.request({
      host: '127.0.0.1',
      port,
      method: 'POST',
      path: route,
      ca: tls.ca,
      agent: directAgent,
      headers: { ...headers, 'x-api-key': SECRET },
    });
  const relayed = (route: string) => () =>
    http.request({
      socketPath,
      method: 'POST',
      path: `/inference/bench${route}`,
      agent: false,
      headers: { ...headers, 'x-api-key': 'placeholder' },
    });
  const ttfb = { direct: [] as number[], relay: [] as number[] };
  const throughput = { direct: [] as number[], relay: [] as number[] };
  for (let round = 0; round < ROUNDS; round++) {
    for (let i = 0; i < REQUESTS / ROUNDS; i++) {
      ttfb.direct.push((await timed(direct('/v1/messages'))).ttfbMs);
      ttfb.relay.push((await timed(relayed('/v1/messages'))).ttfbMs);
    }
    for (const [name, make] of [
      ['direct', direct('/v1/messages/count_tokens')],
      ['relay', relayed('/v1/messages/count_tokens')],
    ] as const) {
      const run = await timed(make);
      throughput[name].push(run.bytes / (1024 * 1024) / (run.totalMs / 1000));
    }
  }
  const row = (name: 'direct' | 'relay') =>
    `${name.padEnd(7)} ttfb p50 ${percentile(ttfb[name], 50).toFixed(3)} ms  p99 ${percentile(ttfb[name], 99).toFixed(3)} ms  ` +
    `stream ${percentile(throughput[name], 50).toFixed(0)} MiB/s`;
  console.log(row('direct'));
  console.log(row('relay'));
  const added = percentile(ttfb.relay, 50) - percentile(ttfb.direct, 50);
  // Each relayed request ran right after a direct one: the median of the pairs' differences is
  // less moved by load from other processes than the difference of the two medians.
  const paired = percentile(
    ttfb.relay.map((relay, i) => relay - ttfb.direct[i]!),
    50,
  );
  const ratio = percentile(throughput.relay, 50) / percentile(throughput.direct, 50);
  console.log(`added ttfb p50 ${added.toFixed(3)} ms (goal <= 1 ms): ${added <= 1 ? 'met' : 'NOT met'}`);
  console.log(`paired added ttfb p50 ${paired.toFixed(3)} ms`);
  console.log(`stream throughput relay/direct ${ratio.toFixed(2)}x`);
  await proxy.close();
  store.close();
  upstream.close();
  fs.rmSync(dir, { recursive: true, force: true });
}

await main();
