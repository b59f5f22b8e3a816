import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { createMemoryLogger } from '../../../../core/log.js';
import { fail, ok } from '../../../../core/result.js';
import { probeMode, runWorkerHostProbes, type ProbeContext } from '../../../../supervisor/probes/index.js';
import type { TurnhostConfig } from '../../../../supervisor/config/types.js';
import { fakeViewHelper } from '../../../support/fake-view-helper.js';
import type { HelperViewProbe } from '../../../../supervisor/probes/view.js';
import { packageRoot } from '../../../../supervisor/software.js';
import { hybridTree, probeConfig, v2DelegatedTree, type ProbeTree } from '../../../support/probe-tree.js';

const ROOT_IDS = { uid: 0, euid: 0 };
const USER_IDS = { uid: 998, euid: 998 };
const receipt = { workerUid: 200_001, uidRange: { first: 200_000, count: 100 }, helperVersion: '1' };

/**
 * A context whose launchers answer like the real ones on a host where they work: the shared
 * launcher's worker runs as the supervisor's uid, and every view holds. Tests that need a
 * launcher to fail override it.
 */
function context(tree: ProbeTree, overrides: Partial<TurnhostConfig> = {}, extra: Partial<ProbeContext> = {}) {
  const { logger, lines } = createMemoryLogger();
  const ids = extra.ids ?? ROOT_IDS;
  const ctx: ProbeContext = {
    config: probeConfig(tree, overrides),
    logger,
    ids,
    env: {},
    sharedProbe: async () => ok({ workerUid: ids.euid, userNamespace: ids.euid !== 0, helperVersion: '2' }),
    sharedView: fakeViewHelper().run,
    helperView: fakeViewHelper().run,
    ...extra,
  };
  return { ctx, lines };
}

function tree(t: { teardown(fn: () => void): void }, make: () => ProbeTree = v2DelegatedTree): ProbeTree {
  const built = make();
  t.teardown(() => built.cleanup());
  return built;
}

function qualifiedHelper(t: { teardown(fn: () => void): void }): string {
  const dir = fs.mkdtempSync('/run/turnhost-probe-helper-');
  fs.chmodSync(dir, 0o755);
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const helper = path.join(dir, 'identity-helper');
  fs.writeFileSync(helper, '', { mode: 0o755 });
  fs.chmodSync(helper, 0o4755);
  return helper;
}

const FULL_LIMITS = {
  memory: '512M',
  pids: 256,
  cpu: '1.5',
  processes: 512,
  open_files: 1024,
  file_size: '1G',
  data: '2G',
};

t.test('v2 delegated host, shared uid, root supervisor: available, warned, processes absent', async (t) => {
  const { ctx, lines } = context(tree(t), { limits: FULL_LIMITS });
  const status = await runWorkerHostProbes(ctx, 'boot');
  t.match(status.ordinary, { available: true, trigger: 'boot' });
  t.equal(status.ordinary?.requirement, undefined);
  t.equal(status.restricted, undefined, 'restricted is absent while disabled');
  t.equal(status.identity, 'shared_uid');
  t.match(
    status.rootServer?.warning,
    /runs as root .*workers run as uid 0 with no capabilities.*able to read a root-owned 0600 file.*root-owned unix sockets the view leaves visible/,
  );
  t.same(status.limits.absent, [
    {
      limit: 'processes',
      source: 'rlimit',
      reason: 'uid 0 for processes: workers run as uid 0, which RLIMIT_NPROC does not bind',
    },
  ]);
  t.same(
    status.limits.enforced.find((e) => e.limit === 'memory'),
    { limit: 'memory', source: 'cgroup', value: 512 * 1024 ** 2, backend: 'cgroup_v2' },
  );
  t.same(
    status.limits.enforced.find((e) => e.limit === 'data'),
    { limit: 'data', source: 'rlimit', value: 2 * 1024 ** 3 },
  );
  t.match(status.boundary.cgroup, {
    available: true,
    layout: 'v2',
    ownCgroup: '/system.slice/turnhost.service',
    nsdelegate: true,
    delegated: true,
  });
  t.equal(status.boundary.seccomp.available, true);
  t.equal(
    lines.filter((l) => JSON.parse(l).level === 'warn').length,
    0,
    'an available boot probe logs no WARN (the daemon logs the root warning)',
  );
});

