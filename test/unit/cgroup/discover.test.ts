import { spawnSync } from 'node:child_process';
import path from 'node:path';
import t from 'tap';
import { discoverCgroupLayout, mapMountPoint, parseCgroupMounts, parseProcCgroup } from '../../../cgroup/discover.js';
import { buildProbeTree, hybridTree, mountLine, v2DelegatedTree } from '../../support/probe-tree.js';

const NOBODY = 65534;
const repoRoot = path.resolve(import.meta.dirname, '../../..');

t.test('v2 delegated subtree with nsdelegate: every controller goes to cgroup v2', async (t) => {
  const tree = v2DelegatedTree();
  t.teardown(() => tree.cleanup());
  const layout = discoverCgroupLayout(tree);
  t.equal(layout.kind, 'v2');
  t.same(layout.v2, {
    mountPoint: tree.sysFsCgroup,
    nsdelegate: true,
    ownCgroup: '/system.slice/turnhost.service',
    ownDir: path.join(tree.sysFsCgroup, 'system.slice/turnhost.service'),
    writable: true,
    controllers: ['cpuset', 'cpu', 'io', 'memory', 'pids'],
  });
  t.same(layout.backendFor, { memory: 'cgroup_v2', pids: 'cgroup_v2', cpu: 'cgroup_v2' });
  t.same(layout.unavailable, {});
  t.same(layout.v1, []);
});

t.test(
  'started in <unit>/supervisor (DelegateSubgroup=supervisor): the unit cgroup is the delegated root',
  async (t) => {
    const tree = buildProbeTree({
      cgroup: ['0::/system.slice/turnhost.service/supervisor'],
      mountinfo: [mountLine(30, '/', '/sys/fs/cgroup', 'cgroup2', 'rw,nsdelegate')],
    });
    t.teardown(() => tree.cleanup());
    const unitDir = tree.cgroupDir('system.slice/turnhost.service', {
      'cgroup.controllers': 'cpu memory pids\n',
      'cgroup.procs': '',
      'cgroup.subtree_control': '',
    });
    tree.cgroupDir('system.slice/turnhost.service/supervisor', {
      'cgroup.controllers': '',
      'cgroup.procs': '1234\n',
      'cgroup.subtree_control': '',
    });
    const layout = discoverCgroupLayout(tree);
    t.equal(layout.v2?.ownCgroup, '/system.slice/turnhost.service');
    t.equal(layout.v2?.ownDir, unitDir);
    t.same(layout.v2?.controllers, ['cpu', 'memory', 'pids'], "the unit's controllers, not the empty leaf's");
    t.same(layout.backendFor, { memory: 'cgroup_v2', pids: 'cgroup_v2', cpu: 'cgroup_v2' });
  },
);

t.test('v2 subtree not delegated: checked for real by a child running as nobody', async (t) => {
  // Root passes every W_OK check (CAP_DAC_OVERRIDE), so the undelegated case runs the real
  // discovery in a child with uid 65534, for which the root-owned 0755/0644 tree is read-only.
  const tree = v2DelegatedTree();
  t.teardown(() => tree.cleanup());
  const script = `
    import { discoverCgroupLayout } from ${JSON.stringify(path.join(repoRoot, 'cgroup/discover.ts'))};
    process.stdout.write(JSON.stringify(discoverCgroupLayout(${JSON.stringify({ proc: tree.proc, sysFsCgroup: tree.sysFsCgroup })})));
  `;
  const child = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: repoRoot,
    uid: NOBODY,
    gid: NOBODY,
    encoding: 'utf8',
    env: { PATH: process.env.PATH, HOME: '/nonexistent' },
  });
  t.equal(child.status, 0, child.stderr);
  const layout = JSON.parse(child.stdout);
  const ownDir = path.join(tree.sysFsCgroup, 'system.slice/turnhost.service');
  t.equal(layout.v2.writable, false);
  t.same(layout.backendFor, {});
  t.same(layout.unavailable, {
    memory: `no delegated cgroup: ${ownDir} is not writable by uid ${NOBODY}`,
    pids: `no delegated cgroup: ${ownDir} is not writable by uid ${NOBODY}`,
    cpu: `no delegated cgroup: ${ownDir} is not writable by uid ${NOBODY}`,
  });
});

t.test('cgroup2 mounted without nsdelegate: no v2 backend, the reason names the mount', async (t) => {
  const tree = v2DelegatedTree('rw,memory_recursiveprot');
  t.teardown(() => tree.cleanup());
  const layout = discoverCgroupLayout(tree);
  t.equal(layout.v2?.nsdelegate, false);
  t.equal(layout.v2?.writable, true);
  t.same(layout.backendFor, {});
  t.equal(layout.unavailable.pids, `no nsdelegate on the cgroup2 mount ${tree.sysFsCgroup}`);
});

