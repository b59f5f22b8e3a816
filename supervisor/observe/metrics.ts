/**
 * Prometheus metrics (prom-client) for `GET /metrics`, every one derived from what the
 * supervisor already records or reports: the governance event stream (through the activity
 * view), the turn manager's prepared-worker counts, the event store's status and the latest
 * worker-host probe. Nothing here instruments the turn lifecycle. docs/operator.md lists every
 * metric with its meaning.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { TurnhostConfig } from '../config/types.js';
import type { EventStore, GovernanceEvent } from '../events/types.js';
import type { WorkerHostStatus } from '../probes/types.js';
import type { Activity } from './activity.js';

interface PreparedWorkerCounts {
  preparedWorkers(): { ready: number; starting: number };
}

export interface MetricsSources {
  config: TurnhostConfig;
  store: EventStore;
  activity: Activity;
  latestStatus: () => WorkerHostStatus | null;
  /** The prepared-worker pool's counts; observe/ sits below turns/, so it is handed in. */
  turns?: PreparedWorkerCounts;
  /** Journal sends, when `events.journal` has been on. */
  journalCounts?: () => { sent: number; failed: number };
}

/** Launch latency buckets, seconds: a prepared worker is claimed in ~20 ms, a fresh start takes ~120 ms (docs/launch-performance.md), a loaded or slow host seconds. */
const LAUNCH_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
/** Label values come from the supervisor's own fixed vocabularies; anything else is folded into "other". */
const labelValue = (value: unknown): string =>
  typeof value === 'string' && /^[A-Za-z0-9_]{1,48}$/.test(value) ? value : 'other';
const TURNS_REMEMBERED = 4096;
const MODES = ['ordinary', 'restricted'] as const;

type Registers = Registry[];

/** The counters the governance event stream drives. */
interface EventCounters {
  launches: Counter;
  launchSeconds: Histogram;
  finished: Counter;
  oomKills: Counter;
  limitHits: Counter;
  egressConnections: Counter;
  egressDenials: Counter;
  egressBytes: Counter;
  appended: Counter;
}

/** Turns running against the capacity, and how their launches went and how they ended. */
function registerTurnMetrics(
  sources: MetricsSources,
  registers: Registers,
): Pick<EventCounters, 'launches' | 'launchSeconds' | 'finished'> {
  new Gauge({
    name: 'turnhost_turns_running',
    help: 'Turns whose command started (worker_launch) and has not exited yet (worker_exit).',
    registers,
    collect() {
      this.set(sources.activity.runningTurns().length);
    },
  });
  new Gauge({
    name: 'turnhost_turns_capacity',
    help: 'Turns that may run at once (turns.maxConcurrent); more are answered 429.',
    registers,
    collect() {
      this.set(sources.config.turns.maxConcurrent);
    },
  });
  const launches = new Counter({
    name: 'turnhost_turn_launches_total',
    help: 'Turn launches by outcome: started (worker_launch), refused (worker_host_refusal for a turn), failed (a worker_exit with neither).',
    labelNames: ['outcome'],
    registers,
  });
  const launchSeconds = new Histogram({
    name: 'turnhost_turn_launch_seconds',
    help: 'From the turn request to its command started (worker_launch payload launchMs).',
    buckets: LAUNCH_BUCKETS,
    registers,
  });
  const finished = new Counter({
    name: 'turnhost_turns_finished_total',
    help: 'Turns that ended, by result status (worker_exit).',
    labelNames: ['status'],
    registers,
  });
  return { launches, launchSeconds, finished };
}

/** The workers themselves: those booted ahead of their turn, and the limits turns ran into. */
function registerWorkerMetrics(
  turns: PreparedWorkerCounts | undefined,
  registers: Registers,
): Pick<EventCounters, 'oomKills' | 'limitHits'> {
  if (turns !== undefined) {
    new Gauge({
      name: 'turnhost_prepared_workers',
      help: 'Workers booted ahead of their turn, by state (ready to be claimed, starting).',
      labelNames: ['state'],
      registers,
      collect() {
        const counts = turns.preparedWorkers();
        this.set({ state: 'ready' }, counts.ready);
        this.set({ state: 'starting' }, counts.starting);
      },
    });
  }
  const oomKills = new Counter({
    name: 'turnhost_oom_kills_total',
    help: 'OOM kills inside turn cgroups (worker_exit usage.oomKills).',
    registers,
  });
  const limitHits = new Counter({
    name: 'turnhost_limit_hits_total',
    help: 'Turns that hit a limit, by limit hit (worker_exit limitHits: memory_oom, pids_max, cpu_throttled, ...).',
    labelNames: ['limit'],
    registers,
  });
  return { oomKills, limitHits };
}

