/**
 * What `cgroup/discover.ts` learns about this host's cgroup layout. Probes turn it into limit
 * status; the v1/v2 backends use it to create turn leaves. All paths are absolute host paths
 * (under the configured /sys/fs/cgroup root).
 */
import type { LimitHit } from '../core/limits.js';
import type { Result } from '../core/result.js';
import type { CgroupFs } from './files.js';

export type CgroupController = 'memory' | 'pids' | 'cpu';

export interface CgroupV2Facts {
  /** Mount point of the cgroup2 filesystem, e.g. /sys/fs/cgroup or /sys/fs/cgroup/unified. */
  mountPoint: string;
  nsdelegate: boolean;
  /** The process's own cgroup, relative to the mount ("/system.slice/turnhost.service"). */
  ownCgroup: string;
  /** Absolute directory of the own cgroup. */
  ownDir: string;
  /** Own cgroup directory and its cgroup.procs/subtree_control writable by this process. */
  writable: boolean;
  /** Controllers listed in the own cgroup's cgroup.controllers. */
  controllers: string[];
}

export interface CgroupV1Hierarchy {
  controller: CgroupController;
  mountPoint: string;
  ownCgroup: string;
  ownDir: string;
  writable: boolean;
  /** memory only: memory.memsw.limit_in_bytes exists. */
  memsw?: boolean;
}

/**
 * v1 hierarchies the turn backend uses besides the limit controllers: `cpuacct` for cpu usage
 * when it is not co-mounted with `cpu`, and `freezer` to stop a turn before killing it.
 */
export interface CgroupV1AuxHierarchy {
  controller: 'cpuacct' | 'freezer';
  mountPoint: string;
  ownCgroup: string;
  ownDir: string;
  writable: boolean;
}

export interface CgroupLayout {
  kind: 'v2' | 'hybrid' | 'v1' | 'none';
  v2: CgroupV2Facts | null;
  /** v1 hierarchies that hold one of our controllers. */
  v1: CgroupV1Hierarchy[];
  /** v1 cpuacct and freezer hierarchies, when mounted (absent: none known). */
  v1Aux?: CgroupV1AuxHierarchy[];
  /** Why a controller cannot be used, per controller, when it cannot. */
  unavailable: Partial<Record<CgroupController, string>>;
  /** Which backend would enforce each controller. */
  backendFor: Partial<Record<CgroupController, 'cgroup_v2' | 'cgroup_v1'>>;
}

type CgroupBackend = 'cgroup_v2' | 'cgroup_v1';
export type CgroupLimits = Partial<Record<CgroupController, number>>;
export type ControllerReasons = Partial<Record<CgroupController, string>>;

export interface CgroupSubtreeV2 {
  backend: 'cgroup_v2';
  /** The delegated cgroup; holds `supervisor` (our processes) and the turns parent. */
  ownDir: string;
  turnsDir: string;
  controllers: CgroupController[];
  unavailable: ControllerReasons;
  fs: CgroupFs;
}

export type V1HierarchyName = CgroupController | 'cpuacct' | 'freezer';

export interface V1TurnHierarchy {
  controller: V1HierarchyName;
  /** `<own v1 cgroup>/<name>`: the parent of this hierarchy's turn leaves. */
  turnsDir: string;
  memsw?: boolean;
}

export interface CgroupSubtreeV1 {
  backend: 'cgroup_v1';
  hierarchies: V1TurnHierarchy[];
  unavailable: ControllerReasons;
  fs: CgroupFs;
}

export type CgroupSubtree = CgroupSubtreeV2 | CgroupSubtreeV1;

export interface TurnCgroupCounters {
  cpuUsec: number | null;
  nrThrottled: number | null;
  throttledUsec: number | null;
  memoryPeakBytes: number | null;
  oomKills: number | null;
  pidsPeak: number | null;
  pidsCurrent: number | null;
  /** Forks refused at pids.max. */
  pidsMaxEvents: number | null;
}

export interface TurnCgroupStats extends TurnCgroupCounters {
  limitHits: LimitHit[];
}

/** What a backend hands back; `TurnCgroup` adds the derived limit hits. */
export interface TurnCgroupLeaves {
  turnId: string;
  backend: CgroupBackend;
  /** Directories the identity helper joins: one for v2, one per hierarchy for v1. */
  paths: string[];
  applied: CgroupLimits;
  /** Requested limits this backend could not apply, with the reason. */
  absent: ControllerReasons;
  /** Kills every process in the turn and waits (bounded) until the cgroup is empty. */
  kill(): Result<{ killedProcesses: number }>;
  counters(): TurnCgroupCounters;
  isEmpty(): boolean;
  /** Removes every leaf directory; fails while processes remain. */
  remove(): Result;
}

export interface TurnCgroup extends Omit<TurnCgroupLeaves, 'counters'> {
  stats(): TurnCgroupStats;
}

export type PrepareFailure =
  'no_cgroup_backend' | 'cgroup_not_delegated' | 'invalid_name' | 'cgroup_setup_failed' | 'cgroup_path_refused';
