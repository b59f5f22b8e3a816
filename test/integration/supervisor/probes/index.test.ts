/**
 * The probes against this real machine, as root. Every expectation is read from the kernel
 * here, independently of the probe code (/proc/self/mountinfo, /proc/self/cgroup, the cgroup
 * files), so the test asserts that the probe agrees with the machine, whatever its layout.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { discoverCgroupLayout } from '../../../../cgroup/discover.js';
import type { CgroupController } from '../../../../cgroup/types.js';
import { createMemoryLogger } from '../../../../core/log.js';
import { runWorkerHostProbes } from '../../../../supervisor/probes/index.js';
import { probeConfig } from '../../../support/probe-tree.js';
import { HELPER_PATH, REPO_ROOT, WORKER_PROGRAM } from '../../../support/turn-harness.js';
import { runSharedProbe } from '../../../../supervisor/identity/helper-probe.js';
import { runHelperView } from '../../../../supervisor/identity/helper-view.js';
import { prepareSharedLauncher } from '../../../../supervisor/identity/shared-launcher.js';

const REAL_ROOTS = { proc: '/proc', sysFsCgroup: '/sys/fs/cgroup' };
const CONTROLLERS: readonly CgroupController[] = ['memory', 'pids', 'cpu'];

interface Mount {
  mountPoint: string;
  fsType: string;
  superOptions: string[];
}

/** The cgroup mounts under /sys/fs/cgroup, from mountinfo (fields after " - " are type, source, options). */
function cgroupMounts(): Mount[] {
  return fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .trim()
    .split('\n')
    .map((line) => {
      const [before, after] = line.split(' - ');
      const [fsType, , options] = (after ?? '').split(' ');
      return {
        mountPoint: (before ?? '').split(' ')[4] ?? '',
        fsType: fsType ?? '',
        superOptions: (options ?? '').split(','),
      };
    })
    .filter((m) => (m.fsType === 'cgroup' || m.fsType === 'cgroup2') && m.mountPoint.startsWith('/sys/fs/cgroup'));
}

/** controller → path of this process's cgroup in that v1 hierarchy; '' → its v2 cgroup. */
function ownCgroups(): Map<string, string> {
  const own = new Map<string, string>();
  for (const line of fs.readFileSync('/proc/self/cgroup', 'utf8').trim().split('\n')) {
    const [, list, cgroupPath] = line.split(':');
    for (const controller of (list ?? '').split(',')) own.set(controller, cgroupPath ?? '');
  }
  return own;
}

const mounts = cgroupMounts();
const v2Mount = mounts.find((m) => m.fsType === 'cgroup2');
const v1Mounts = mounts.filter((m) => m.fsType === 'cgroup');
const v1MountOf = (controller: string): Mount | undefined => v1Mounts.find((m) => m.superOptions.includes(controller));

t.test('the cgroup layout the probe reports is the one the kernel shows', async (t) => {
  const layout = discoverCgroupLayout(REAL_ROOTS);
  const expectedKind =
    v2Mount && v1Mounts.length === 0 ? 'v2' : v2Mount ? 'hybrid' : v1Mounts.length > 0 ? 'v1' : 'none';
  t.equal(
    layout.kind,
    expectedKind,
    `mountinfo shows ${v1Mounts.length} v1 hierarchies and ${v2Mount ? 'a' : 'no'} cgroup2 mount`,
  );
  if (v2Mount) {
    t.equal(layout.v2?.mountPoint, v2Mount.mountPoint, 'the cgroup2 mount point');
    t.equal(layout.v2?.nsdelegate, v2Mount.superOptions.includes('nsdelegate'), 'nsdelegate as the mount options say');
    const ownDir = path.join(v2Mount.mountPoint, ownCgroups().get('') ?? '/');
    const controllers = fs
      .readFileSync(path.join(ownDir, 'cgroup.controllers'), 'utf8')
      .trim()
      .split(/\s+/)
      .filter(Boolean);
    t.same(layout.v2?.controllers, controllers, "the own cgroup's controllers");
  }
  const own = ownCgroups();
  for (const controller of CONTROLLERS) {
    const mount = v1MountOf(controller);
    const hierarchy = layout.v1.find((h) => h.controller === controller);
    t.equal(
      hierarchy !== undefined,
      mount !== undefined,
      `${controller}: a v1 hierarchy is reported exactly when one is mounted`,
    );
    if (mount && hierarchy) {
      t.equal(hierarchy.mountPoint, mount.mountPoint, `${controller}: its mount point`);
      t.equal(hierarchy.ownCgroup, own.get(controller), `${controller}: the own cgroup from /proc/self/cgroup`);
    }
    const backend = layout.backendFor[controller];
    if (backend === 'cgroup_v1')
      t.ok(mount && hierarchy?.writable, `${controller}: enforced by v1 only where a writable v1 hierarchy holds it`);
    else if (backend === 'cgroup_v2')
      t.ok(layout.v2?.controllers.includes(controller), `${controller}: enforced by v2 only where v2 offers it`);
    else t.type(layout.unavailable[controller], 'string', `${controller}: unavailable, with a reason`);
  }
  const freezer = v1MountOf('freezer');
  t.equal(
    layout.v1Aux?.find((h) => h.controller === 'freezer')?.mountPoint,
    freezer?.mountPoint,
    'the freezer hierarchy, if mounted',
  );
  const memory = layout.v1.find((h) => h.controller === 'memory');
  if (memory)
    t.equal(memory.memsw, fs.existsSync(`${memory.ownDir}/memory.memsw.limit_in_bytes`), 'memsw as the files show');
});

