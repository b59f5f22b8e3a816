/**
 * The supervisor daemon, composed in a fixed order: configuration → logger → data directory →
 * event store (replays the fallback log) → API token → boot probes (a failure is logged once and
 * never refuses boot) → root-server warning → unbound-event pruning → workspace service and turn
 * manager (supervisor/compose.ts) → activity, metrics and the journal copy of events → HTTP →
 * `READY=1` to systemd (supervisor/systemd/). Each step is a function of its own; `startDaemon`
 * lists them, and what each started is undone, newest first, at shutdown. `reload()` (SIGHUP)
 * re-reads the configuration and applies what can change live (supervisor/config/reload.ts).
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { createLogger, type Logger, type LogLevelSwitch } from '../core/log.js';
import { fail, ok, type Result } from '../core/result.js';
import { describeDerivation } from './config/capacity.js';
import { loadConfig, parseHostPort, type ConfigOverrides, type ConfigSources } from './config/load.js';
import { tokenFilePath } from './config/token-path.js';
import type { TurnhostConfig } from './config/types.js';
import { openEventStore } from './events/store.js';
import { isPinnedScratchName, startScratchPruner } from './fs/scratch.js';
import type { EventStore } from './events/types.js';
import { collectHostFacts } from './http/host-facts.js';
import type { AppDeps } from './http/app.js';
import { startHttp, type HttpServerHandle } from './http/server.js';
import { ensureApiToken } from './http/token.js';
import { runWorkerHostProbes, type ProbeContext } from './probes/index.js';
import type { WorkerHostStatus } from './probes/types.js';
import type { AttackTrigger } from './probes/attack.js';
import { BoundaryAttack } from './probes/attack-runner.js';
import { TurnManagerAttackHost } from './http/attack-host.js';
import { packageRoot, softwareIdentity } from './software.js';
import type { TurnManager } from './turns/types.js';
import { runHelperProbe, runSharedProbe } from './identity/helper-probe.js';
import { runHelperView } from './identity/helper-view.js';
import type { WorkspaceService } from './workspaces/service.js';
import { prepareSharedLauncher } from './identity/shared-launcher.js';
import { runHelperImageProbe } from './identity/helper-workspace-image.js';
import { applyLiveKeys, planReload } from './config/reload.js';
import { createActivity, type Activity } from './observe/activity.js';
import { createMetrics, type Metrics } from './observe/metrics.js';
import { startMetricsListener } from './http/metrics-route.js';
import { createUiSessions } from './http/ui-session.js';
import { createJournalEventSink, type JournalEventSink } from './systemd/journal.js';
import { createServiceNotifier, type ServiceNotifier } from './systemd/notify.js';
import { OwnListeners } from '../proxy/self-connection.js';

const DATABASE_FILE = 'turnhost.db';
const FALLBACK_LOG_FILE = 'events-fallback.log';
const PRUNE_INTERVAL_MS = 60 * 60 * 1000;
/** Said at boot (and in status) when the probes could not produce a warning of their own. */
const ROOT_WARNING_FALLBACK =
  'the supervisor runs as uid 0: without an identity helper its workers run as uid 0 too and can read root-owned files and connect to root-owned and abstract unix sockets';

export interface DaemonOptions {
  configPath?: string;
  env?: NodeJS.ProcessEnv;
  overrides?: ConfigOverrides;
  /** Tests capture the log; production logs JSON lines to stderr at the configured level. */
  logger?: Logger;
  /** Tests inject probe outcomes; production runs the real probes. */
  runProbes?: (ctx: ProbeContext, trigger: 'boot' | 'check') => Promise<WorkerHostStatus>;
  /** false: serve without turn routes (tests of the status surface). */
  turns?: boolean;
  /** The journal's native socket (events.journal); tests point it at a socket of their own. */
  journalSocket?: string;
}

/** What a reload did: the keys applied live and those that wait for a restart, or why nothing was applied. */
type ReloadOutcome =
  { ok: true; applied: string[]; needsRestart: string[] } | { ok: false; reason: 'config_invalid'; detail: string };

