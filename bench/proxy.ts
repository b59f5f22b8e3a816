/**
 * Egress proxy benchmark: request latency (new connection per request, p50/p99 at concurrency
 * 1, 16, 128) and 64 MiB upload throughput, through the proxy (client -> unix socket proxy ->
 * loopback origin; CONNECT for throughput) and direct to the origin, in one run, as ratios.
 * Client, origins and proxy are three processes, as in production (the proxy lives in the
 * supervisor, the client in a worker). Goals: throughput >= 0.8x direct, added p50 <= 1 ms.
 * Run: npx tsx bench/proxy.ts   (BENCH_REQUESTS shrinks the latency runs while tuning)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { createLogger } from '../core/log.js';
import type { AppendResult, EventSink } from '../supervisor/events/types.js';
import { buildTurnPolicy, DEFAULT_INFERENCE_HOSTS } from '../proxy/policy.js';
import { startTurnProxy } from '../proxy/server.js';

const ORIGIN = 'origin.bench.test';
const ROLE_ORIGINS = '--serve-origins';
const ROLE_PROXY = '--serve-proxy';
const CONCURRENCY_LEVELS = [1, 16, 128];
const REQUESTS_PER_LEVEL = Number(process.env.BENCH_REQUESTS ?? 4000);
const WARMUP_REQUESTS = 300;
const UPLOAD_BYTES = 64 * 1024 * 1024;
const UPLOAD_CHUNK = 1024 * 1024;
const UPLOAD_RUNS = 7;
const GOAL_THROUGHPUT_RATIO = 0.8;
const GOAL_ADDED_P50_MS = 1;

type Target = { path: string } | { port: number };
type Message = Record<string, number>;

function connect(target: Target, allowHalfOpen = false): net.Socket {
  return 'path' in target
    ? net.connect({ path: target.path, allowHalfOpen })
    : net.connect({ host: '127.0.0.1', port: target.port, allowHalfOpen });
}

/** One request on a fresh connection; resolves with the milliseconds until the response ended. */
function timedRequest(target: Target, request: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const socket = connect(target);
    socket.on('error', reject);
    socket.resume();
    socket.on('end', () => {
      resolve(performance.now() - started);
      socket.destroy();
    });
    socket.write(request);
  });
}

async function latencies(target: Target, request: string, concurrency: number, total: number): Promise<{ sorted: number[]; perSecond: number }> {
  const results: number[] = [];
  const started = performance.now();
  let issued = 0;
  const worker = async (): Promise<void> => {
    while (issued < total) {
      issued++;
      results.push(await timedRequest(target, request));
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return { sorted: results.sort((a, b) => a - b), perSecond: total / ((performance.now() - started) / 1000) };
}

const percentile = (sorted: number[], p: number): number => sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** Uploads UPLOAD_BYTES with backpressure on an open socket; resolves with MB/s once the origin counted them all. */
function upload(socket: net.Socket, started: number, payload: Buffer): Promise<number> {
  return new Promise((resolve, reject) => {
    socket.on('error', reject);
    let answer = '';
    socket.on('data', (c: Buffer) => (answer += c.toString()));
    socket.on('end', () => {
      if (Number(answer) !== UPLOAD_BYTES) reject(new Error(`origin counted ${answer}`));
      resolve(UPLOAD_BYTES / 1e6 / ((performance.now() - started) / 1000));
      socket.destroy();
    });
    let sent = 0;
    const pump = (): void => {
      while (sent < UPLOAD_BYTES) {
        sent += UPLOAD_CHUNK;
        if (!socket.write(payload)) {
          socket.once('drain', pump);
          return;
        }
      }
      socket.end();
    };
    pump();
  });
}

function openDirect(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ port }, true);
    socket.once('error', reject);
    socket.once('connect', () => resolve(socket));
  });
}

