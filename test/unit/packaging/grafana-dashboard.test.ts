/**
 * The Grafana dashboard (packaging/hosting/grafana-dashboard.json) queries only metrics the
 * server really exports, with their real labels: every `turnhost_*` name in a panel's query is
 * a family of the exposition the supervisor's metrics render (a histogram's `_bucket`, `_sum`
 * and `_count` included), and every label a query selects or groups by is one of its series'.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import parsePrometheusTextFormat from 'parse-prometheus-text-format';
import { createMemoryLogger } from '../../../core/log.js';
import { defaultConfig } from '../../../supervisor/config/load.js';
import { openEventStore } from '../../../supervisor/events/store.js';
import { createActivity } from '../../../supervisor/observe/activity.js';
import { createMetrics } from '../../../supervisor/observe/metrics.js';
import type { WorkerHostStatus } from '../../../supervisor/probes/types.js';
import { egressConnectionEvent, exitEvent, launchEvent, metricEvent } from '../../support/metric-events.js';
import { REPO_ROOT } from '../../support/turn-harness.js';

interface Family {
  name: string;
  type: string;
  metrics: Array<{ labels?: Record<string, string> }>;
}
interface Panel {
  id: number;
  title: string;
  targets: Array<{ expr: string }>;
}

/** Labels Prometheus adds at scrape time, and the histogram bucket bound. */
const SCRAPE_LABELS = ['instance', 'job', 'le'];

/** Metric name → its label names, from the exposition of a supervisor that saw one of each event. */
async function exported(t: { teardown(fn: () => void): void }): Promise<Map<string, Set<string>>> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-dashboard-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const { logger } = createMemoryLogger();
  const store = openEventStore({
    databasePath: path.join(dir, 'turnhost.db'),
    fallbackLogPath: path.join(dir, 'fallback.log'),
    unboundRetentionDays: 30,
    logger,
  });
  t.teardown(() => store.close());
  const activity = createActivity(store);
  const status = {
    ordinary: { available: true, checkedAt: '2026-12-03T10:00:00.000Z', trigger: 'boot' },
  } as unknown as WorkerHostStatus;
  const metrics = createMetrics({
    config: defaultConfig({ installed: false, cwd: dir }),
    store,
    activity,
    latestStatus: () => status,
    turns: { preparedWorkers: () => ({ ready: 1, starting: 0 }) },
    journalCounts: () => ({ sent: 1, failed: 0 }),
  });
  t.teardown(() => metrics.close());
  store.appendBatch([
    launchEvent('t1', 20),
    exitEvent('t1', 'oom_killed', ['memory_oom'], 1),
    egressConnectionEvent('t1', 1, 2),
    metricEvent('egress_denial', 't1', { host: 'b.example', port: 443, reason: 'not_allowlisted' }),
  ]);
  const families = parsePrometheusTextFormat((await metrics.render()).body) as Family[];
  const names = new Map<string, Set<string>>();
  for (const family of families) {
    const labels = new Set(family.metrics.flatMap((m) => Object.keys(m.labels ?? {})));
    const series = family.type === 'HISTOGRAM' ? ['_bucket', '_sum', '_count'].map((s) => family.name + s) : [];
    for (const name of [family.name, ...series]) names.set(name, labels);
  }
  return names;
}

/** What a query names that the exposition lacks: unknown metrics, and labels its metrics do not carry. */
function unknownNames(expr: string, names: Map<string, Set<string>>): string[] {
  const metrics = [...expr.matchAll(/\b(turnhost_[a-z_]+)\b/g)].map((m) => m[1]!);
  const problems = metrics.filter((name) => !names.has(name)).map((name) => `metric ${name}`);
  const known = new Set([...SCRAPE_LABELS, ...metrics.flatMap((name) => [...(names.get(name) ?? [])])]);
  const labels = [
    ...[...expr.matchAll(/\b(?:by|without)\s*\(([^)]*)\)/g)].flatMap((m) => m[1]!.split(',')),
    ...[...expr.matchAll(/\{([^}]*)\}/g)].flatMap((m) => m[1]!.split(',').map((s) => s.split(/[=!~]/)[0]!)),
  ]
    .map((s) => s.trim())
    .filter((s) => s !== '');
  return [...problems, ...labels.filter((label) => !known.has(label)).map((label) => `label ${label}`)];
}

const dashboard = JSON.parse(
  fs.readFileSync(path.join(REPO_ROOT, 'packaging/hosting/grafana-dashboard.json'), 'utf8'),
) as { panels: Panel[]; templating: { list: Array<{ definition?: string }> } };

t.test('every query of the dashboard names exported metrics and their labels', async (t) => {
  const names = await exported(t);
  t.ok(
    names.has('turnhost_turns_running') && names.get('turnhost_egress_denials_total')?.has('reason'),
    'exposition read',
  );
  for (const panel of dashboard.panels) {
    t.ok(panel.targets.length > 0, `${panel.title}: has a query`);
    for (const target of panel.targets) t.same(unknownNames(target.expr, names), [], `${panel.title}: ${target.expr}`);
  }
  for (const variable of dashboard.templating.list)
    if (variable.definition) t.same(unknownNames(variable.definition, names), [], variable.definition);
  t.equal(new Set(dashboard.panels.map((p) => p.id)).size, dashboard.panels.length, 'panel ids are unique');
});

t.test('the dashboard covers what an operator of many hosts looks at', async (t) => {
  const queries = dashboard.panels.flatMap((p) => p.targets.map((x) => x.expr)).join('\n');
  for (const metric of [
    'turnhost_turns_running',
    'turnhost_turns_capacity',
    'turnhost_turn_launches_total',
    'turnhost_turn_launch_seconds_bucket',
    'turnhost_egress_denials_total',
    'turnhost_oom_kills_total',
    'turnhost_egress_bytes_total',
    'turnhost_worker_host_mode_available',
  ])
    t.match(queries, metric);
});

t.test('the check has teeth: a misspelt metric or a label no series carries is found', async (t) => {
  const names = await exported(t);
  t.same(unknownNames('sum(turnhost_turns_runing)', names), ['metric turnhost_turns_runing']);
  t.same(unknownNames('sum by (host) (turnhost_egress_denials_total)', names), ['label host']);
  t.same(unknownNames('turnhost_oom_kills_total{reason="x"}', names), ['label reason']);
});