t.test('hybrid host: limits enforced by the v1 backend', async (t) => {
  const { ctx } = context(tree(t, hybridTree), { limits: FULL_LIMITS });
  const status = await runWorkerHostProbes(ctx, 'check');
  t.equal(status.ordinary?.available, true);
  for (const limit of ['memory', 'pids', 'cpu']) {
    t.equal(status.limits.enforced.find((e) => e.limit === limit)?.backend, 'cgroup_v1', limit);
  }
  t.equal(status.boundary.cgroup.layout, 'hybrid');
});

t.test('no nsdelegate and no v1: modes unavailable naming the cgroup requirement', async (t) => {
  const { ctx, lines } = context(
    tree(t, () => v2DelegatedTree('rw')),
    { limits: FULL_LIMITS, modes: { restricted: { enabled: true } } },
  );
  const status = await runWorkerHostProbes(ctx, 'boot');
  const requirement = `a cgroup that can hold and kill the whole worker: no nsdelegate on the cgroup2 mount ${ctx.config.probeRoots.sysFsCgroup}`;
  t.match(status.ordinary, { available: false, requirement });
  t.match(status.restricted, { available: false, requirement });
  t.match(status.governed, { available: false, reason: 'worker_host_unavailable', detail: requirement });
  for (const limit of ['memory', 'pids', 'cpu']) {
    t.match(status.limits.absent.find((a) => a.limit === limit)?.reason, /no nsdelegate on the cgroup2 mount/);
  }
  t.ok(
    lines.some((l) => JSON.parse(l).msg === `worker mode ordinary unavailable: ${requirement}`),
    'boot logs the failed probe',
  );
});

t.test('seccomp actions missing: the first missing requirement wins', async (t) => {
  const built = tree(t);
  fs.writeFileSync(path.join(built.proc, 'sys/kernel/seccomp/actions_avail'), 'kill_thread trap allow\n');
  const { ctx } = context(built);
  const status = await runWorkerHostProbes(ctx, 'check');
  t.match(status.ordinary?.requirement, /^seccomp actions missing from .*actions_avail: errno, kill_process$/);
  fs.rmSync(path.join(built.proc, 'sys/kernel/seccomp/actions_avail'));
  const again = await runWorkerHostProbes(ctx, 'check');
  t.match(again.ordinary?.requirement, /^seccomp filters unavailable: .* cannot be read$/);
});

t.test('malformed TURNHOST_WORKER_LIMITS makes every limit absent with that reason', async (t) => {
  const { ctx } = context(
    tree(t),
    { limits: FULL_LIMITS, limitsDisabled: ['cpu'] },
    { env: { TURNHOST_WORKER_LIMITS: 'memory=256M,pids=many' } },
  );
  const status = await runWorkerHostProbes(ctx, 'check');
  t.same(status.limits.enforced, [], 'nothing applied partially');
  const reasons = Object.fromEntries(status.limits.absent.map((a) => [a.limit, a.reason]));
  t.equal(reasons.cpu, 'disabled by the operator');
  t.equal(reasons.memory, 'malformed TURNHOST_WORKER_LIMITS: pids must be a positive integer, got "many"');
  t.equal(reasons.open_files, reasons.memory);
  t.equal(reasons.tmp_size, reasons.memory);
  t.equal(status.limits.absent.length, 8);
});

t.test('TURNHOST_WORKER_LIMITS wins over the config; unconfigured and disabled are named', async (t) => {
  const { ctx } = context(
    tree(t),
    { limits: { memory: '1G', pids: 100 }, limitsDisabled: ['open_files'] },
    { ids: USER_IDS, env: { TURNHOST_WORKER_LIMITS: 'memory=256M' } },
  );
  const status = await runWorkerHostProbes(ctx, 'check');
  t.same(
    status.limits.enforced.map((e) => [e.limit, e.value]),
    [
      ['tmp_size', 512 * 1024 ** 2],
      ['memory', 256 * 1024 ** 2],
      ['pids', 100],
    ],
    'tmp_size is always enforced: unconfigured, it is the default size',
  );
  const reasons = Object.fromEntries(status.limits.absent.map((a) => [a.limit, a.reason]));
  t.same(reasons, {
    processes: 'not configured',
    data: 'not configured',
    file_size: 'not configured',
    open_files: 'disabled by the operator',
    cpu: 'not configured',
  });
  t.equal(status.rootServer, undefined, 'no root warning for a non-root supervisor');
});