function registerEgressMetrics(
  registers: Registers,
): Pick<EventCounters, 'egressConnections' | 'egressDenials' | 'egressBytes'> {
  const egressConnections = new Counter({
    name: 'turnhost_egress_connections_total',
    help: 'Egress proxy forward requests and CONNECT tunnels, by outcome and scope (egress_connection).',
    labelNames: ['outcome', 'scope'],
    registers,
  });
  const egressDenials = new Counter({
    name: 'turnhost_egress_denials_total',
    help: 'Egress requests the proxy refused, by reason (egress_denial).',
    labelNames: ['reason'],
    registers,
  });
  const egressBytes = new Counter({
    name: 'turnhost_egress_bytes_total',
    help: 'Bytes relayed by the egress proxies, by direction (egress_connection bytesUp / bytesDown).',
    labelNames: ['direction'],
    registers,
  });
  return { egressConnections, egressDenials, egressBytes };
}

/** Events committed to the database, and those waiting in the fallback log instead. */
function registerEventStoreMetrics(store: EventStore, registers: Registers): Pick<EventCounters, 'appended'> {
  const appended = new Counter({
    name: 'turnhost_events_appended_total',
    help: 'Governance events committed to the database, by kind.',
    labelNames: ['kind'],
    registers,
  });
  new Gauge({
    name: 'turnhost_events_fallback_pending',
    help: 'Events waiting in the fallback log for replay (the database could not take them).',
    registers,
    collect() {
      this.set(store.status().fallbackPendingEvents);
    },
  });
  new Gauge({
    name: 'turnhost_events_fallback_active',
    help: '1 while events written since the last replay sit in the fallback log.',
    registers,
    collect() {
      this.set(store.status().fallbackActive ? 1 : 0);
    },
  });
  return { appended };
}

/** The latest worker-host probe and the configuration's modes. */
function registerWorkerHostMetrics(sources: MetricsSources, registers: Registers): void {
  new Gauge({
    name: 'turnhost_worker_host_mode_available',
    help: 'Latest probe answer per mode: 1 available, 0 unavailable, disabled or not probed.',
    labelNames: ['mode'],
    registers,
    collect() {
      const status = sources.latestStatus();
      for (const mode of MODES) this.set({ mode }, status?.[mode]?.available === true ? 1 : 0);
    },
  });
  new Gauge({
    name: 'turnhost_worker_host_mode_enabled',
    help: 'Whether the configuration turns a mode on (restricted: modes.restricted.enabled).',
    labelNames: ['mode'],
    registers,
    collect() {
      this.set({ mode: 'ordinary' }, 1);
      this.set({ mode: 'restricted' }, sources.config.modes.restricted.enabled ? 1 : 0);
    },
  });
  new Gauge({
    name: 'turnhost_worker_host_checked_timestamp_seconds',
    help: 'When the latest probe of each mode ran (Unix time).',
    labelNames: ['mode'],
    registers,
    collect() {
      const status = sources.latestStatus();
      for (const mode of MODES) {
        const checkedAt = status?.[mode]?.checkedAt;
        if (checkedAt !== undefined) this.set({ mode }, Date.parse(checkedAt) / 1000);
      }
    },
  });
  new Gauge({
    name: 'turnhost_boundary_attested_cases',
    help: 'The latest attack battery run (turnhost check --attack): its cases per mode and result (held, broken, skipped); none before a run.',
    labelNames: ['mode', 'result'],
    registers,
    collect() {
      this.reset();
      const attested = sources.latestStatus()?.attested;
      if (attested === undefined) return;
      for (const mode of MODES)
        for (const result of ['held', 'broken', 'skipped'] as const)
          this.set({ mode, result }, attested.cases.filter((c) => c.mode === mode && c.result === result).length);
    },
  });
}

/** What the daemon reports of itself: configuration reloads and journal sends. */
function registerDaemonMetrics(
  journalCounts: MetricsSources['journalCounts'],
  registers: Registers,
): { reloads: Counter } {
  const reloads = new Counter({
    name: 'turnhost_config_reloads_total',
    help: 'Configuration reloads (SIGHUP), by result: applied, or refused (the configuration did not validate).',
    labelNames: ['result'],
    registers,
  });
  if (journalCounts !== undefined) {
    new Gauge({
      name: 'turnhost_journal_entries',
      help: 'Governance events sent to the journal (events.journal) since boot, by result (sent, failed).',
      labelNames: ['result'],
      registers,
      collect() {
        const { sent, failed } = journalCounts();
        this.set({ result: 'sent' }, sent);
        this.set({ result: 'failed' }, failed);
      },
    });
  }
  return { reloads };
}

