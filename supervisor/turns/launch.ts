/**
 * The launch sequence: the only way a worker starts. In order:
 *   probe this mode for this turn → limits (overrides only lower) → egress policy →
 *   worker uid → turn cgroup → egress proxy → environment filter → helper descriptor (or the
 *   same worker entry in shared_uid mode) → launch message on fd 3 → tracking → result.
 * Every step that can fail answers a typed refusal; resources taken so far are released in
 * reverse order.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fail, ok, type Result } from '../../core/result.js';
import { discoverCgroupLayout } from '../../cgroup/discover.js';
import type { CgroupLayout } from '../../cgroup/types.js';
import { reapStaleTurnCgroups } from '../../cgroup/reap.js';
import {
  createTurnCgroup,
  prepareCgroupSubtree,
  removeCgroupSubtree,
  type CgroupSubtree,
  type TurnCgroup,
} from '../../cgroup/turn-cgroup.js';
import { startTurnProxy, type TurnProxy } from '../../proxy/server.js';
import { buildTurnPolicy, type EgressPolicy } from '../../proxy/policy.js';
import {
  encodeMessage,
  LineDecoder,
  parseWorkerMessage,
  type ExitMessage,
  type ForwardableSignal,
  type LaunchMessage,
  type SupervisorMessage,
} from '../../worker/protocol.js';
import { listOpenFds, markCloseOnExec } from '../../worker/fds.js';
import {
  parseHelperRefusal,
  runHelperKill,
  runHelperReclaim,
  spawnHelperLaunch,
  type HelperLocation,
  type HelperProtectRule,
  type HelperRlimitName,
} from '../identity/helper-client.js';
import { lowerOnly, parseLimitSettings } from '../limits/parse.js';
import type { ResolvedLimits } from '../limits/types.js';
import { probeMode } from '../probes/index.js';
import { resolveDefaultLimits } from '../probes/limits.js';
import { serverTurnEvent, type TurnAttribution } from '../events/turn-event.js';
// issue 6 (fs): the turn's held roots for host writes, and the turn temp lifecycle.
import { closeRoot, openRoot } from '../fs/guard.js';
import type { HostWriteRoots, HostWriteTurn } from '../fs/host-write.js';
import { createTurnTemp, purgeTurnTemp, turnTempPurgePayload } from '../fs/turn-temp.js';
import type { IdentityMode, WorkerMode } from '../probes/types.js';
import { attestWorker } from '../probes/worker-attestation.js';
import { createPreparedWorkerPool, PREPARED_WORKER_PREFIX, type PreparedWorkerPool } from './prepared-workers.js';
import { filterSubprocessEnv, parseEnvExtra, ENV_EXTRA_CONTROL } from './env-filter.js';
import { turnViewKeys, viewFingerprint } from './view-descriptor.js'; // issue 6: masked worker view
import type { OutputChannel } from './output.js';
import type { TurnRecordStore } from './store.js';
import type { TurnManagerDeps } from './manager.js';
import { createUidPool, type UidPool } from './uid-pool.js';
import type {
  LimitHit,
  TurnAttachment,
  TurnCreateFailure,
  TurnRecord,
  TurnRequest,
  TurnResult,
  TurnStatus,
  TurnUsage,
} from './types.js';

const DEFAULT_COMMAND_PATH = '/usr/local/bin:/usr/bin:/bin';
const STDERR_TAIL_BYTES = 4096;
/**
 * The worker's own environment (the command's is in its launch message). libuv must not submit
 * work to io_uring: the seccomp filter the worker installs answers io_uring_* with EPERM.
 */
const WORKER_ENV = { PATH: DEFAULT_COMMAND_PATH, LANG: 'C.UTF-8', UV_USE_IO_URING: '0' };
const RLIMIT_FOR: Record<'processes' | 'data' | 'file_size' | 'open_files', HelperRlimitName> = {
  processes: 'nproc',
  data: 'data',
  file_size: 'fsize',
  open_files: 'nofile',
};

export interface LaunchEnvironment {
  deps: TurnManagerDeps;
  records: TurnRecordStore;
  /** Per-turn directories for proxy sockets: created exclusively, 0711. */
  runtimeDir: string;
  /** issue 6: parent of the per-turn temp directories (`turns.tempRoot`); supervisor-owned, 0711 so a worker uid can reach its own. */
  turnTempParent: string;
  /**
   * Chooses who changes the turn temp's owner: a root supervisor chowns and purges it itself; a
   * non-root one leaves it its own and has the identity helper hand it over and back.
   */
  supervisorIsRoot: boolean;
  cgroupSubtree: Result<{ subtree: CgroupSubtree }>;
  uidPools: Map<string, UidPool>;
  preparedWorkers: PreparedWorkerPool<StartedWorker, WorkerSpec>;
  close(): Promise<void>;
}

export interface RunningTurn {
  record: TurnRecord;
  done: Promise<TurnResult>;
  stop(reason: 'cancelled' | 'timeout'): void;
  attach(): TurnAttachment;
  /** issue 6: the held roots for host writes while the worker runs; null once it has exited. */
  hostWriteTarget(): { roots: HostWriteRoots; turn: HostWriteTurn } | null;
}

export type LaunchOutcome =
  | { ok: true; turn: RunningTurn }
  | ({ ok: false; reason: TurnCreateFailure; detail: string } & { field?: string; requirement?: string });

function helperLocation(deps: TurnManagerDeps): HelperLocation | null {
  const { path: helperPath, configPath } = deps.config.identityHelper;
  return helperPath ? { path: helperPath, configPath } : null;
}

/**
 * Whatever this process inherited without close-on-exec (a service manager's or a CI harness's
 * fds) must never reach a worker: shared_uid workers are spawned by this process directly.
 */
