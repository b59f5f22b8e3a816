/**
 * One worker's life, and the turn it serves, top to bottom.
 *
 * Theory of operation
 * -------------------
 * Four processes take part in a turn:
 *
 *   supervisor  uid `turnhost` (or root). Trusted. Holds the API, the database, the proxy.
 *   helper      identity-helper/, setuid root (run directly by a root supervisor). Trusts
 *               only its own root-owned config: the supervisor may ask, the config decides.
 *   worker      worker/main.ts, as the worker uid, no capabilities, no_new_privs, in new
 *               net/ipc/uts/mount/pid namespaces with the filesystem view. Our code, trusted
 *               until the command exists; after that only what the supervisor can read for
 *               itself (/proc, the cgroup) is believed over what the worker reports.
 *   command     the turn's program, as the worker uid, under the worker's seccomp filter.
 *               Never trusted.
 *
 * Their fds at each step:
 *
 *   supervisor → helper   0-2 the worker's stdio (pipes), 3 the protocol socket (the launch
 *                         descriptor is written there first), 4 the listener channel (a unix
 *                         SOCK_SEQPACKET pair; the supervisor keeps the other end). Empty env.
 *   helper → worker       the helper closes every fd but 0-4 and clears FD_CLOEXEC on them,
 *                         drops to the worker uid and execs the worker with the descriptor's env.
 *   worker                refuses any fd outside that rule, marks 3 close-on-exec, installs
 *                         seccomp, opens its egress listener (127.0.0.1 in its namespace), sends
 *                         a copy on 4, says `ready` on 3, then waits for `launch`.
 *   worker → command      the command gets 0-2 only (pipes, or a pty), in a new session, with the
 *                         proxy variables pointing at the listener the supervisor now serves.
 *
 * In shared_uid mode (no helper configured) the same helper binary runs unprivileged in its
 * `--shared` mode (shared-launcher.ts): the same namespaces, view and empty capability sets,
 * the worker keeping the supervisor's uid (inside a user namespace unless the supervisor is
 * root), with the same fds.
 *
 * The sequence (`workerLifecycle`, below) calls each mechanism once, in this order:
 *
 *   probe the mode → acquire (uid, temp, cgroup leaf, proxy, view keys, listener channel),
 *   each deferred onto one disposal scope → start the worker → ready → [a prepared worker
 *   waits here for a turn; a direct launch is claimed already] → check the claim (view and
 *   helper unchanged, live process attested) → bind the turn (its record) → serve the egress
 *   listener → launch → started → exit → dispose → record the result and its events.
 *
 * A prepared worker (prepared-workers.ts) is this same function paused at the claim.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fail, type Result } from '../../core/result.js';
import { createTurnCgroup } from '../../cgroup/turn-cgroup.js';
import { startTurnProxy } from '../../proxy/server.js';
import { profileFor } from '../../core/modes.js';
import { openRoot, type RootHandle } from '../fs/guard.js';
import type { HelperLocation } from '../identity/helper-client.js';
import { probeMode } from '../probes/index.js';
import type { LaunchEnvironment } from './launch-environment.js';
import {
  closeChannelEnd,
  openListenerChannel,
  receiveLaunchReport,
  receiveWorkerListener,
} from './listener-channel.js';
import type { OutputChannel } from './output.js';
import { preparedWorkerName, type PreparedWorkerPool } from './prepared-workers.js';
import { hostRefusal, Turn, type LaunchFailure, type LaunchOutcome } from './running-turn.js';
import { buildResult } from './turn-result.js';
import { commandEnv, resolveWorkerSpec, workerKey, type WorkerSpec } from './turn-request.js';
import type { TurnRequest } from './types.js';

/** A workspace turn's lease, as the manager resolved it from the workspace record. */
export interface WorkspaceLease {
  id: string;
  /** The leased uid, or null for a workspace made in shared_uid mode. */
  uid: number | null;
  path: string;
}
import { leaseUid } from './uid-pool.js';
import { turnViewKeys, viewFingerprint } from '../view/descriptor.js';
import { attestWorker, type AttestationExpectation } from './worker-attestation.js';
import { WorkerConnection } from './worker-connection.js';
import { DisposalScope } from './disposal-scope.js';
import { helperLocation, helperStamp, spawnWorker } from './worker-process.js';
import { holdTurnTmp, TURN_TMP_PATH } from './turn-tmp.js';

