/**
 * What every worker launch of this supervisor shares, set up once when the turn manager starts:
 * the runtime directory (per-worker proxy sockets), the parent of the turn temps, the turn
 * cgroup subtree, and the worker uid pools.
 */
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { Result } from '../../core/result.js';
import { discoverCgroupLayout } from '../../cgroup/discover.js';
import type { CgroupLayout } from '../../cgroup/types.js';
import { prepareCgroupSubtree, removeCgroupSubtree } from '../../cgroup/turn-cgroup.js';
import { type CgroupSubtree } from '../../cgroup/types.js';
import type { TurnRecordStore } from './store.js';
import type { TurnManagerDeps } from './types.js';
import type { UidPool } from './uid-pool.js';
import { markInheritedFdsCloseOnExec } from './worker-process.js';

export interface LaunchEnvironment {
  deps: TurnManagerDeps;
  records: TurnRecordStore;
  /** Per-worker directories for proxy sockets: created exclusively, 0711. */
  runtimeDir: string;
  /** Parent of the per-turn temp directories (`turns.tempRoot`); supervisor-owned, 0711 so a worker uid can reach its own. */
  turnTempParent: string;
  /**
   * Chooses who changes the turn temp's owner: a root supervisor chowns and purges it itself; a
   * non-root one leaves it its own and has the identity helper hand it over and back.
   */
  supervisorIsRoot: boolean;
  cgroupSubtree: Result<{ subtree: CgroupSubtree }>;
  uidPools: Map<string, UidPool>;
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
  const turnTempParent = deps.config.turns.tempRoot;
  prepareTurnTempRoot(turnTempParent, deps.logger);
  const layout = discoverCgroupLayout(deps.config.probeRoots);
  const name = deps.cgroupSubtreeName ?? turnSubtreeName(layout, deps.config.dataDir);
  const cgroupSubtree = prepareCgroupSubtree(layout, name === undefined ? {} : { name });
  if (!cgroupSubtree.ok)
    deps.logger.warn('turn cgroups unavailable', { reason: cgroupSubtree.reason, detail: cgroupSubtree.detail });
  return {
    deps,
    records,
    runtimeDir,
    turnTempParent,
    supervisorIsRoot: deps.supervisorIsRoot ?? process.geteuid?.() === 0,
    cgroupSubtree,
    uidPools: new Map(),
    close() {
      fs.rmSync(runtimeDir, { recursive: true, force: true });
      // Every worker has ended by now; an empty subtree is removed and made again at the next start.
      if (cgroupSubtree.ok) removeCgroupSubtree(cgroupSubtree.subtree);
    },
  };
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
