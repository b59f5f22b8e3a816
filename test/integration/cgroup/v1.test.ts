/**
 * The v1 backend for real on this hybrid machine: turn leaves under the test process's own v1
 * cgroups hold a fork bomb at pids.max, OOM-kill a memory hog, throttle a spinner, and kill,
 * remove and reap leave nothing behind.
 */
import t from 'tap';
import fs from 'node:fs';
import { createTurnCgroup, prepareCgroupSubtree, removeCgroupSubtree } from '../../../cgroup/turn-cgroup.js';
import { type CgroupSubtree, type TurnCgroup } from '../../../cgroup/types.js';
import { reapStaleTurnCgroups } from '../../../cgroup/reap.js';
import { hostLayout, pidAlive, spawnInCgroups } from './fixtures/host-cgroups.js';
import { until } from '../../support/until.js';

const prepared = prepareCgroupSubtree(hostLayout(), { name: `thtest-v1-${process.pid}` });
if (!prepared.ok) throw new Error(`prepare failed: ${prepared.detail}`);
const subtree: CgroupSubtree = prepared.subtree;

// Whatever a failing test left: reap kills and removes every leaf, then the subtree goes.
t.teardown(() => {
  reapStaleTurnCgroups(subtree);
  removeCgroupSubtree(subtree);
});

function turnCgroup(turnId: string, limits: Parameters<typeof createTurnCgroup>[2]): TurnCgroup {
  const created = createTurnCgroup(subtree, turnId, limits);
  if (!created.ok) throw new Error(`${created.reason}: ${created.detail}`);
  return created.cgroup;
}

t.test('subtree sits under the own v1 cgroups in memory, pids, cpu, cpuacct, freezer', async (t) => {
  t.equal(subtree.backend, 'cgroup_v1');
  if (subtree.backend !== 'cgroup_v1') return;
  const own = fs.readFileSync('/proc/self/cgroup', 'utf8');
  for (const h of subtree.hierarchies) {
    const line = own.split('\n').find((l) => l.split(':')[1]?.split(',').includes(h.controller));
    t.ok(line, `membership line for ${h.controller}`);
    t.ok(h.turnsDir.endsWith(`${line?.split(':')[2]?.replace(/\/$/, '')}/thtest-v1-${process.pid}`), h.turnsDir);
  }
  t.same(subtree.hierarchies.map((h) => h.controller).sort(), ['cpu', 'cpuacct', 'freezer', 'memory', 'pids']);
});

t.test('a fork bomb is held at pids.max and kill leaves no process', async (t) => {
  const cgroup = turnCgroup('bomb', { pids: 32 });
  t.teardown(() => {
    cgroup.kill();
    cgroup.remove();
  });
  t.same(cgroup.applied, { pids: 32 });
  t.equal(cgroup.paths.length, 5);
  const child = spawnInCgroups(cgroup.paths, 'b(){ b|b& }; b; sleep 1000');
  t.ok(await until(() => (cgroup.stats().pidsMaxEvents ?? 0) > 0), 'forks were refused at pids.max');
  const stats = cgroup.stats();
  t.ok(stats.pidsCurrent !== null && stats.pidsCurrent <= 32, `pids.current ${stats.pidsCurrent} <= 32`);
  t.ok(stats.pidsPeak !== null && stats.pidsPeak <= 32, `pids.peak ${stats.pidsPeak} <= 32`);
  t.ok(stats.limitHits.includes('pids_max'));

  const killed = cgroup.kill();
  t.ok(killed.ok, 'kill succeeds');
  if (killed.ok) t.ok(killed.killedProcesses > 0, `killed ${killed.killedProcesses}`);
  t.ok(cgroup.isEmpty(), 'no process left in the turn cgroup');
  t.notOk(pidAlive(child.pid ?? -1), 'the bomb shell is gone');
  t.ok(cgroup.remove().ok);
  for (const dir of cgroup.paths) t.notOk(fs.existsSync(dir), `${dir} removed`);
});

