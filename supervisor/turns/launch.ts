/**
 * The launch sequence: the only way a turn gets a worker. In order: limits (overrides only
 * lower) → egress policy → workspace root → a prepared worker for this key, or one started now
 * (worker-start.ts: probe, uid, temp, cgroup, proxy, view, helper) → attestation of the live
 * worker → launch message on fd 3 → tracking → result. Also the launch environment (runtime
 * directory, turn cgroup subtree, uid pools, the prepared-worker pool) and boot recovery.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { ok, type Result } from '../../core/result.js';
import { discoverCgroupLayout } from '../../cgroup/discover.js';
import type { CgroupLayout } from '../../cgroup/types.js';
import { reapStaleTurnCgroups } from '../../cgroup/reap.js';
import { prepareCgroupSubtree, removeCgroupSubtree, type CgroupSubtree, type TurnCgroup } from '../../cgroup/turn-cgroup.js';
import { buildTurnPolicy } from '../../proxy/policy.js';
import {
  encodeMessage,
  LineDecoder,
  parseWorkerMessage,
  type ExitMessage,
  type ForwardableSignal,
  type LaunchMessage,
  type SupervisorMessage,
} from '../../worker/protocol.js';
import { parseHelperRefusal, runHelperKill } from '../identity/helper-client.js';
import { lowerOnly, parseLimitSettings } from '../limits/parse.js';
import type { ResolvedLimits } from '../limits/types.js';
import { resolveDefaultLimits } from '../probes/limits.js';
import { serverTurnEvent, type TurnAttribution } from '../events/turn-event.js';
// issue 6 (fs): the turn's held roots for host writes.
import { closeRoot, openRoot } from '../fs/guard.js';
import type { HostWriteRoots, HostWriteTurn } from '../fs/host-write.js';
import { createPreparedWorkerPool, type PreparedWorkerPool } from './prepared-workers.js';
import { filterSubprocessEnv, parseEnvExtra, ENV_EXTRA_CONTROL } from './env-filter.js';
import type { OutputChannel } from './output.js';
import type { TurnRecordStore } from './store.js';
import type { TurnManagerDeps } from './manager.js';
import type { UidPool } from './uid-pool.js';
import {
  attestStartedWorker,
  serveEgressListener,
  DEFAULT_COMMAND_PATH,
  isPreparedWorkerName,
  killIfPermitted,
  markInheritedFdsCloseOnExec,
  prepareWorker,
  profileFor,
  startWorker,
  appendStderrTail,
  stopUntrackedWorker,
  viewStillCurrent,
  workerKey,
  type StartedWorker,
  type WorkerSpec,
} from './worker-start.js';
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

function attributionOf(record: TurnRecord, request: TurnRequest): TurnAttribution {
  return { sessionId: record.sessionId, turnId: record.id, profile: record.profile, model: request.model ?? null };
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

function appendHostRefusal(env: LaunchEnvironment, record: TurnRecord, request: TurnRequest, requirement: string): void {
  env.deps.events.append(
    serverTurnEvent(attributionOf(record, request), 'worker_host_refusal', { mode: record.mode, requirement, trigger: 'turn' }),
  );
}

/** Records a refusal: a finished turn with `launch_refused`, and a `worker_host_refusal` event. */
function refuseTurn(env: LaunchEnvironment, record: TurnRecord, request: TurnRequest, requirement: string): LaunchOutcome {
  env.records.insert(finishedWithoutRun(record, 'launch_refused', requirement), []);
  appendHostRefusal(env, record, request, requirement);
  env.deps.logger.warn('turn refused: worker host unsupported', { turnId: record.id, requirement });
  return { ok: false, reason: 'worker_host_unsupported', detail: requirement, requirement };
}

function invalid(detail: string, field: string): LaunchOutcome {
  return { ok: false, reason: 'invalid_request', detail, field };
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
    egress: true,
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
  let launchRefusal: string | null = null;
  let launchSent = false;
  let stderrTail = worker.stderrTail;
  let rootsOpen = true; // issue 6: host writes stop when the worker exits
  let signalStarted!: () => void;
  const startedOrEnded = new Promise<void>((resolve) => (signalStarted = resolve));

  const send = (message: SupervisorMessage): void => {
    const encoded = encodeMessage(message);
    if (encoded.ok && !protocol.destroyed) protocol.write(encoded.line);
  };

  /**
   * The launch message goes only to a worker attested for this turn, once its turn proxy serves
   * the worker's egress listener.
   */
  const sendLaunch = async (): Promise<void> => {
    if (launchSent || stopReason) return;
    launchSent = true;
    const attested = inputs.attested ? ok({}) : attestStartedWorker(worker);
    const served = attested.ok ? await serveEgressListener(worker) : attested;
    if (stopReason) return;
    if (served.ok) return send(inputs.launch);
    launchRefusal = served.detail;
    appendHostRefusal(env, record, request, served.detail);
    log.warn(attested.ok ? 'turn refused: the egress listener was not served' : 'turn refused: worker attestation failed', { detail: served.detail });
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
        void sendLaunch();
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
    stderrTail = appendStderrTail(stderrTail, data);
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
      refusal: launchRefusal ?? (exitMessage || record.state === 'running' ? null : refusal?.detail ?? null),
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

  if (inputs.attested) void sendLaunch();
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