/** A worker that hangs in its boot must not hold a uid (and the pool's close) for ever. */
const READY_TIMEOUT_MS = 60_000;

/** What the claim of a worker came to. */
type ClaimOutcome =
  /** The worker took the turn: the turn's own promises tell the rest. */
  | { kind: 'bound' }
  /** No worker ever ran for the turn: refused (and recorded as the failure says). */
  | { kind: 'refused'; failure: LaunchFailure }
  /** The worker failed the claim's checks and was stopped; nothing was recorded for the turn. */
  | { kind: 'unusable'; detail: string };

/** A started worker, from its launch to its end; a prepared one waits at the claim. */
export interface Worker {
  name: string;
  key: string;
  /** Settles when the worker waits for its launch message, or failed to get there. */
  readonly ready: Promise<Result>;
  readonly ended: boolean;
  onEnd(listener: () => void): void;
  /** Gives the worker to `turn`; settles once it is bound to it, or refused or unusable. */
  claim(turn: Turn): Promise<ClaimOutcome>;
  /** Stops a worker no turn claimed, releasing what it holds. */
  retire(): Promise<void>;
}

/** The state one `workerLifecycle` call shares with its `Worker` handle. */
interface WorkerState {
  name: string;
  spec: WorkerSpec;
  /** Set for a worker started for a waiting turn: it may stop an idle prepared worker for a uid. */
  makeRoom: (() => Promise<boolean>) | null;
  claimed: Promise<Turn | null>;
  claim(turn: Turn | null): void;
  outcome(result: ClaimOutcome): void;
  readied(result: Result): void;
  exited(): void;
  connection: WorkerConnection | null;
  /** The turn's /tmp (its own tmpfs), once the helper reported it. */
  tmp: RootHandle | null;
  /** The turn the worker serves, once claimed. */
  turn: Turn | null;
}

export function startWorker(
  env: LaunchEnvironment,
  spec: WorkerSpec,
  name: string,
  options: { makeRoom?: () => Promise<boolean> } = {},
): Worker {
  let claim!: (turn: Turn | null) => void;
  let readied!: (result: Result) => void;
  let outcome: ((result: ClaimOutcome) => void) | null = null;
  const endListeners: Array<() => void> = [];
  let ended = false;
  const state: WorkerState = {
    name,
    spec,
    makeRoom: options.makeRoom ?? null,
    claimed: new Promise((resolve) => (claim = resolve)),
    claim: (turn) => claim(turn),
    outcome: (result) => outcome?.(result),
    readied: (result) => readied(result),
    exited: () => {
      ended = true;
      for (const listener of endListeners.splice(0)) listener();
    },
    connection: null,
    tmp: null,
    turn: null,
  };
  const ready = new Promise<Result>((resolve) => (readied = resolve));
  const life = workerLifecycle(env, state).catch((error: unknown) => {
    env.deps.logger.error('worker lifecycle failed', { worker: name, detail: (error as Error).stack ?? String(error) });
    state.readied(fail('internal', String(error)));
    state.outcome({ kind: 'refused', failure: hostRefusal(`the worker lifecycle failed: ${String(error)}`) });
  });
  return {
    name,
    key: workerKey(spec),
    ready,
    get ended() {
      return ended || (state.connection?.ended ?? false);
    },
    onEnd: (listener) => (ended ? listener() : endListeners.push(listener)),
    claim(turn) {
      const settled = new Promise<ClaimOutcome>((resolve) => (outcome = resolve));
      state.claim(turn);
      return settled;
    },
    async retire() {
      state.claim(null);
      await life;
    },
  };
}