t.test('hybrid layout like the build machine: v1 backends, cgroup2 with only hugetlb', async (t) => {
  const tree = hybridTree();
  t.teardown(() => tree.cleanup());
  const layout = discoverCgroupLayout(tree);
  t.equal(layout.kind, 'hybrid');
  t.equal(layout.v2?.mountPoint, path.join(tree.sysFsCgroup, 'unified'));
  t.same(layout.v2?.controllers, ['hugetlb']);
  t.same(layout.backendFor, { memory: 'cgroup_v1', pids: 'cgroup_v1', cpu: 'cgroup_v1' });
  const memory = layout.v1.find((h) => h.controller === 'memory');
  t.equal(memory?.ownDir, path.join(tree.sysFsCgroup, 'memory/process_api/abc'));
  t.equal(memory?.memsw, true);
  t.equal(layout.v1.find((h) => h.controller === 'cpu')?.ownDir, path.join(tree.sysFsCgroup, 'cpu,cpuacct'));
  t.equal(layout.v1.find((h) => h.controller === 'pids')?.ownCgroup, '/');
  t.same(
    layout.v1Aux?.map((h) => [h.controller, h.ownDir, h.writable]),
    [['cpuacct', path.join(tree.sysFsCgroup, 'cpu,cpuacct'), true]],
  );
});

t.test('hybrid without memsw reports memsw false', async (t) => {
  const tree = hybridTree({ memsw: false });
  t.teardown(() => tree.cleanup());
  t.equal(discoverCgroupLayout(tree).v1.find((h) => h.controller === 'memory')?.memsw, false);
});

t.test('a controller in neither hierarchy is named with the file that lacks it', async (t) => {
  const tree = buildProbeTree({
    cgroup: ['0::/svc'],
    mountinfo: [mountLine(30, '/', '/sys/fs/cgroup', 'cgroup2', 'rw,nsdelegate')],
  });
  t.teardown(() => tree.cleanup());
  tree.cgroupDir('svc', { 'cgroup.controllers': 'cpu pids\n', 'cgroup.procs': '', 'cgroup.subtree_control': '' });
  const layout = discoverCgroupLayout(tree);
  t.same(layout.backendFor, { pids: 'cgroup_v2', cpu: 'cgroup_v2' });
  t.match(
    layout.unavailable.memory,
    `controller memory unavailable: not in ${path.join(tree.sysFsCgroup, 'svc/cgroup.controllers')}`,
  );
});

t.test('no cgroup filesystem at all', async (t) => {
  const tree = buildProbeTree({ cgroup: [], mountinfo: [] });
  t.teardown(() => tree.cleanup());
  const layout = discoverCgroupLayout(tree);
  t.equal(layout.kind, 'none');
  t.equal(layout.v2, null);
  t.match(layout.unavailable.pids, /no cgroup2 mount and no cgroup v1 pids hierarchy/);
});

t.test('a mount of a subtree (container cgroup namespace) maps the own cgroup beneath it', async (t) => {
  const tree = buildProbeTree({
    cgroup: ['0::/docker/abc/inner'],
    mountinfo: [mountLine(30, '/docker/abc', '/sys/fs/cgroup', 'cgroup2', 'rw,nsdelegate')],
  });
  t.teardown(() => tree.cleanup());
  tree.cgroupDir('inner', {
    'cgroup.controllers': 'memory pids cpu\n',
    'cgroup.procs': '',
    'cgroup.subtree_control': '',
  });
  const layout = discoverCgroupLayout(tree);
  t.equal(layout.v2?.ownDir, path.join(tree.sysFsCgroup, 'inner'));
  t.equal(layout.backendFor.memory, 'cgroup_v2');
});

t.test('parsers', async (t) => {
  t.same(parseProcCgroup('4:memory:/a\n2:cpu,cpuacct:/\n0::/b\n'), [
    { hierarchyId: 4, controllers: ['memory'], path: '/a' },
    { hierarchyId: 2, controllers: ['cpu', 'cpuacct'], path: '/' },
    { hierarchyId: 0, controllers: [], path: '/b' },
  ]);
  const mounts = parseCgroupMounts(
    '25 1 0:22 / /proc rw - proc proc rw\n' +
      mountLine(30, '/', '/sys/fs/cgroup/with\\040space', 'cgroup2', 'rw,nsdelegate'),
  );
  t.same(mounts, [
    { root: '/', mountPoint: '/sys/fs/cgroup/with space', fsType: 'cgroup2', superOptions: ['rw', 'nsdelegate'] },
  ]);
  t.equal(mapMountPoint('/sys/fs/cgroup/memory', '/sys/fs/cgroup'), '/sys/fs/cgroup/memory');
  t.equal(mapMountPoint('/sys/fs/cgroup/memory', '/tmp/t/cgroup'), '/tmp/t/cgroup/memory');
  t.equal(mapMountPoint('/sys/fs/cgroup', '/tmp/t/cgroup'), '/tmp/t/cgroup');
  t.equal(mapMountPoint('/run/cg', '/tmp/t/cgroup'), '/tmp/t/cgroup/run/cg');
});
