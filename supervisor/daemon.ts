/**
 * The supervisor daemon, composed in a fixed order: configuration → logger → data directory →
 * event store (replays the fallback log) → API token → boot probes (a failure is logged once and
 * never refuses boot) → root-server warning → unbound-event pruning → turn manager → activity,
 * metrics and the journal copy of events → HTTP → `READY=1` to systemd (supervisor/systemd/).
 * `reload()` (SIGHUP) re-reads the configuration and applies what can change live
 * (supervisor/config/reload.ts).
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createLogger, type Logger, type LogLevelSwitch } from '../core/log.js';
import { fail, ok, type Result } from '../core/result.js';
import { loadConfig, parseHostPort, type ConfigOverrides, type ConfigSources } from './config/load.js';
import type { TurnhostConfig } from './config/types.js';
import { openEventStore } from './events/store.js';
import { isPinnedScratchName, startScratchPruner } from './fs/scratch.js';
import type { EventStore } from './events/types.js';
import { collectHostFacts } from './http/host-facts.js';
import { startHttp, type HttpServerHandle } from './http/server.js';
import { ensureApiToken } from './http/token.js';
import { runWorkerHostProbes, type ProbeContext } from './probes/index.js';
import type { WorkerHostStatus } from './probes/types.js';
import { packageRoot, softwareIdentity } from './software.js';
import type { TurnManager } from './turns/types.js';
import { runHelperProbe, runSharedProbe } from './identity/helper-probe.js';
import { runHelperView } from './identity/helper-view.js';
import { prepareSharedLauncher } from './identity/shared-launcher.js';
import { applyLiveKeys, planReload } from './config/reload.js';
import { createActivity } from './observe/activity.js';
import { createMetrics } from './observe/metrics.js';
import { startMetricsListener } from './http/metrics-route.js';
import { createUiSessions } from './http/ui-session.js';
import { createJournalEventSink, type JournalEventSink } from './systemd/journal.js';
import { createServiceNotifier } from './systemd/notify.js';
import { OwnListeners } from '../proxy/self-connection.js';

export const DATABASE_FILE = 'turnhost.db';
export const FALLBACK_LOG_FILE = 'events-fallback.log';
export const PRUNE_INTERVAL_MS = 60 * 60 * 1000;
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
export type ReloadOutcome =
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

/** The compiled worker next to this module (dist/), or dist/ of the checkout when running under tsx. */
export function workerEntry(): string {
  const sibling = fileURLToPath(new URL('../worker/main.js', import.meta.url));
  return fs.existsSync(sibling) ? sibling : path.join(packageRoot(), 'dist', 'worker', 'main.js');
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
    return context;
  }
  const shared = prepareSharedLauncher(config.dataDir, {
    cgroupRoots: [],
    workerExec: process.execPath,
    workerArgs: [workerEntry()],
    viewPaths: [packageRoot()],
  });
  if (!shared.ok) {
    context.sharedProbe = () => Promise.resolve(fail(shared.reason, shared.detail));
    return context;
  }
  context.sharedProbe = () => runSharedProbe(shared.launcher);
  context.sharedView = (request) => runHelperView(shared.launcher, request);
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
export function supervisorListeners(config: TurnhostConfig): OwnListeners {
  const listeners = new OwnListeners();
  const configured = config.listen.tcp === null ? null : parseHostPort(config.listen.tcp);
  if (configured !== null) listeners.add(configured);
  return listeners;
}

/**
 * Builds the production turn manager. The worker entry, the helper probe in
 * the probe context and the database handle are wired here, once, for `serve` and `run --local`.
 */