t.test('the worker host status agrees with the layout and the kernel facilities', async (t) => {
  const { logger } = createMemoryLogger();
  const config = probeConfig(REAL_ROOTS, {
    limits: { memory: '512M', pids: 256, cpu: '1', processes: 512, open_files: 1024 },
  });
  const status = await runWorkerHostProbes({ config, logger, env: {} }, 'check');
  const layout = discoverCgroupLayout(REAL_ROOTS);
  t.equal(
    status.boundary.seccomp.available,
    /^Seccomp:/m.test(fs.readFileSync('/proc/self/status', 'utf8')),
    status.boundary.seccomp.detail,
  );
  t.equal(
    status.boundary.landlock.available,
    (status.boundary.landlock.abi ?? 0) >= 1,
    'Landlock is available exactly when an ABI was found',
  );
  t.equal(status.boundary.cgroup.layout, layout.kind, 'the cgroup facility names the layout');
  t.equal(
    status.boundary.cgroup.available,
    layout.backendFor.pids !== undefined,
    'the cgroup facility is available exactly when pids can be held',
  );
  for (const limit of CONTROLLERS) {
    const enforced = status.limits.enforced.find((e) => e.limit === limit);
    if (layout.backendFor[limit] === undefined) t.notOk(enforced, `${limit}: not claimed enforced without a backend`);
    else t.equal(enforced?.backend, layout.backendFor[limit], `${limit}: enforced by the backend discovery chose`);
  }
  t.equal(process.geteuid?.(), 0, 'these tests run as root');
  t.match(status.rootServer?.warning, /runs as root/, 'a root supervisor is warned about');
  t.equal(status.identity, undefined, 'no helper and no launcher probed: no identity is claimed');
  t.match(status.ordinary?.requirement, /shared_uid workers cannot be started: no shared_uid launcher/);
  t.match(
    status.limits.absent.find((a) => a.limit === 'processes')?.reason,
    /^uid 0 for processes/,
    'RLIMIT_NPROC does not bind uid 0',
  );
});

t.test(
  "shared_uid is claimed only from the launcher's probe; its views verified, the root warning from what they showed",
  async (t) => {
    const { logger } = createMemoryLogger();
    const config = probeConfig(REAL_ROOTS, { limits: { memory: '512M', pids: 256, cpu: '1' } });
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-probe-shared-'));
    t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
    const prepared = prepareSharedLauncher(
      dir,
      { cgroupRoots: [], workerExec: WORKER_PROGRAM, workerArgs: [], viewPaths: [REPO_ROOT] },
      HELPER_PATH,
    );
    if (!prepared.ok) throw new Error(prepared.detail);
    const status = await runWorkerHostProbes(
      {
        config,
        logger,
        env: {},
        sharedProbe: () => runSharedProbe(prepared.launcher),
        sharedView: (request) => runHelperView(prepared.launcher, request),
      },
      'check',
    );
    t.equal(status.identity, 'shared_uid');
    t.equal(status.workerUid, 0, 'the receipt names the supervisor uid, verified');
    t.match(status.ordinary, { available: true }, status.ordinary?.requirement ?? '');
    t.match(status.governed, { available: true, identity: 'shared_uid' });
    t.match(status.rootServer?.warning, /no capabilities and no_new_privs/);
    t.match(
      status.rootServer?.warning,
      /found the host tree read-only to them/,
      'the warning says what the view probe proved',
    );
    t.match(status.rootServer?.warning, /able to read a root-owned 0600 file/, 'and what it did not prevent');
  },
);
