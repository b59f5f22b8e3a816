/**
 * Starting a worker: the one sequence every worker goes through, whether a turn asks for it
 * now or the pool prepares it for the next turn (prepared-workers.ts). In order: this mode's
 * probe → worker uid → turn temp → turn cgroup → egress proxy → view keys and fingerprint →
 * helper descriptor (or the same worker entry in shared_uid mode) → `ready`. Then the claim's
 * checks (attestation, view and helper unchanged) and stopping a worker no turn tracks.
 * Every step that can fail answers a typed refusal; what was taken is released in reverse order.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fail, ok, type Result } from '../../core/result.js';
import { createTurnCgroup, type TurnCgroup } from '../../cgroup/turn-cgroup.js';
import { startTurnProxy, type TurnProxy } from '../../proxy/server.js';
import type { EgressPolicy } from '../../proxy/policy.js';
import { LineDecoder, parseWorkerMessage } from '../../worker/protocol.js';
import { closeChannelEnd, openListenerChannel, receiveWorkerListener } from '../../proxy/worker-listener.js';
import { listOpenFds, markCloseOnExec } from '../../worker/fds.js';
import {
  parseHelperRefusal,
  runHelperReclaim,
  spawnHelperLaunch,
  type HelperLocation,
  type HelperProtectRule,
  type HelperRlimitName,
} from '../identity/helper-client.js';
import type { ResolvedLimits } from '../limits/types.js';
import { probeMode } from '../probes/index.js';
import type { IdentityMode, WorkerMode } from '../probes/types.js';
import { attestWorker } from '../probes/worker-attestation.js';
import { serverTurnEvent, type TurnAttribution } from '../events/turn-event.js';
// issue 6 (fs): the turn temp lifecycle.
import type { HostWriteRoots } from '../fs/host-write.js';
import { createTurnTemp, purgeTurnTemp, turnTempPurgePayload } from '../fs/turn-temp.js';
import { PREPARED_WORKER_PREFIX } from './prepared-workers.js';
import { turnViewKeys, viewFingerprint } from './view-descriptor.js'; // issue 6: masked worker view
import type { TurnManagerDeps } from './manager.js';
import { createUidPool, type UidPool } from './uid-pool.js';
import type { LaunchEnvironment, LaunchOutcome } from './launch.js';

export const DEFAULT_COMMAND_PATH = '/usr/local/bin:/usr/bin:/bin';

const STDERR_TAIL_BYTES = 4096;

/** The last bytes of a worker's stderr: a helper refusal is read from there. */
export function appendStderrTail(tail: Buffer, data: Buffer): Buffer {
  return Buffer.concat([tail, data]).subarray(-STDERR_TAIL_BYTES);
}

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

function helperLocation(deps: TurnManagerDeps): HelperLocation | null {
  const { path: helperPath, configPath } = deps.config.identityHelper;
  return helperPath ? { path: helperPath, configPath } : null;
}

/**
 * Whatever this process inherited without close-on-exec (a service manager's or a CI harness's
 * fds) must never reach a worker: shared_uid workers are spawned by this process directly.
 */
export function markInheritedFdsCloseOnExec(): Result {
  const listed = listOpenFds();
  if (!listed.ok) return listed;
  const failed = listed.fds.filter(({ fd }) => fd > 2 && !markCloseOnExec(fd).ok).map(({ fd }) => fd);
  // The directory fd that listed /proc/self/fd is closed by now, so marking it fails harmlessly.
  const stillOpen = failed.filter((fd) => fs.existsSync(`/proc/self/fd/${fd}`));
  return stillOpen.length === 0 ? ok({}) : fail('fcntl_failed', `fds ${stillOpen.join(', ')} stay inheritable`);
}

export function profileFor(mode: WorkerMode): 'governed' | 'strict' {
  return mode === 'ordinary' ? 'governed' : 'strict';
}

