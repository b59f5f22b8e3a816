/**
 * Egress proxy benchmark: request latency (p50/p99 at concurrency 1, 16, 128; a new client
 * connection per request, while the proxy may reuse its upstream connection) and bulk
 * throughput (256 MiB downloaded from, and uploaded to, a fast loopback origin by curl), direct
 * to the origin and through the proxy, in one run, as ratios:
 *   proxy         client -> unix socket -> proxy -> loopback origin              (latency only)
 *   listener      client -> TCP 127.0.0.1 (the worker's egress listener) -> proxy -> origin
 * The second is what a command in a turn uses: a "worker" process opens the listener
 * (test/support/egress-listener.ts, as the native worker does) and hands it to the proxy over the listener channel, as in a
 * turn (supervisor/turns/listener-channel.ts); here the worker runs in a network namespace of its own
 * (`unshare --net`, root needed) and the client connects from inside it (setns, per
 * connection; curl runs there under nsenter). Client, origins, proxy and worker are separate
 * processes, as in production, and the proxy records its events in a real event store (SQLite,
 * synchronous = FULL) in a temporary directory. Bulk transfers go three ways, interleaved round
 * by round: direct, CONNECT (curl -p) and forward (plain HTTP through the proxy), each with the
 * CPU per MiB of curl, the origin, the proxy's main thread and its relay thread.
 * Goals: bulk throughput >= 0.9x direct over CONNECT and forward; added p50 (proxied p50 -
 * direct p50 at the same concurrency, in the same interleaved round) <= 1 ms.
 * Run: npx tsx bench/proxy.ts   (BENCH_REQUESTS shrinks the latency runs, BENCH_LATENCY=0 skips
 * them, BENCH_BULK_BYTES and BENCH_BULK_ROUNDS size the bulk runs, BENCH_KERNEL_RELAY=0 relays in Node)
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import {
  AF_INET,
  libcFunction,
  RUSAGE_CHILDREN,
  SOCK_CLOEXEC,
  SOCK_NONBLOCK,
  SOCK_STREAM,
  socket,
} from '../core/linux-abi.js';
import { createLogger } from '../core/log.js';
import { openEventStore } from '../supervisor/events/store.js';
import type { EventStore } from '../supervisor/events/types.js';
import type { EventInput, EventSink } from '../core/events.js';
import { buildTurnPolicy } from '../proxy/policy.js';
import { startTurnProxy } from '../proxy/server.js';
import { kernelRelay, type KernelRelay } from '../proxy/relay/kernel-relay.js';
import { handOverEgressListener, openEgressListener } from '../test/support/egress-listener.js';
import { closeChannelEnd, openListenerChannel, receiveWorkerListener } from '../supervisor/turns/listener-channel.js';
import { LISTENER_CHANNEL_FD } from '../supervisor/turns/worker-protocol.js';

const ORIGIN = 'origin.bench.test';
const TURN_ID = 'bench';
const ROLE_ORIGINS = '--serve-origins';
const ROLE_PROXY = '--serve-proxy';
const ROLE_WORKER = '--hold-listener';
const CONCURRENCY_LEVELS = [1, 16, 128];
const REQUESTS_PER_LEVEL = Number(process.env.BENCH_REQUESTS ?? 4000);
const WARMUP_REQUESTS = 300;
const LATENCY_ROUNDS = 5;
const RUN_LATENCY = process.env.BENCH_LATENCY !== '0';
const BULK_BYTES = Number(process.env.BENCH_BULK_BYTES ?? 256 * 1024 * 1024);
const BULK_ROUNDS = Number(process.env.BENCH_BULK_ROUNDS ?? 5);
/** What the bulk origin writes per call: large writes keep its own CPU per MiB low. */
const ORIGIN_CHUNK = 4 * 1024 * 1024;
const GOAL_THROUGHPUT_RATIO = 0.9;
const GOAL_ADDED_P50_MS = 1;
/** BENCH_KERNEL_RELAY=0 relays tunnels in Node (the path used while the relay thread starts). */
const USE_KERNEL_RELAY = process.env.BENCH_KERNEL_RELAY !== '0';

