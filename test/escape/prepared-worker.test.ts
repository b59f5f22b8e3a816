/**
 * Attack class: a prepared worker (booted before its turn existed) serving a turn with a
 * boundary older or weaker than the one a freshly started worker would get. Each case changes
 * something between the worker's preparation and the claim and proves the turn never runs in
 * that worker: the view is re-fingerprinted and the live process attested at claim
 * (supervisor/turns/lifecycle.ts, supervisor/turns/worker-attestation.ts).
 */
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { createTurnHarness, runTurn } from '../support/turn-harness.js';
import { preparedWorker, workerProcesses } from '../support/prepared-workers.js';

const SECRET = 'prepared-worker-secret-sentinel';

const harness = await createTurnHarness({
  slot: 73,
  configure: (config) => {
    const workspace = config.turns.workspaceRoots[0] as string;
    config.fs.protectedPaths = [{ root: workspace, path: '.env', mode: 'mask_file', reason: 'secrets' }];
  },
});
t.teardown(() => harness.close());

function notUsedLogged(detail: RegExp): boolean {
  return harness.logLines.some((line) => line.includes('prepared worker not used') && detail.test(line));
}

t.test('a protected path created after the worker was prepared is still masked for the claiming turn', async (t) => {
  const envFile = path.join(harness.workspace, '.env');
  fs.rmSync(envFile, { force: true });
  await runTurn(harness, { argv: ['/bin/true'] });
  const prepared = await preparedWorker(harness);
  // Absent when the helper built the prepared view, so that view has no mask for it.
  fs.writeFileSync(envFile, `${SECRET}\n`, { mode: 0o644 });
  t.teardown(() => fs.rmSync(envFile, { force: true }));
  const run = await runTurn(harness, { argv: ['/bin/sh', '-c', 'id -u; cat .env 2>&1; true'] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  t.notMatch(run.stdout, SECRET, 'the secret is not readable');
  t.not(Number(run.stdout.split('\n')[0]), prepared.uid, 'the turn did not run in the stale worker');
  t.ok(notUsedLogged(/changed since the worker was launched/), 'the refusal to use it is logged');
});

t.test('a prepared worker moved out of its turn cgroup is not claimed and does not survive', async (t) => {
  await runTurn(harness, { argv: ['/bin/true'] });
  const prepared = await preparedWorker(harness);
  // Out of every turn leaf into its parent (the turn subtree): its processes would escape the
  // turn's limits and the cgroup kill.
  for (const line of fs.readFileSync(`/proc/${prepared.pid}/cgroup`, 'utf8').split('\n')) {
    const [, controllers, leaf] = line.split(':');
    if (!controllers || !leaf?.includes('/prepared_')) continue;
    fs.writeFileSync(path.join('/sys/fs/cgroup', controllers, path.dirname(leaf), 'cgroup.procs'), `${prepared.pid}\n`);
  }
  const run = await runTurn(harness, { argv: ['/bin/sh', '-c', 'id -u'] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  t.not(Number(run.stdout.trim()), prepared.uid, 'the turn did not run in the moved worker');
  t.ok(notUsedLogged(/is not in/), 'the attestation names the missing membership');
  t.notOk(
    workerProcesses(harness).some((p) => p.pid === prepared.pid),
    'the moved worker was killed',
  );
});

t.test('a prepared worker is not claimed across a change of the identity helper config', async (t) => {
  await runTurn(harness, { argv: ['/bin/true'] });
  const prepared = await preparedWorker(harness);
  const configPath = harness.config.identityHelper.configPath as string;
  // Same content, new inode: any replacement counts, whatever it says.
  const content = fs.readFileSync(configPath);
  fs.rmSync(configPath);
  fs.writeFileSync(configPath, content, { mode: 0o644 });
  const run = await runTurn(harness, { argv: ['/bin/sh', '-c', 'id -u'] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  t.not(Number(run.stdout.trim()), prepared.uid, 'the turn started its own worker under the config it now finds');
  t.ok(notUsedLogged(/identity helper or its config changed/));
});