function markInheritedFdsCloseOnExec(): Result {
  const listed = listOpenFds();
  if (!listed.ok) return listed;
  const failed = listed.fds.filter(({ fd }) => fd > 2 && !markCloseOnExec(fd).ok).map(({ fd }) => fd);
  // The directory fd that listed /proc/self/fd is closed by now, so marking it fails harmlessly.
  const stillOpen = failed.filter((fd) => fs.existsSync(`/proc/self/fd/${fd}`));
  return stillOpen.length === 0 ? ok({}) : fail('fcntl_failed', `fds ${stillOpen.join(', ')} stay inheritable`);
}

/**
 * Under cgroup v1 the subtree sits in the supervisor's own v1 cgroups, which other processes
 * (another supervisor with another data directory, say) may share: the name is derived from the
 * data directory so that one supervisor never reaps another's turns. A v2 supervisor owns its
 * delegated cgroup alone and uses the backend's default name.
 */
export function turnSubtreeName(layout: CgroupLayout, dataDir: string): string | undefined {
  if (!Object.values(layout.backendFor).includes('cgroup_v1')) return undefined;
  return `turnhost-${createHash('sha256').update(path.resolve(dataDir)).digest('hex').slice(0, 12)}`;
}

export async function prepareLaunchEnvironment(
  deps: TurnManagerDeps,
  records: TurnRecordStore,
): Promise<LaunchEnvironment> {
  const inherited = markInheritedFdsCloseOnExec();
  if (!inherited.ok) deps.logger.warn('inherited fds could not be marked close-on-exec', { detail: inherited.detail });
  const runtimeDir = fs.mkdtempSync(path.join(deps.runtimeParent ?? os.tmpdir(), 'turnhost-run-'));
  fs.chmodSync(runtimeDir, 0o711);
  const turnTempParent = deps.config.turns.tempRoot;
  prepareTurnTempRoot(turnTempParent, deps.logger);
  const layout = discoverCgroupLayout(deps.config.probeRoots);
  const name = deps.cgroupSubtreeName ?? turnSubtreeName(layout, deps.config.dataDir);
  const cgroupSubtree = prepareCgroupSubtree(layout, name === undefined ? {} : { name });
  if (!cgroupSubtree.ok)
    deps.logger.warn('turn cgroups unavailable', { reason: cgroupSubtree.reason, detail: cgroupSubtree.detail });
  const env: LaunchEnvironment = {
    deps,
    records,
    runtimeDir,
    turnTempParent,
    supervisorIsRoot: deps.supervisorIsRoot ?? process.geteuid?.() === 0,
    cgroupSubtree,
    uidPools: new Map(),
    preparedWorkers: createPreparedWorkerPool<StartedWorker, WorkerSpec>({
      capacity: deps.config.turns.preparedWorkers,
      idleMs: deps.config.turns.preparedWorkerIdleSeconds * 1000,
      keyOf: workerKey,
      prepare: (spec) => prepareWorker(env, spec),
      stop: stopUntrackedWorker,
      logger: deps.logger.child({ component: 'prepared-workers' }),
    }),
    async close() {
      await env.preparedWorkers.close();
      fs.rmSync(runtimeDir, { recursive: true, force: true });
      // Every turn has ended by now; an empty subtree is removed and made again at the next start.
      if (cgroupSubtree.ok) removeCgroupSubtree(cgroupSubtree.subtree);
    },
  };
  return env;
}

/**
 * The temp root is stable (the helper config names it): created 0711 when missing; an existing
 * one is tightened to 0711 only when it is a directory of ours. Anything else (a symlink,
 * another owner) is left for createTurnTemp to refuse turn by turn, naming the requirement.
 */
function prepareTurnTempRoot(dir: string, logger: TurnManagerDeps['logger']): void {
  try {
    fs.mkdirSync(dir, { mode: 0o711 });
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') {
      logger.warn('turn temp root unavailable', { dir, detail: (error as Error).message });
      return;
    }
  }
  const st = fs.lstatSync(dir);
  if (st.isDirectory() && st.uid === process.geteuid?.()) fs.chmodSync(dir, 0o711);
}

/**
 * At boot: turns a dead supervisor left running are marked interrupted, and every turn cgroup
 * left behind is killed, measured and removed, with a `worker_recovered` event each.
 */
export async function recoverInterruptedTurns(env: LaunchEnvironment): Promise<void> {
  const { deps, records } = env;
  const unfinished = records.unfinished();
  // A turn that claimed a prepared worker runs in a leaf named after the worker, not the turn.
  const turnOfLeaf = new Map(unfinished.flatMap(({ turn, cgroupPaths }) => cgroupPaths.map((leaf) => [leaf, turn] as const)));
  if (env.cgroupSubtree.ok) {
    for (const reaped of reapStaleTurnCgroups(env.cgroupSubtree.subtree)) {
      const turn = reaped.paths.map((leaf) => turnOfLeaf.get(leaf)).find((found) => found !== undefined);
      deps.events.append({
        sessionId: turn?.sessionId ?? null,
        // A prepared worker no turn had claimed belongs to no turn.
        turnId: turn?.id ?? (isPreparedWorkerName(reaped.turnId) ? null : reaped.turnId),
        kind: 'worker_recovered',
        actor: 'server',
        model: null,
        profile: turn?.profile ?? null,
        payload: {
          cgroup: reaped.paths[0] ?? '',
          paths: reaped.paths,
          usage: reaped.stats,
          killedProcesses: reaped.killedProcesses,
          outcome: reaped.outcome,
        },
      });
    }
  }
  for (const { turn } of unfinished) {
    records.update(
      finishedWithoutRun(turn, 'interrupted', 'the supervisor stopped while this turn ran; its processes were killed at the next start'),
    );
    deps.logger.warn('turn interrupted by a supervisor restart', { turnId: turn.id });
  }
}

