/**
 * Worker resource limits as every layer speaks of them: the names, their resolved values and
 * the limit hits a turn's cgroup reports.
 */
export type RlimitName = 'processes' | 'data' | 'file_size' | 'open_files';
export type CgroupLimitName = 'memory' | 'pids' | 'cpu';
export type LimitName = RlimitName | CgroupLimitName;

/**
 * Limits after parsing: bytes for memory, data and file_size; CPUs (may be fractional) for cpu;
 * a count for pids, processes and open_files. A missing name means "no limit configured".
 */
export type ResolvedLimits = Partial<Record<LimitName, number>>;

export type LimitHit = 'memory_oom' | 'pids_max' | 'cpu_throttled';
