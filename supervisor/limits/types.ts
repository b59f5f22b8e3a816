import type { LimitName } from '../probes/types.js';

/**
 * Limits after parsing: bytes for memory, data and file_size; CPUs (may be fractional) for cpu;
 * a count for pids, processes and open_files. A missing name means "no limit configured".
 */
export type ResolvedLimits = Partial<Record<LimitName, number>>;