t.test('a memory hog is OOM-killed at memory=64M', async (t) => {
  const cgroup = turnCgroup('hog', { memory: 64 * 1024 * 1024 });
  t.teardown(() => {
    cgroup.kill();
    cgroup.remove();
  });
  t.same(cgroup.applied, { memory: 64 * 1024 * 1024 });
  const memoryLeaf = cgroup.paths.find((p) => p.includes('/memory/'));
  t.equal(fs.readFileSync(`${memoryLeaf}/memory.limit_in_bytes`, 'utf8').trim(), String(64 * 1024 * 1024));
  t.equal(
    fs.readFileSync(`${memoryLeaf}/memory.memsw.limit_in_bytes`, 'utf8').trim(),
    String(64 * 1024 * 1024),
    'no swap',
  );
  const child = spawnInCgroups(cgroup.paths, 'tail /dev/zero');
  const exit = await new Promise<NodeJS.Signals | null>((resolve) =>
    child.on('exit', (_code, signal) => resolve(signal)),
  );
  t.equal(exit, 'SIGKILL', 'the hog died of SIGKILL');
  const stats = cgroup.stats();
  t.ok((stats.oomKills ?? 0) > 0, `oom_kill counter ${stats.oomKills}`);
  t.ok(stats.limitHits.includes('memory_oom'));
  t.ok(stats.memoryPeakBytes !== null && stats.memoryPeakBytes <= 64 * 1024 * 1024, `peak ${stats.memoryPeakBytes}`);
  t.ok(cgroup.kill().ok);
  t.ok(cgroup.remove().ok);
});

t.test('a spinner under cpu=0.2 is throttled', async (t) => {
  const cgroup = turnCgroup('spin', { cpu: 0.2 });
  t.teardown(() => {
    cgroup.kill();
    cgroup.remove();
  });
  const cpuLeaf = cgroup.paths.find((p) => p.includes('/cpu/'));
  t.equal(fs.readFileSync(`${cpuLeaf}/cpu.cfs_quota_us`, 'utf8').trim(), '20000');
  t.equal(fs.readFileSync(`${cpuLeaf}/cpu.cfs_period_us`, 'utf8').trim(), '100000');
  spawnInCgroups(cgroup.paths, 'while :; do :; done');
  t.ok(await until(() => (cgroup.stats().nrThrottled ?? 0) > 0), 'nr_throttled rises');
  const stats = cgroup.stats();
  t.ok(stats.limitHits.includes('cpu_throttled'));
  t.ok((stats.cpuUsec ?? 0) > 0, `cpu usage ${stats.cpuUsec} usec`);
  t.ok(cgroup.kill().ok);
  t.ok(cgroup.isEmpty());
  t.ok(cgroup.remove().ok);
});

t.test('reap kills, measures and removes a leaf left behind', async (t) => {
  const cgroup = turnCgroup('stale', { pids: 8 });
  const child = spawnInCgroups(cgroup.paths, 'sleep 1000 & sleep 1000');
  t.ok(await until(() => (cgroup.stats().pidsCurrent ?? 0) >= 2), 'two sleepers inside');
  const reaped = reapStaleTurnCgroups(subtree);
  t.equal(reaped.length, 1);
  const entry = reaped[0];
  t.equal(entry?.turnId, 'stale');
  t.same(entry?.paths, cgroup.paths);
  t.ok((entry?.killedProcesses ?? 0) >= 2, `killed ${entry?.killedProcesses}`);
  t.ok(entry?.outcome.ok, 'removed');
  t.ok(entry?.stats.pidsPeak !== null);
  for (const dir of cgroup.paths) t.notOk(fs.existsSync(dir), `${dir} removed`);
  t.notOk(pidAlive(child.pid ?? -1));
});

t.test('turn ids that are not [A-Za-z0-9_-]{1,64} are refused', async (t) => {
  for (const bad of ['../x', 'a/b', '', 'x'.repeat(65), 'cgroup.procs', '..']) {
    const created = createTurnCgroup(subtree, bad, {});
    t.equal(created.ok ? 'ok' : created.reason, 'invalid_turn_id', JSON.stringify(bad));
  }
});