export interface DaemonHandle {
  config: TurnhostConfig;
  sources: ConfigSources;
  http: HttpServerHandle;
  /** The token-free loopback metrics listener (metrics.listen), or null. */
  metricsAddress: { host: string; port: number } | null;
  /** Re-reads the configuration (SIGHUP); a configuration that does not validate changes nothing. */
  reload(): Promise<ReloadOutcome>;
  /** The supervisor's TCP listeners every turn proxy refuses to dial (proxy/self-connection.ts). */
  ownListeners: OwnListeners;
  /** Drain mode from a signal (SIGUSR2): new turns are refused; false without a turn manager. */
  drain(draining: boolean): boolean;
  close(): Promise<void>;
}

export type DaemonFailure =
  | 'config_invalid'
  | 'data_dir_unusable'
  | 'data_dir_in_use'
  | 'token_unusable'
  | 'store_unavailable'
  | 'listen_failed'
  | 'socket_in_use';

/** The data directory: created 0700; an existing one must be a directory owned by us, not writable by others. */
export function prepareDataDir(dir: string): Result<{}, 'data_dir_unusable'> {
  try {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    const stat = fs.lstatSync(dir);
    if (!stat.isDirectory()) return fail('data_dir_unusable', `${dir}: not a directory`);
    if (stat.uid !== process.geteuid?.())
      return fail('data_dir_unusable', `${dir}: owned by uid ${stat.uid}, not by the supervisor`);
    if ((stat.mode & 0o022) !== 0)
      return fail('data_dir_unusable', `${dir}: writable by group or others; chmod 700 it`);
    return ok({});
  } catch (error) {
    return fail('data_dir_unusable', `${dir}: ${(error as NodeJS.ErrnoException).code ?? 'error'}`);
  }
}

/**
 * One supervisor per data directory: a second one would replay the fallback log, recover
 * "interrupted" turns and reap cgroups of the running one. The lock is an abstract unix socket
 * named after the directory's device and inode, so the kernel releases it when the holder dies.
 */
export async function lockDataDir(
  dir: string,
): Promise<Result<{ release(): Promise<void> }, 'data_dir_in_use' | 'data_dir_unusable'>> {
  const { dev, ino } = fs.statSync(dir);
  const server = net.createServer();
  const error = await new Promise<NodeJS.ErrnoException | null>((resolve) => {
    server.once('error', resolve);
    server.listen(`\0turnhost-data-dir-${dev}-${ino}`, () => resolve(null));
  });
  if (error === null) {
    server.unref();
    return ok({ release: () => new Promise<void>((resolve) => server.close(() => resolve())) });
  }
  if (error.code === 'EADDRINUSE')
    return fail('data_dir_in_use', `${dir}: another turnhost supervisor uses this data directory`);
  return fail('data_dir_unusable', `${dir}: cannot take the data directory lock (${error.code ?? error.message})`);
}

export function openStore(config: TurnhostConfig, logger: Logger): Result<{ store: EventStore }, 'store_unavailable'> {
  try {
    const store = openEventStore({
      databasePath: path.join(config.dataDir, DATABASE_FILE),
      fallbackLogPath: path.join(config.dataDir, FALLBACK_LOG_FILE),
      // Read at each pruning, so a reload's new retention applies to the next one.
      get unboundRetentionDays() {
        return config.events.unboundRetentionDays;
      },
      logger: logger.child({ component: 'events' }),
    });
    return ok({ store });
  } catch (error) {
    return fail('store_unavailable', `event store: ${(error as Error).message}`);
  }
}

/**
 * The native turn worker: installed beside the package's code (the deb's
 * /usr/lib/turnhost/turnhost-worker), or built in the checkout (make -C worker all). The helper
 * executes it from an fd, so no view needs to show this path.
 */