/** A turn that ends without a worker result (refused, or interrupted by a supervisor restart). */
function finishedWithoutRun(turn: TurnRecord, status: 'launch_refused' | 'interrupted', detail: string): TurnRecord {
  const endedAt = new Date().toISOString();
  const result: TurnResult = {
    status,
    exitCode: null,
    signal: null,
    durationMs: Date.parse(endedAt) - Date.parse(turn.createdAt),
    usage: emptyUsage(),
    limitHits: [],
    detail,
  };
  return { ...turn, state: 'finished', endedAt, result };
}

function emptyUsage(): TurnUsage {
  return {
    userCpuUsec: null,
    systemCpuUsec: null,
    maxRssKiB: null,
    cgroupCpuUsec: null,
    memoryPeakBytes: null,
    pidsPeak: null,
    oomKills: null,
  };
}

function profileFor(mode: WorkerMode): 'governed' | 'strict' {
  return mode === 'ordinary' ? 'governed' : 'strict';
}


function attributionOf(record: TurnRecord, request: TurnRequest): TurnAttribution {
  return { sessionId: record.sessionId, turnId: record.id, profile: record.profile, model: request.model ?? null };
}

/** Releases what a launch has taken so far, newest first. */
class Releases {
  private steps: Array<() => void | Promise<void>> = [];
  add(step: () => void | Promise<void>): void {
    this.steps.push(step);
  }
  async run(): Promise<void> {
    for (const step of this.steps.reverse()) {
      try {
        await step();
      } catch {
        // Release is best effort per step; one failure must not keep the others from running.
      }
    }
    this.steps = [];
  }
}

function resolveTurnLimits(
  deps: TurnManagerDeps,
  overrides: TurnRequest['limits'],
): Result<{ limits: ResolvedLimits }> & { field?: string } {
  const defaults = resolveDefaultLimits(deps.config, deps.env ?? process.env);
  if (!defaults.ok) return defaults;
  const disabled = new Set(deps.config.limitsDisabled);
  const enabled: ResolvedLimits = Object.fromEntries(
    Object.entries(defaults.limits).filter(([name]) => !disabled.has(name as keyof ResolvedLimits)),
  );
  if (!overrides) return ok({ limits: enabled });
  const parsed = parseLimitSettings(overrides, 'limits');
  if (!parsed.ok) return { ...parsed, field: 'limits' };
  const lowered = lowerOnly(enabled, parsed.limits);
  if (!lowered.ok) return { ...lowered, field: 'limits' };
  return lowered;
}

function commandEnv(deps: TurnManagerDeps, request: TurnRequest): Record<string, string> {
  const extra = [...deps.config.turns.envExtra, ...parseEnvExtra((deps.env ?? process.env)[ENV_EXTRA_CONTROL]).names];
  const { env } = filterSubprocessEnv(request.env ?? {}, extra);
  return {
    PATH: DEFAULT_COMMAND_PATH,
    HOME: request.cwd,
    LANG: 'C.UTF-8',
    ...(request.tty ? { TERM: 'xterm-256color' } : {}),
    ...env,
  };
}

function acquireUid(env: LaunchEnvironment, range: { first: number; count: number }): Result<{ uid: number; pool: UidPool }> {
  const key = `${range.first}:${range.count}`;
  let pool = env.uidPools.get(key);
  if (!pool) {
    pool = createUidPool(range);
    env.uidPools.set(key, pool);
  }
  const taken = pool.acquire();
  return taken.ok ? ok({ uid: taken.uid, pool }) : taken;
}

/** Records a refusal: a finished turn with `launch_refused`, and a `worker_host_refusal` event. */
function refuseTurn(env: LaunchEnvironment, record: TurnRecord, request: TurnRequest, requirement: string): LaunchOutcome {
  env.records.insert(finishedWithoutRun(record, 'launch_refused', requirement), []);
  env.deps.events.append(
    serverTurnEvent(attributionOf(record, request), 'worker_host_refusal', { mode: record.mode, requirement, trigger: 'turn' }),
  );
  env.deps.logger.warn('turn refused: worker host unsupported', { turnId: record.id, requirement });
  return { ok: false, reason: 'worker_host_unsupported', detail: requirement, requirement };
}

function invalid(detail: string, field: string): LaunchOutcome {
  return { ok: false, reason: 'invalid_request', detail, field };
}

/** What a worker is started for: a prepared worker serves only a turn with the same key. */
export interface WorkerSpec {
  mode: WorkerMode;
  cwd: string;
  limits: ResolvedLimits;
  egressAdditions: readonly string[];
  policy: EgressPolicy;
}

export function workerKey(spec: Pick<WorkerSpec, 'mode' | 'cwd' | 'limits' | 'egressAdditions'>): string {
  const limits = Object.entries(spec.limits).sort(([a], [b]) => a.localeCompare(b));
  return JSON.stringify([spec.mode, spec.cwd, limits, [...spec.egressAdditions].sort()]);
}

/**
 * A worker from the helper's launch to its exit. Everything the helper binds at launch (uid,
 * cgroup leaf, rlimits, view with the proxy socket and the turn temp) belongs to it; the turn
 * that claims it adds its workspace root and its attribution.
 */
export interface StartedWorker {
  /** Name of its cgroup leaf, turn temp and runtime directory: the turn id, or `prepared_...`. */
  name: string;
  key: string;
  spec: WorkerSpec;
  identity: IdentityMode;
  uid: number;
  cgroup: TurnCgroup;
  proxy: TurnProxy;
  temp: NonNullable<HostWriteRoots['temp']>;
  spawned: { child: ChildProcess; protocol: net.Socket };
  helper: HelperLocation | null;
  /** Identifies the helper binary and its config at launch: a prepared worker is not claimed across a change. */
  helperStamp: string;
  /** The view's host entries at launch (view-descriptor.ts): a prepared worker is not claimed across a change. */
  view: { workspace: string; protect: HelperProtectRule[]; fingerprint: string };
  releases: Releases;
  /** The claiming turn; null while the worker waits (its releases then record no turn events). */
  turn: TurnAttribution | null;
  /** Helper and worker stderr before a turn took the worker (a helper refusal is read from it). */
  stderrTail: Buffer;
}