/** The key a turn's launch bookkeeping goes by, or null for an event of no turn. */
function turnKey(event: GovernanceEvent): string | null {
  return event.turnId === null ? null : `${event.sessionId ?? ''}\u0000${event.turnId}`;
}

/**
 * The supervisor's metrics registry: gauges read their sources when scraped, counters follow
 * the governance event stream from construction until `close`.
 */
export class Metrics {
  readonly registry = new Registry();
  private readonly counters: EventCounters;
  private readonly reloads: Counter;
  // Per-turn launch bookkeeping: bounded, a turn is forgotten at its worker_exit.
  private readonly launched = new Set<string>();
  private readonly refused = new Set<string>();
  private readonly unsubscribe: () => void;

  constructor(sources: MetricsSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry });
    // Registration order is the order of the exposition.
    this.counters = {
      ...registerTurnMetrics(sources, registers),
      ...registerWorkerMetrics(sources.turns, registers),
      ...registerEgressMetrics(registers),
      ...registerEventStoreMetrics(sources.store, registers),
    };
    registerWorkerHostMetrics(sources, registers);
    this.reloads = registerDaemonMetrics(sources.journalCounts, registers).reloads;

    // Series that exist from the start, so rates and alerts see 0 rather than no data.
    for (const outcome of ['started', 'refused', 'failed']) this.counters.launches.inc({ outcome }, 0);
    for (const direction of ['up', 'down']) this.counters.egressBytes.inc({ direction }, 0);
    for (const result of ['applied', 'refused']) this.reloads.inc({ result }, 0);

    this.unsubscribe = sources.activity.onEvent((event) => this.take(event));
  }

  /** The text exposition format, and its content type. */
  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  /** A configuration reload: applied or refused. */
  countReload(result: 'applied' | 'refused'): void {
    this.reloads.inc({ result });
  }

  close(): void {
    this.unsubscribe();
    this.registry.clear();
  }

  private take(event: GovernanceEvent): void {
    const { counters } = this;
    counters.appended.inc({ kind: labelValue(event.kind) });
    const p = event.payload;
    switch (event.kind) {
      case 'worker_launch':
        counters.launches.inc({ outcome: 'started' });
        this.remember(this.launched, turnKey(event));
        if (typeof p['launchMs'] === 'number' && p['launchMs'] >= 0)
          counters.launchSeconds.observe(p['launchMs'] / 1000);
        break;
      case 'worker_host_refusal':
        if (p['trigger'] !== 'turn') break;
        counters.launches.inc({ outcome: 'refused' });
        this.remember(this.refused, turnKey(event));
        break;
      case 'worker_exit':
        this.takeWorkerExit(event);
        break;
      case 'egress_connection':
        counters.egressConnections.inc({ outcome: labelValue(p['outcome']), scope: labelValue(p['scope']) });
        if (typeof p['bytesUp'] === 'number') counters.egressBytes.inc({ direction: 'up' }, p['bytesUp']);
        if (typeof p['bytesDown'] === 'number') counters.egressBytes.inc({ direction: 'down' }, p['bytesDown']);
        break;
      case 'egress_denial':
        counters.egressDenials.inc({ reason: labelValue(p['reason']) });
        break;
    }
  }

  /** A turn's end: a launch that neither started nor was refused counts as failed. */
  private takeWorkerExit(event: GovernanceEvent): void {
    const { counters } = this;
    const p = event.payload;
    const key = turnKey(event);
    if (key !== null && !this.launched.has(key) && !this.refused.has(key)) counters.launches.inc({ outcome: 'failed' });
    if (key !== null) {
      this.launched.delete(key);
      this.refused.delete(key);
    }
    counters.finished.inc({ status: labelValue(p['status']) });
    const usage = p['usage'] as Record<string, unknown> | undefined;
    const kills = usage?.['oomKills'];
    if (typeof kills === 'number' && kills > 0) counters.oomKills.inc(kills);
    if (Array.isArray(p['limitHits']))
      for (const hit of p['limitHits']) counters.limitHits.inc({ limit: labelValue(hit) });
  }

  private remember(set: Set<string>, key: string | null): void {
    if (key === null) return;
    set.add(key);
    if (set.size > TURNS_REMEMBERED) set.delete(set.values().next().value as string);
  }
}

export function createMetrics(sources: MetricsSources): Metrics {
  return new Metrics(sources);
}