function workerProgram(): string {
  const installed = path.join(packageRoot(), 'turnhost-worker');
  return fs.existsSync(installed) ? installed : path.join(packageRoot(), 'worker', 'build', 'turnhost-worker');
}

/** The workspaces root as the image probe names it: its real path, none while it is missing. */
function realWorkspaceRoot(root: string): string[] {
  try {
    return [fs.realpathSync(root)];
  } catch {
    return [];
  }
}

/**
 * The probe context for `serve` and `run --local`: a configured helper is probed for its
 * receipt on every run; with none, the shared_uid launcher (the bundled helper in shared mode,
 * its config in the data directory) is probed instead. Either way each probe also verifies the
 * masked views through the program that builds them.
 */
export function createProbeContext(config: TurnhostConfig, logger: Logger, env: NodeJS.ProcessEnv): ProbeContext {
  const context: ProbeContext = { config, logger: logger.child({ component: 'probes' }), env };
  const { path: helperPath, configPath } = config.identityHelper;
  if (helperPath !== null) {
    context.helperProbe = () => runHelperProbe({ path: helperPath, configPath });
    context.helperView = (request) => runHelperView({ path: helperPath, configPath }, request);
    context.helperImageProbe = (root) => runHelperImageProbe({ path: helperPath, configPath }, root);
    return context;
  }
  const root = config.workspaces.root;
  const shared = prepareSharedLauncher(config.dataDir, {
    cgroupRoots: [],
    workerExec: workerProgram(),
    workerArgs: [],
    viewPaths: [],
    // The image probe runs in the workspaces root, which the launcher matches exactly.
    workspaceRoots: root === null ? [] : realWorkspaceRoot(root),
  });
  if (!shared.ok) {
    context.sharedProbe = () => Promise.resolve(fail(shared.reason, shared.detail));
    return context;
  }
  context.sharedProbe = () => runSharedProbe(shared.launcher);
  context.sharedView = (request) => runHelperView(shared.launcher, request);
  context.sharedImageProbe = (workspaceRoot) => runHelperImageProbe(shared.launcher, workspaceRoot);
  return context;
}

function isRoot(): boolean {
  return process.getuid?.() === 0 || process.geteuid?.() === 0;
}

/**
 * The supervisor's own TCP listeners, starting with the configured API address (a nonzero
 * port): where this configuration's `turnhost serve` listens, which `run --local` must not reach
 * either. `serve` adds the bound address once it listens.
 */
function supervisorListeners(config: TurnhostConfig): OwnListeners {
  const listeners = new OwnListeners();
  const configured = config.listen.tcp === null ? null : parseHostPort(config.listen.tcp);
  if (configured !== null) listeners.add(configured);
  return listeners;
}

/**
 * Builds the production turn manager and the workspace service it runs turns on
 * (supervisor/compose.ts). The worker entry, the helper probe in the probe context and the
 * database handle are wired here, once, for `serve` and `run --local`.
 */
export async function createProductionTurnManager(ctx: {
  config: TurnhostConfig;
  logger: Logger;
  store: EventStore;
  probeContext: ProbeContext;
  ownListeners?: OwnListeners;
}): Promise<Result<{ turns: TurnManager; workspaces: WorkspaceService; close(): void }, 'turns_unavailable'>> {
  try {
    const [{ composeTurnServices }, { openDatabase }] = await Promise.all([
      import('./compose.js'),
      import('./db/open.js'),
    ]);
    const opened = openDatabase(path.join(ctx.config.dataDir, DATABASE_FILE));
    if (!opened.ok) return fail('turns_unavailable', opened.detail);
    const { turns, workspaces } = await composeTurnServices({
      config: ctx.config,
      logger: ctx.logger.child({ component: 'turns' }),
      events: ctx.store,
      db: opened.db,
      probeContext: ctx.probeContext,
      worker: { exec: workerProgram(), args: [] },
      ownListeners: ctx.ownListeners ?? supervisorListeners(ctx.config),
    });
    return ok({ turns, workspaces, close: () => opened.db.close() });
  } catch (error) {
    return fail('turns_unavailable', (error as Error).stack ?? String(error));
  }
}