type StartFailure = { ok: false; refusal: string } | { ok: false; outcome: LaunchOutcome };

function helperStamp(helper: HelperLocation | null): string {
  if (!helper) return '';
  const stamp = (file: string | null | undefined): string => {
    if (file === undefined || file === null) return '-';
    try {
      const st = fs.statSync(file);
      return `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}:${st.mode}:${st.uid}`;
    } catch {
      return 'missing';
    }
  };
  return `${stamp(helper.path)}|${stamp(helper.configPath)}`;
}

/**
 * Starts a worker up to the point where it waits for its launch message: this mode's probe →
 * worker uid → turn temp → turn cgroup → egress proxy → view → helper (or the shared_uid
 * worker). `attribution` names the turn for a direct launch; a prepared worker gets it at claim.
 */
async function startWorker(
  env: LaunchEnvironment,
  spec: WorkerSpec,
  name: string,
  attribution: TurnAttribution | null,
): Promise<{ ok: true; worker: StartedWorker } | StartFailure> {
  const { deps } = env;
  const probe = await probeMode(deps.probeContext, spec.mode, 'turn');
  if (!probe.availability.available)
    return { ok: false, refusal: probe.availability.requirement ?? 'the worker boundary is unavailable' };
  if (!env.cgroupSubtree.ok) return { ok: false, refusal: `turn cgroups are unavailable: ${env.cgroupSubtree.detail}` };

  const releases = new Releases();
  const helper = helperLocation(deps);
  const stampAtProbe = helperStamp(helper);
  let workerUid: number;
  if (probe.identity === 'separate_uid') {
    const range = probe.uidRange;
    if (!helper || !range) return { ok: false, refusal: 'the identity helper gave no verified uid range' };
    let taken = acquireUid(env, range);
    // Idle prepared workers hold uids too; a turn that arrives comes first.
    if (!taken.ok && attribution !== null && (await env.preparedWorkers.evictOne())) taken = acquireUid(env, range);
    if (!taken.ok) return { ok: false, outcome: { ok: false, reason: 'capacity_exhausted', detail: taken.detail } };
    workerUid = taken.uid;
    const { pool } = taken;
    releases.add(() => pool.release(workerUid));
  } else {
    workerUid = process.getuid?.() ?? 0;
  }

  const worker: Partial<StartedWorker> & { turn: TurnAttribution | null } = { turn: attribution };
  // Created before the cgroup so that its release (reclaim, purge) runs after the cgroup kill.
  const tempOwnership = probe.identity === 'separate_uid' && helper && !env.supervisorIsRoot ? { helper } : null;
  const temp = createWorkerTemp(env, name, workerUid, tempOwnership, () => worker.turn, releases);
  if (!temp.ok) {
    await releases.run();
    return { ok: false, outcome: temp.outcome };
  }

  const leaf = createTurnCgroup(env.cgroupSubtree.subtree, name, spec.limits);
  if (!leaf.ok) {
    await releases.run();
    return { ok: false, refusal: `the turn cgroup could not be created: ${leaf.detail}` };
  }
  const cgroup = leaf.cgroup;
  releases.add(() => {
    cgroup.kill();
    cgroup.remove();
  });

  const runtimeDir = path.join(env.runtimeDir, name);
  fs.mkdirSync(runtimeDir, { mode: 0o711 });
  releases.add(() => fs.rmSync(runtimeDir, { recursive: true, force: true }));
  const profile = profileFor(spec.mode);
  const proxy = await startTurnProxy({
    socketPath: path.join(runtimeDir, 'proxy.sock'),
    allowedPeerUid: workerUid,
    socketOwnership: env.supervisorIsRoot ? 'owner' : 'peer-cred-only',
    policy: spec.policy,
    caps: {
      maxConnections: deps.config.egress.maxConnections,
      maxBytes: deps.config.egress.maxBytes,
      idleTimeoutMs: deps.config.egress.idleTimeoutMs,
    },
    sink: deps.events,
    turn: attribution ?? { sessionId: '', turnId: name, profile, model: null },
    logger: deps.logger.child({ ...(attribution ? { turnId: attribution.turnId } : { preparedWorker: name }), component: 'proxy' }),
  });
  if (!proxy.ok) {
    await releases.run();
    return { ok: false, outcome: { ok: false, reason: 'worker_host_unsupported', detail: `egress proxy: ${proxy.detail}`, requirement: proxy.detail } };
  }
  releases.add(() => proxy.close());

  const rlimits: Partial<Record<HelperRlimitName, number>> = {};
  for (const [limit, helperName] of Object.entries(RLIMIT_FOR)) {
    const value = spec.limits[limit as keyof typeof RLIMIT_FOR];
    if (value !== undefined) rlimits[helperName] = value;
  }
  const view = turnViewKeys(deps.config, spec.cwd);
  if (!view.ok) {
    await releases.run();
    return { ok: false, refusal: `the worker filesystem view: ${view.detail}` };
  }

  const fingerprint = viewFingerprint(view);
  let spawned: { child: ChildProcess; protocol: net.Socket };
  try {
    spawned =
      probe.identity === 'separate_uid' && helper
        ? spawnHelperLaunch(helper, {
            uid: workerUid,
            gid: workerUid,
            cgroups: cgroup.paths,
            rlimits,
            hostname: 'turnhost',
            cwd: spec.cwd,
            env: WORKER_ENV,
            profile,
            workspace: view.workspace,
            temp: temp.temp.path,
            socket: proxy.socketPath,
            protect: view.protect,
          })
        : spawnSharedWorker(deps, spec.cwd);
  } catch (error) {
    await releases.run();
    const detail = `worker spawn: ${(error as Error).message}`;
    return { ok: false, outcome: { ok: false, reason: 'worker_host_unsupported', detail, requirement: (error as Error).message } };
  }
  // Whoever tracks the worker adds its own handling; an unheard 'error' would end this process.
  spawned.child.on('error', (error) => deps.logger.warn('worker process error', { worker: name, detail: error.message }));
  if (probe.identity !== 'separate_uid') {
    const joined = joinCgroupDirect(cgroup, spawned.child.pid);
    if (!joined.ok) {
      spawned.child.kill('SIGKILL');
      await releases.run();
      return { ok: false, refusal: joined.detail };
    }
  }
  Object.assign(worker, {
    name,
    key: workerKey(spec),
    spec,
    identity: probe.identity,
    uid: workerUid,
    cgroup,
    proxy,
    temp: temp.temp,
    spawned,
    helper,
    helperStamp: stampAtProbe,
    view: { ...view, fingerprint },
    releases,
    stderrTail: Buffer.alloc(0),
  });
  return { ok: true, worker: worker as StartedWorker };
}

