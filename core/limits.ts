/**
 * Worker resource limits as every layer speaks of them: the names, their resolved values and
 * the limit hits a turn's cgroup reports.
 */
export type RlimitName = 'processes' | 'data' | 'file_size' | 'open_files';
export type CgroupLimitName = 'memory' | 'pids' | 'cpu';
/** The size of the turn's own /tmp (also its /var/tmp) and /dev/shm tmpfs, each. */
type TmpfsLimitName = 'tmp_size';
/**
 * The turn's /tmp size when none is configured. The supervisor always sends a size, so the
 * status reports the bound the helper actually mounts.
 */
export const DEFAULT_TMP_SIZE_BYTES = 512 * 1024 * 1024;
export type LimitName = RlimitName | CgroupLimitName | TmpfsLimitName;
/** What enforces a limit: the kernel's rlimits, the turn cgroup, or the size of a tmpfs. */
export type LimitSource = 'rlimit' | 'cgroup' | 'tmpfs';

/**
 * Limits after parsing: bytes for memory, data and file_size; CPUs (may be fractional) for cpu;
 * a count for pids, processes and open_files. A missing name means "no limit configured".
 */
export type ResolvedLimits = Partial<Record<LimitName, number>>;

export type LimitHit = 'memory_oom' | 'pids_max' | 'cpu_throttled';