/** Ended sessions past `events.sessionRetentionDays` (read at each pass) are deleted at boot and hourly. */
function startSessionRetention(turns: TurnManager, config: TurnhostConfig, logger: Logger): () => void {
  const pass = (): void => {
    if (config.events.sessionRetentionDays <= 0) return;
    const pruned = turns.pruneSessions();
    if (!pruned.ok) logger.error('session retention failed', { detail: pruned.detail });
    else if (pruned.deleted.length > 0)
      logger.info('deleted sessions past retention', {
        sessions: pruned.deleted.length,
        retentionDays: config.events.sessionRetentionDays,
      });
  };
  pass();
  const timer = setInterval(pass, PRUNE_INTERVAL_MS);
  timer.unref();
  return () => clearInterval(timer);
}

/** What the daemon undoes when it stops (or fails to start), newest first. */
class ShutdownSteps {
  private readonly steps: Array<() => void | Promise<void>> = [];

  push(...steps: Array<() => void | Promise<void>>): void {
    this.steps.push(...steps);
  }

  async run(): Promise<void> {
    for (const step of this.steps.reverse()) await step();
  }

  /** Undoes what started, then answers the failure that stopped the start. */
  async abort<F extends Result<object, DaemonFailure>>(failure: F): Promise<F> {
    await this.run();
    return failure;
  }
}

/** The configuration, and the logger at its level (a reload changes the level through the switch). */
function loadDaemonConfig(
  options: DaemonOptions,
  env: NodeJS.ProcessEnv,
): Result<
  { config: TurnhostConfig; sources: ConfigSources; levelSwitch: LogLevelSwitch; logger: Logger },
  'config_invalid'
> {
  const loaded = loadConfig({ configPath: options.configPath, env, overrides: options.overrides });
  if (!loaded.ok) return loaded;
  const { config, sources } = loaded;
  const levelSwitch: LogLevelSwitch = { level: config.logLevel };
  const logger = options.logger ?? createLogger({ level: levelSwitch, fields: { component: 'supervisor' } });
  logger.info('configuration loaded', {
    file: sources.file,
    env: sources.env,
    flags: sources.cli,
    dataDir: config.dataDir,
    maxConcurrent: config.turns.maxConcurrent,
    maxConcurrentSource:
      sources.capacity.source === 'derived' ? describeDerivation(sources.capacity.derived) : 'configured',
  });
  return ok({ config, sources, levelSwitch, logger });
}

/**
 * The data directory, held for this supervisor alone, the event store in it and the systemd
 * notifier; the shutdown steps start with undoing these.
 */
async function openDataDir(
  config: TurnhostConfig,
  logger: Logger,
  env: NodeJS.ProcessEnv,
): Promise<Result<{ store: EventStore; notifier: ServiceNotifier; shutdown: ShutdownSteps }, DaemonFailure>> {
  const dataDir = prepareDataDir(config.dataDir);
  if (!dataDir.ok) return dataDir;
  const lock = await lockDataDir(config.dataDir);
  if (!lock.ok) return lock;
  const opened = openStore(config, logger);
  if (!opened.ok) {
    await lock.release();
    return opened;
  }
  const { store } = opened;
  const notifier = createServiceNotifier({ env, logger });
  const shutdown = new ShutdownSteps();
  shutdown.push(
    () => notifier.close(),
    () => lock.release(),
    () => store.close(),
  );
  return ok({ store, notifier, shutdown });
}

/** The API token: read from the data directory, or generated there on first start. */
function loadApiToken(config: TurnhostConfig, logger: Logger): Result<{ token: string }, DaemonFailure> {
  const token = ensureApiToken(config);
  if (!token.ok) return token;
  if (token.source === 'generated')
    logger.info('api token generated', { file: path.join(config.dataDir, 'api-token') });
  return ok({ token: token.token });
}