/**
 * SIGKILL for a worker process this supervisor may signal: a non-root supervisor cannot signal
 * another uid, and a refused kill would surface as an 'error' event on the child.
 */
function killIfPermitted(child: ChildProcess, workerUid: number): void {
  const euid = process.geteuid?.();
  if (euid === 0 || euid === workerUid) child.kill('SIGKILL');
}

/** The live check of this turn's worker (supervisor/probes/worker-attestation.ts). */
function attestStartedWorker(worker: StartedWorker): Result {
  const { child } = worker.spawned;
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null)
    return fail('worker_attestation_failed', 'worker attestation: the worker is no longer running');
  if (helperStamp(worker.helper) !== worker.helperStamp)
    return fail('worker_attestation_failed', 'worker attestation: the identity helper or its config changed since the worker was launched');
  return attestWorker({ pid: child.pid, identity: worker.identity, uid: worker.uid, gid: worker.uid, cgroupPaths: worker.cgroup.paths });
}

/** The host entries the prepared worker's view was built from are the ones there now. */
function viewStillCurrent(worker: StartedWorker): Result {
  if (viewFingerprint(worker.view) === worker.view.fingerprint) return ok({});
  return fail('view_changed', 'the workspace or a protected path changed since the worker was launched');
}

/** Stops a worker no turn tracks (a prepared one, or one whose start failed) and releases what it held. */
export async function stopUntrackedWorker(worker: StartedWorker): Promise<void> {
  const { child } = worker.spawned;
  const closed = child.exitCode !== null || child.signalCode !== null ? Promise.resolve() : new Promise<void>((resolve) => child.once('close', () => resolve()));
  worker.cgroup.kill();
  // The worker itself may have left its leaf (that is one way its attestation fails); it also
  // ends itself when its protocol fd closes, which covers a worker we may not signal.
  killIfPermitted(child, worker.uid);
  worker.spawned.protocol.destroy();
  await closed;
  await worker.releases.run();
}

/**
 * A prepared worker is ready once it reported `ready`: booted, fds checked, seccomp installed,
 * waiting for its launch message. Its protocol stream is then paused until a turn takes it.
 */
export function awaitWorkerReady(worker: StartedWorker): Promise<Result> {
  const { child, protocol } = worker.spawned;
  const decoder = new LineDecoder();
  const collectStderr = (data: Buffer): void => {
    worker.stderrTail = Buffer.concat([worker.stderrTail, data]).subarray(-STDERR_TAIL_BYTES);
  };
  child.stderr?.on('data', collectStderr);
  return new Promise<Result>((resolve) => {
    const settle = (result: Result): void => {
      protocol.off('data', onData);
      child.off('exit', onExit);
      child.off('error', onError);
      child.stderr?.off('data', collectStderr);
      if (result.ok) protocol.pause();
      resolve(result);
    };
    const onError = (error: Error): void => settle(fail('spawn_failed', `worker spawn: ${error.message}`));
    const onExit = (code: number | null): void => {
      const refusal = parseHelperRefusal(code, worker.stderrTail.toString('utf8'));
      settle(fail('worker_exited', refusal?.detail ?? `the worker exited (code ${code}) before it was ready`));
    };
    const onData = (chunk: Buffer): void => {
      const framed = decoder.push(chunk);
      const line = framed.ok ? framed.lines[0] : undefined;
      if (!framed.ok) return settle(fail('protocol_invalid', framed.detail));
      if (line === undefined) return;
      const parsed = parseWorkerMessage(line);
      if (!parsed.ok) return settle(fail('protocol_invalid', parsed.detail));
      if (parsed.message.type === 'ready' && framed.lines.length === 1) return settle(ok({}));
      const message = parsed.message;
      settle(fail('worker_not_ready', message.type === 'error' ? `${message.code}: ${message.detail}` : `unexpected ${message.type} before launch`));
    };
    protocol.on('data', onData);
    child.on('exit', onExit);
    child.once('error', onError);
    protocol.on('error', () => undefined);
  });
}

