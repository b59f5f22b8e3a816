/**
 * The metrics, derived from governance events appended to a real event store, rendered by
 * prom-client and read back with a Prometheus text-format parser.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { egressConnectionEvent, exitEvent, launchEvent, metricEvent } from '../../../support/metric-events.js';
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { createMemoryLogger } from '../../../../core/log.js';
import { defaultConfig } from '../../../../supervisor/config/load.js';
import { openEventStore } from '../../../../supervisor/events/store.js';
import { createActivity } from '../../../../supervisor/observe/activity.js';
import { createMetrics } from '../../../../supervisor/observe/metrics.js';
import type { WorkerHostStatus } from '../../../../supervisor/probes/types.js';

interface Family {
  name: string;
  type: string;
  help: string;
  metrics: Array<{
    value?: string;
    labels?: Record<string, string>;
    buckets?: Record<string, string>;
    count?: string;
    sum?: string;
  }>;
}

function sample(families: Family[], name: string, labels: Record<string, string> = {}): number | undefined {
  const family = families.find((f) => f.name === name);
  const metric = family?.metrics.find((m) => Object.entries(labels).every(([k, v]) => m.labels?.[k] === v));
  return metric?.value === undefined ? undefined : Number(metric.value);
}

t.test('every metric of the list, from events and status surfaces', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-metrics-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const { logger } = createMemoryLogger();
  const store = openEventStore({
    databasePath: path.join(dir, 'turnhost.db'),
    fallbackLogPath: path.join(dir, 'fallback.log'),
    unboundRetentionDays: 30,
    logger,
  });
  t.teardown(() => store.close());
  const config = defaultConfig({ installed: false, cwd: dir });
  config.turns.maxConcurrent = 3;
  const activity = createActivity(store);
  const status = {
    ordinary: { available: true, checkedAt: '2026-12-03T10:00:00.000Z', trigger: 'boot' },
  } as unknown as WorkerHostStatus;
  const metrics = createMetrics({
    config,
    store,
    activity,
    latestStatus: () => status,
    turns: { preparedWorkers: () => ({ ready: 1, starting: 2 }) },
    journalCounts: () => ({ sent: 5, failed: 1 }),
  });
  t.teardown(() => metrics.close());

  store.appendBatch([
    launchEvent('t1', 20),
    launchEvent('t2', 300),
    exitEvent('t1', 'oom_killed', ['memory_oom', 'pids_max'], 2),
    metricEvent('worker_host_refusal', 't3', { mode: 'ordinary', requirement: 'x', trigger: 'turn' }),
    metricEvent('worker_host_refusal', null, { mode: 'ordinary', requirement: 'x', trigger: 'check' }),
    exitEvent('t4', 'internal_error', [], 0),
    egressConnectionEvent('t2', 100, 2000),
    metricEvent('egress_denial', 't2', { host: 'b.example', port: 443, reason: 'not_allowlisted' }),
    metricEvent('egress_denial', 't2', { host: 'c.example', port: 80, reason: 'not_allowlisted' }),
    metricEvent('egress_denial', 't2', { host: 'c.example', port: 80, reason: 'a reason with spaces' }),
  ]);
  metrics.countReload('applied');

  const rendered = await metrics.render();
  t.match(rendered.contentType, /^text\/plain; version=0\.0\.4/);
  const families = parsePrometheusTextFormat(rendered.body) as Family[];
  const types = Object.fromEntries(families.map((f) => [f.name, f.type]));
  t.match(types, {
    turnhost_turns_running: 'GAUGE',
    turnhost_turns_capacity: 'GAUGE',
    turnhost_turn_launches_total: 'COUNTER',
    turnhost_turn_launch_seconds: 'HISTOGRAM',
    turnhost_turns_finished_total: 'COUNTER',
    turnhost_prepared_workers: 'GAUGE',
    turnhost_oom_kills_total: 'COUNTER',
    turnhost_limit_hits_total: 'COUNTER',
    turnhost_egress_connections_total: 'COUNTER',
    turnhost_egress_denials_total: 'COUNTER',
    turnhost_egress_bytes_total: 'COUNTER',
    turnhost_events_appended_total: 'COUNTER',
    turnhost_events_fallback_pending: 'GAUGE',
    turnhost_events_fallback_active: 'GAUGE',
    turnhost_worker_host_mode_available: 'GAUGE',
    turnhost_worker_host_mode_enabled: 'GAUGE',
    turnhost_config_reloads_total: 'COUNTER',
    turnhost_journal_entries: 'GAUGE',
  });
  for (const family of families.filter((f) => f.name.startsWith('turnhost_')))
    t.ok(family.help.length > 10, `${family.name} has a help text`);

  t.equal(sample(families, 'turnhost_turns_running'), 1, 't2 launched and has not exited');
  t.equal(sample(families, 'turnhost_turns_capacity'), 3);
  t.equal(sample(families, 'turnhost_turn_launches_total', { outcome: 'started' }), 2);
  t.equal(sample(families, 'turnhost_turn_launches_total', { outcome: 'refused' }), 1, 'only refusals of a turn');
  t.equal(sample(families, 'turnhost_turn_launches_total', { outcome: 'failed' }), 1, 'an exit with no launch');
  const histogram = families.find((f) => f.name === 'turnhost_turn_launch_seconds')!.metrics[0]!;
  t.equal(Number(histogram.count), 2);
  t.equal(Number(histogram.buckets?.['0.025']), 1, '20 ms');
  t.equal(Number(histogram.buckets?.['0.5']), 2, '300 ms');
  t.equal(sample(families, 'turnhost_turns_finished_total', { status: 'oom_killed' }), 1);
  t.equal(sample(families, 'turnhost_prepared_workers', { state: 'ready' }), 1);
  t.equal(sample(families, 'turnhost_prepared_workers', { state: 'starting' }), 2);
  t.equal(sample(families, 'turnhost_oom_kills_total'), 2);
  t.equal(sample(families, 'turnhost_limit_hits_total', { limit: 'memory_oom' }), 1);
  t.equal(sample(families, 'turnhost_limit_hits_total', { limit: 'pids_max' }), 1);
  t.equal(sample(families, 'turnhost_egress_connections_total', { outcome: 'ok', scope: 'tool' }), 1);
  t.equal(sample(families, 'turnhost_egress_denials_total', { reason: 'not_allowlisted' }), 2);
  t.equal(sample(families, 'turnhost_egress_denials_total', { reason: 'other' }), 1, 'free text is folded');
  t.equal(sample(families, 'turnhost_egress_bytes_total', { direction: 'up' }), 100);
  t.equal(sample(families, 'turnhost_egress_bytes_total', { direction: 'down' }), 2000);
  t.equal(sample(families, 'turnhost_events_appended_total', { kind: 'egress_denial' }), 3);
  t.equal(sample(families, 'turnhost_events_fallback_pending'), 0);
  t.equal(sample(families, 'turnhost_worker_host_mode_available', { mode: 'ordinary' }), 1);
  t.equal(sample(families, 'turnhost_worker_host_mode_available', { mode: 'restricted' }), 0);
  t.equal(sample(families, 'turnhost_worker_host_mode_enabled', { mode: 'restricted' }), 0);
  t.equal(sample(families, 'turnhost_config_reloads_total', { result: 'applied' }), 1);
  t.equal(sample(families, 'turnhost_config_reloads_total', { result: 'refused' }), 0);
  t.equal(sample(families, 'turnhost_journal_entries', { result: 'sent' }), 5);
  t.ok(
    families.some((f) => f.name === 'process_cpu_user_seconds_total'),
    'process metrics too',
  );

  t.same(
    activity.runningTurns().map((turn) => turn.turnId),
    ['t2'],
  );
  t.same(
    activity.recentDenials().map((d) => d.payload['host']),
    ['b.example', 'c.example', 'c.example'],
  );
});