/**
 * The one sequence every worker goes through, whether a turn asked for it now or the pool
 * prepared it for the next turn. Each step that can fail ends the worker here; what was
 * acquired is released by the scope, newest first.
 */
async function workerLifecycle(env: LaunchEnvironment, w: WorkerState): Promise<void> {
  const { deps } = env;
  const { spec, name } = w;
  const scope = new DisposalScope();
  const logger = deps.logger.child({ worker: name });
  /** Before a worker process exists, a failure refuses the turn that claimed it (if any yet). */
  const refuse = async (failure: LaunchFailure): Promise<void> => {
    w.readied(fail(failure.reason, failure.detail));
    await scope.dispose();
    const turn = await w.claimed;
    if (turn) w.outcome({ kind: 'refused', failure: turn.refuse(failure) });
    w.exited();
  };

  // 1. This mode's probe, now: a pass is never cached.
  const probe = await probeMode(deps.probeContext, spec.mode, 'turn');
  if (!probe.availability.available)
    return refuse(hostRefusal(probe.availability.requirement ?? 'the worker boundary is unavailable'));
  if (!env.cgroupSubtree.ok) return refuse(hostRefusal(`turn cgroups are unavailable: ${env.cgroupSubtree.detail}`));
  const identity = probe.identity;
  if (identity === undefined) return refuse(hostRefusal('the probe established no worker identity'));
  const separate = identity === 'separate_uid';
  const helper = separate ? helperLocation(deps.config) : env.sharedLauncher;
  if (!helper) return refuse(hostRefusal(env.sharedLauncherProblem ?? 'no identity helper to launch the worker'));
  const stampAtProbe = helperStamp(helper);

  // 2. Acquire: a uid to start the helper's search at, the cgroup leaf, the view, the listener channel.
  let uidHint: number | null = null;
  const lease = spec.lease;
  if (lease && separate !== (lease.uid !== null))
    return refuse(
      hostRefusal(
        separate
          ? `workspace ${lease.id} was made without an identity helper (shared_uid); it cannot run as a leased uid`
          : `workspace ${lease.id} holds a uid leased by the identity helper, which is not configured now`,
      ),
    );
  if (separate && lease) {
    uidHint = lease.uid;
  } else if (separate) {
    if (!probe.uidRange) return refuse(hostRefusal('the identity helper gave no verified uid range'));
    let pooled = leaseUid(env.uidPools, probe.uidRange);
    // Idle prepared workers hold uids too; a turn that arrives comes first.
    if (!pooled.ok && w.makeRoom && (await w.makeRoom())) pooled = leaseUid(env.uidPools, probe.uidRange);
    if (!pooled.ok) return refuse({ ok: false, reason: 'capacity_exhausted', detail: pooled.detail });
    const held = pooled;
    scope.defer(() => held.release());
    uidHint = pooled.uid;
  }
  const leaf = createTurnCgroup(env.cgroupSubtree.subtree, name, spec.limits);
  if (!leaf.ok) return refuse(hostRefusal(`the turn cgroup could not be created: ${leaf.detail}`));
  const cgroup = leaf.cgroup;
  scope.defer(() => {
    cgroup.kill();
    cgroup.remove();
  });
  const view = turnViewKeys(deps.config, spec.cwd, lease?.path);
  if (!view.ok) return refuse(hostRefusal(`the worker filesystem view: ${view.detail}`));
  const fingerprint = viewFingerprint(view);
  const channel = openListenerChannel();
  if (!channel.ok) return refuse(hostRefusal(`the listener channel: ${channel.detail}`));
  scope.defer(() => closeChannelEnd(channel.supervisorFd));

  // 3. Start the worker: the helper (separate_uid) or the shared_uid launcher, in the turn's
  //    cgroup, namespaces and view. The process this supervisor holds is the helper's monitor.
  const spawned = spawnWorker({
    helper,
    uidHint,
    ...(separate && lease ? { lease: lease.id } : {}),
    cgroupPaths: cgroup.paths,
    limits: spec.limits,
    cwd: spec.cwd,
    profile: profileFor(spec.mode),
    view: view,
    listenerChannelFd: channel.workerFd,
  });
  // The helper holds its end now (or never will).
  closeChannelEnd(channel.workerFd);
  if (!spawned.ok) return refuse(hostRefusal(spawned.detail));
  const monitorUid = separate ? 0 : (process.getuid?.() ?? 0);
  const connection = new WorkerConnection(spawned, monitorUid, () => cgroup.kill());
  w.connection = connection;
  connection.child.once('exit', () => w.exited());
  const killWorker = (): void => {
    const killed = cgroup.kill();
    if (killed.ok) return;
    logger.warn('cgroup kill incomplete; killing the worker through its monitor', { detail: killed.detail });
    connection.stop();
  };

  // 4. Ready: booted, fds checked, seccomp installed, egress listener handed over. Before the
  //    worker existed the helper reported the uid it got and the turn's /tmp (its own tmpfs).
  let ready = await connection.ready(READY_TIMEOUT_MS);
  const report = ready.ok ? receiveLaunchReport(channel.supervisorFd) : null;
  if (report && !report.ok) ready = report;
  let uid = report?.ok ? report.uid : (uidHint ?? process.getuid?.() ?? 0);
  if (report?.ok) {
    const turnTmp = holdTurnTmp(report.tmpFd, {
      events: deps.events,
      logger,
      turnOf: () => w.turn?.attribution ?? null,
    });
    // Disposed once the worker's processes are dead: nothing writes the tmpfs while it is measured.
    scope.defer(() => turnTmp.dispose());
    w.tmp = turnTmp.root;
    const expected = separate ? probe.uidRange && uidInRange(uid, probe.uidRange) : uid === process.getuid?.();
    if (!expected)
      ready = fail('launch_report_refused', `the helper reported uid ${uid}, outside what the probe verified`);
  } else {
    uid = uidHint ?? process.getuid?.() ?? 0;
  }
  const runtimeDir = path.join(env.runtimeDir, name);
  fs.mkdirSync(runtimeDir, { mode: 0o711 });
  scope.defer(() => fs.rmSync(runtimeDir, { recursive: true, force: true }));
  const proxy = await startTurnProxy({
    socketPath: path.join(runtimeDir, 'proxy.sock'),
    allowedPeerUid: uid,
    socketOwnership: env.supervisorIsRoot ? 'owner' : 'peer-cred-only',
    policy: spec.policy,
    caps: {
      maxConnections: deps.config.egress.maxConnections,
      maxBytes: deps.config.egress.maxBytes,
      idleTimeoutMs: deps.config.egress.idleTimeoutMs,
    },
    sink: deps.events,
    ownListeners: deps.ownListeners,
    // A prepared worker's proxy learns its turn at the claim, before the command can connect.
    turn: { sessionId: '', turnId: name, profile: profileFor(spec.mode), model: null },
    logger: logger.child({ component: 'proxy' }),
  });
  if (!proxy.ok) ready = fail('proxy_failed', `egress proxy: ${proxy.detail}`);
  else scope.defer(() => proxy.close());
  w.readied(ready);

  // 5. The claim: a direct launch is claimed already; a prepared worker waits here for a turn.
  const turn = await w.claimed;

  // 6. The claim's checks: the view's host entries and the helper unchanged since the launch,
  //    and the live process attested (credentials, namespaces, cgroup membership).
  const usable =
    ready.ok && turn
      ? checkClaim(connection, {
          monitorPid: connection.pid ?? -1,
          identity,
          uid,
          gid: separate ? uid : (process.getgid?.() ?? 0),
          groupsMayStay: !separate && uid !== 0,
          cgroupPaths: cgroup.paths,
          helper,
          stampAtProbe,
          view,
          fingerprint,
        })
      : ready;
  if (!turn || (ready.ok && !usable.ok) || !proxy.ok) {
    // The worker may have left its leaf (one way its attestation fails); it also ends itself
    // when its protocol fd closes, which covers a worker this supervisor may not signal.
    killWorker();
    connection.stop();
    await connection.closed();
    await scope.dispose();
    if (turn) w.outcome({ kind: 'unusable', detail: usable.ok ? (proxy.ok ? 'unused' : proxy.detail) : usable.detail });
    return;
  }

  // 7. Bind the turn: its record names this worker; its timeout runs; its output flows.
  w.turn = turn;
  proxy.attribute(turn.attribution, logger.child({ turnId: turn.record.id, component: 'proxy' }));
  turn.bind({ identity, uid, cgroupPaths: cgroup.paths, temp: w.tmp, connection, kill: killWorker });
  w.outcome({ kind: 'bound' });
  let refusal: string | null = null;

  // 8. Serve the egress listener the worker handed over, then 9. launch the command.
  if (ready.ok && !turn.stoppedFor()) {
    const received = receiveWorkerListener(channel.supervisorFd);
    const served = received.ok ? await proxy.serveWorkerListener(received.fd) : received;
    if (served.ok) {
      connection.launch({
        type: 'launch',
        v: 1,
        argv: turn.request.argv,
        cwd: turn.request.cwd,
        env: { ...commandEnv(deps.config, deps.env ?? process.env, turn.request), TMPDIR: TURN_TMP_PATH },
        tty: turn.request.tty ?? null,
        egress: true,
      });
    } else {
      refusal = served.detail;
      turn.refuseLaunch(served.detail, 'turn refused: the egress listener was not served');
    }
  }
  // A worker that never got ready, or was refused or stopped before its launch, waits no longer.
  if (!ready.ok || refusal !== null || turn.stoppedFor()) killWorker();

  // 10. Started.
  if (await connection.started()) turn.started({ cgroup: cgroup.paths[0] ?? null, limits: spec.limits });

  // 11. Exit. Background processes die with the turn, whatever the command did; a process that
  //     holds the output pipes open would otherwise keep them from draining.
  const report_ = await connection.exited();
  turn.workerExited();
  killWorker();
  await connection.closed();
  const result = buildResult({
    stopReason: turn.stoppedFor(),
    exitMessage: report_.exit,
    workerError: report_.error ?? (ready.ok ? null : ready.detail),
    refusal: refusal ?? report_.helperRefusal,
    workerExitCode: report_.processExitCode,
    stats: cgroup.stats(),
    durationMs: turn.elapsedMs(),
  });

  // 12. Dispose (the turn's workspace root last), 13. record the result and its events.
  await scope.dispose();
  // A workspace turn's result says what its workspace holds now that no process of it runs.
  if (lease && env.workspaceUsage) {
    const usage = await env.workspaceUsage(lease.id);
    if (usage.ok) result.workspace = { id: lease.id, bytes: usage.bytes, files: usage.files };
    else logger.warn('workspace usage unavailable', { workspaceId: lease.id, detail: usage.detail });
  }
  turn.release();
  turn.finish(result);
}