export async function launchTurn(
  env: LaunchEnvironment,
  request: TurnRequest & { turnId: string },
  output: OutputChannel,
): Promise<LaunchOutcome> {
  const { deps } = env;
  const record: TurnRecord = {
    id: request.turnId,
    sessionId: request.sessionId,
    mode: request.mode,
    profile: profileFor(request.mode),
    state: 'starting',
    identity: 'shared_uid',
    workerUid: null,
    createdAt: new Date().toISOString(),
    endedAt: null,
    tty: request.tty !== undefined,
    result: null,
  };

  const limits = resolveTurnLimits(deps, request.limits);
  if (!limits.ok) return invalid(limits.detail, limits.field ?? 'limits');
  const policy = buildTurnPolicy(deps.config.egress, { mode: request.mode, additions: request.egressAllow });
  if (!policy.ok) return invalid(policy.detail, 'egressAllow');
  const spec: WorkerSpec = {
    mode: request.mode,
    cwd: request.cwd,
    limits: limits.limits,
    egressAdditions: request.egressAllow ?? [],
    policy: policy.policy,
  };
  // issue 6: the turn's held workspace root for host writes.
  const workspace = openRoot(request.cwd);
  if (!workspace.ok) return invalid(`cwd: ${workspace.detail}`, 'cwd');

  const attribution = attributionOf(record, request);
  let worker: { worker: StartedWorker; attested: boolean } | null = await claimPreparedWorker(env, workerKey(spec), attribution);
  if (!worker) {
    const started = await startWorker(env, spec, record.id, attribution);
    if (!started.ok) {
      closeRoot(workspace);
      return 'refusal' in started ? refuseTurn(env, record, request, started.refusal) : started.outcome;
    }
    worker = { worker: started.worker, attested: false };
  }
  const { worker: claimed, attested } = worker;
  claimed.releases.add(() => closeRoot(workspace));
  record.identity = claimed.identity;
  record.workerUid = claimed.uid;

  const launch: LaunchMessage = {
    type: 'launch',
    v: 1,
    argv: request.argv,
    cwd: request.cwd,
    env: { ...commandEnv(deps, request), TMPDIR: claimed.temp.path }, // issue 6: TMPDIR = turn temp
    tty: request.tty ?? null,
    egress: { socketPath: claimed.proxy.socketPath },
  };
  env.records.insert(record, claimed.cgroup.paths);
  const turn = trackTurn({
    env,
    record,
    request,
    output,
    worker: claimed,
    attested,
    launch,
    started: Date.now(),
    roots: { workspace, temp: claimed.temp }, // issue 6
  });
  // The next turn's worker starts once this one has ended: it would compete with this turn's
  // own start for the CPU, and a long turn would hold a second uid for nothing.
  void turn.running.done.then(() => setImmediate(() => env.preparedWorkers.prepareFor(spec)));
  await turn.startedOrEnded;
  return { ok: true, turn: turn.running };
}

/**
 * A ready prepared worker for this key, attested now for this turn. One that fails its
 * attestation is stopped and logged; the turn then starts its own worker, probe first.
 */
async function claimPreparedWorker(
  env: LaunchEnvironment,
  key: string,
  attribution: TurnAttribution,
): Promise<{ worker: StartedWorker; attested: true } | null> {
  const prepared = await env.preparedWorkers.take(key);
  if (!prepared) return null;
  const current = viewStillCurrent(prepared);
  const attested = current.ok ? attestStartedWorker(prepared) : current;
  if (!attested.ok) {
    env.deps.logger.warn('prepared worker not used', { preparedWorker: prepared.name, detail: attested.detail });
    await stopUntrackedWorker(prepared);
    return null;
  }
  prepared.turn = attribution;
  prepared.proxy.attribute(attribution, env.deps.logger.child({ turnId: attribution.turnId, component: 'proxy' }));
  return { worker: prepared, attested: true };
}

/** A prepared worker's leaf, temp and runtime directory name; a valid turn-id spelling, never a turn's. */
export function preparedWorkerName(): string {
  return `${PREPARED_WORKER_PREFIX}${randomBytes(9).toString('base64url')}`;
}

function isPreparedWorkerName(name: string): boolean {
  return name.startsWith(PREPARED_WORKER_PREFIX);
}

/** Starts a worker for the pool and waits until it is ready; null (logged) when it cannot be. */
export async function prepareWorker(env: LaunchEnvironment, spec: WorkerSpec): Promise<StartedWorker | null> {
  const name = preparedWorkerName();
  const started = await startWorker(env, spec, name, null);
  if (!started.ok) {
    const detail = 'refusal' in started ? started.refusal : started.outcome.ok ? '' : started.outcome.detail;
    env.deps.logger.info('no prepared worker', { mode: spec.mode, detail });
    return null;
  }
  const awaited = await awaitWorkerReady(started.worker);
  // A change while the helper built the view could have been caught halfway.
  const ready = awaited.ok ? viewStillCurrent(started.worker) : awaited;
  if (!ready.ok) {
    env.deps.logger.warn('prepared worker failed before it was ready', { preparedWorker: name, detail: ready.detail });
    await stopUntrackedWorker(started.worker);
    return null;
  }
  return started.worker;
}

/** shared_uid: the same worker entry, as the supervisor's uid, in new net/ipc/uts namespaces. */
function spawnSharedWorker(deps: TurnManagerDeps, cwd: string): { child: ChildProcess; protocol: net.Socket } {
  // No helper closes fds here, and fds can appear after the start-up pass (libraries, a test
  // runner's hooks): mark again right before the spawn.
  const marked = markInheritedFdsCloseOnExec();
  if (!marked.ok) throw new Error(marked.detail);
  const asRoot = process.geteuid?.() === 0;
  const unshare = asRoot ? ['--net', '--ipc', '--uts'] : ['--user', '--map-current-user', '--net', '--ipc', '--uts'];
  const child = spawn(
    'unshare',
    [...unshare, '--', '/bin/sh', '-c', 'ip link set lo up && exec "$0" "$@"', deps.worker.node, deps.worker.entry],
    { stdio: ['pipe', 'pipe', 'pipe', 'pipe'], cwd, env: WORKER_ENV },
  );
  const protocol = child.stdio[3] as net.Socket;
  return { child, protocol };
}

/**
 * issue 6: the turn temp (owned by the worker uid, its path given as TMPDIR). Its release
 * purges it with a `turn_temp_purge` receipt for the turn that used the worker (none for a
 * prepared worker nobody claimed); it runs after the cgroup is killed and removed. With
 * `helperOwnership` (a non-root supervisor) the temp is created as ours, the helper's launch
 * hands it to the worker, and the helper's reclaim hands it back right before the purge.
 */
