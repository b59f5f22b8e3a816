/**
 * The supervisor daemon, composed in a fixed order: configuration → logger → data directory →
 * event store (replays the fallback log) → API token → boot probes (a failure is logged once and
 * never refuses boot) → root-server warning → unbound-event pruning → turn manager → HTTP.
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createLogger, type Logger } from '../core/log.js';
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
import { runHelperProbe, runHelperView } from './identity/helper-client.js';
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
}

export interface DaemonHandle {
  config: TurnhostConfig;
  sources: ConfigSources;
  http: HttpServerHandle;
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
      unboundRetentionDays: config.events.unboundRetentionDays,
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

/** The probe context for `serve` and `run --local`: a configured helper is probed for its receipt on every run. */
export function createProbeContext(config: TurnhostConfig, logger: Logger, env: NodeJS.ProcessEnv): ProbeContext {
  const context: ProbeContext = { config, logger: logger.child({ component: 'probes' }), env };
  const { path: helperPath, configPath } = config.identityHelper;
  if (helperPath !== null) {
    context.helperProbe = () => runHelperProbe({ path: helperPath, configPath });
    // Each probe verifies the masked view on a sentinel tree through the helper's `view`.
    context.helperView = (request) => runHelperView({ path: helperPath, configPath }, request);
  }
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

export async function startDaemon(
  options: DaemonOptions = {},
): Promise<Result<{ daemon: DaemonHandle }, DaemonFailure>> {
  const env = options.env ?? process.env;
  const loaded = loadConfig({ configPath: options.configPath, env, overrides: options.overrides });
  if (!loaded.ok) return loaded;
  const { config, sources } = loaded;
  const logger = options.logger ?? createLogger({ level: config.logLevel, fields: { component: 'supervisor' } });
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
  const cleanup: Array<() => void | Promise<void>> = [() => lock.release(), () => store.close()];
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
  try {
    latest = await runProbes(probeContext, 'boot');
  } catch (error) {
    logger.error('boot probe failed; status reports no worker host until a check succeeds', {
      error: (error as Error).message,
    });
  }
  if (isRoot()) logger.warn(latest?.rootServer?.warning ?? ROOT_WARNING_FALLBACK, { rootServer: true });

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
    } else {
      logger.error('turn manager unavailable; serving without turn routes', { detail: built.detail });
    }
  }

  const http = await startHttp(
    {
      config,
      logger: logger.child({ component: 'http' }),
      store,
      probes: async () => {
        latest = await runProbes(probeContext, 'check');
        return latest;
      },
      latestStatus: () => latest,
      turns,
      software: softwareIdentity(),
      host: await collectHostFacts(),
      token: token.token,
    },
    config.listen,
  );
  if (!http.ok) return abort(http);
  if (http.server.tcp !== null) ownListeners.add(http.server.tcp);
  logger.info('listening', { tcp: http.server.tcp, socket: http.server.socket });
  cleanup.push(() => http.server.close());

  let closing: Promise<void> | undefined;
  const close = (): Promise<void> => {
    closing ??= (async () => {
      for (const step of cleanup.reverse()) await step();
      logger.info('stopped');
    })();
    return closing;
  };
  return ok({ daemon: { config, sources, http: http.server, ownListeners, close } });
}
