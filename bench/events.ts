/**
 * Event store benchmark: ingest rate (single appends vs batches, against raw better-sqlite3
 * inserts as the in-run baseline) and query latency at 1,000,000 stored events.
 * Run: npx tsx bench/events.ts
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { createLogger } from '../core/log.js';
import { openDatabase } from '../supervisor/db/open.js';
import { openEventStore } from '../supervisor/events/store.js';
import type { EventQuery, EventStore } from '../supervisor/events/types.js';
import type { EventInput } from '../core/events.js';

/** BENCH_EVENTS shrinks the run while tuning; the reported figures use the default. */
const TOTAL_EVENTS = Number(process.env.BENCH_EVENTS ?? 1_000_000);
const BATCH_SIZE = 1000;
const SINGLE_APPENDS = 2000;
const QUERY_RUNS = 2000;
const QUERY_WARMUP_RUNS = 200;

const GOAL_BATCHED_PER_SECOND = 50_000;
const GOAL_FIRST_PAGE_P99_MS = 5;

/**
 * Session layout. `clustered` (the default) models a busy host: 16 sessions active at a time,
 * each emitting events interleaved with the others, a new set every 20,000 events (800 sessions
 * over 1M events). `uniform` is the worst case for the (session_id, id) index: 1000 sessions
 * strictly interleaved, so every 1000-event batch touches ~1000 index pages.
 */
type Layout = 'clustered' | 'uniform';
const ACTIVE_SESSIONS = 16;
const SESSION_SPAN = 20_000;
const UNIFORM_SESSIONS = 1000;

function sessionNumber(i: number, layout: Layout): number {
  return layout === 'uniform'
    ? i % UNIFORM_SESSIONS
    : Math.floor(i / SESSION_SPAN) * ACTIVE_SESSIONS + (i % ACTIVE_SESSIONS);
}

function makeEvent(i: number, layout: Layout = 'clustered'): EventInput {
  const session = sessionNumber(i, layout);
  return {
    sessionId: i % 50 === 0 ? null : `session-${session}`,
    turnId: `turn-${session}-${Math.floor(i / 2000)}`,
    kind: i % 3 === 0 ? 'egress_connection' : 'egress_denial',
    actor: 'server',
    model: 'model-a',
    profile: 'governed',
    payload:
      i % 3 === 0
        ? {
            host: `h${i % 97}.example.test`,
            port: 443,
            method: 'POST',
            path: '/v1/messages',
            bytesUp: 812,
            bytesDown: 40_961,
            durationMs: 213,
            outcome: 'ok',
            scope: 'inference',
            inference: true,
          }
        : { host: `h${i % 97}.example.test`, port: 443, reason: 'not_in_allowlist' },
  };
}

function rate(count: number, ms: number): number {
  return Math.round((count / ms) * 1000);
}

