/**
 * v2 backend logic against a constructed tree of plain files: exact files and values written,
 * one subtree_control write per controller, stats parsing, kill/remove and reap.
 */
import t, { type Test } from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { hostCgroupFs, type CgroupFs } from '../../../cgroup/files.js';
import { createTurnCgroup, prepareCgroupSubtree } from '../../../cgroup/turn-cgroup.js';
import { type CgroupSubtree } from '../../../cgroup/types.js';
import { reapStaleTurnCgroups } from '../../../cgroup/reap.js';
import { cpuMaxValue } from '../../../cgroup/v2.js';
import type { CgroupLayout, CgroupController } from '../../../cgroup/types.js';

const LEAF_FILES: Record<string, string> = {
  'cgroup.procs': '',
  'cgroup.subtree_control': '',
  'cgroup.events': 'populated 0\nfrozen 0\n',
  'cgroup.kill': '',
  'memory.max': 'max\n',
  'memory.swap.max': 'max\n',
  'memory.oom.group': '0\n',
  'pids.max': 'max\n',
  'cpu.max': 'max 100000\n',
};

/** hostCgroupFs over a tmp dir, plus what the kernel would do: interface files, cgroup.kill. */
function fakeKernel(root: string): { cgfs: CgroupFs; writes: Array<[string, string]> } {
  const writes: Array<[string, string]> = [];
  const populate = (dir: string): void => {
    for (const [name, text] of Object.entries(LEAF_FILES)) fs.writeFileSync(path.join(dir, name), text);
  };
  const cgfs: CgroupFs = {
    ...hostCgroupFs,
    write(file, value) {
      writes.push([path.relative(root, file), value]);
      const written = hostCgroupFs.write(file, value);
      if (written.ok && path.basename(file) === 'cgroup.kill') {
        fs.writeFileSync(path.join(path.dirname(file), 'cgroup.procs'), '');
        fs.writeFileSync(path.join(path.dirname(file), 'cgroup.events'), 'populated 0\nfrozen 0\n');
      }
      return written;
    },
    mkdir(dir) {
      const made = hostCgroupFs.mkdir(dir);
      if (made.ok) populate(dir);
      return made;
    },
    rmdir(dir) {
      if (!fs.existsSync(dir)) return hostCgroupFs.rmdir(dir);
      fs.rmSync(dir, { recursive: true });
      return { ok: true };
    },
  };
  return { cgfs, writes };
}

function setup(t: Test, options: { controllers?: CgroupController[]; ownCgroup?: string; writable?: boolean } = {}) {
  const root = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'cg2-unit-')));
  t.teardown(() => fs.rmSync(root, { recursive: true, force: true }));
  const ownDir = path.join(root, 'turnhost.service');
  fs.mkdirSync(ownDir);
  for (const [name, text] of Object.entries(LEAF_FILES)) fs.writeFileSync(path.join(ownDir, name), text);
  fs.writeFileSync(path.join(ownDir, 'cgroup.procs'), '101\n102\n');
  const controllers = options.controllers ?? ['memory', 'pids', 'cpu'];
  const layout: CgroupLayout = {
    kind: 'v2',
    v2: {
      mountPoint: root,
      nsdelegate: true,
      ownCgroup: options.ownCgroup ?? '/turnhost.service',
      ownDir,
      writable: options.writable ?? true,
      controllers: ['cpuset', 'io', ...controllers],
    },
    v1: [],
    unavailable: {},
    backendFor: { memory: 'cgroup_v2', pids: 'cgroup_v2', cpu: 'cgroup_v2' },
  };
  const kernel = fakeKernel(root);
  return { root, ownDir, layout, ...kernel };
}

function prepared(t: Test, env: ReturnType<typeof setup>): CgroupSubtree {
  const result = prepareCgroupSubtree(env.layout, { fs: env.cgfs });
  if (!result.ok) throw new Error(`${result.reason}: ${result.detail}`);
  t.equal(result.subtree.backend, 'cgroup_v2');
  return result.subtree;
}

t.test('prepare moves our processes into a leaf and enables controllers one write each', async (t) => {
  const env = setup(t);
  const subtree = prepared(t, env);
  t.same(env.writes, [
    ['turnhost.service/supervisor/cgroup.procs', '101'],
    ['turnhost.service/supervisor/cgroup.procs', '102'],
    ['turnhost.service/cgroup.subtree_control', '+memory'],
    ['turnhost.service/cgroup.subtree_control', '+pids'],
    ['turnhost.service/cgroup.subtree_control', '+cpu'],
    ['turnhost.service/turns/cgroup.subtree_control', '+memory'],
    ['turnhost.service/turns/cgroup.subtree_control', '+pids'],
    ['turnhost.service/turns/cgroup.subtree_control', '+cpu'],
  ]);
  t.ok(fs.statSync(path.join(env.ownDir, 'turns')).isDirectory());
  if (subtree.backend === 'cgroup_v2') t.same(subtree.controllers, ['memory', 'pids', 'cpu']);
});