function openTunnel(socketPath: string, authority: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect({ path: socketPath }, true);
    let head = '';
    const onData = (c: Buffer): void => {
      head += c.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      socket.removeListener('data', onData);
      if (!head.startsWith('HTTP/1.1 200')) reject(new Error(head.split('\r\n')[0]));
      else resolve(socket);
    };
    socket.once('error', reject);
    socket.on('data', onData);
    socket.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`);
  });
}

/** Answers the parent's stop message with `report()` and exits. */
function stopOnRequest(report: () => Promise<Message>): void {
  process.once('message', async () => {
    const message = await report();
    process.send!(message, () => process.exit(0));
  });
}

async function serveOrigins(): Promise<void> {
  const httpOrigin = http.createServer((_req, res) => res.end('ok'));
  await new Promise<void>((r) => httpOrigin.listen(0, '127.0.0.1', r));
  const countingOrigin = net.createServer({ allowHalfOpen: true }, (socket) => {
    let bytes = 0;
    socket.on('data', (c: Buffer) => (bytes += c.length));
    socket.on('end', () => socket.end(String(bytes)));
  });
  await new Promise<void>((r) => countingOrigin.listen(0, '127.0.0.1', r));
  process.send!({
    httpPort: (httpOrigin.address() as net.AddressInfo).port,
    sinkPort: (countingOrigin.address() as net.AddressInfo).port,
  });
  stopOnRequest(async () => ({}));
}

async function serveProxy(socketPath: string, httpPort: number, sinkPort: number): Promise<void> {
  const caps = { maxConnections: 1024, maxBytes: Number.MAX_SAFE_INTEGER, idleTimeoutMs: 60_000 };
  const built = buildTurnPolicy(
    {
      allowlist: [`${ORIGIN}:${httpPort}`, `${ORIGIN}:${sinkPort}`],
      denylist: [],
      allowAddressRanges: ['127.0.0.0/8'],
      inferenceHosts: [...DEFAULT_INFERENCE_HOSTS],
      turnAdditionsAllowed: [],
      ...caps,
    },
    { mode: 'ordinary' },
  );
  if (!built.ok) throw new Error(built.detail);
  let events = 0;
  const sink: EventSink = {
    append: (): AppendResult => {
      events++;
      return { ok: true, stored: 'database', ids: [] };
    },
  };
  const proxy = await startTurnProxy({
    socketPath,
    allowedPeerUid: process.getuid!(),
    policy: built.policy,
    resolver: async () => ['127.0.0.1'],
    caps,
    sink,
    turn: { sessionId: 'bench', turnId: 'bench', profile: 'governed', model: null },
    logger: createLogger({ level: 'warn' }),
  });
  if (!proxy.ok) throw new Error(proxy.detail);
  process.send!({});
  stopOnRequest(async () => {
    await proxy.close();
    const cpu = process.cpuUsage();
    return { events, cpuMicros: cpu.user + cpu.system };
  });
}

/** Starts this file in another role; resolves with the child's first message. */
async function spawnRole(args: string[]): Promise<{ child: ChildProcess; first: Message }> {
  const child = spawn(process.execPath, [...process.execArgv, fileURLToPath(import.meta.url), ...args], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const first = await new Promise<Message>((resolve, reject) => {
    child.once('message', (message) => resolve(message as Message));
    child.once('exit', (code) => reject(new Error(`${args[0]} exited with ${code}`)));
  });
  return { child, first };
}

function stopRole(child: ChildProcess): Promise<Message> {
  return new Promise((resolve) => {
    child.removeAllListeners('exit');
    child.once('message', (message) => resolve(message as Message));
    child.send({ stop: true });
  });
}

async function main(): Promise<void> {
  const origins = await spawnRole([ROLE_ORIGINS]);
  const { httpPort, sinkPort } = origins.first as { httpPort: number; sinkPort: number };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-bench-proxy-'));
  const socketPath = path.join(dir, 'proxy.sock');
  const proxy = await spawnRole([ROLE_PROXY, socketPath, String(httpPort), String(sinkPort)]);

  const directRequest = `GET / HTTP/1.1\r\nHost: 127.0.0.1:${httpPort}\r\nConnection: close\r\n\r\n`;
  const proxyRequest = `GET http://${ORIGIN}:${httpPort}/ HTTP/1.1\r\nHost: ${ORIGIN}:${httpPort}\r\nConnection: close\r\n\r\n`;
  await latencies({ port: httpPort }, directRequest, 16, WARMUP_REQUESTS);
  await latencies({ path: socketPath }, proxyRequest, 16, WARMUP_REQUESTS);

  console.log(`egress proxy benchmark (${REQUESTS_PER_LEVEL} requests per level, new connection per request)`);
  console.log('concurrency  direct p50/p99 ms   proxy p50/p99 ms   added p50 ms   p50 ratio   p99 ratio   req/s direct/proxy');
  let addedP50AtOne = 0;
  for (const concurrency of CONCURRENCY_LEVELS) {
    const direct = await latencies({ port: httpPort }, directRequest, concurrency, REQUESTS_PER_LEVEL);
    const proxied = await latencies({ path: socketPath }, proxyRequest, concurrency, REQUESTS_PER_LEVEL);
    const [d50, d99] = [percentile(direct.sorted, 0.5), percentile(direct.sorted, 0.99)];
    const [p50, p99] = [percentile(proxied.sorted, 0.5), percentile(proxied.sorted, 0.99)];
    if (concurrency === 1) addedP50AtOne = p50 - d50;
    console.log(
      `${String(concurrency).padStart(11)}  ${d50.toFixed(3).padStart(7)} / ${d99.toFixed(3).padStart(7)}  ` +
        `${p50.toFixed(3).padStart(7)} / ${p99.toFixed(3).padStart(7)}  ${(p50 - d50).toFixed(3).padStart(12)}  ` +
        `${(p50 / d50).toFixed(2).padStart(9)}x  ${(p99 / d99).toFixed(2).padStart(9)}x   ` +
        `${direct.perSecond.toFixed(0)}/${proxied.perSecond.toFixed(0)}`,
    );
  }

  const payload = Buffer.alloc(UPLOAD_CHUNK, 0x5a);
  const directRates: number[] = [];
  const proxyRates: number[] = [];
  for (let run = 0; run < UPLOAD_RUNS; run++) {
    let started = performance.now();
    directRates.push(await upload(await openDirect(sinkPort), started, payload));
    started = performance.now();
    proxyRates.push(await upload(await openTunnel(socketPath, `${ORIGIN}:${sinkPort}`), started, payload));
  }
  const [directMBs, proxyMBs] = [median(directRates), median(proxyRates)];
  const ratio = proxyMBs / directMBs;
  console.log(`64 MiB upload (median of ${UPLOAD_RUNS}): direct ${directMBs.toFixed(0)} MB/s, proxy (CONNECT) ${proxyMBs.toFixed(0)} MB/s, ratio ${ratio.toFixed(2)}x`);
  console.log(`goal throughput >= ${GOAL_THROUGHPUT_RATIO}x direct: ${ratio >= GOAL_THROUGHPUT_RATIO ? 'met' : 'NOT met'}`);
  console.log(`goal added p50 <= ${GOAL_ADDED_P50_MS} ms at concurrency 1: ${addedP50AtOne <= GOAL_ADDED_P50_MS ? 'met' : 'NOT met'} (${addedP50AtOne.toFixed(3)} ms)`);

  const usage = await stopRole(proxy.child);
  console.log(`proxy process: ${usage.events} connections, ${((usage.cpuMicros ?? 0) / (usage.events ?? 1)).toFixed(0)} µs CPU each (whole run, uploads included)`);
  await stopRole(origins.child);
  fs.rmSync(dir, { recursive: true, force: true });
}

const role = process.argv[2];
if (role === ROLE_ORIGINS) await serveOrigins();
else if (role === ROLE_PROXY) await serveProxy(process.argv[3]!, Number(process.argv[4]), Number(process.argv[5]));
else await main();
