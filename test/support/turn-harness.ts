/**
 * Builds a real turn manager for native tests: a temp data dir and workspace, the helper built
 * in the tree with a root-owned config naming a per-test-file uid range and cgroup subtree, and
 * a real event store. Everything is removed in teardown.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { createMemoryLogger } from '../../core/log.js';
import { stopTapInjectingIntoChildren } from './no-tap-inject.js';
import { discoverCgroupLayout } from '../../cgroup/discover.js';
import { prepareCgroupSubtree, removeCgroupSubtree, subtreeTurnRoots } from '../../cgroup/turn-cgroup.js';
import { defaultConfig } from '../../supervisor/config/load.js';
import type { TurnhostConfig } from '../../supervisor/config/types.js';
import { openDatabase } from '../../supervisor/db/open.js';
import { openEventStore } from '../../supervisor/events/store.js';
import { runHelperProbe, runSharedProbe } from '../../supervisor/identity/helper-probe.js';
import { runHelperView } from '../../supervisor/identity/helper-view.js';
import { prepareSharedLauncher } from '../../supervisor/identity/shared-launcher.js';
import type { ProbeContext } from '../../supervisor/probes/index.js';
import { writeHelperConfig } from '../../supervisor/identity/helper-config.js';
import { composeTurnServices } from '../../supervisor/compose.js';
import type { TurnManager } from '../../supervisor/turns/manager.js';
import type { TurnResult } from '../../supervisor/turns/types.js';
import type { WorkspaceService } from '../../supervisor/workspaces/service.js';
import type { EventStore } from '../../supervisor/events/types.js';
import type { OwnListeners } from '../../proxy/self-connection.js';

export const REPO_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const HELPER_PATH = path.join(REPO_ROOT, 'identity-helper/build/identity-helper');
/** The native worker (make -C worker all); the helper executes it from an fd, outside any view. */
export const WORKER_PROGRAM = path.join(REPO_ROOT, 'worker/build/turnhost-worker');
/** What the helper executes as the worker, and its arguments. */
interface WorkerProgram {
  exec: string;
  args: string[];
}
export const NATIVE_BUILD = path.join(REPO_ROOT, 'test/native/build');

export interface TurnHarness {
  turns: TurnManager;
  /** The workspace service the turns run on (workspaces.root set only with `workspaces`). */
  workspaces: WorkspaceService;
  events: EventStore;
  config: TurnhostConfig;
  workspace: string;
  uidRange: { first: number; count: number };
  /** The probes' context the turn manager was built with, for a test that runs the probes itself. */
  probeContext: ProbeContext;
  logLines: string[];
  close(): Promise<void>;
}

export interface HarnessOptions {
  /** Distinguishes parallel test files: uid range and cgroup subtree derive from it. */
  slot: number;
  separateUid?: boolean;
  configure?: (config: TurnhostConfig) => void;
  /**
   * Use this directory for data and workspace instead of a fresh one: a second harness on the
   * directory of a killed one plays the supervisor restarting after a crash.
   */
  stateDir?: string;
  /** False runs the non-root supervisor's turn temp path (helper chown and reclaim); see TurnManagerDeps. */
  supervisorIsRoot?: boolean;
  /**
   * Workspaces under `<base>/workspaces` (workspaces.root, and the helper's workspace_root);
   * leases recorded in `uidLeaseDir` (root's, outside /tmp; default inside the helper dir).
   */
  workspaces?: { uidLeaseDir?: string; root?: string };
  /** close() leaves the state directory (and workspaces root) for a restarted harness. */
  keepStateOnClose?: boolean;
  /** Size of the helper's worker uid range (default 64). */
  uidCount?: number;
  /** A program to run instead of the worker (a decoy; a file under the repository: the view shows that). */
  worker?: WorkerProgram;
  /** The supervisor's TCP listeners (a daemon's), which no turn's proxy may dial. */
  ownListeners?: OwnListeners;
}

/** The worker uid range of a harness in `slot`: fixed, so a test can watch it before creating the harness. */
export function harnessUidRange(slot: number, count = 64): { first: number; count: number } {
  return { first: 3_100_000 + slot * 1000, count };
}

