/**
 * The v2 leaf operations against a child of this machine's real cgroup2 tree (hugetlb only:
 * no limits, but cgroup.events, cgroup.freeze and cgroup.kill are real).
 */
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { hostCgroupFs } from '../../../cgroup/files.js';
import { createTurnCgroup, removeCgroupSubtree } from '../../../cgroup/turn-cgroup.js';
import { type CgroupSubtreeV2 } from '../../../cgroup/types.js';
import { reapStaleTurnCgroups } from '../../../cgroup/reap.js';
import { ownV2Dir, pidAlive, spawnInCgroups } from './fixtures/host-cgroups.js';
import { until } from '../../support/until.js';

const ownDir = ownV2Dir();
const turnsDir = path.join(ownDir, `thtest-v2-${process.pid}`);
fs.mkdirSync(turnsDir);
const subtree: CgroupSubtreeV2 = {
  backend: 'cgroup_v2',
  ownDir,
  turnsDir,
  controllers: [],
  unavailable: { memory: 'controller memory is not offered here' },
  fs: hostCgroupFs,
};
t.teardown(() => {
  reapStaleTurnCgroups(subtree);
  removeCgroupSubtree(subtree);
});

const events = (dir: string): string => fs.readFileSync(path.join(dir, 'cgroup.events'), 'utf8');

t.test('populated, freeze and cgroup.kill on a real cgroup2 leaf', async (t) => {
  const created = createTurnCgroup(subtree, 'real', { memory: 64 * 1024 * 1024 });
  if (!created.ok) throw new Error(created.detail);
  const { cgroup } = created;
  t.teardown(() => {
    cgroup.kill();
    cgroup.remove();
  });
  t.same(cgroup.applied, {}, 'no controller here, nothing applied');
  t.match(cgroup.absent.memory, /not offered/);
  const [leaf] = cgroup.paths;
  if (leaf === undefined) throw new Error('no leaf');
  t.ok(cgroup.isEmpty(), 'empty before launch');

  const child = spawnInCgroups([leaf], 'sleep 1000 & exec sleep 1000');
  t.ok(await until(() => /populated 1/.test(events(leaf))), 'cgroup.events populated 1');
  t.notOk(cgroup.isEmpty());
  t.ok(await until(() => fs.readFileSync(path.join(leaf, 'cgroup.procs'), 'utf8').trim().split('\n').length === 2));

  fs.writeFileSync(path.join(leaf, 'cgroup.freeze'), '1');
  t.ok(await until(() => /frozen 1/.test(events(leaf))), 'cgroup.events frozen 1');

  const killed = cgroup.kill();
  t.same(killed, { ok: true, killedProcesses: 2 }, 'cgroup.kill killed both, frozen or not');
  t.match(events(leaf), /populated 0/);
  t.ok(cgroup.isEmpty());
  t.ok(await until(() => !pidAlive(child.pid ?? -1)), 'the process is gone');
  t.ok(cgroup.remove().ok);
  t.notOk(fs.existsSync(leaf), 'leaf removed');
});

t.test('reap empties and removes a populated real leaf', async (t) => {
  const created = createTurnCgroup(subtree, 'left', {});
  if (!created.ok) throw new Error(created.detail);
  const [leaf] = created.cgroup.paths;
  if (leaf === undefined) throw new Error('no leaf');
  spawnInCgroups([leaf], 'exec sleep 1000');
  t.ok(await until(() => /populated 1/.test(events(leaf))));
  const reaped = reapStaleTurnCgroups(subtree);
  t.same(
    reaped.map((r) => [r.turnId, r.killedProcesses, r.outcome.ok]),
    [['left', 1, true]],
  );
  t.notOk(fs.existsSync(leaf));
});
