/**
 * Configuration reload (SIGHUP → DaemonHandle.reload) in a real daemon: live keys apply to the
 * next turn, boot-bound keys are named for a restart, a configuration that no longer validates
 * changes nothing, and status says which configuration it describes. The turns are real
 * (shared_uid as root here); their egress goes to an origin on this host's loopback only.
 */
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { createMemoryLogger } from '../../../core/log.js';
import { daemonConnection, startTestDaemon } from '../../support/app-server.js';
import { stopTapInjectingIntoChildren } from '../../support/no-tap-inject.js';
import { apiRequest } from '../../support/served-api.js';
import { until } from '../../support/until.js';
import { deriveMaxConcurrent, hostCapacityFacts } from '../../../supervisor/config/capacity.js';

stopTapInjectingIntoChildren();
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-daemon-'));
fs.chmodSync(dir, 0o755);
const workspace = path.join(dir, 'workspace');
fs.mkdirSync(workspace, { mode: 0o777 });
const apiSocket = path.join(dir, 'api.sock');
const configFile = path.join(dir, 'turnhost.json');

const origin = http.createServer((_req, res) => res.end('hello from the origin\n'));
await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', () => resolve()));
const originPort = (origin.address() as { port: number }).port;

function writeConfig(egress: Record<string, unknown>, extra: Record<string, unknown> = {}): void {
  fs.writeFileSync(
    configFile,
    JSON.stringify({
      dataDir: path.join(dir, 'data'),
      listen: { tcp: null, socket: apiSocket, allowNonLoopback: false },
      turns: { workspaceRoots: [workspace], preparedWorkers: 1 },
      egress: { allowAddressRanges: ['127.0.0.1/32'], ...egress },
      ...extra,
    }),
  );
}

writeConfig({ allowlist: [] });
const { logger, lines } = createMemoryLogger('info');
const daemon = await startTestDaemon({ configPath: configFile, env: {}, logger });
t.teardown(async () => {
  await daemon.close();
  origin.close();
  fs.rmSync(dir, { recursive: true, force: true });
});
const connection = daemonConnection(daemon);

/** A request whose answer is checked against the API contract (a mismatch rejects). */
async function api(method: string, urlPath: string, body?: unknown): Promise<{ status: number; json: any }> {
  const answer = await apiRequest(connection, method, urlPath, body);
  return { status: answer.status, json: answer.body };
}

/** One turn whose command GETs the origin through its proxy; answers the turn's egress events. */
async function fetchOriginInATurn(): Promise<Array<{ kind: string; payload: Record<string, unknown> }>> {
  const script =
    "const port = process.env.HTTP_PROXY.split(':')[2];" +
    `require('http').get({ host: '127.0.0.1', port, path: 'http://localhost:${originPort}/', headers: { host: 'localhost:${originPort}' } }, (r) => { console.log(r.statusCode); r.resume(); })`;
  const created = await api('POST', '/api/turns', {
    sessionId: 'reload-test',
    mode: 'ordinary',
    cwd: workspace,
    argv: [process.execPath, '-e', script],
  });
  if (created.status !== 201) throw new Error(`create answered ${created.status}: ${JSON.stringify(created.json)}`);
  const id = created.json.turn.id as string;
  let finished = false;
  let failed: Error | undefined;
  await until(() => {
    void api('GET', `/api/turns/${id}`).then(
      (answer) => (finished = answer.json.turn.state === 'finished'),
      (error: unknown) => (failed = error instanceof Error ? error : new Error(String(error))),
    );
    return finished || failed !== undefined;
  }, 60_000);
  if (failed !== undefined) throw failed;
  const events = await api('GET', `/api/governance/events?turn=${id}`);
  return events.json.events.filter((e: { kind: string }) => e.kind.startsWith('egress_'));
}

t.test('status starts as the startup configuration', async (t) => {
  const status = await api('GET', '/api/status');
  t.equal(status.json.runtime.workerHost.governed.configurationView, 'startup');
});