export async function createTurnHarness(options: HarnessOptions): Promise<TurnHarness> {
  stopTapInjectingIntoChildren();
  const base = options.stateDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-harness-'));
  fs.chmodSync(base, 0o755);
  const workspace = path.join(base, 'workspace');
  fs.mkdirSync(workspace, { recursive: true, mode: 0o777 });
  fs.chmodSync(workspace, 0o777);
  // The helper refuses a config under a world-writable directory such as /tmp.
  const helperDir = fs.mkdtempSync('/run/turnhost-harness-');
  const uidRange = harnessUidRange(options.slot, options.uidCount);
  const subtreeName = options.stateDir
    ? `turnhost-test-${options.slot}-${path.basename(base)}`
    : `turnhost-test-${options.slot}-${process.pid}`;

  const config = defaultConfig({ installed: false, cwd: base });
  config.dataDir = path.join(base, 'data');
  config.turns.workspaceRoots = [workspace];
  config.limits = { processes: 256, open_files: 1024, memory: '512M', pids: 128, cpu: 1, tmp_size: '64M' };
  config.egress.allowAddressRanges = [];

  const layout = discoverCgroupLayout(config.probeRoots);
  const prepared = prepareCgroupSubtree(layout, { name: subtreeName });
  if (!prepared.ok) throw new Error(`test cgroup subtree: ${prepared.detail}`);
  // A root outside /tmp is what a view shows unless it hides it (the view replaces /tmp whole).
  const workspacesRoot = options.workspaces?.root ?? path.join(base, 'workspaces');
  if (options.workspaces) {
    fs.mkdirSync(workspacesRoot, { recursive: true, mode: 0o711 });
    config.workspaces.root = workspacesRoot;
  }
  const worker = options.worker ?? { exec: WORKER_PROGRAM, args: [] };
  if (options.separateUid !== false) {
    const helperConfig = path.join(helperDir, 'identity-helper.conf');
    writeHelperConfig(helperConfig, {
      uidRange,
      callerGroup: 'root',
      cgroupRoots: subtreeTurnRoots(prepared.subtree),
      workerExec: worker.exec,
      workerArgs: worker.args,
      viewPaths: [REPO_ROOT], // the native test programs (the worker needs no path in the view)
      ...(options.workspaces
        ? {
            workspaceRoots: [workspacesRoot],
            uidLeaseDir: options.workspaces.uidLeaseDir ?? path.join(helperDir, 'leases'),
          }
        : {}),
    });
    // A copy in the root-owned helper dir: the probe refuses a helper below a group- or
    // world-writable directory, and a checkout may live under /tmp.
    const helperCopy = path.join(helperDir, 'identity-helper');
    fs.copyFileSync(HELPER_PATH, helperCopy);
    fs.chmodSync(helperCopy, 0o755);
    config.identityHelper = { path: helperCopy, configPath: helperConfig };
  }
  options.configure?.(config);

  fs.mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  const { logger, lines } = createMemoryLogger('debug');
  const events = openEventStore({
    databasePath: path.join(config.dataDir, 'turnhost.db'),
    fallbackLogPath: path.join(config.dataDir, 'events-fallback.log'),
    unboundRetentionDays: 30,
    logger,
  });
  const db = openDatabase(path.join(config.dataDir, 'turnhost.db'));
  if (!db.ok) throw new Error(db.detail);
  const helper = config.identityHelper.path
    ? { path: config.identityHelper.path, configPath: config.identityHelper.configPath }
    : null;
  const probeContext: ProbeContext = {
    config,
    logger,
    env: {},
    ...(helper
      ? { helperProbe: () => runHelperProbe(helper), helperView: (request) => runHelperView(helper, request) }
      : sharedProbes(helperDir, worker)),
  };
  const { turns, workspaces } = await composeTurnServices({
    config,
    logger,
    events,
    db: db.db,
    probeContext,
    worker,
    env: {},
    cgroupSubtreeName: subtreeName,
    sharedViewPaths: [REPO_ROOT],
    sharedLauncherBinary: HELPER_PATH,
    ...(options.supervisorIsRoot === undefined ? {} : { supervisorIsRoot: options.supervisorIsRoot }),
    ...(options.ownListeners ? { ownListeners: options.ownListeners } : {}),
  });
  return {
    turns,
    workspaces,
    events,
    config,
    workspace,
    uidRange,
    probeContext,
    logLines: lines,
    async close() {
      await turns.close();
      events.close();
      db.db.close();
      fs.rmSync(helperDir, { recursive: true, force: true });
      removeCgroupSubtree(prepared.subtree);
      if (options.keepStateOnClose) return;
      fs.rmSync(base, { recursive: true, force: true });
      if (options.workspaces?.root) fs.rmSync(options.workspaces.root, { recursive: true, force: true });
    },
  };
}

/** The shared_uid launcher's probes, as the daemon wires them (its config in `dir`). */
function sharedProbes(dir: string, worker: WorkerProgram): Pick<ProbeContext, 'sharedProbe' | 'sharedView'> {
  const prepared = prepareSharedLauncher(
    dir,
    { cgroupRoots: [], workerExec: worker.exec, workerArgs: worker.args, viewPaths: [REPO_ROOT] },
    HELPER_PATH,
  );
  if (!prepared.ok) throw new Error(prepared.detail);
  return {
    sharedProbe: () => runSharedProbe(prepared.launcher),
    sharedView: (request) => runHelperView(prepared.launcher, request),
  };
}

/** Runs one turn to its end and collects its output. */
export async function runTurn(
  harness: TurnHarness,
  request: {
    argv: string[];
    mode?: 'ordinary' | 'restricted';
    tty?: { cols: number; rows: number };
    timeoutSeconds?: number;
    limits?: Record<string, string | number>;
    env?: Record<string, string>;
    sessionId?: string;
    /** A workspace id: the turn runs in it, cwd relative to it. */
    workspace?: string;
    cwd?: string;
  },
) {
  const created = await harness.turns.create({
    sessionId: request.sessionId ?? 'session-test',
    mode: 'ordinary',
    cwd: request.workspace === undefined ? harness.workspace : '.',
    ...request,
  });
  if (!created.ok) throw new Error(`turn refused: ${created.reason}: ${created.detail}`);
  const id = created.turn.id;
  const attached = harness.turns.attach(id);
  if (!attached.ok) throw new Error(attached.detail);
  const chunks: Buffer[] = [];
  const stderr: Buffer[] = [];
  // The attach replays kept output from its files, then follows live: its exit comes after
  // every byte, where the turn's own end may come before the replay has caught up.
  const result = await new Promise<TurnResult>((resolve) =>
    attached.attachment.onEvent((event) => {
      if (event.type === 'output') (event.stream === 'stderr' ? stderr : chunks).push(event.data);
      if (event.type === 'exit') resolve(event.result);
    }),
  );
  return {
    id,
    result,
    stdout: Buffer.concat(chunks).toString(),
    stderr: Buffer.concat(stderr).toString(),
    record: harness.turns.get(id)!,
  };
}
