/**
 * What every worker launch of this supervisor shares, set up once when the turn manager starts:
 * the runtime directory (per-worker proxy sockets, the shared_uid launcher's config), the turn
 * cgroup subtree, the worker uid pools and the shared_uid launcher.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Result } from '../../core/result.js';
import { discoverCgroupLayout } from '../../cgroup/discover.js';
import type { CgroupLayout, CgroupSubtree } from '../../cgroup/types.js';
import { prepareCgroupSubtree, removeCgroupSubtree, subtreeTurnRoots } from '../../cgroup/turn-cgroup.js';
import type { HelperLocation } from '../identity/helper-process.js';
import { prepareSharedLauncher } from '../identity/shared-launcher.js';
import type { TurnRecordStore } from './store.js';
import type { TurnManagerDeps } from './types.js';
import type { UidPool } from './uid-pool.js';
import { markInheritedFdsCloseOnExec } from './worker-process.js';

export interface LaunchEnvironment {
  deps: TurnManagerDeps;
  records: TurnRecordStore;
  /** Per-worker directories for proxy sockets: created exclusively, 0711. */
  runtimeDir: string;
  /** A root supervisor owns the proxy sockets as itself; a non-root one checks peers' credentials. */
  supervisorIsRoot: boolean;
  cgroupSubtree: Result<{ subtree: CgroupSubtree }>;
  uidPools: Map<string, UidPool>;
  /** The helper in shared mode, with this supervisor's config (shared_uid workers); null when unusable. */
  sharedLauncher: HelperLocation | null;
  /** Why there is no shared launcher, when there is none. */
  sharedLauncherProblem: string | null;
  /** What a workspace holds (set by the manager once its workspace service exists). */
  workspaceUsage?: (id: string) => Promise<Result<{ bytes: number; files: number; image: boolean }>>;
  close(): void;
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

export function prepareLaunchEnvironment(deps: TurnManagerDeps, records: TurnRecordStore): LaunchEnvironment {
  const inherited = markInheritedFdsCloseOnExec();
  if (!inherited.ok) deps.logger.warn('inherited fds could not be marked close-on-exec', { detail: inherited.detail });
  const runtimeDir = fs.mkdtempSync(path.join(deps.runtimeParent ?? os.tmpdir(), 'turnhost-run-'));
  fs.chmodSync(runtimeDir, 0o711);
  const layout = discoverCgroupLayout(deps.config.probeRoots);
  const name = deps.cgroupSubtreeName ?? turnSubtreeName(layout, deps.config.dataDir);
  const cgroupSubtree = prepareCgroupSubtree(layout, name === undefined ? {} : { name });
  if (!cgroupSubtree.ok)
    deps.logger.warn('turn cgroups unavailable', { reason: cgroupSubtree.reason, detail: cgroupSubtree.detail });
  const shared = prepareSharedLauncher(
    runtimeDir,
    {
      cgroupRoots: cgroupSubtree.ok ? subtreeTurnRoots(cgroupSubtree.subtree) : [],
      workerExec: deps.worker.exec,
      workerArgs: deps.worker.args,
      viewPaths: deps.sharedViewPaths ?? [],
      workspaceRoots: deps.config.workspaces.root === null ? [] : [deps.config.workspaces.root],
    },
    deps.sharedLauncherBinary,
  );
  return {
    deps,
    records,
    runtimeDir,
    supervisorIsRoot: deps.supervisorIsRoot ?? process.geteuid?.() === 0,
    cgroupSubtree,
    uidPools: new Map(),
    sharedLauncher: shared.ok ? shared.launcher : null,
    sharedLauncherProblem: shared.ok ? null : shared.detail,
    close() {
      fs.rmSync(runtimeDir, { recursive: true, force: true });
      // Every worker has ended by now; an empty subtree is removed and made again at the next start.
      if (cgroupSubtree.ok) removeCgroupSubtree(cgroupSubtree.subtree);
    },
  };
}