function createWorkerTemp(
  env: LaunchEnvironment,
  name: string,
  workerUid: number,
  helperOwnership: { helper: HelperLocation } | null,
  turnOf: () => TurnAttribution | null,
  releases: Releases,
): { ok: true; temp: NonNullable<HostWriteRoots['temp']> } | { ok: false; outcome: LaunchOutcome } {
  const temp = createTurnTemp({
    parentDir: env.turnTempParent,
    name,
    uid: workerUid,
    gid: workerUid,
    owner: helperOwnership ? 'self' : 'worker',
  });
  if (!temp.ok) {
    const detail = `turn temp: ${temp.reason}: ${temp.detail}`;
    return { ok: false, outcome: { ok: false, reason: 'worker_host_unsupported', detail, requirement: detail } };
  }
  releases.add(async () => {
    if (helperOwnership) await reclaimTurnTemp(env, name, helperOwnership.helper, workerUid, temp.path);
    const purge = purgeTurnTemp(temp, { removeRoot: true });
    if (purge.outcome !== 'purged')
      env.deps.logger.warn('turn temp purge incomplete', { worker: name, errorCount: purge.errorCount, errors: purge.errors });
    const turn = turnOf();
    if (turn) env.deps.events.append(serverTurnEvent(turn, 'turn_temp_purge', { ...turnTempPurgePayload(purge) }));
  });
  return { ok: true, temp };
}

/** A failed reclaim leaves worker-owned entries the purge cannot remove: its receipt says partial. */
async function reclaimTurnTemp(env: LaunchEnvironment, name: string, helper: HelperLocation, uid: number, temp: string): Promise<void> {
  const reclaimed = await runHelperReclaim(helper, { uid, temp });
  if (reclaimed.ok)
    env.deps.logger.debug('turn temp reclaimed', { worker: name, reclaimed: reclaimed.reclaimed, skipped: reclaimed.skipped });
  else env.deps.logger.warn('turn temp reclaim failed', { worker: name, reason: reclaimed.reason, detail: reclaimed.detail });
}

function joinCgroupDirect(cgroup: TurnCgroup, pid: number | undefined): Result {
  if (pid === undefined) return fail('spawn_failed', 'the worker did not start');
  for (const dir of cgroup.paths) {
    try {
      fs.writeFileSync(path.join(dir, 'cgroup.procs'), `${pid}\n`);
    } catch (error) {
      return fail('cgroup_join_failed', `joining ${dir}: ${(error as Error).message}`);
    }
  }
  return ok({});
}

interface TrackInputs {
  env: LaunchEnvironment;
  record: TurnRecord;
  request: TurnRequest;
  output: OutputChannel;
  worker: StartedWorker;
  /** A claimed prepared worker was attested at claim; a directly started one is attested at `ready`. */
  attested: boolean;
  launch: LaunchMessage;
  started: number;
  roots: HostWriteRoots; // issue 6
}