/** Releases what a launch has taken so far, newest first. */
export class Releases {
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
  /** The supervisor's end of the listener channel (proxy/worker-listener.ts); null once the listener was taken. */
  listenerChannel: number | null;
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
export async function startWorker(
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
  const opened = openListenerChannel();
  if (!opened.ok) {
    await releases.run();
    return { ok: false, refusal: `the listener channel: ${opened.detail}` };
  }
  const channel = opened;
  worker.listenerChannel = channel.supervisorFd;
  releases.add(() => {
    const untaken = takeListenerChannel(worker);
    if (untaken !== null) closeChannelEnd(untaken);
  });
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
          }, { listenerChannelFd: channel.workerFd })
        : spawnSharedWorker(deps, spec.cwd, channel.workerFd);
  } catch (error) {
    await releases.run();
    const detail = `worker spawn: ${(error as Error).message}`;
    return { ok: false, outcome: { ok: false, reason: 'worker_host_unsupported', detail, requirement: (error as Error).message } };
  } finally {
    // The worker holds its end now (or never will).
    closeChannelEnd(channel.workerFd);
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
export function killIfPermitted(child: ChildProcess, workerUid: number): void {
  const euid = process.geteuid?.();
  if (euid === 0 || euid === workerUid) child.kill('SIGKILL');
}

/** The live check of this turn's worker (supervisor/probes/worker-attestation.ts). */
export function attestStartedWorker(worker: StartedWorker): Result {
  const { child } = worker.spawned;
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null)
    return fail('worker_attestation_failed', 'worker attestation: the worker is no longer running');
  if (helperStamp(worker.helper) !== worker.helperStamp)
    return fail('worker_attestation_failed', 'worker attestation: the identity helper or its config changed since the worker was launched');
  return attestWorker({ pid: child.pid, identity: worker.identity, uid: worker.uid, gid: worker.uid, cgroupPaths: worker.cgroup.paths });
}

/** The supervisor's end of the listener channel, once: later calls (and a release after the hand-over) get null. */
function takeListenerChannel(worker: Pick<Partial<StartedWorker>, 'listenerChannel'>): number | null {
  const channel = worker.listenerChannel ?? null;
  worker.listenerChannel = null;
  return channel;
}

/**
 * Gives the worker's egress listener to its turn proxy: the copy the worker sent before
 * `ready`, checked (proxy/worker-listener.ts). Before the launch message, which tells the
 * worker to close its own copy and point the command at it. Once per worker.
 */
export async function serveEgressListener(worker: StartedWorker): Promise<Result> {
  const channel = takeListenerChannel(worker);
  if (channel === null) return fail('listener_refused', "the worker's egress listener was already taken");
  const received = receiveWorkerListener(channel);
  closeChannelEnd(channel);
  if (!received.ok) return received;
  return worker.proxy.serveWorkerListener(received.fd);
}

/** The host entries the prepared worker's view was built from are the ones there now. */
export function viewStillCurrent(worker: StartedWorker): Result {
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
const READY_TIMEOUT_MS = 60_000;

export function awaitWorkerReady(worker: StartedWorker): Promise<Result> {
  const { child, protocol } = worker.spawned;
  const decoder = new LineDecoder();
  const collectStderr = (data: Buffer): void => {
    worker.stderrTail = appendStderrTail(worker.stderrTail, data);
  };
  child.stderr?.on('data', collectStderr);
  return new Promise<Result>((resolve) => {
    // A worker that hangs in its boot must not hold a uid (and the pool's close) for ever.
    const timer = setTimeout(
      () => settle(fail('worker_not_ready', `no ready within ${READY_TIMEOUT_MS / 1000} s`)),
      READY_TIMEOUT_MS,
    );
    const settle = (result: Result): void => {
      clearTimeout(timer);
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

/** A prepared worker's leaf, temp and runtime directory name; a valid turn-id spelling, never a turn's. */
export function preparedWorkerName(): string {
  return `${PREPARED_WORKER_PREFIX}${randomBytes(9).toString('base64url')}`;
}

export function isPreparedWorkerName(name: string): boolean {
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
function spawnSharedWorker(deps: TurnManagerDeps, cwd: string, listenerChannelFd: number): { child: ChildProcess; protocol: net.Socket } {
  // No helper closes fds here, and fds can appear after the start-up pass (libraries, a test
  // runner's hooks): mark again right before the spawn.
  const marked = markInheritedFdsCloseOnExec();
  if (!marked.ok) throw new Error(marked.detail);
  const asRoot = process.geteuid?.() === 0;
  const unshare = asRoot ? ['--net', '--ipc', '--uts'] : ['--user', '--map-current-user', '--net', '--ipc', '--uts'];
  const child = spawn(
    'unshare',
    [...unshare, '--', '/bin/sh', '-c', 'ip link set lo up && exec "$0" "$@"', deps.worker.node, deps.worker.entry],
    { stdio: ['pipe', 'pipe', 'pipe', 'pipe', listenerChannelFd], cwd, env: WORKER_ENV },
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