export async function createProductionTurnManager(ctx: {
  config: TurnhostConfig;
  logger: Logger;
  store: EventStore;
  probeContext: ProbeContext;
  ownListeners?: OwnListeners;
}): Promise<Result<{ turns: TurnManager; close(): void }, 'turns_unavailable'>> {
  try {
    const [{ createTurnManager }, { openDatabase }] = await Promise.all([
      import('./turns/manager.js'),
      import('./db/open.js'),
    ]);
    const opened = openDatabase(path.join(ctx.config.dataDir, DATABASE_FILE));
    if (!opened.ok) return fail('turns_unavailable', opened.detail);
    const turns = await createTurnManager({
      config: ctx.config,
      logger: ctx.logger.child({ component: 'turns' }),
      events: ctx.store,
      db: opened.db,
      probeContext: ctx.probeContext,
      worker: { node: process.execPath, entry: workerEntry() },
      ownListeners: ctx.ownListeners ?? supervisorListeners(ctx.config),
    });
    return ok({ turns, close: () => opened.db.close() });
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

export async function startDaemon(
  options: DaemonOptions = {},
): Promise<Result<{ daemon: DaemonHandle }, DaemonFailure>> {
  const env = options.env ?? process.env;
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
  });

  const dataDir = prepareDataDir(config.dataDir);
  if (!dataDir.ok) return dataDir;
  const lock = await lockDataDir(config.dataDir);
  if (!lock.ok) return lock;
  const opened = openStore(config, logger);
  if (!opened.ok) {
    await lock.release();
    return opened;
  }
  const store = opened.store;
  const notifier = createServiceNotifier({ env, logger });
  const cleanup: Array<() => void | Promise<void>> = [
    () => notifier.close(),
    () => lock.release(),
    () => store.close(),
  ];
  const abort = async <F extends Result<object, DaemonFailure>>(failure: F): Promise<F> => {
    for (const step of cleanup.reverse()) await step();
    return failure;
  };

  const token = ensureApiToken(config);
  if (!token.ok) return abort(token);
  if (token.source === 'generated')
    logger.info('api token generated', { file: path.join(config.dataDir, 'api-token') });

  const probeContext = createProbeContext(config, logger, env);
  const runProbes = options.runProbes ?? runWorkerHostProbes;
  let latest: WorkerHostStatus | null = null;
  /** `live` once a reload has applied a change: status then describes the reloaded configuration. */
  let configurationView: 'startup' | 'live' = 'startup';
  const probe = async (trigger: 'boot' | 'check'): Promise<WorkerHostStatus> => {
    const status = await runProbes(probeContext, trigger);
    status.governed.configurationView = configurationView;
    latest = status;
    return status;
  };
  try {
    latest = await probe('boot');
  } catch (error) {
    logger.error('boot probe failed; status reports no worker host until a check succeeds', {
      error: (error as Error).message,
    });
  }
  if (isRoot()) logger.warn(latest?.rootServer?.warning ?? ROOT_WARNING_FALLBACK, { rootServer: true });

  notifier.status(`boot probe done: ${probeSummary(latest)}`);

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
  const pruneTimer = setInterval(prune, PRUNE_INTERVAL_MS);
  pruneTimer.unref();
  cleanup.push(() => clearInterval(pruneTimer));
  // The scratch area's byte cap; files named *.pin are pinned (docs/fs-guard.md).
  const { scratch } = config.fs;
  if (scratch.dir !== null)
    cleanup.push(
      startScratchPruner({
        dir: scratch.dir,
        capBytes: scratch.capBytes,
        intervalSeconds: scratch.pruneIntervalSeconds,
        isPinned: isPinnedScratchName,
        sink: store,
        logger: logger.child({ component: 'scratch' }),
      }),
    );

  const ownListeners = supervisorListeners(config);
  let turns: TurnManager | undefined;
  if (options.turns !== false) {
    const built = await createProductionTurnManager({ config, logger, store, probeContext, ownListeners });
    if (built.ok) {
      turns = built.turns;
      cleanup.push(
        () => built.close(),
        () => built.turns.close(),
      );
      cleanup.push(startSessionRetention(built.turns, config, logger));
    } else {
      logger.error('turn manager unavailable; serving without turn routes', { detail: built.detail });
    }
  }

  const activity = createActivity(store);
  cleanup.push(() => activity.close());
  let journal: JournalEventSink | null = null;
  const journalSocket = options.journalSocket;
  const syncJournal = (): void => {
    if (config.events.journal && journal === null)
      journal = createJournalEventSink({ socketPath: journalSocket, logger: logger.child({ component: 'journal' }) });
  };
  syncJournal();
  const stopJournalCopy = activity.onEvent((event) => {
    if (config.events.journal) journal?.send(event);
  });
  cleanup.push(() => {
    stopJournalCopy();
    journal?.close();
  });
  const metrics = createMetrics({
    config,
    store,
    activity,
    latestStatus: () => latest,
    turns,
    journalCounts: () => journal?.counts() ?? { sent: 0, failed: 0 },
  });
  cleanup.push(() => metrics.close());

  const http = await startHttp(
    {
      config,
      logger: logger.child({ component: 'http' }),
      store,
      probes: () => probe('check'),
      latestStatus: () => latest,
      turns,
      software: softwareIdentity(),
      host: await collectHostFacts(),
      token: token.token,
      metrics,
      activity,
      statusPage: { uiDir: path.join(packageRoot(), 'ui'), sessions: createUiSessions() },
    },
    config.listen,
  );
  if (!http.ok) return abort(http);
  if (http.server.tcp !== null) ownListeners.add(http.server.tcp);
  logger.info('listening', { tcp: http.server.tcp, socket: http.server.socket });
  cleanup.push(() => http.server.close());

  let metricsAddress: DaemonHandle['metricsAddress'] = null;
  if (config.metrics.listen !== null) {
    const listener = await startMetricsListener(config.metrics.listen, metrics, logger.child({ component: 'metrics' }));
    if (!listener.ok) return abort(listener);
    metricsAddress = listener.listener.address;
    // Token-free by design: a turn must reach it even less than the API.
    ownListeners.add(metricsAddress);
    logger.info('metrics listening', { tcp: metricsAddress });
    cleanup.push(() => listener.listener.close());
  }

  // Listeners bound, boot probe done: systemd may now order dependants after this unit.
  notifier.ready(readyStatus(latest));
  notifier.startWatchdog();

  const reloadOnce = async (): Promise<ReloadOutcome> => {
    notifier.reloading();
    const next = loadConfig({ configPath: options.configPath, env, overrides: options.overrides });
    if (!next.ok) {
      logger.error('configuration reload refused; the running configuration stays in force', {
        detail: next.detail,
      });
      metrics.countReload('refused');
      notifier.ready(`reload refused (${next.detail}); ${readyStatus(latest)}`);
      return { ok: false, reason: 'config_invalid', detail: next.detail };
    }
    const plan = planReload(config, next.config);
    applyLiveKeys(config, next.config, plan);
    levelSwitch.level = config.logLevel;
    syncJournal();
    if (plan.live.length > 0) configurationView = 'live';
    if (plan.live.length > 0) {
      // The probe reports the limits and egress the next turn gets: run it against the new values.
      try {
        await probe('check');
      } catch (error) {
        logger.error('probe after reload failed', { error: (error as Error).message });
      }
    }
    logger.info('configuration reloaded', {
      file: next.sources.file,
      applied: plan.live,
      needsRestart: plan.restart,
    });
    if (plan.restart.length > 0)
      logger.warn('configuration changes wait for a restart (systemctl restart turnhost)', {
        needsRestart: plan.restart,
      });
    metrics.countReload('applied');
    notifier.ready(readyStatus(latest));
    return { ok: true, applied: plan.live, needsRestart: plan.restart };
  };
  // One reload at a time, each reading the file afresh: a SIGHUP sent during a reload (after a
  // second edit) gets a reload of its own instead of being folded into one that read too early.
  let reloads: Promise<unknown> = Promise.resolve();
  const reload = (): Promise<ReloadOutcome> => {
    const next = reloads.then(reloadOnce);
    reloads = next.catch(() => undefined);
    return next;
  };

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      notifier.stopping();
      for (const step of cleanup.reverse()) await step();
      logger.info('stopped');
    })();
    return closing;
  };
  return ok({ daemon: { config, sources, http: http.server, metricsAddress, ownListeners, reload, close } });
}

/** One line for systemd's STATUS=: per mode available or its requirement. */
export function probeSummary(status: WorkerHostStatus | null): string {
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
