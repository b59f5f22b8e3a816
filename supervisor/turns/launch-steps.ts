/**
 * Steps 1 to 5 of a worker's life (lifecycle.ts, "Theory of operation"): from the probe to a
 * worker waiting for its launch message behind its egress proxy. Each step is one call into
 * its mechanism and defers the release of what it acquired onto the launch's scope at once.
 * Steps 1 to 3 refuse the turn (a `LaunchFailure`) while no worker process exists; from step 4
 * on a failure is carried in `ready`, for the claim to act on.
 */
import fs from 'node:fs';
import path from 'node:path';
import { createTurnCgroup } from '../../cgroup/turn-cgroup.js';
import { profileFor } from '../../core/modes.js';
import { fail, ok, type Result } from '../../core/result.js';
import { startTurnProxy } from '../../proxy/server.js';
import { compileBrokers } from '../../proxy/brokers.js';
import { readBrokerSpecs } from './turn-brokers.js';
import { probeMode } from '../probes/index.js';
import { closeChannelEnd, openListenerChannel, receiveLaunchReport } from './listener-channel.js';
import { hostRefusal } from './running-turn.js';
import type {
  AcquiredLaunch,
  BootedLaunch,
  LaunchStep,
  ProbedLaunch,
  ProxiedLaunch,
  SpawnedLaunch,
  TurnLaunch,
} from './turn-launch.js';
import { holdTurnTmp } from './turn-tmp.js';
import { leaseUid } from './uid-pool.js';
import { turnViewKeys, viewFingerprint } from '../view/descriptor.js';
import { WorkerConnection } from './worker-connection.js';
import { helperLocation, helperStamp, spawnWorker } from './worker-process.js';

/** A worker that hangs in its boot must not hold a uid (and the pool's close) for ever. */
const READY_TIMEOUT_MS = 60_000;

/** 1. This mode's probe, now (a pass is never cached): the identity, and the helper for it. */
export async function probeBoundary(launch: TurnLaunch): Promise<LaunchStep<ProbedLaunch>> {
  const { env, spec } = launch;
  const probe = await probeMode(env.deps.probeContext, spec.mode, 'turn');
  if (!probe.availability.available)
    return hostRefusal(probe.availability.requirement ?? 'the worker boundary is unavailable');
  if (!env.cgroupSubtree.ok) return hostRefusal(`turn cgroups are unavailable: ${env.cgroupSubtree.detail}`);
  const identity = probe.identity;
  if (identity === undefined) return hostRefusal('the probe established no worker identity');
  const separate = identity === 'separate_uid';
  const helper = separate ? helperLocation(env.deps.config) : env.sharedLauncher;
  if (!helper) return hostRefusal(env.sharedLauncherProblem ?? 'no identity helper to launch the worker');
  const stampAtProbe = helperStamp(helper);
  return ok({ ...launch, probe, identity, separate, helper, stampAtProbe, cgroupSubtree: env.cgroupSubtree.subtree });
}

/** 2. Acquire: a uid to start the helper's search at, the cgroup leaf, the view, the listener channel. */
export async function acquireHoldings(launch: ProbedLaunch): Promise<LaunchStep<AcquiredLaunch>> {
  const { spec, scope } = launch;
  const uidHint = await holdUidHint(launch);
  if (!uidHint.ok) return uidHint;
  const leaf = createTurnCgroup(launch.cgroupSubtree, launch.name, spec.limits);
  if (!leaf.ok) return hostRefusal(`the turn cgroup could not be created: ${leaf.detail}`);
  const cgroup = leaf.cgroup;
  scope.defer(() => {
    cgroup.kill();
    cgroup.remove();
  });
  const view = turnViewKeys(launch.env.deps.config, spec.cwd, spec.lease?.path);
  if (!view.ok) return hostRefusal(`the worker filesystem view: ${view.detail}`);
  const fingerprint = viewFingerprint(view);
  const channel = openListenerChannel();
  if (!channel.ok) return hostRefusal(`the listener channel: ${channel.detail}`);
  scope.defer(() => closeChannelEnd(channel.supervisorFd));
  return ok({ ...launch, uidHint: uidHint.uid, cgroup, view, fingerprint, channel });
}

/** separate_uid: the workspace's uid, or one leased from this supervisor's pool of the probed range. */
async function holdUidHint(launch: ProbedLaunch): Promise<LaunchStep<{ uid: number | null }>> {
  const { separate, env, worker } = launch;
  const lease = launch.spec.lease;
  if (lease && separate !== (lease.uid !== null))
    return hostRefusal(
      separate
        ? `workspace ${lease.id} was made without an identity helper (shared_uid); it cannot run as a leased uid`
        : `workspace ${lease.id} holds a uid leased by the identity helper, which is not configured now`,
    );
  if (!separate) return ok({ uid: null });
  if (lease) return ok({ uid: lease.uid });
  const range = launch.probe.uidRange;
  if (!range) return hostRefusal('the identity helper gave no verified uid range');
  let pooled = leaseUid(env.uidPools, range);
  // Idle prepared workers hold uids too; a turn that arrives comes first.
  if (!pooled.ok && worker.makeRoom && (await worker.makeRoom())) pooled = leaseUid(env.uidPools, range);
  if (!pooled.ok) return { ok: false, reason: 'capacity_exhausted', detail: pooled.detail };
  const held = pooled;
  launch.scope.defer(() => held.release());
  return ok({ uid: held.uid });
}