t.test('status shows the turns that may run at once, derived from this host', async (t) => {
  const expected = deriveMaxConcurrent(hostCapacityFacts(), 2 * 1024 ** 3);
  const status = await api('GET', '/api/status');
  t.match(status.json.runtime.concurrency, {
    maxConcurrent: expected.value,
    configured: expected.value,
    source: 'derived',
    cappedBy: null,
    uidRangeSize: null,
    derived: { value: expected.value, cpuBound: expected.cpuBound, memoryLimitBytes: 2 * 1024 ** 3 },
  });
  t.match(
    status.json.runtime.concurrency.reason,
    /^\d+ turns at once: turns\.maxConcurrent derived from the host: min\(/,
  );
  t.equal(daemon.config.turns.maxConcurrent, expected.value, 'the value in force is the one shown');
});

t.test('a reload with a changed allowlist: the next turn obeys it', async (t) => {
  const before = await fetchOriginInATurn();
  t.match(before, [{ kind: 'egress_denial', payload: { host: 'localhost', reason: 'not_allowlisted' } }]);

  writeConfig(
    { allowlist: [`localhost:${originPort}`] },
    { turns: { workspaceRoots: [workspace], preparedWorkers: 2 } },
  );
  const reloaded = await daemon.reload();
  t.same(reloaded, { ok: true, applied: ['egress.allowlist'], needsRestart: ['turns.preparedWorkers'] });
  t.same(daemon.config.egress.allowlist, [`localhost:${originPort}`]);
  t.equal(daemon.config.turns.preparedWorkers, 1, 'a restart key keeps its running value');
  const logged = lines.map((line) => JSON.parse(line)).find((line) => line.msg === 'configuration reloaded');
  t.same(logged?.applied, ['egress.allowlist'], 'the log line names what changed');
  t.same(logged?.needsRestart, ['turns.preparedWorkers'], 'and what needs a restart');

  // The first turn left a worker prepared under the old policy; it must not serve this turn.
  const after = await fetchOriginInATurn();
  t.match(after, [{ kind: 'egress_connection', payload: { host: 'localhost', outcome: 'ok' } }]);
  t.notOk(
    after.some((e) => e.kind === 'egress_denial'),
    'no denial under the new allowlist',
  );
  const status = await api('GET', '/api/status');
  t.equal(
    status.json.runtime.workerHost.governed.configurationView,
    'live',
    'status describes the reloaded configuration',
  );
});

t.test('a configuration that no longer validates changes nothing and says why', async (t) => {
  fs.writeFileSync(configFile, JSON.stringify({ egress: { allowlist: 5 } }));
  const refused = await daemon.reload();
  t.match(refused, { ok: false, reason: 'config_invalid', detail: /egress\.allowlist: expected an array/ });
  t.same(daemon.config.egress.allowlist, [`localhost:${originPort}`], 'the running configuration stays');
  const line = lines.map((l) => JSON.parse(l)).find((l) => l.msg.startsWith('configuration reload refused'));
  t.equal(line?.level, 'error');
  t.match(line?.detail, /egress\.allowlist/);
  const metrics = String((await apiRequest(connection, 'GET', '/metrics')).body);
  t.match(metrics, /^turnhost_config_reloads_total\{result="refused"\} 1$/m);
  t.match(metrics, /^turnhost_config_reloads_total\{result="applied"\} 1$/m);
  t.match(metrics, /^turnhost_turn_launches_total\{outcome="started"\} 2$/m);
  t.match(metrics, /^turnhost_turn_launch_seconds_count 2$/m);
});

t.test('a reload that configures turns.maxConcurrent: status says it is configured', async (t) => {
  writeConfig({ allowlist: [`localhost:${originPort}`] }, { turns: { workspaceRoots: [workspace], maxConcurrent: 3 } });
  const reloaded = await daemon.reload();
  t.match(reloaded, { ok: true });
  t.equal(daemon.config.turns.maxConcurrent, 3);
  const status = await api('GET', '/api/status');
  t.match(status.json.runtime.concurrency, { maxConcurrent: 3, configured: 3, source: 'configured', cappedBy: null });
  t.match(
    status.json.runtime.concurrency.reason,
    /^3 turns at once: turns\.maxConcurrent configured as 3 \(the host's derived default would be \d+\)$/,
  );
});