/** The worker-host probes and their latest answer, which status, readiness and metrics report. */
class WorkerHostProbes {
  latest: WorkerHostStatus | null = null;
  /** `live` once a reload has applied a change: status then describes the reloaded configuration. */
  configurationView: 'startup' | 'live' = 'startup';
  /** The attack battery, once a turn manager exists to run it. */
  attack: BoundaryAttack | null = null;

  constructor(
    private readonly context: ProbeContext,
    private readonly runProbes: (ctx: ProbeContext, trigger: 'boot' | 'check') => Promise<WorkerHostStatus>,
  ) {}

  private async probe(trigger: 'boot' | 'check'): Promise<WorkerHostStatus> {
    const status = await this.runProbes(this.context, trigger);
    status.governed.configurationView = this.configurationView;
    return status;
  }

  async run(trigger: 'boot' | 'check'): Promise<WorkerHostStatus> {
    const status = await this.probe(trigger);
    // A broken attack case keeps its mode unavailable until an attack run shows it held.
    this.latest = this.attack?.keep(status) ?? status;
    return this.latest;
  }

  /** The probes, then the attack battery on the modes they offer; the answer becomes the latest status. */
  async attackCheck(trigger: AttackTrigger): Promise<Result<{ status: WorkerHostStatus }>> {
    if (this.attack === null) return fail('attack_failed', 'the attack battery needs the turn manager');
    const attacked = await this.attack.run(await this.probe('check'), trigger);
    if (attacked.ok) this.latest = attacked.status;
    return attacked;
  }

  /** The boot probe: a failure is logged once and never refuses boot. */
  async boot(logger: Logger): Promise<void> {
    try {
      await this.run('boot');
    } catch (error) {
      logger.error('boot probe failed; status reports no worker host until a check succeeds', {
        error: (error as Error).message,
      });
    }
  }
}

/**
 * The attack battery on a turn manager (none: no attack), at boot when `probes.attackAtBoot`
 * and every `probes.attackIntervalSeconds`; a run that fails is logged and changes nothing.
 */
async function startBoundaryAttack(
  ctx: { config: TurnhostConfig; logger: Logger; store: EventStore; ownListeners: OwnListeners },
  probes: WorkerHostProbes,
  services: { turns?: TurnManager; workspaces?: WorkspaceService },
  shutdown: ShutdownSteps,
): Promise<void> {
  const { config, logger, store, ownListeners } = ctx;
  if (services.turns === undefined) return;
  const workspaces = config.workspaces.root === null ? undefined : services.workspaces;
  probes.attack = new BoundaryAttack({
    config,
    logger: logger.child({ component: 'attack' }),
    events: store,
    host: new TurnManagerAttackHost(services.turns, workspaces),
    ownPorts: () => ownListeners.ports(),
  });
  if (config.probes.attackAtBoot) await probes.attackCheck('boot');
  const seconds = config.probes.attackIntervalSeconds;
  if (seconds === 0) return;
  const timer = setInterval(() => void probes.attackCheck('schedule'), seconds * 1000);
  timer.unref();
  shutdown.push(() => clearInterval(timer));
}

/** Unbound events past retention (read at each pass) are pruned at boot and hourly. */
function startEventPruning(store: EventStore, config: TurnhostConfig, logger: Logger): () => void {
  const prune = (): void => {
    try {
      const removed = store.pruneUnbound();
      if (removed > 0)
        logger.info('pruned unbound events', { removed, retentionDays: config.events.unboundRetentionDays });
    } catch (error) {
      logger.error('pruning unbound events failed', { error: (error as Error).message });
    }
  };
  prune();
  const timer = setInterval(prune, PRUNE_INTERVAL_MS);
  timer.unref();
  return () => clearInterval(timer);
}