/** Follows one worker from its launch message to its result. */
function trackTurn(inputs: TrackInputs): { running: RunningTurn; startedOrEnded: Promise<void> } {
  const { env, record, request, output, worker, started } = inputs;
  const { cgroup, helper, releases } = worker;
  const limits = worker.spec.limits;
  const { deps } = env;
  const { child, protocol } = worker.spawned;
  const log = deps.logger.child({ turnId: record.id });
  let stopReason: 'cancelled' | 'timeout' | null = null;
  let exitMessage: ExitMessage | null = null;
  let workerError: string | null = null;
  let attestationFailure: string | null = null;
  let launchSent = false;
  let stderrTail = worker.stderrTail;
  let rootsOpen = true; // issue 6: host writes stop when the worker exits
  let signalStarted!: () => void;
  const startedOrEnded = new Promise<void>((resolve) => (signalStarted = resolve));

  const send = (message: SupervisorMessage): void => {
    const encoded = encodeMessage(message);
    if (encoded.ok && !protocol.destroyed) protocol.write(encoded.line);
  };

  /** The launch message goes only to a worker attested for this turn. */
  const sendLaunch = (): void => {
    if (launchSent || stopReason) return;
    launchSent = true;
    const attested = inputs.attested ? ok({}) : attestStartedWorker(worker);
    if (attested.ok) return send(inputs.launch);
    attestationFailure = attested.detail;
    deps.events.append(
      serverTurnEvent(attributionOf(record, request), 'worker_host_refusal', { mode: record.mode, requirement: attested.detail, trigger: 'turn' }),
    );
    log.warn('turn refused: worker attestation failed', { detail: attested.detail });
    killWorker();
  };

  const decoder = new LineDecoder();
  protocol.on('data', (chunk: Buffer) => {
    const framed = decoder.push(chunk);
    if (!framed.ok) {
      workerError = `protocol: ${framed.detail}`;
      stop('cancelled');
      return;
    }
    for (const line of framed.lines) {
      const parsed = parseWorkerMessage(line);
      if (!parsed.ok) {
        workerError = `protocol: ${parsed.detail}`;
        continue;
      }
      const message = parsed.message;
      if (message.type === 'ready') {
        sendLaunch();
      } else if (message.type === 'started') {
        record.state = 'running';
        env.records.update(record);
        deps.events.append(
          serverTurnEvent(attributionOf(record, request), 'worker_launch', {
            mode: record.mode,
            profile: record.profile,
            identity: record.identity,
            workerUid: record.workerUid,
            command: path.basename(request.argv[0] ?? ''),
            cgroup: cgroup.paths[0] ?? null,
            limits,
          }),
        );
        signalStarted();
      } else if (message.type === 'exit') {
        exitMessage = message;
        // The report is complete; the worker's own teardown (Node's exit) adds nothing to wait for.
        killIfPermitted(child, worker.uid);
      } else {
        workerError = `${message.code}: ${message.detail}`;
      }
    }
  });
  protocol.on('error', () => undefined);

  const stdoutStream = record.tty ? 'pty' : 'stdout';
  child.stdout?.on('data', (data: Buffer) => output.push({ type: 'output', stream: stdoutStream, data }));
  child.stderr?.on('data', (data: Buffer) => {
    stderrTail = Buffer.concat([stderrTail, data]).subarray(-STDERR_TAIL_BYTES);
    output.push({ type: 'output', stream: 'stderr', data });
  });
  child.stdin?.on('error', () => undefined);

  const killWorker = (): void => {
    const killed = cgroup.kill();
    if (!killed.ok) {
      log.warn('cgroup kill incomplete; falling back to the helper kill', { detail: killed.detail });
      if (helper && record.workerUid) void runHelperKill(helper, record.workerUid);
      child.kill('SIGKILL');
    }
  };

  function stop(reason: 'cancelled' | 'timeout'): void {
    if (record.state === 'finished' || stopReason) return;
    stopReason = reason;
    killWorker();
  }

  const timeoutSeconds = request.timeoutSeconds ?? deps.config.turns.defaultTimeoutSeconds;
  const timer = setTimeout(() => stop('timeout'), timeoutSeconds * 1000);

  // A background process can hold the output pipes open after the worker exited: the turn ends
  // at the worker's exit, then the cgroup kill ends such holders, and only then are the pipes drained.
  const childExited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  const childClosed = new Promise<void>((resolve) => child.on('close', () => resolve()));
  child.on('error', (error) => {
    workerError = `spawn: ${error.message}`;
  });

  const done = (async (): Promise<TurnResult> => {
    const exitCode = await childExited;
    rootsOpen = false; // issue 6
    clearTimeout(timer);
    // Background processes die with the turn, whatever the command did.
    killWorker();
    await childClosed;
    const stats = cgroup.stats();
    const refusal = parseHelperRefusal(exitCode, stderrTail.toString('utf8'));
    const result = buildResult({
      stopReason,
      exitMessage,
      workerError,
      refusal: attestationFailure ?? (exitMessage || record.state === 'running' ? null : refusal?.detail ?? null),
      workerExitCode: exitCode,
      stats,
      durationMs: Date.now() - started,
    });
    await releases.run();
    record.state = 'finished';
    record.endedAt = new Date().toISOString();
    record.result = result;
    env.records.update(record);
    deps.events.append(
      serverTurnEvent(attributionOf(record, request), 'worker_exit', {
        status: result.status,
        exitCode: result.exitCode,
        signal: result.signal,
        durationMs: result.durationMs,
        usage: result.usage,
        limitHits: result.limitHits,
      }),
    );
    log.info('turn finished', { status: result.status, exitCode: result.exitCode, durationMs: result.durationMs });
    output.push({ type: 'exit', result });
    signalStarted();
    return result;
  })();

  if (inputs.attested) sendLaunch();
  // A claimed prepared worker's stream was paused while it waited.
  protocol.resume();

  const running: RunningTurn = {
    record,
    done,
    stop,
    attach(): TurnAttachment {
      let unsubscribe: (() => void) | null = null;
      return {
        onEvent(listener) {
          unsubscribe?.();
          unsubscribe = output.subscribe(listener);
        },
        write(data) {
          if (child.stdin && !child.stdin.destroyed) child.stdin.write(data);
        },
        resize(cols, rows) {
          send({ type: 'resize', cols, rows });
        },
        signal(signal) {
          send({ type: 'signal', signal: signal as ForwardableSignal });
        },
        detach() {
          unsubscribe?.();
          unsubscribe = null;
        },
      };
    },
    // issue 6
    hostWriteTarget: () =>
      rootsOpen
        ? {
            roots: inputs.roots,
            turn: { sessionId: record.sessionId, turnId: record.id, profile: record.profile, model: request.model ?? null },
          }
        : null,
  };
  return { running, startedOrEnded };
}

interface ResultInputs {
  stopReason: 'cancelled' | 'timeout' | null;
  exitMessage: ExitMessage | null;
  workerError: string | null;
  refusal: string | null;
  workerExitCode: number | null;
  stats: ReturnType<TurnCgroup['stats']>;
  durationMs: number;
}

function buildResult(inputs: ResultInputs): TurnResult {
  const { exitMessage, stats } = inputs;
  const limitHits: LimitHit[] = [...stats.limitHits];
  const usage: TurnUsage = {
    userCpuUsec: exitMessage?.rusage.userCpuUsec ?? null,
    systemCpuUsec: exitMessage?.rusage.systemCpuUsec ?? null,
    maxRssKiB: exitMessage?.rusage.maxRssKiB ?? null,
    cgroupCpuUsec: stats.cpuUsec,
    memoryPeakBytes: stats.memoryPeakBytes,
    pidsPeak: stats.pidsPeak,
    oomKills: stats.oomKills,
  };
  let status: TurnStatus;
  let detail: string | undefined;
  if (inputs.stopReason) status = inputs.stopReason;
  else if ((stats.oomKills ?? 0) > 0) status = 'oom_killed';
  else if (exitMessage?.signal) status = 'signaled';
  else if (exitMessage) status = exitMessage.exitCode === 0 ? 'ok' : 'nonzero_exit';
  else if (inputs.refusal) {
    status = 'launch_refused';
    detail = inputs.refusal;
  } else {
    status = 'internal_error';
    detail = inputs.workerError ?? `the worker exited (code ${inputs.workerExitCode}) without reporting a result`;
  }
  return {
    status,
    exitCode: exitMessage?.exitCode ?? null,
    signal: exitMessage?.signal ?? null,
    durationMs: inputs.durationMs,
    usage,
    limitHits,
    ...(detail ? { detail } : {}),
  };
}