t.test('unqualified helper: modes unavailable with that requirement, never shared_uid', async (t) => {
  const helper = qualifiedHelper(t);
  fs.chmodSync(helper, 0o755); // not setuid, and the supervisor is not root
  const { ctx } = context(
    tree(t),
    { identityHelper: { path: helper, configPath: null } },
    { ids: USER_IDS, helperProbe: async () => ok(receipt) },
  );
  const status = await runWorkerHostProbes(ctx, 'check');
  t.equal(status.identity, undefined, 'no identity is claimed without a receipt');
  t.equal(status.workerUid, undefined);
  t.match(status.ordinary?.requirement, /must be setuid root/);
  t.match(status.boundary.identityHelper, { qualified: false, path: helper, available: false });
  t.equal(status.governed.identity, undefined);
});

t.test('verified helper: separate uid with its workerUid, processes enforced', async (t) => {
  const helper = qualifiedHelper(t);
  const { ctx } = context(
    tree(t),
    { identityHelper: { path: helper, configPath: null }, limits: { processes: 64 } },
    { helperProbe: async () => ok(receipt) },
  );
  const status = await runWorkerHostProbes(ctx, 'check');
  t.equal(status.ordinary?.available, true);
  t.equal(status.identity, 'separate_uid');
  t.equal(status.workerUid, 200_001);
  t.equal(status.governed.workerUid, 200_001);
  t.same(status.limits.enforced, [
    { limit: 'processes', source: 'rlimit', value: 64 },
    { limit: 'tmp_size', source: 'tmpfs', value: 512 * 1024 ** 2 },
  ]);
  t.match(status.rootServer?.warning, /separate uid 200001, not root/);
});

t.test('governed status: protected paths and egress from the config', async (t) => {
  const { ctx } = context(tree(t), {
    fs: {
      ...probeConfig({ proc: '', sysFsCgroup: '' }).fs,
      protectedPaths: [{ root: '/srv/ws/', path: '.env', mode: 'mask_file', reason: 'secrets' }],
    },
    egress: { ...probeConfig({ proc: '', sysFsCgroup: '' }).egress, allowlist: ['api.example.com'] },
  });
  const status = await runWorkerHostProbes(ctx, 'check');
  t.same(status.governed.protectedPaths, [{ path: '/srv/ws/.env', mode: 'mask_file', reason: 'secrets' }]);
  t.same(status.governed.egress, {
    active: true,
    detail:
      'per-turn egress proxy with 1 allowed host pattern(s), 0 denied (an allow entry without a port allows ports 80 and 443 only; a deny entry without a port denies every port)',
  });
  t.match(status.governed, { available: true, hostExecution: 'worker', profile: 'governed' });
});

t.test('probeMode re-reads every time: a pass is never cached', async (t) => {
  const built = tree(t);
  const { ctx } = context(built, { limits: { pids: 10 } });
  const first = await probeMode(ctx, 'ordinary', 'turn');
  t.match(first.availability, { available: true, trigger: 'turn' });
  t.equal(first.cgroupLayout.backendFor.pids, 'cgroup_v2');
  t.same(first.limits.enforced, [
    { limit: 'tmp_size', source: 'tmpfs', value: 512 * 1024 ** 2 },
    { limit: 'pids', source: 'cgroup', value: 10, backend: 'cgroup_v2' },
  ]);
  fs.writeFileSync(path.join(built.proc, 'self/cgroup'), '0::/elsewhere\n');
  const second = await probeMode(ctx, 'ordinary', 'turn');
  t.equal(second.availability.available, false);
  t.match(
    second.availability.requirement,
    /a cgroup that can hold and kill the whole worker: controller pids unavailable/,
  );
  fs.writeFileSync(path.join(built.proc, 'self/cgroup'), '0::/system.slice/turnhost.service\n');
  t.equal(
    (await probeMode(ctx, 'ordinary', 'turn')).availability.available,
    true,
    'a known failure does not short-circuit',
  );
});