/** Event and scratch pruning, each undone at shutdown. */
function startPruning(config: TurnhostConfig, store: EventStore, logger: Logger, shutdown: ShutdownSteps): void {
  shutdown.push(startEventPruning(store, config, logger));
  // The scratch area's byte cap; files named *.pin are pinned (docs/fs-guard.md).
  const { scratch } = config.fs;
  if (scratch.dir !== null)
    shutdown.push(
      startScratchPruner({
        dir: scratch.dir,
        capBytes: scratch.capBytes,
        intervalSeconds: scratch.pruneIntervalSeconds,
        isPinned: isPinnedScratchName,
        sink: store,
        logger: logger.child({ component: 'scratch' }),
      }),
    );
}

/** The turn manager and its workspaces; without them the daemon serves no turn routes (logged). */
async function startTurnServices(
  ctx: {
    config: TurnhostConfig;
    logger: Logger;
    store: EventStore;
    probeContext: ProbeContext;
    ownListeners: OwnListeners;
  },
  shutdown: ShutdownSteps,
): Promise<{ turns?: TurnManager; workspaces?: WorkspaceService }> {
  const built = await createProductionTurnManager(ctx);
  if (!built.ok) {
    ctx.logger.error('turn manager unavailable; serving without turn routes', { detail: built.detail });
    return {};
  }
  shutdown.push(
    () => built.close(),
    () => built.turns.close(),
    () => built.workspaces.close(),
  );
  shutdown.push(startSessionRetention(built.turns, ctx.config, ctx.logger));
  return { turns: built.turns, workspaces: built.workspaces };
}

/** The copy of every event to the journal, while `events.journal` is on (a reload may turn it on). */
class JournalCopy {
  private journal: JournalEventSink | null = null;

  constructor(
    private readonly config: TurnhostConfig,
    private readonly socketPath: string | undefined,
    private readonly logger: Logger,
  ) {
    this.sync();
  }

  /** Opens the journal once the configuration asks for it. */
  sync(): void {
    if (this.config.events.journal && this.journal === null)
      this.journal = createJournalEventSink({ socketPath: this.socketPath, logger: this.logger });
  }

  send(event: Parameters<JournalEventSink['send']>[0]): void {
    if (this.config.events.journal) this.journal?.send(event);
  }

  counts(): ReturnType<JournalEventSink['counts']> {
    return this.journal?.counts() ?? { sent: 0, failed: 0 };
  }

  close(): void {
    this.journal?.close();
  }
}

/** Activity, the journal copy of events and the metrics, all fed by the event stream. */
function startObservers(
  ctx: { config: TurnhostConfig; logger: Logger; store: EventStore; journalSocket?: string },
  probes: WorkerHostProbes,
  turns: TurnManager | undefined,
  shutdown: ShutdownSteps,
): { activity: Activity; journal: JournalCopy; metrics: Metrics } {
  const { config, store } = ctx;
  const activity = createActivity(store);
  shutdown.push(() => activity.close());
  const journal = new JournalCopy(config, ctx.journalSocket, ctx.logger.child({ component: 'journal' }));
  const stopJournalCopy = activity.onEvent((event) => journal.send(event));
  shutdown.push(() => {
    stopJournalCopy();
    journal.close();
  });
  const metrics = createMetrics({
    config,
    store,
    activity,
    latestStatus: () => probes.latest,
    turns,
    journalCounts: () => journal.counts(),
  });
  shutdown.push(() => metrics.close());
  return { activity, journal, metrics };
}