function uidInRange(uid: number, range: { first: number; count: number }): boolean {
  return uid >= range.first && uid < range.first + range.count;
}

interface ClaimFacts extends Omit<AttestationExpectation, 'procRoot'> {
  helper: HelperLocation;
  stampAtProbe: string;
  view: Parameters<typeof viewFingerprint>[0];
  fingerprint: string;
}

/** Whether a worker booted earlier may serve a turn now (docs/probes.md, "Worker attestation"). */
function checkClaim(connection: WorkerConnection, facts: ClaimFacts): Result {
  if (viewFingerprint(facts.view) !== facts.fingerprint)
    return fail('view_changed', 'the workspace or a protected path changed since the worker was launched');
  if (connection.pid === undefined || connection.ended)
    return fail('worker_attestation_failed', 'worker attestation: the worker is no longer running');
  if (helperStamp(facts.helper) !== facts.stampAtProbe) {
    return fail(
      'worker_attestation_failed',
      'worker attestation: the identity helper or its config changed since the worker was launched',
    );
  }
  return attestWorker(facts);
}

/** Starts a worker for the pool and waits until it is ready; null (logged) when it cannot be. */
export async function prepareWorker(env: LaunchEnvironment, spec: WorkerSpec): Promise<Worker | null> {
  const worker = startWorker(env, spec, preparedWorkerName());
  const ready = await worker.ready;
  if (ready.ok) return worker;
  env.deps.logger.info('no prepared worker', { mode: spec.mode, detail: ready.detail });
  await worker.retire();
  return null;
}