/** `namespace`: an fd of the network namespace the connection is made from (the worker's). */
type Target = { path: string } | { port: number; namespace?: number };
type Message = Record<string, number>;
type Role = { child: ChildProcess; first: Message };
/** The child processes whose CPU time is counted (the worker only waits). */
type Roles = { origins: Role; proxy: Role };
/** A way to the origin: its client-side target and the request sent along it. */
type BenchPath = { name: string; target: Target; request: string };

const CLONE_NEWNET = 0x40000000;
const setns = libcFunction('int setns(int, int)') as (fd: number, type: number) => number;
const ownNamespace = fs.openSync('/proc/thread-self/ns/net', 'r');

/** A TCP socket created inside `namespace` (connected later by Node, which keeps the socket's namespace). */
function socketIn(namespace: number): number {
  if (setns(namespace, CLONE_NEWNET) !== 0) throw new Error('setns into the worker namespace failed');
  const fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (setns(ownNamespace, CLONE_NEWNET) !== 0) throw new Error('setns back failed');
  if (fd < 0) throw new Error('socket() failed');
  return fd;
}

function connect(target: Target, allowHalfOpen = false): net.Socket {
  if ('path' in target) return net.connect({ path: target.path, allowHalfOpen });
  if (target.namespace === undefined) return net.connect({ host: '127.0.0.1', port: target.port, allowHalfOpen });
  return new net.Socket({ fd: socketIn(target.namespace), allowHalfOpen, readable: true, writable: true }).connect({
    host: '127.0.0.1',
    port: target.port,
  });
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

async function latencies(
  target: Target,
  request: string,
  concurrency: number,
  total: number,
): Promise<{ sorted: number[]; elapsedMs: number }> {
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
  return { sorted: results.sort((a, b) => a - b), elapsedMs: performance.now() - started };
}

const percentile = (sorted: number[], p: number): number =>
  sorted[Math.min(sorted.length - 1, Math.floor(sorted.length * p))]!;
const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

/** curl's CPU: getrusage(RUSAGE_CHILDREN) counts each curl once it has been waited for. */
const getrusage = libcFunction('int getrusage(int, void *)') as (who: number, usage: Buffer) => number;
function childrenCpuMicros(): number {
  const usage = Buffer.alloc(144);
  if (getrusage(RUSAGE_CHILDREN, usage) !== 0) throw new Error('getrusage failed');
  const timeval = (offset: number): number =>
    Number(usage.readBigInt64LE(offset)) * 1e6 + Number(usage.readBigInt64LE(offset + 8));
  return timeval(0) + timeval(16);
}

/** CPU nanoseconds of each thread of this process, from /proc (schedstat: nanosecond resolution). */
function threadCpuNanos(): Map<number, number> {
  const times = new Map<number, number>();
  for (const tid of fs.readdirSync('/proc/self/task')) {
    try {
      const schedstat = fs.readFileSync(`/proc/self/task/${tid}/schedstat`, 'utf8');
      times.set(Number(tid), Number(schedstat.split(' ')[0]));
    } catch {
      // The thread ended meanwhile.
    }
  }
  return times;
}

interface CurlRun {
  bytes: number;
  seconds: number;
}

/** Runs curl (inside `namespacePid`'s network namespace) to the end; its own byte count and transfer time. */
function runCurl(namespacePid: number, args: string[]): Promise<CurlRun> {
  return new Promise((resolve, reject) => {
    const child = spawn(
      'nsenter',
      [
        `--net=/proc/${namespacePid}/ns/net`,
        'curl',
        '-sS',
        '--fail',
        '-w',
        '%{size_download} %{size_upload} %{time_total}',
        ...args,
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.once('error', reject);
    child.once('exit', (code) => {
      const [down, up, seconds] = out.trim().split(/\s+/).slice(-3).map(Number) as [number, number, number];
      if (code !== 0) reject(new Error(`curl ${args.join(' ')} exited with ${code}: ${out}`));
      else resolve({ bytes: Math.max(down, up), seconds });
    });
  });
}

function cpuMicros(): number {
  const cpu = process.cpuUsage();
  return cpu.user + cpu.system;
}

/** Answers every `cpu` message with this process's CPU time (and `extra()`); `stop` answers with `report()` and exits. */
function serveControl(report: () => Promise<Message>, extra: () => Message = () => ({})): void {
  process.on('message', (message: { op: 'cpu' | 'stop' }) => {
    if (message.op === 'cpu') {
      process.send!({ cpuMicros: cpuMicros(), ...extra() });
      return;
    }
    void report().then((final) => process.send!(final, () => process.exit(0)));
  });
}

/**
 * The bulk origin: GET /bytes/<n> answers n bytes (Content-Length) from one preallocated buffer
 * written in ORIGIN_CHUNK pieces with backpressure; PUT and POST answer the number of body
 * bytes received. Keep-alive, as any HTTP server.
 */
function bulkOrigin(): http.Server {
  const block = Buffer.alloc(ORIGIN_CHUNK, 0x5a);
  return http.createServer((req, res) => {
    if (req.method === 'GET') {
      const total = Number(/^\/bytes\/(\d+)$/.exec(req.url ?? '')?.[1] ?? 0);
      res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': total });
      let sent = 0;
      const pump = (): void => {
        while (sent < total) {
          const chunk = total - sent >= block.length ? block : block.subarray(0, total - sent);
          sent += chunk.length;
          if (!res.write(chunk)) {
            res.once('drain', pump);
            return;
          }
        }
        res.end();
      };
      pump();
      return;
    }
    let received = 0;
    req.on('data', (chunk: Buffer) => (received += chunk.length));
    req.on('end', () => res.end(String(received)));
  });
}

async function serveOrigins(): Promise<void> {
  const httpOrigin = http.createServer((_req, res) => res.end('ok'));
  await new Promise<void>((r) => httpOrigin.listen(0, '127.0.0.1', r));
  const bulk = bulkOrigin();
  await new Promise<void>((r) => bulk.listen(0, '127.0.0.1', r));
  process.send!({
    httpPort: (httpOrigin.address() as net.AddressInfo).port,
    bulkPort: (bulk.address() as net.AddressInfo).port,
  });
  serveControl(async () => ({}));
}

/** Every stored egress event of the bench turn, counted page by page. */
function storedEvents(store: EventStore): number {
  let count = 0;
  let after: number | null = 0;
  while (after !== null) {
    const page = store.query({ turn: TURN_ID, limit: 1000, after });
    if (!page.ok) throw new Error(page.detail);
    count += page.events.length;
    after = page.nextAfter;
  }
  return count;
}

/** The store as the supervisor hands it over, counting what the proxy gave it. */
function countingSink(store: EventStore): { sink: EventSink & Pick<EventStore, 'appendBatch'>; given: () => number } {
  let given = 0;
  return {
    sink: {
      append: (event: EventInput) => {
        given++;
        return store.append(event);
      },
      appendBatch: (events: EventInput[]) => {
        given += events.length;
        return store.appendBatch(events);
      },
    },
    given: () => given,
  };
}

async function serveProxy(socketPath: string, httpPort: number, bulkPort: number): Promise<void> {
  const caps = { maxConnections: 1024, maxBytes: Number.MAX_SAFE_INTEGER, idleTimeoutMs: 60_000 };
  const built = buildTurnPolicy(
    {
      allowlist: [`${ORIGIN}:${httpPort}`, `${ORIGIN}:${bulkPort}`],
      denylist: [],
      allowAddressRanges: ['127.0.0.0/8'],
      turnAdditionsAllowed: [],
      ...caps,
    },
    { mode: 'ordinary' },
  );
  if (!built.ok) throw new Error(built.detail);
  const logger = createLogger({ level: 'warn' });
  const dir = path.dirname(socketPath);
  const store = openEventStore({
    databasePath: path.join(dir, 'events.db'),
    fallbackLogPath: path.join(dir, 'events.fallback.log'),
    unboundRetentionDays: 30,
    logger,
  });
  const counting = countingSink(store);
  const threadsBefore = new Set(threadCpuNanos().keys());
  const kernel = relayUnderTest();
  const proxy = await startTurnProxy({
    socketPath,
    allowedPeerUid: process.getuid!(),
    policy: built.policy,
    resolver: async () => ['127.0.0.1'],
    caps,
    kernel,
    sink: counting.sink,
    turn: { sessionId: 'bench', turnId: TURN_ID, profile: 'governed', model: null },
    logger,
  });
  if (!proxy.ok) throw new Error(proxy.detail);
  const taken = receiveWorkerListener(LISTENER_CHANNEL_FD);
  if (!taken.ok) throw new Error(taken.detail);
  closeChannelEnd(LISTENER_CHANNEL_FD);
  const served = await proxy.serveWorkerListener(taken.fd);
  if (!served.ok) throw new Error(served.detail);
  if (kernel) await kernel.settled();
  // The relay thread is the thread that appeared with it.
  const relayThreads = [...threadCpuNanos().keys()].filter((tid) => !threadsBefore.has(tid));
  const relayMicros = (): number => {
    const times = threadCpuNanos();
    return relayThreads.reduce((sum, tid) => sum + (times.get(tid) ?? 0), 0) / 1000;
  };
  process.send!({});
  serveControl(
    async () => {
      await proxy.close();
      const report = {
        events: counting.given(),
        stored: storedEvents(store),
        fallback: store.status().fallbackPendingEvents,
      };
      store.close();
      return report;
    },
    () => ({ relayMicros: relayMicros() }),
  );
}

function relayUnderTest(): KernelRelay | null {
  return USE_KERNEL_RELAY ? kernelRelay() : null;
}

/** The worker's part of the command's path, in its own network namespace: a listener it hands over and never accepts on. */
function holdListener(): void {
  const listener = openEgressListener();
  if (!listener.ok) throw new Error(listener.detail);
  const handedOver = handOverEgressListener(listener);
  if (!handedOver.ok) throw new Error(handedOver.detail);
  process.send!({ pid: process.pid, port: listener.port });
  serveControl(async () => ({}));
}

/** Starts this file in another role (`channel` as its fd 4; `unshared`: in a new network namespace); resolves with the child's first message. */
async function spawnRole(args: string[], options: { channel?: number; unshared?: boolean } = {}): Promise<Role> {
  const node = [process.execPath, ...process.execArgv, fileURLToPath(import.meta.url), ...args];
  const [command, ...rest] = options.unshared
    ? ['unshare', '--net', '--', '/bin/sh', '-c', 'ip link set lo up && exec "$@"', 'sh', ...node]
    : node;
  const child = spawn(command!, rest, {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc', ...(options.channel === undefined ? [] : [options.channel])],
  });
  // A run that fails (a curl that does not finish, say) must not leave its roles running.
  process.once('exit', () => child.kill());
  const first = await new Promise<Message>((resolve, reject) => {
    child.once('message', (message) => resolve(message as Message));
    child.once('exit', (code) => reject(new Error(`${args[0]} exited with ${code}`)));
  });
  child.removeAllListeners('exit');
  return { child, first };
}

function ask(role: Role, op: 'cpu' | 'stop'): Promise<Message> {
  return new Promise((resolve) => {
    role.child.once('message', (message) => resolve(message as Message));
    role.child.send({ op });
  });
}

/** CPU microseconds of every process of the bench: this client, the origins, the proxy (the worker only waits). */
interface CpuSpent {
  total: number;
  proxy: number;
  /** The proxy's relay thread (part of `proxy`). */
  relay: number;
  origin: number;
  /** This process (the latency client). */
  client: number;
  /** curl processes that ended meanwhile (the bulk client). */
  curl: number;
}

const noCpu = (): CpuSpent => ({ total: 0, proxy: 0, relay: 0, origin: 0, client: 0, curl: 0 });

function addCpu(sum: CpuSpent, more: CpuSpent): void {
  for (const key of Object.keys(sum) as Array<keyof CpuSpent>) sum[key] += more[key];
}

/** Runs `work` and returns its result with the CPU each process spent meanwhile. */
async function withCpu<T>(roles: Roles, work: () => Promise<T>): Promise<{ result: T; cpu: CpuSpent }> {
  const children = [roles.origins, roles.proxy];
  const before = await Promise.all(children.map((r) => ask(r, 'cpu')));
  const clientBefore = cpuMicros();
  const curlBefore = childrenCpuMicros();
  const result = await work();
  const client = cpuMicros() - clientBefore;
  const curl = childrenCpuMicros() - curlBefore;
  const after = await Promise.all(children.map((r) => ask(r, 'cpu')));
  const [origin, proxy] = after.map((a, i) => a.cpuMicros! - before[i]!.cpuMicros!) as [number, number];
  const relay = (after[1]!.relayMicros ?? 0) - (before[1]!.relayMicros ?? 0);
  return { result, cpu: { total: client + curl + origin + proxy, proxy, relay, origin, client, curl } };
}

interface PathLatencies {
  sorted: number[];
  elapsedMs: number;
  cpu: CpuSpent;
  /** Per round: this path's p50 minus direct's p50 in the same round. */
  addedByRound: number[];
}

/**
 * One concurrency level: LATENCY_ROUNDS rounds, each running every path in turn (the order
 * reversed every other round), so that a change in the machine's speed during the run (seen
 * on shared build machines: 2x within minutes) shifts every path alike.
 */
async function latencyLevel(
  roles: Roles,
  paths: BenchPath[],
  concurrency: number,
): Promise<Record<string, PathLatencies>> {
  const level: Record<string, PathLatencies> = {};
  for (const { name } of paths) level[name] = { sorted: [], elapsedMs: 0, cpu: noCpu(), addedByRound: [] };
  const perRound = Math.ceil(REQUESTS_PER_LEVEL / LATENCY_ROUNDS);
  for (let round = 0; round < LATENCY_ROUNDS; round++) {
    const p50s: Record<string, number> = {};
    const order = round % 2 === 0 ? paths : [...paths].reverse();
    for (const { name, target, request } of order) {
      const { result, cpu } = await withCpu(roles, () => latencies(target, request, concurrency, perRound));
      const sum = level[name]!;
      sum.sorted.push(...result.sorted);
      sum.elapsedMs += result.elapsedMs;
      addCpu(sum.cpu, cpu);
      p50s[name] = percentile(result.sorted, 0.5);
    }
    for (const { name } of paths) if (name !== 'direct') level[name]!.addedByRound.push(p50s[name]! - p50s.direct!);
  }
  for (const sum of Object.values(level)) sum.sorted.sort((a, b) => a - b);
  return level;
}

const CORES = os.cpus().length;
const ms = (value: number, width = 7): string => value.toFixed(3).padStart(width);
const micros = (value: number, width = 6): string => value.toFixed(0).padStart(width);

interface BulkPath {
  name: 'direct' | 'CONNECT' | 'forward';
  /** The network namespace curl runs in: the worker's for the proxied paths. */
  namespacePid: number;
  /** curl's arguments for a download and an upload of `file`. */
  download: string[];
  upload: (file: string) => string[];
}

interface BulkResult {
  rates: number[];
  /** Per round: this path's rate over direct's in the same round. */
  ratios: number[];
  cpu: CpuSpent;
  mebibytes: number;
}

/**
 * BULK_ROUNDS rounds, each running every path once (the order reversed every other round), as
 * the latency levels do: the machine's speed drifts, and each round compares paths that ran
 * within seconds of each other.
 */
async function bulkRuns(
  roles: Roles,
  paths: BulkPath[],
  args: (path: BulkPath) => string[],
): Promise<Record<string, BulkResult>> {
  const results: Record<string, BulkResult> = {};
  for (const { name } of paths) results[name] = { rates: [], ratios: [], cpu: noCpu(), mebibytes: 0 };
  for (let round = 0; round < BULK_ROUNDS; round++) {
    const rates: Record<string, number> = {};
    for (const path of round % 2 === 0 ? paths : [...paths].reverse()) {
      const { result, cpu } = await withCpu(roles, () => runCurl(path.namespacePid, args(path)));
      if (result.bytes !== BULK_BYTES) throw new Error(`${path.name}: curl moved ${result.bytes} bytes`);
      const sum = results[path.name]!;
      rates[path.name] = BULK_BYTES / 1e6 / result.seconds;
      sum.rates.push(rates[path.name]!);
      sum.mebibytes += BULK_BYTES / (1024 * 1024);
      addCpu(sum.cpu, cpu);
    }
    for (const { name } of paths) results[name]!.ratios.push(rates[name]! / rates.direct!);
  }
  return results;
}

function printBulk(title: string, results: Record<string, BulkResult>): Record<string, number> {
  console.log(title);
  console.log(
    '  path        MB/s  ratio   CPU µs per MiB: all   curl  origin  proxy (main + relay thread)  ceiling MB/s',
  );
  const ratios: Record<string, number> = {};
  for (const [name, { rates, ratios: byRound, cpu, mebibytes }] of Object.entries(results)) {
    const perMiB = (value: number, width = 6): string => micros(value / mebibytes, width);
    ratios[name] = median(byRound);
    console.log(
      `  ${name.padEnd(8)} ${median(rates).toFixed(0).padStart(6)}  ${ratios[name].toFixed(2)}x` +
        `  ${perMiB(cpu.total, 20)} ${perMiB(cpu.curl)} ${perMiB(cpu.origin, 7)} ${perMiB(cpu.proxy, 6)}` +
        ` (${micros((cpu.proxy - cpu.relay) / mebibytes, 4)} + ${micros(cpu.relay / mebibytes, 4)})` +
        `   ${micros((CORES * 1.048576e6 * mebibytes) / cpu.total, 16)}`,
    );
  }
  console.log(
    `  ratio: median over the rounds of (rate / direct's rate in the same round); all: curl + origin + proxy`,
  );
  return ratios;
}

async function main(): Promise<void> {
  const origins = await spawnRole([ROLE_ORIGINS]);
  const { httpPort, bulkPort } = origins.first as { httpPort: number; bulkPort: number };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-bench-proxy-'));
  const socketPath = path.join(dir, 'proxy.sock');
  const channel = openListenerChannel();
  if (!channel.ok) throw new Error(channel.detail);
  const worker = await spawnRole([ROLE_WORKER], { channel: channel.workerFd, unshared: true });
  const proxy = await spawnRole([ROLE_PROXY, socketPath, String(httpPort), String(bulkPort)], {
    channel: channel.supervisorFd,
  });
  closeChannelEnd(channel.workerFd);
  closeChannelEnd(channel.supervisorFd);
  const workerNamespace = fs.openSync(`/proc/${worker.first.pid}/ns/net`, 'r');
  const roles = { origins, proxy };
  const paths: BenchPath[] = [
    {
      name: 'direct',
      target: { port: httpPort },
      request: `GET / HTTP/1.1\r\nHost: 127.0.0.1:${httpPort}\r\nConnection: close\r\n\r\n`,
    },
    { name: 'proxy', target: { path: socketPath }, request: '' },
    { name: 'listener', target: { port: worker.first.port!, namespace: workerNamespace }, request: '' },
  ];
  const proxyRequest = `GET http://${ORIGIN}:${httpPort}/ HTTP/1.1\r\nHost: ${ORIGIN}:${httpPort}\r\nConnection: close\r\n\r\n`;
  for (const entry of paths.slice(1)) entry.request = proxyRequest;

  const load = os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
  console.log(`egress proxy benchmark, ${new Date().toISOString()}, load average ${load}, ${CORES} CPUs`);
  console.log(
    `CONNECT tunnels and forward bodies relayed ${USE_KERNEL_RELAY ? 'by the kernel relay (splice; BENCH_KERNEL_RELAY=0: in Node)' : 'in Node (BENCH_KERNEL_RELAY=0)'}`,
  );
  const addedP50: Record<string, number[]> = {};
  if (RUN_LATENCY) {
    for (const { target, request } of paths) await latencies(target, request, 16, WARMUP_REQUESTS);
    console.log(
      `${REQUESTS_PER_LEVEL} requests per level and path, new client connection per request, in ${LATENCY_ROUNDS} interleaved rounds;`,
    );
    console.log(
      'added p50: median over the rounds of (p50 - direct p50 in the same round). CPU µs per request: all processes',
    );
    console.log(`(client, origin, proxy) and the proxy; ceiling = req/s if all ${CORES} CPUs did nothing else.`);
    console.log(
      'concurrency  path           p50 ms     p99 ms  added p50 ms  p50 ratio  req/s  CPU: all  proxy  ceiling',
    );
    for (const concurrency of CONCURRENCY_LEVELS) {
      const level = await latencyLevel(roles, paths, concurrency);
      const directP50 = percentile(level.direct!.sorted, 0.5);
      for (const { name } of paths) {
        const { sorted, elapsedMs, cpu, addedByRound } = level[name]!;
        const p50 = percentile(sorted, 0.5);
        const count = sorted.length;
        const perRequest = (value: number): string => micros(value / count);
        let added = ['', ''];
        if (name !== 'direct') {
          const addedMedian = median(addedByRound);
          (addedP50[name] ??= []).push(addedMedian);
          added = [ms(addedMedian, 12), `${(p50 / directP50).toFixed(2)}x`];
        }
        console.log(
          `${(name === 'direct' ? String(concurrency) : '').padStart(11)}  ${name.padEnd(13)} ${ms(p50)}  ${ms(percentile(sorted, 0.99), 9)}  ` +
            `${added[0]!.padStart(12)}  ${added[1]!.padStart(9)}  ${(count / (elapsedMs / 1000)).toFixed(0).padStart(5)}    ${perRequest(cpu.total)} ${perRequest(cpu.proxy)} ` +
            ` ${micros((CORES * 1e6 * count) / cpu.total, 7)}`,
        );
      }
    }
  }

  // Bulk: curl from the worker's namespace through its egress listener, direct from this one.
  const listenerProxy = `http://127.0.0.1:${worker.first.port!}`;
  const viaOrigin = `http://${ORIGIN}:${bulkPort}`;
  const bulkPaths: BulkPath[] = [
    {
      name: 'direct',
      namespacePid: process.pid,
      download: ['-o', '/dev/null', `http://127.0.0.1:${bulkPort}/bytes/${BULK_BYTES}`],
      upload: (file) => ['-o', '/dev/null', '-T', file, `http://127.0.0.1:${bulkPort}/upload`],
    },
    {
      name: 'CONNECT',
      namespacePid: worker.first.pid!,
      download: ['-p', '-x', listenerProxy, '-o', '/dev/null', `${viaOrigin}/bytes/${BULK_BYTES}`],
      upload: (file) => ['-p', '-x', listenerProxy, '-o', '/dev/null', '-T', file, `${viaOrigin}/upload`],
    },
    {
      name: 'forward',
      namespacePid: worker.first.pid!,
      download: ['-x', listenerProxy, '-o', '/dev/null', `${viaOrigin}/bytes/${BULK_BYTES}`],
      upload: (file) => ['-x', listenerProxy, '-o', '/dev/null', '-T', file, `${viaOrigin}/upload`],
    },
  ];
  const mib = BULK_BYTES / (1024 * 1024);
  const downloads = await bulkRuns(roles, bulkPaths, (p) => p.download);
  const downloadRatios = printBulk(
    `${mib} MiB download by curl from a Node origin (${BULK_ROUNDS} interleaved rounds; median MB/s)`,
    downloads,
  );
  // The upload's source is in memory (tmpfs), so curl reads it from the page cache.
  const uploadFile = path.join('/dev/shm', `turnhost-bench-upload-${process.pid}`);
  fs.writeFileSync(uploadFile, Buffer.alloc(BULK_BYTES, 0x5a));
  let uploadRatios: Record<string, number>;
  try {
    const uploads = await bulkRuns(roles, bulkPaths, (p) => p.upload(uploadFile));
    uploadRatios = printBulk(`${mib} MiB upload by curl -T (PUT with Content-Length) to the same origin`, uploads);
  } finally {
    fs.rmSync(uploadFile, { force: true });
  }
  for (const name of ['CONNECT', 'forward']) {
    const met = (ratio: number): string => (ratio >= GOAL_THROUGHPUT_RATIO ? 'met' : 'NOT met');
    console.log(
      `goal, ${name}: throughput >= ${GOAL_THROUGHPUT_RATIO}x direct: download ${met(downloadRatios[name]!)}, upload ${met(uploadRatios[name]!)}`,
    );
  }
  for (const { name } of paths.slice(1)) {
    if (!addedP50[name]) continue;
    const latencyMet = addedP50[name].map(
      (added, i) => `c=${CONCURRENCY_LEVELS[i]} ${added <= GOAL_ADDED_P50_MS ? 'met' : 'NOT met'}`,
    );
    console.log(`goal, ${name}: added p50 <= ${GOAL_ADDED_P50_MS} ms: ${latencyMet.join(', ')}`);
  }

  await ask(worker, 'stop');
  const events = await ask(proxy, 'stop');
  console.log(
    `events: ${events.events} given to the store, ${events.stored} stored, ${events.fallback} in the fallback log`,
  );
  await ask(origins, 'stop');
  fs.rmSync(dir, { recursive: true, force: true });
}

const role = process.argv[2];
if (role === ROLE_ORIGINS) await serveOrigins();
else if (role === ROLE_PROXY) await serveProxy(process.argv[3]!, Number(process.argv[4]), Number(process.argv[5]));
else if (role === ROLE_WORKER) holdListener();
else await main();