/** The API (TCP and/or socket) and the token-free metrics listener; each bound address joins `ownListeners`. */
async function startListeners(
  ctx: { config: TurnhostConfig; logger: Logger; ownListeners: OwnListeners; metrics: Metrics },
  app: Omit<AppDeps, 'config' | 'logger' | 'metrics' | 'host' | 'software' | 'statusPage'>,
  shutdown: ShutdownSteps,
): Promise<Result<{ http: HttpServerHandle; metricsAddress: DaemonHandle['metricsAddress'] }, DaemonFailure>> {
  const { config, logger, ownListeners, metrics } = ctx;
  const http = await startHttp(
    {
      ...app,
      config,
      logger: logger.child({ component: 'http' }),
      software: softwareIdentity(),
      host: await collectHostFacts(),
      metrics,
      statusPage: {
        uiDir: path.join(packageRoot(), 'ui'),
        sessions: createUiSessions(),
        tokenFile: config.apiToken === null ? tokenFilePath(config.dataDir) : null,
      },
    },
    config.listen,
  );
  if (!http.ok) return http;
  if (http.server.tcp !== null) ownListeners.add(http.server.tcp);
  logger.info('listening', { tcp: http.server.tcp, socket: http.server.socket });
  shutdown.push(() => http.server.close());
  if (config.metrics.listen === null) return ok({ http: http.server, metricsAddress: null });
  const listener = await startMetricsListener(config.metrics.listen, metrics, logger.child({ component: 'metrics' }));
  if (!listener.ok) return listener;
  const metricsAddress = listener.listener.address;
  // Token-free by design: a turn must reach it even less than the API.
  ownListeners.add(metricsAddress);
  logger.info('metrics listening', { tcp: metricsAddress });
  shutdown.push(() => listener.listener.close());
  return ok({ http: http.server, metricsAddress });
}

/** What a reload reads and changes: the running configuration is changed in place. */
interface ReloadContext {
  options: DaemonOptions;
  env: NodeJS.ProcessEnv;
  config: TurnhostConfig;
  /** Changed in place too: the status reads where `turns.maxConcurrent` came from. */
  sources: ConfigSources;
  levelSwitch: LogLevelSwitch;
  logger: Logger;
  notifier: ServiceNotifier;
  probes: WorkerHostProbes;
  journal: JournalCopy;
  metrics: Metrics;
}

/** One reload (SIGHUP): a configuration that does not validate changes nothing. */
async function reloadOnce(ctx: ReloadContext): Promise<ReloadOutcome> {
  const { config, logger, notifier, probes, metrics } = ctx;
  notifier.reloading();
  const next = loadConfig({ configPath: ctx.options.configPath, env: ctx.env, overrides: ctx.options.overrides });
  if (!next.ok) {
    logger.error('configuration reload refused; the running configuration stays in force', {
      detail: next.detail,
    });
    metrics.countReload('refused');
    notifier.ready(`reload refused (${next.detail}); ${readyStatus(probes.latest)}`);
    return { ok: false, reason: 'config_invalid', detail: next.detail };
  }
  const plan = planReload(config, next.config);
  applyLiveKeys(config, next.config, plan);
  // turns.maxConcurrent and limits are live: where the value in force came from follows them.
  ctx.sources.capacity = next.sources.capacity;
  ctx.levelSwitch.level = config.logLevel;
  ctx.journal.sync();
  if (plan.live.length > 0) {
    probes.configurationView = 'live';
    // The probe reports the limits and egress the next turn gets: run it against the new values.
    try {
      await probes.run('check');
    } catch (error) {
      logger.error('probe after reload failed', { error: (error as Error).message });
    }
  }
  logger.info('configuration reloaded', { file: next.sources.file, applied: plan.live, needsRestart: plan.restart });
  if (plan.restart.length > 0)
    logger.warn('configuration changes wait for a restart (systemctl restart turnhost)', {
      needsRestart: plan.restart,
    });
  metrics.countReload('applied');
  notifier.ready(readyStatus(probes.latest));
  return { ok: true, applied: plan.live, needsRestart: plan.restart };
}

/**
 * One reload at a time, each reading the file afresh: a SIGHUP sent during a reload (after a
 * second edit) gets a reload of its own instead of being folded into one that read too early.
 */
function serialReload(ctx: ReloadContext): () => Promise<ReloadOutcome> {
  let reloads: Promise<unknown> = Promise.resolve();
  return () => {
    const next = reloads.then(() => reloadOnce(ctx));
    reloads = next.catch(() => undefined);
    return next;
  };
}