/**
 * A turn's launch: its spec and workspace root, then the worker prepared for its key if the
 * pool has one that passes the claim's checks, else a worker started for it now. Resolves once
 * the command started, or the turn ended or was refused before it did.
 */
export async function launchTurn(
  env: LaunchEnvironment,
  pool: PreparedWorkerPool<Worker, WorkerSpec>,
  request: TurnRequest & { turnId: string },
  output: OutputChannel,
  workspaceLease?: WorkspaceLease,
): Promise<LaunchOutcome> {
  const { deps } = env;
  const resolved = resolveWorkerSpec(deps.config, deps.env ?? process.env, request);
  if (!resolved.ok)
    return { ok: false, reason: 'invalid_request', detail: resolved.detail, field: resolved.field ?? 'limits' };
  const spec: WorkerSpec = workspaceLease
    ? { ...resolved.spec, lease: { id: workspaceLease.id, uid: workspaceLease.uid, path: workspaceLease.path } }
    : resolved.spec;
  const workspace = openRoot(request.cwd);
  if (!workspace.ok) return { ok: false, reason: 'invalid_request', detail: `cwd: ${workspace.detail}`, field: 'cwd' };
  const turn = new Turn(env, request, output, workspace);
  if (workspaceLease) {
    // The byte cap is measured at the start (and the end, in the result): a workspace over it
    // runs no turn until something removes files from it.
    const usage = env.workspaceUsage
      ? await env.workspaceUsage(workspaceLease.id)
      : fail('workspaces_unavailable', 'no workspace usage');
    if (!usage.ok) return turn.refuse(hostRefusal(`workspace ${workspaceLease.id} usage: ${usage.detail}`));
    const maxBytes = deps.config.workspaces.maxBytes;
    if (usage.bytes > maxBytes)
      return turn.refuse(
        hostRefusal(
          `workspace ${workspaceLease.id} holds ${usage.bytes} bytes, above its cap of ${maxBytes} (workspaces.maxBytes)`,
        ),
      );
    // A workspace's turns start their own worker: a prepared one runs under no lease.
    const claim = await startWorker(env, spec, turn.record.id).claim(turn);
    if (claim.kind === 'refused') return claim.failure;
    if (claim.kind === 'unusable') return turn.refuse(hostRefusal(claim.detail));
    return turn.launched;
  }

  const prepared = await pool.take(workerKey(spec));
  let claim = prepared ? await prepared.claim(turn) : null;
  if (prepared && claim?.kind === 'unusable')
    deps.logger.warn('prepared worker not used', { preparedWorker: prepared.name, detail: claim.detail });
  if (claim === null || claim.kind === 'unusable') {
    claim = await startWorker(env, spec, turn.record.id, { makeRoom: () => pool.evictOne() }).claim(turn);
  }
  if (claim.kind === 'refused') return claim.failure;
  if (claim.kind === 'unusable') {
    return turn.refuse(hostRefusal(claim.detail));
  }
  // The next turn's worker starts once this one has ended: it would compete with this turn's
  // own start for the CPU, and a long turn would hold a second uid for nothing.
  void turn.done.then(() => setImmediate(() => pool.prepareFor(spec)));
  return turn.launched;
}