t.test('prepare refuses the cgroup2 root and an undelegated cgroup', async (t) => {
  for (const [options, reason] of [
    [{ ownCgroup: '/' }, 'cgroup_not_delegated'],
    [{ writable: false }, 'cgroup_not_delegated'],
  ] as const) {
    const env = setup(t, options);
    const result = prepareCgroupSubtree(env.layout, { fs: env.cgfs });
    t.equal(result.ok ? 'ok' : result.reason, reason, JSON.stringify(options));
    t.same(env.writes, [], 'nothing written');
  }
});

t.test('prepare refuses a symlink on the way to the own cgroup', async (t) => {
  const env = setup(t);
  const link = path.join(env.root, 'link');
  fs.symlinkSync(env.ownDir, link);
  const layout = { ...env.layout, v2: { ...env.layout.v2!, ownDir: link } };
  const result = prepareCgroupSubtree(layout, { fs: env.cgfs });
  t.equal(result.ok ? 'ok' : result.reason, 'cgroup_path_refused');
});

t.test('prepare refuses a symlink planted where the turns parent goes', async (t) => {
  const env = setup(t);
  fs.symlinkSync(env.root, path.join(env.ownDir, 'turns'));
  const result = prepareCgroupSubtree(env.layout, { fs: env.cgfs });
  t.equal(result.ok, false);
  if (!result.ok) t.match(result.detail, /is a symlink/);
});

t.test('a turn leaf gets exactly the limit files', async (t) => {
  const env = setup(t);
  const subtree = prepared(t, env);
  env.writes.length = 0;
  const created = createTurnCgroup(subtree, 'turn-1', {
    memory: 512 * 1024 * 1024,
    pids: 64,
    cpu: 1.5,
    processes: 10,
  });
  if (!created.ok) throw new Error(created.detail);
  const leaf = path.join(env.ownDir, 'turns', 'turn-1');
  t.same(created.cgroup.paths, [leaf]);
  t.equal(created.cgroup.backend, 'cgroup_v2');
  t.same(created.cgroup.applied, { memory: 512 * 1024 * 1024, pids: 64, cpu: 1.5 });
  t.same(created.cgroup.absent, {});
  t.same(env.writes, [
    ['turnhost.service/turns/turn-1/memory.max', '536870912'],
    ['turnhost.service/turns/turn-1/memory.swap.max', '0'],
    ['turnhost.service/turns/turn-1/memory.oom.group', '1'],
    ['turnhost.service/turns/turn-1/pids.max', '64'],
    ['turnhost.service/turns/turn-1/cpu.max', '150000 100000'],
  ]);
  t.equal(fs.readFileSync(path.join(leaf, 'cpu.max'), 'utf8'), '150000 100000');
  const again = createTurnCgroup(subtree, 'turn-1', {});
  t.equal(again.ok ? 'ok' : again.reason, 'cgroup_exists');
});

t.test('a controller the tree does not offer is reported absent, never written', async (t) => {
  const env = setup(t, { controllers: ['memory', 'pids'] });
  const subtree = prepared(t, env);
  t.match(subtree.unavailable.cpu, /controller cpu is not offered/);
  env.writes.length = 0;
  const created = createTurnCgroup(subtree, 't2', { pids: 5, cpu: 0.5 });
  if (!created.ok) throw new Error(created.detail);
  t.same(created.cgroup.applied, { pids: 5 });
  t.match(created.cgroup.absent.cpu, /controller cpu is not offered/);
  t.same(env.writes, [['turnhost.service/turns/t2/pids.max', '5']]);
});

t.test('invalid limits and turn ids are refused, naming the field', async (t) => {
  const env = setup(t);
  const subtree = prepared(t, env);
  const cases: Array<[string, Parameters<typeof createTurnCgroup>[2], RegExp]> = [
    ['ok-id', { memory: -1 }, /limits\.memory/],
    ['ok-id', { pids: 1.5 }, /limits\.pids/],
    ['ok-id', { cpu: Number.NaN }, /limits\.cpu/],
    ['../escape', {}, /turnId/],
  ];
  for (const [turnId, limits, detail] of cases) {
    const created = createTurnCgroup(subtree, turnId, limits);
    t.equal(created.ok, false);
    if (!created.ok) t.match(created.detail, detail);
  }
  t.notOk(fs.existsSync(path.join(env.ownDir, 'turns', 'ok-id')), 'no leaf created for refused limits');
  t.equal(cpuMaxValue(0.001), '1000 100000', 'quota never below the kernel minimum');
  t.equal(cpuMaxValue(0.2), '20000 100000');
});