/** Stops once, however often it is called: STOPPING=1, then every shutdown step, newest first. */
function shutdownOnce(notifier: ServiceNotifier, shutdown: ShutdownSteps, logger: Logger): () => Promise<void> {
  let closing: Promise<void> | undefined;
  return () => {
    closing ??= (async () => {
      notifier.stopping();
      await shutdown.run();
      logger.info('stopped');
    })();
    return closing;
  };
}

/** The boot probe and the root-server warning; the probe's summary goes to systemd's STATUS=. */
async function probeAtBoot(probes: WorkerHostProbes, logger: Logger, notifier: ServiceNotifier): Promise<void> {
  await probes.boot(logger);
  if (isRoot()) logger.warn(probes.latest?.rootServer?.warning ?? ROOT_WARNING_FALLBACK, { rootServer: true });
  notifier.status(`boot probe done: ${probeSummary(probes.latest)}`);
}

export async function startDaemon(
  options: DaemonOptions = {},
): Promise<Result<{ daemon: DaemonHandle }, DaemonFailure>> {
  const env = options.env ?? process.env;
  const loaded = loadDaemonConfig(options, env);
  if (!loaded.ok) return loaded;
  const { config, sources, levelSwitch, logger } = loaded;
  const opened = await openDataDir(config, logger, env);
  if (!opened.ok) return opened;
  const { store, notifier, shutdown } = opened;
  const token = loadApiToken(config, logger);
  if (!token.ok) return shutdown.abort(token);

  const probeContext = createProbeContext(config, logger, env);
  const probes = new WorkerHostProbes(probeContext, options.runProbes ?? runWorkerHostProbes);
  await probeAtBoot(probes, logger, notifier);
  startPruning(config, store, logger, shutdown);

  const ownListeners = supervisorListeners(config);
  const services =
    options.turns === false
      ? {}
      : await startTurnServices({ config, logger, store, probeContext, ownListeners }, shutdown);
  const { activity, journal, metrics } = startObservers(
    { config, logger, store, journalSocket: options.journalSocket },
    probes,
    services.turns,
    shutdown,
  );
  const listening = await startListeners(
    { config, logger, ownListeners, metrics },
    {
      store,
      probes: () => probes.run('check'),
      attack: () => probes.attackCheck('check'),
      latestStatus: () => probes.latest,
      capacity: () => sources.capacity,
      ...services,
      token: token.token,
      activity,
    },
    shutdown,
  );
  if (!listening.ok) return shutdown.abort(listening);
  await startBoundaryAttack({ config, logger, store, ownListeners }, probes, services, shutdown);

  // Listeners bound, boot probe done: systemd may now order dependants after this unit.
  notifier.ready(readyStatus(probes.latest));
  notifier.startWatchdog();
  const reload = serialReload({
    options,
    env,
    config,
    sources,
    levelSwitch,
    logger,
    notifier,
    probes,
    journal,
    metrics,
  });
  const close = shutdownOnce(notifier, shutdown, logger);
  const { http, metricsAddress } = listening;
  const drain = (draining: boolean): boolean => services.turns?.setDraining(draining, 'signal') ?? false;
  return ok({ daemon: { config, sources, http, metricsAddress, ownListeners, reload, drain, close } });
}

/** One line for systemd's STATUS=: per mode available or its requirement. */
function probeSummary(status: WorkerHostStatus | null): string {
  if (status === null) return 'worker host unknown (the boot probe failed; run turnhost check)';
  const mode = (name: 'ordinary' | 'restricted'): string => {
    const availability = status[name];
    if (availability === undefined) return `${name} disabled`;
    return availability.available
      ? `${name} available`
      : `${name} UNAVAILABLE: ${availability.requirement ?? 'unknown'}`;
  };
  return `${mode('ordinary')}; ${mode('restricted')}; identity ${status.identity}`;
}

function readyStatus(status: WorkerHostStatus | null): string {
  return `serving; ${probeSummary(status)}`;
}