/**
 * 3. Start the worker: the helper (separate_uid) or the shared_uid launcher, in the turn's
 * cgroup, namespaces and view. The process this supervisor holds is the helper's monitor.
 */
export function spawnWorkerProcess(launch: AcquiredLaunch): LaunchStep<SpawnedLaunch> {
  const { separate, spec, cgroup, channel, worker } = launch;
  const lease = spec.lease;
  const spawned = spawnWorker({
    helper: launch.helper,
    uidHint: launch.uidHint,
    ...(separate && lease ? { lease: lease.id } : {}),
    cgroupPaths: cgroup.paths,
    limits: spec.limits,
    cwd: spec.cwd,
    profile: profileFor(spec.mode),
    view: launch.view,
    listenerChannelFd: channel.workerFd,
  });
  // The helper holds its end now (or never will).
  closeChannelEnd(channel.workerFd);
  if (!spawned.ok) return hostRefusal(spawned.detail);
  const monitorUid = separate ? 0 : (process.getuid?.() ?? 0);
  const connection = new WorkerConnection(spawned, monitorUid, () => cgroup.kill());
  worker.connection = connection;
  connection.child.once('exit', () => worker.exited());
  return ok({ ...launch, connection });
}

/**
 * 4. Ready: booted, fds checked, seccomp installed, egress listener handed over. Before the
 * worker existed the helper reported the uid it got and the turn's /tmp (its own tmpfs).
 */
export async function awaitReady(launch: SpawnedLaunch): Promise<BootedLaunch> {
  const { env, worker, scope } = launch;
  const ready = await launch.connection.ready(READY_TIMEOUT_MS);
  const report = ready.ok ? receiveLaunchReport(launch.channel.supervisorFd) : ready;
  if (!report.ok) return { ...launch, ready: report, uid: launch.uidHint ?? process.getuid?.() ?? 0, temp: null };
  const turnTmp = holdTurnTmp(report.tmpFd, {
    events: env.deps.events,
    logger: launch.logger,
    turnOf: () => worker.turn?.attribution ?? null,
  });
  // Disposed once the worker's processes are dead: nothing writes the tmpfs while it is measured.
  scope.defer(() => turnTmp.dispose());
  return { ...launch, ready: checkReportedUid(launch, report.uid, ready), uid: report.uid, temp: turnTmp.root };
}

/** The reported uid must lie in the range the probe verified (separate_uid) or be our own (shared_uid). */
function checkReportedUid(launch: SpawnedLaunch, uid: number, ready: Result): Result {
  const range = launch.probe.uidRange;
  const expected = launch.separate ? range && uidInRange(uid, range) : uid === process.getuid?.();
  if (expected) return ready;
  return fail('launch_report_refused', `the helper reported uid ${uid}, outside what the probe verified`);
}

function uidInRange(uid: number, range: { first: number; count: number }): boolean {
  return uid >= range.first && uid < range.first + range.count;
}

/** 5. The per-worker runtime directory and the egress proxy, its peer check given the uid the helper leased. */
export async function startEgressProxy(launch: BootedLaunch): Promise<ProxiedLaunch> {
  const { env, spec, scope, logger } = launch;
  const { egress } = env.deps.config;
  const runtimeDir = path.join(env.runtimeDir, launch.name);
  fs.mkdirSync(runtimeDir, { mode: 0o711 });
  scope.defer(() => fs.rmSync(runtimeDir, { recursive: true, force: true }));
  const specs = readBrokerSpecs(spec.brokers, env.deps.config, env.deps.env ?? process.env);
  const brokers = specs.ok ? compileBrokers(specs.specs) : specs;
  if (!brokers.ok) {
    const failed = fail('proxy_failed', `egress brokers: ${brokers.detail}`);
    return { ...launch, ready: failed, proxy: failed };
  }
  const proxy = await startTurnProxy({
    brokers: brokers.brokers,
    socketPath: path.join(runtimeDir, 'proxy.sock'),
    allowedPeerUid: launch.uid,
    socketOwnership: env.supervisorIsRoot ? 'owner' : 'peer-cred-only',
    policy: spec.policy,
    caps: { maxConnections: egress.maxConnections, maxBytes: egress.maxBytes, idleTimeoutMs: egress.idleTimeoutMs },
    sink: env.deps.events,
    ownListeners: env.deps.ownListeners,
    // A prepared worker's proxy learns its turn at the claim, before the command can connect.
    turn: { sessionId: '', turnId: launch.name, profile: profileFor(spec.mode), model: null },
    logger: logger.child({ component: 'proxy' }),
  });
  if (!proxy.ok) {
    const failed = fail('proxy_failed', `egress proxy: ${proxy.detail}`);
    return { ...launch, ready: failed, proxy: failed };
  }
  scope.defer(() => proxy.close());
  return { ...launch, proxy };
}
