/**
 * Egress proxy benchmark: request latency (p50/p99 at concurrency 1, 16, 128; a new client
 * connection per request, while the proxy may reuse its upstream connection) and 64 MiB upload
 * throughput, direct to the origin and along two proxied paths, in one run, as ratios:
 *   proxy         client -> unix socket -> proxy -> loopback origin
 *   listener      client -> TCP 127.0.0.1 (the worker's egress listener) -> proxy -> origin
 * The second is what a command in a turn uses: a "worker" process opens the listener
 * (worker/egress-listener.ts) and hands it to the proxy over the listener channel, as in a
 * turn (supervisor/turns/listener-channel.ts); here the worker runs in a network namespace of its own
 * (`unshare --net`, root needed) and the client connects from inside it (setns, per connection). Client, origins,
 * proxy and worker are separate processes, as in production, and the proxy records its events in a real event store (SQLite, synchronous = FULL) in a
 * temporary directory. Throughput goes through CONNECT. Goals: throughput >= 0.8x direct,
 * added p50 (proxied p50 - direct p50 at the same concurrency, in the same interleaved round) <= 1 ms.
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
import { libc } from '../core/libc.js';
import { createLogger } from '../core/log.js';
import { openEventStore } from '../supervisor/events/store.js';
import type { EventStore } from '../supervisor/events/types.js';
import type { EventInput, EventSink } from '../core/events.js';
import { buildTurnPolicy, DEFAULT_INFERENCE_HOSTS } from '../proxy/policy.js';
import { startTurnProxy } from '../proxy/server.js';
import { kernelRelay, type KernelRelay } from '../proxy/relay/kernel-relay.js';
import { handOverEgressListener, openEgressListener } from '../worker/egress-listener.js';
import { closeChannelEnd, openListenerChannel, receiveWorkerListener } from '../supervisor/turns/listener-channel.js';
import { LISTENER_CHANNEL_FD } from '../worker/protocol.js';

const ORIGIN = 'origin.bench.test';
const TURN_ID = 'bench';
const ROLE_ORIGINS = '--serve-origins';
const ROLE_PROXY = '--serve-proxy';
const ROLE_WORKER = '--hold-listener';
const CONCURRENCY_LEVELS = [1, 16, 128];
const REQUESTS_PER_LEVEL = Number(process.env.BENCH_REQUESTS ?? 4000);
const WARMUP_REQUESTS = 300;
const LATENCY_ROUNDS = 5;
const UPLOAD_BYTES = 64 * 1024 * 1024;
const UPLOAD_CHUNK = 1024 * 1024;
const UPLOAD_RUNS = 9;
const GOAL_THROUGHPUT_RATIO = 0.8;
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
const setns = libc().func('int setns(int, int)') as (fd: number, type: number) => number;
const tcpSocket = libc().func('int socket(int, int, int)') as (
  domain: number,
  type: number,
  protocol: number,
) => number;
const ownNamespace = fs.openSync('/proc/thread-self/ns/net', 'r');

/** A TCP socket created inside `namespace` (connected later by Node, which keeps the socket's namespace). */
function socketIn(namespace: number): number {
  if (setns(namespace, CLONE_NEWNET) !== 0) throw new Error('setns into the worker namespace failed');
  const fd = tcpSocket(2, 1 | 0o4000 | 0o2000000, 0);
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

function openTunnel(target: Target, authority: string): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(target, true);
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

function cpuMicros(): number {
  const cpu = process.cpuUsage();
  return cpu.user + cpu.system;
}

/** Answers every `cpu` message with this process's CPU time; `stop` answers with `report()` and exits. */
function serveControl(report: () => Promise<Message>): void {
  process.on('message', (message: { op: 'cpu' | 'stop' }) => {
    if (message.op === 'cpu') {
      process.send!({ cpuMicros: cpuMicros() });
      return;
    }
    void report().then((final) => process.send!(final, () => process.exit(0)));
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
  const logger = createLogger({ level: 'warn' });
  const dir = path.dirname(socketPath);
  const store = openEventStore({
    databasePath: path.join(dir, 'events.db'),
    fallbackLogPath: path.join(dir, 'events.fallback.log'),
    unboundRetentionDays: 30,
    logger,
  });
  const counting = countingSink(store);
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
  process.send!({});
  serveControl(async () => {
    await proxy.close();
    const report = {
      events: counting.given(),
      stored: storedEvents(store),
      fallback: store.status().fallbackPendingEvents,
    };
    store.close();
    return report;
  });
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
}

/** Runs `work` and returns its result with the CPU each process spent meanwhile. */
async function withCpu<T>(roles: Roles, work: () => Promise<T>): Promise<{ result: T; cpu: CpuSpent }> {
  const children = [roles.origins, roles.proxy];
  const before = await Promise.all(children.map((r) => ask(r, 'cpu')));
  const clientBefore = cpuMicros();
  const result = await work();
  const client = cpuMicros() - clientBefore;
  const after = await Promise.all(children.map((r) => ask(r, 'cpu')));
  const [origins, proxy] = after.map((a, i) => a.cpuMicros! - before[i]!.cpuMicros!) as [number, number];
  return { result, cpu: { total: client + origins + proxy, proxy } };
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
  for (const { name } of paths)
    level[name] = { sorted: [], elapsedMs: 0, cpu: { total: 0, proxy: 0 }, addedByRound: [] };
  const perRound = Math.ceil(REQUESTS_PER_LEVEL / LATENCY_ROUNDS);
  for (let round = 0; round < LATENCY_ROUNDS; round++) {
    const p50s: Record<string, number> = {};
    const order = round % 2 === 0 ? paths : [...paths].reverse();
    for (const { name, target, request } of order) {
      const { result, cpu } = await withCpu(roles, () => latencies(target, request, concurrency, perRound));
      const sum = level[name]!;
      sum.sorted.push(...result.sorted);
      sum.elapsedMs += result.elapsedMs;
      sum.cpu.total += cpu.total;
      sum.cpu.proxy += cpu.proxy;
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

async function main(): Promise<void> {
  const origins = await spawnRole([ROLE_ORIGINS]);
  const { httpPort, sinkPort } = origins.first as { httpPort: number; sinkPort: number };
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-bench-proxy-'));
  const socketPath = path.join(dir, 'proxy.sock');
  const channel = openListenerChannel();
  if (!channel.ok) throw new Error(channel.detail);
  const worker = await spawnRole([ROLE_WORKER], { channel: channel.workerFd, unshared: true });
  const proxy = await spawnRole([ROLE_PROXY, socketPath, String(httpPort), String(sinkPort)], {
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
  for (const { target, request } of paths) await latencies(target, request, 16, WARMUP_REQUESTS);

  const load = os
    .loadavg()
    .map((l) => l.toFixed(2))
    .join(' ');
  console.log(`egress proxy benchmark, ${new Date().toISOString()}, load average ${load}, ${CORES} CPUs`);
  console.log(
    `CONNECT tunnels relayed ${USE_KERNEL_RELAY ? 'by the kernel relay (splice; BENCH_KERNEL_RELAY=0: in Node)' : 'in Node (BENCH_KERNEL_RELAY=0)'}`,
  );
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
  const addedP50: Record<string, number[]> = {};
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

  const payload = Buffer.alloc(UPLOAD_CHUNK, 0x5a);
  const rates: Record<string, number[]> = {};
  const uploadCpu: Record<string, CpuSpent> = {};
  const open = (name: string, target: Target): Promise<net.Socket> =>
    name === 'direct' ? openDirect(sinkPort) : openTunnel(target, `${ORIGIN}:${sinkPort}`);
  for (let run = 0; run < UPLOAD_RUNS; run++) {
    for (const { name, target } of paths) {
      const { result, cpu } = await withCpu(roles, async () => {
        const started = performance.now();
        return upload(await open(name, target), started, payload);
      });
      (rates[name] ??= []).push(result);
      const sum = (uploadCpu[name] ??= { total: 0, proxy: 0 });
      for (const key of ['total', 'proxy'] as const) sum[key] += cpu[key];
    }
  }
  const mebibytes = (UPLOAD_RUNS * UPLOAD_BYTES) / (1024 * 1024);
  const directMBs = median(rates.direct!);
  console.log(
    `64 MiB upload (CONNECT when proxied), median of ${UPLOAD_RUNS}; CPU µs per MiB as above; ceiling in MB/s`,
  );
  const ratios: Record<string, number> = {};
  for (const { name } of paths) {
    const MBs = median(rates[name]!);
    ratios[name] = MBs / directMBs;
    const perMiB = (value: number): string => micros(value / mebibytes);
    const cpu = uploadCpu[name]!;
    console.log(
      `  ${name.padEnd(13)} ${MBs.toFixed(0).padStart(5)} MB/s  ratio ${ratios[name].toFixed(2)}x  CPU: all ${perMiB(cpu.total)}  ` +
        `proxy ${perMiB(cpu.proxy)}  ceiling ${micros((CORES * 1.048576e6 * mebibytes) / cpu.total)}`,
    );
  }
  for (const { name } of paths.slice(1)) {
    const throughputMet = ratios[name]! >= GOAL_THROUGHPUT_RATIO;
    const latencyMet = addedP50[name]!.map(
      (added, i) => `c=${CONCURRENCY_LEVELS[i]} ${added <= GOAL_ADDED_P50_MS ? 'met' : 'NOT met'}`,
    );
    console.log(
      `goals, ${name}: throughput >= ${GOAL_THROUGHPUT_RATIO}x ${throughputMet ? 'met' : 'NOT met'}; added p50 <= ${GOAL_ADDED_P50_MS} ms: ${latencyMet.join(', ')}`,
    );
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