t.test('stats come from cpu.stat, memory.peak, memory.events, pids.peak, pids.events', async (t) => {
  const env = setup(t);
  const subtree = prepared(t, env);
  const created = createTurnCgroup(subtree, 's', {});
  if (!created.ok) throw new Error(created.detail);
  const leaf = created.cgroup.paths[0]!;
  t.same(
    created.cgroup.stats(),
    {
      cpuUsec: null,
      nrThrottled: null,
      throttledUsec: null,
      memoryPeakBytes: null,
      oomKills: null,
      pidsPeak: null,
      pidsCurrent: null,
      pidsMaxEvents: null,
      limitHits: [],
    },
    'missing files read as null (memory.peak before 5.19)',
  );
  fs.writeFileSync(
    path.join(leaf, 'cpu.stat'),
    'usage_usec 123456\nuser_usec 100000\nsystem_usec 23456\nnr_periods 40\nnr_throttled 7\nthrottled_usec 90000\nnr_bursts 0\nburst_usec 0\n',
  );
  fs.writeFileSync(path.join(leaf, 'memory.events'), 'low 0\nhigh 0\nmax 12\noom 2\noom_kill 1\noom_group_kill 1\n');
  fs.writeFileSync(path.join(leaf, 'memory.peak'), '67108864\n');
  fs.writeFileSync(path.join(leaf, 'pids.peak'), '32\n');
  fs.writeFileSync(path.join(leaf, 'pids.current'), '3\n');
  fs.writeFileSync(path.join(leaf, 'pids.events'), 'max 250\n');
  t.same(created.cgroup.stats(), {
    cpuUsec: 123456,
    nrThrottled: 7,
    throttledUsec: 90000,
    memoryPeakBytes: 67108864,
    oomKills: 2,
    pidsPeak: 32,
    pidsCurrent: 3,
    pidsMaxEvents: 250,
    limitHits: ['memory_oom', 'pids_max', 'cpu_throttled'],
  });
  fs.writeFileSync(path.join(leaf, 'cpu.stat'), 'usage_usec 5\nnr_throttled 0\nthrottled_usec 0\n');
  fs.writeFileSync(path.join(leaf, 'memory.events'), 'oom 0\noom_kill 0\n');
  fs.writeFileSync(path.join(leaf, 'pids.events'), 'max 0\n');
  t.same(created.cgroup.stats().limitHits, [], 'zero counters are no hit');
});

t.test('kill writes cgroup.kill and waits for populated 0; remove deletes the leaf', async (t) => {
  const env = setup(t);
  const subtree = prepared(t, env);
  const created = createTurnCgroup(subtree, 'k', {});
  if (!created.ok) throw new Error(created.detail);
  const leaf = created.cgroup.paths[0]!;
  fs.writeFileSync(path.join(leaf, 'cgroup.procs'), '501\n502\n503\n');
  fs.writeFileSync(path.join(leaf, 'cgroup.events'), 'populated 1\nfrozen 0\n');
  t.notOk(created.cgroup.isEmpty());
  env.writes.length = 0;
  const killed = created.cgroup.kill();
  t.same(killed, { ok: true, killedProcesses: 3 });
  t.same(env.writes, [['turnhost.service/turns/k/cgroup.kill', '1']]);
  t.ok(created.cgroup.isEmpty());
  t.ok(created.cgroup.remove().ok);
  t.notOk(fs.existsSync(leaf));
});

t.test('reap reports a leaf that stays populated after cgroup.kill and keeps it', async (t) => {
  const env = setup(t);
  const subtree = prepared(t, env);
  const created = createTurnCgroup(subtree, 'stuck', {});
  if (!created.ok) throw new Error(created.detail);
  const leaf = created.cgroup.paths[0]!;
  const stubborn: CgroupFs = { ...env.cgfs, write: hostCgroupFs.write.bind(hostCgroupFs) };
  const subtreeStuck = { ...subtree, fs: stubborn };
  fs.writeFileSync(path.join(leaf, 'cgroup.events'), 'populated 1\nfrozen 0\n');
  const [entry] = reapStaleTurnCgroups(subtreeStuck);
  t.equal(entry?.turnId, 'stuck');
  t.equal(entry?.outcome.ok, false);
  t.match(entry?.outcome.ok === false ? entry.outcome.reason : '', 'cgroup_kill_incomplete');
  t.ok(fs.existsSync(leaf), 'a leaf that could not be emptied stays for the next boot');
});

t.test('reap kills, measures and removes every turn leaf and ignores other names', async (t) => {
  const env = setup(t);
  const subtree = prepared(t, env);
  for (const id of ['a', 'b']) {
    const created = createTurnCgroup(subtree, id, { pids: 4 });
    if (!created.ok) throw new Error(created.detail);
    fs.writeFileSync(path.join(created.cgroup.paths[0]!, 'cgroup.procs'), '900\n');
    fs.writeFileSync(path.join(created.cgroup.paths[0]!, 'pids.peak'), '4\n');
  }
  fs.mkdirSync(path.join(env.ownDir, 'turns', 'not.a.turn'));
  const reaped = reapStaleTurnCgroups(subtree);
  t.same(
    reaped.map((r) => [r.turnId, r.killedProcesses, r.outcome.ok, r.stats.pidsPeak]),
    [
      ['a', 1, true, 4],
      ['b', 1, true, 4],
    ],
  );
  const left = fs.readdirSync(path.join(env.ownDir, 'turns'), { withFileTypes: true }).filter((e) => e.isDirectory());
  t.same(
    left.map((e) => e.name),
    ['not.a.turn'],
  );
});
