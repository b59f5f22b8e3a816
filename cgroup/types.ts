/**
 * What `cgroup/discover.ts` learns about this host's cgroup layout. Probes turn it into limit
 * status; the v1/v2 backends use it to create turn leaves. All paths are absolute host paths
 * (under the configured /sys/fs/cgroup root).
 */
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