t.test('probeMode restricted while disabled names the config key', async (t) => {
  const { ctx } = context(tree(t));
  const probe = await probeMode(ctx, 'restricted', 'turn');
  t.match(probe.availability, { available: false, requirement: /modes\.restricted\.enabled/ });
});

t.test('workspace turns: absent unconfigured, then each missing requirement named', async (t) => {
  const probeTree = tree(t);
  const unconfigured = await runWorkerHostProbes(context(probeTree).ctx, 'check');
  t.equal(unconfigured.workspaceTurns, undefined, 'no workspaces configured: nothing to report');

  const base = fs.mkdtempSync('/run/turnhost-probe-workspaces-');
  t.teardown(() => fs.rmSync(base, { recursive: true, force: true }));
  const root = path.join(base, 'workspaces');
  const workspaces = (dir: string) => ({ workspaces: { ...probeConfig(probeTree).workspaces, root: dir } });

  const missing = await runWorkerHostProbes(context(probeTree, workspaces(root)).ctx, 'check');
  t.equal(missing.ordinary?.available, true, 'ordinary turns can still run');
  t.match(missing.workspaceTurns, { available: false, trigger: 'check', requirement: /workspaces root .* is missing/ });

  fs.symlinkSync('/tmp', root);
  const linked = await runWorkerHostProbes(context(probeTree, workspaces(root)).ctx, 'check');
  t.match(linked.workspaceTurns?.requirement, /not a directory \(a symbolic link is refused\)/);
  fs.unlinkSync(root);
  fs.mkdirSync(root, { mode: 0o711 });

  const shared = await runWorkerHostProbes(context(probeTree, workspaces(root)).ctx, 'check');
  t.match(shared.workspaceTurns, { available: true, trigger: 'check' }, 'shared_uid: a usable root is enough');
  t.equal(shared.workspaceTurns?.requirement, undefined);

  // separate_uid: the helper leases workspaces only in its own workspace_root directories.
  const helper = qualifiedHelper(t);
  // Named so the fake view leaves it out, as the real view hides the supervisor's own state.
  const helperConfig = path.join(path.dirname(helper), 'host-only');
  const separate = (text: string) => {
    fs.writeFileSync(helperConfig, text);
    return context(
      probeTree,
      { identityHelper: { path: helper, configPath: helperConfig }, ...workspaces(root) },
      { helperProbe: async () => ok(receipt) },
    );
  };
  const elsewhere = separate(`uid_range 200000 100\nworkspace_root /var/lib/other-workspaces\n`);
  const unleasable = await runWorkerHostProbes(elsewhere.ctx, 'boot');
  t.equal(unleasable.ordinary?.available, true, unleasable.ordinary?.requirement ?? 'ordinary available');
  t.match(unleasable.workspaceTurns, {
    available: false,
    requirement: new RegExp(
      `has no workspace_root line for ${root} \\(workspaces.root; it names /var/lib/other-workspaces\\)`,
    ),
  });
  t.ok(
    elsewhere.lines.some((line) => /workspace turns unavailable: .*no workspace_root line/.test(line)),
    'the boot probe logs it',
  );
  const leasable = await runWorkerHostProbes(separate(`uid_range 200000 100\nworkspace_root ${root}\n`).ctx, 'check');
  t.match(leasable.workspaceTurns, { available: true });

  const noOrdinary = await runWorkerHostProbes(
    context(tree(t, hybridTree), {
      ...workspaces(root),
      identityHelper: { path: '/nonexistent/helper', configPath: null },
    }).ctx,
    'check',
  );
  t.equal(noOrdinary.ordinary?.available, false);
  t.match(noOrdinary.workspaceTurns?.requirement, /^workspace turns run in mode ordinary, which is unavailable: /);
});