function percentile(sorted: number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

interface Latency {
  p50: number;
  p99: number;
  /** p99 of this process's CPU time per query: far below `p99` means the wall-clock tail is the scheduler (other load), not the query. */
  cpuP99: number;
}

function latency(store: EventStore, name: string, query: () => EventQuery): Latency {
  for (let i = 0; i < QUERY_WARMUP_RUNS; i++) store.query(query());
  const wall: number[] = [];
  const cpu: number[] = [];
  for (let i = 0; i < QUERY_RUNS; i++) {
    const q = query();
    const cpuStart = process.cpuUsage();
    const start = performance.now();
    const result = store.query(q);
    wall.push(performance.now() - start);
    const used = process.cpuUsage(cpuStart);
    cpu.push((used.user + used.system) / 1000);
    if (!result.ok) throw new Error(`${name}: ${result.detail}`);
    if (result.events.length === 0) throw new Error(`${name}: empty page`);
  }
  wall.sort((a, b) => a - b);
  cpu.sort((a, b) => a - b);
  return { p50: percentile(wall, 50), p99: percentile(wall, 99), cpuP99: percentile(cpu, 99) };
}

const RATIO_EVENTS = 100_000;

/** Raw prepared inserts in one transaction per batch into a fresh database: what SQLite alone costs here. */
function rawInsertRate(dir: string): number {
  const opened = openDatabase(path.join(dir, 'raw.db'));
  if (!opened.ok) throw new Error(opened.detail);
  const insert = opened.db.prepare(
    `INSERT INTO events (session_id, turn_id, at, kind, schema_version, actor, model, profile, payload)
     VALUES (?, ?, ?, ?, 1, ?, ?, ?, ?)`,
  );
  const insertBatch = opened.db.transaction((events: EventInput[], at: string) => {
    for (const e of events)
      insert.run(e.sessionId, e.turnId, at, e.kind, e.actor, e.model, e.profile, JSON.stringify(e.payload));
  });
  const count = RATIO_EVENTS;
  const start = performance.now();
  for (let i = 0; i < count; i += BATCH_SIZE) {
    insertBatch(
      Array.from({ length: BATCH_SIZE }, (_, j) => makeEvent(i + j)),
      new Date().toISOString(),
    );
  }
  const ms = performance.now() - start;
  opened.db.close();
  return rate(count, ms);
}

function openStore(dir: string, name: string): EventStore {
  return openEventStore({
    databasePath: path.join(dir, `${name}.db`),
    fallbackLogPath: path.join(dir, `${name}.fallback.jsonl`),
    unboundRetentionDays: 30,
    logger: createLogger({ level: 'warn' }),
  });
}

/** Events per wall-clock second; `perCpuSecond` shows what contention for the cores took away. */
function appendBatches(
  store: EventStore,
  from: number,
  to: number,
  layout: Layout = 'clustered',
): { perSecond: number; perCpuSecond: number } {
  const start = performance.now();
  const cpuStart = process.cpuUsage();
  for (let i = from; i < to; i += BATCH_SIZE) {
    const size = Math.min(BATCH_SIZE, to - i);
    const result = store.appendBatch(Array.from({ length: size }, (_, j) => makeEvent(i + j, layout)));
    if (!result.ok || result.stored !== 'database') throw new Error('batch append failed');
  }
  const cpu = process.cpuUsage(cpuStart);
  return {
    perSecond: rate(to - from, performance.now() - start),
    perCpuSecond: rate(to - from, (cpu.user + cpu.system) / 1000),
  };
}

/** The store's batched path into a fresh database, same count as the raw baseline. */
function storeInsertRate(dir: string, layout: Layout): number {
  const store = openStore(dir, `ratio-${layout}`);
  const { perSecond: result } = appendBatches(store, 0, RATIO_EVENTS, layout);
  store.close();
  return result;
}

function main(): void {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-bench-events-'));
  try {
    const rawRate = rawInsertRate(dir);
    const freshStoreRate = storeInsertRate(dir, 'clustered');
    const uniformStoreRate = storeInsertRate(dir, 'uniform');
    const store = openStore(dir, 'events');

    const start = performance.now();
    for (let i = 0; i < SINGLE_APPENDS; i++) {
      const result = store.append(makeEvent(i));
      if (!result.ok || result.stored !== 'database') throw new Error('single append failed');
    }
    const singleRate = rate(SINGLE_APPENDS, performance.now() - start);

    const { perSecond: batchedRate, perCpuSecond: batchedCpuRate } = appendBatches(store, SINGLE_APPENDS, TOTAL_EVENTS);

    const lastId = TOTAL_EVENTS;
    const deepAfter = () => lastId - 150 - Math.floor(Math.random() * 50);
    const sessionCount = sessionNumber(TOTAL_EVENTS - 1, 'clustered') + 1;
    const randomSession = () => `session-${Math.floor(Math.random() * sessionCount)}`;
    const recentSession = () => `session-${sessionCount - 1 - Math.floor(Math.random() * ACTIVE_SESSIONS)}`;
    const firstPage = latency(store, 'first page', () => ({}));
    const deepPage = latency(store, 'deep page', () => ({ after: deepAfter() }));
    const sessionFirst = latency(store, 'session first page', () => ({ session: randomSession() }));
    const sessionDeep = latency(store, 'session deep page', () => ({ session: recentSession(), after: lastId - 5000 }));
    const kindDeep = latency(store, 'kind deep page', () => ({ kind: 'egress_connection', after: deepAfter() - 1000 }));
    store.close();

    const ms = (v: number) => `${v.toFixed(3)} ms`;
    const figures = (l: Latency) => `p50 ${ms(l.p50)}  p99 ${ms(l.p99)}  (cpu p99 ${ms(l.cpuP99)})`;
    const verdict = (met: boolean) => (met ? 'MET' : 'MISSED');
    console.log(
      `load average at end: ${os
        .loadavg()
        .map((l) => l.toFixed(1))
        .join(' ')} on ${os.cpus().length} cpus`,
    );
    console.log(`layout: ${ACTIVE_SESSIONS} sessions active at a time, ${sessionCount} sessions in all`);
    console.log(
      `events stored: ${TOTAL_EVENTS.toLocaleString('en')} (${(fs.statSync(path.join(dir, 'events.db')).size / 1e6).toFixed(0)} MB)`,
    );
    console.log(`ingest single appends:   ${singleRate.toLocaleString('en')} events/s (one fsync'd transaction each)`);
    console.log(
      `ingest batched (${BATCH_SIZE}):    ${batchedRate.toLocaleString('en')} events/s  goal >= ${GOAL_BATCHED_PER_SECOND.toLocaleString('en')}: ${verdict(batchedRate >= GOAL_BATCHED_PER_SECOND)}`,
    );
    console.log(
      `  batched/single ratio ${(batchedRate / singleRate).toFixed(1)}; batched per CPU-second of this process: ${batchedCpuRate.toLocaleString('en')} events`,
    );
    console.log(
      `first ${RATIO_EVENTS.toLocaleString('en')} into a fresh db: store ${freshStoreRate.toLocaleString('en')} events/s, raw better-sqlite3 baseline ${rawRate.toLocaleString('en')} events/s, store/raw ratio ${(freshStoreRate / rawRate).toFixed(2)}`,
    );
    console.log(
      `  worst-case layout (${UNIFORM_SESSIONS} sessions strictly interleaved): store ${uniformStoreRate.toLocaleString('en')} events/s, ratio to clustered ${(uniformStoreRate / freshStoreRate).toFixed(2)}`,
    );
    console.log(
      `query first page:        ${figures(firstPage)}  goal p99 <= ${GOAL_FIRST_PAGE_P99_MS} ms: ${verdict(firstPage.p99 <= GOAL_FIRST_PAGE_P99_MS)}`,
    );
    console.log(`query deep page:         ${figures(deepPage)}  (after near the end)`);
    console.log(`query session first:     ${figures(sessionFirst)}`);
    console.log(
      `query session deep:      ${figures(sessionDeep)}  (a session active at the end, after = last id - 5,000)`,
    );
    console.log(`query kind deep:         ${figures(kindDeep)}`);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
}

main();
