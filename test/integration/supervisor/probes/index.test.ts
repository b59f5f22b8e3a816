/**
 * The probes against this real machine (Debian 12, hybrid cgroups, run as root). The expected
 * values are read from the kernel independently of the probe code where that is cheap.
 */
import fs from 'node:fs';
import t from 'tap';
import { discoverCgroupLayout } from '../../../cgroup/discover.js';
import { createMemoryLogger } from '../../../core/log.js';
import { runWorkerHostProbes } from '../../../supervisor/probes/index.js';
import { probeConfig } from '../../support/probe-tree.js';

const REAL_ROOTS = { proc: '/proc', sysFsCgroup: '/sys/fs/cgroup' };
const mountinfo = fs.readFileSync('/proc/self/mountinfo', 'utf8');
const isHybrid = / \/sys\/fs\/cgroup\/unified .* - cgroup2 /.test(mountinfo);

t.test('the hybrid layout is reported accurately', { skip: isHybrid ? false : 'not a hybrid-layout host' }, async (t) => {
  const layout = discoverCgroupLayout(REAL_ROOTS);
  t.equal(layout.kind, 'hybrid');
  t.equal(layout.v2?.mountPoint, '/sys/fs/cgroup/unified');
  t.same(layout.v2?.controllers, fs.readFileSync('/sys/fs/cgroup/unified/cgroup.controllers', 'utf8').trim().split(/\s+/));
  t.same(layout.v2?.controllers, ['hugetlb']);
  t.equal(layout.v2?.nsdelegate, false);
  const ownCgroups = Object.fromEntries(
    fs.readFileSync('/proc/self/cgroup', 'utf8').trim().split('\n').map((l) => l.split(':')).flatMap(([, list, p]) => (list ?? '').split(',').map((c) => [c, p])),
  );
  for (const controller of ['memory', 'pids', 'cpu'] as const) {
    const hierarchy = layout.v1.find((h) => h.controller === controller);
    t.ok(hierarchy, `${controller} is bound to a v1 hierarchy`);
    t.equal(hierarchy?.ownCgroup, ownCgroups[controller], `${controller} own cgroup from /proc/self/cgroup`);
    t.equal(hierarchy?.writable, true, `${controller} own cgroup writable by root`);
    t.equal(layout.backendFor[controller], 'cgroup_v1', `${controller} enforced by cgroup v1`);
  }
  t.equal(layout.v1Aux?.find((h) => h.controller === 'freezer')?.mountPoint, '/sys/fs/cgroup/freezer');
  t.equal(layout.v1.find((h) => h.controller === 'memory')?.memsw, fs.existsSync(`${layout.v1.find((h) => h.controller === 'memory')?.ownDir}/memory.memsw.limit_in_bytes`));
});

t.test('worker host status of this machine', async (t) => {
  const { logger } = createMemoryLogger();
  const config = probeConfig(REAL_ROOTS, { limits: { memory: '512M', pids: 256, cpu: '1', processes: 512, open_files: 1024 } });
  const status = await runWorkerHostProbes({ config, logger, env: {} }, 'check');
  t.equal(status.boundary.seccomp.available, true, status.boundary.seccomp.detail);
  t.equal(status.boundary.networkNamespaces.available, true, status.boundary.networkNamespaces.detail);
  t.equal(status.boundary.landlock.available, true, status.boundary.landlock.detail);
  t.ok((status.boundary.landlock.abi ?? 0) >= 1, 'Landlock ABI >= 1');
  t.equal(process.geteuid?.(), 0, 'these tests run as root');
  t.match(status.rootServer?.warning, /runs as root/);
  t.equal(status.identity, 'shared_uid');
  t.match(status.ordinary, { available: true, trigger: 'check' });
  if (isHybrid) {
    for (const limit of ['memory', 'pids', 'cpu']) {
      t.equal(status.limits.enforced.find((e) => e.limit === limit)?.backend, 'cgroup_v1', `${limit} via cgroup v1`);
    }
    t.match(status.boundary.cgroup, { available: true, layout: 'hybrid', nsdelegate: false });
  }
  t.match(status.limits.absent.find((a) => a.limit === 'processes')?.reason, /^uid 0 for processes/);
});