t.test("workspace turns: a workspace turn's view is built for real, and its failures named", async (t) => {
  const probeTree = tree(t);
  const base = fs.mkdtempSync('/run/turnhost-probe-workspaces-');
  t.teardown(() => fs.rmSync(base, { recursive: true, force: true }));
  const root = path.join(base, 'workspaces');
  fs.mkdirSync(root, { mode: 0o711 });
  const workspaces = { workspaces: { ...probeConfig(probeTree).workspaces, root } };

  const holding = fakeViewHelper();
  const held = await runWorkerHostProbes(context(probeTree, workspaces, { sharedView: holding.run }).ctx, 'check');
  t.match(held.workspaceTurns, { available: true });
  const request = holding.requests.find((r) => r.workspace?.startsWith(`${root}/`) === true);
  t.ok(request, 'a view was built for a workspace inside the workspaces root');
  t.equal(request?.profile, 'governed');
  t.ok(request?.hide?.includes(root), 'with the workspaces root hidden above it, as a turn has it');
  t.notOk(request?.paths.includes(packageRoot()), 'no path is kept for the worker, which runs from a descriptor');
  t.same(fs.readdirSync(root), [], 'the probe workspace is removed');

  // A view the helper cannot build (what a hidden parent did before nested masks).
  const refusing: HelperViewProbe = async (r) =>
    r.workspace?.startsWith(`${root}/`) === true
      ? fail('namespace_failed', 'view: mounting a tmpfs over /root to hide it: ENOSPC (a mount limit)')
      : holding.run(r);
  const refused = await runWorkerHostProbes(context(probeTree, workspaces, { sharedView: refusing }).ctx, 'check');
  t.equal(refused.ordinary?.available, true, 'ordinary turns outside workspaces still run');
  t.match(refused.workspaceTurns, {
    available: false,
    requirement:
      "a workspace turn's view cannot be built: view: mounting a tmpfs over /root to hide it: ENOSPC (a mount limit)",
  });

  const siblingShown = fakeViewHelper((entry) =>
    entry.path.startsWith(`${root}/`) && entry.path.endsWith('/host-only') ? { ...entry, exists: true } : entry,
  );
  const shown = await runWorkerHostProbes(
    context(probeTree, workspaces, { sharedView: siblingShown.run }).ctx,
    'check',
  );
  t.match(
    shown.workspaceTurns?.requirement,
    /^a workspace turn's view does not hold: a sibling of the workspace must stay hidden/,
  );

  const unwritable = fakeViewHelper((entry) =>
    entry.path.startsWith(`${root}/`) && entry.path.endsWith('/workspace') ? { ...entry, write: false } : entry,
  );
  const readOnly = await runWorkerHostProbes(
    context(probeTree, workspaces, { sharedView: unwritable.run }).ctx,
    'check',
  );
  t.match(
    readOnly.workspaceTurns?.requirement,
    /^a workspace turn's view does not hold: the workspace must be writable/,
  );

  const noViews = await runWorkerHostProbes(context(probeTree, workspaces, { sharedView: undefined }).ctx, 'check');
  t.equal(noViews.workspaceTurns?.available, false);
});

t.test('a view must keep its view_path lines visible, and needs no path for the worker', async (t) => {
  const probeTree = tree(t);
  // The worker is executed from a descriptor: a view hiding the package root still runs turns.
  const hiding = fakeViewHelper((entry) => (entry.path === packageRoot() ? { ...entry, empty: true } : entry));
  const status = await runWorkerHostProbes(context(probeTree, {}, { sharedView: hiding.run }).ctx, 'check');
  t.equal(status.ordinary?.available, true, status.ordinary?.requirement ?? '');

  // separate_uid: the helper config's view_path lines are what its views keep.
  const helper = qualifiedHelper(t);
  const helperConfig = path.join(path.dirname(helper), 'host-only');
  fs.writeFileSync(helperConfig, 'uid_range 200000 100\nview_path /opt/turnhost-code\n');
  const absent = fakeViewHelper((entry) => (entry.path === '/opt/turnhost-code' ? { ...entry, exists: false } : entry));
  const separate = await runWorkerHostProbes(
    context(
      probeTree,
      { identityHelper: { path: helper, configPath: helperConfig } },
      { helperProbe: async () => ok(receipt), helperView: absent.run },
    ).ctx,
    'check',
  );
  t.match(separate.ordinary?.requirement, /view_path\) must stay visible \(\/opt\/turnhost-code\)/);
});
