/**
 * The capacity the status reports: `turns.maxConcurrent` (configured, or derived from the host
 * by supervisor/config/capacity.ts) and, in separate_uid, the worker uid range, which caps it:
 * every running turn holds one uid of the range, and a turn that finds none free is answered
 * 429 `capacity_exhausted` like one beyond `turns.maxConcurrent`.
 */
import { describeDerivation, type CapacityChoice } from '../config/capacity.js';
import type { TurnhostConfig } from '../config/types.js';
import type { WorkerHostStatus } from './types.js';

export interface CapacityStatus {
  maxConcurrent: number;
  configured: number;
  source: CapacityChoice['source'];
  cappedBy: 'uid_range' | null;
  uidRangeSize: number | null;
  derived: {
    value: number;
    memoryBound: number | null;
    cpuBound: number;
    memoryBytes: number;
    cpus: number;
    memoryLimitBytes: number | null;
  };
  reason: string;
}

/** The uid range bounds only separate_uid turns; shared_uid turns all run as the supervisor's uid. */
function uidRangeSize(probe: WorkerHostStatus | null): number | null {
  if (probe?.identity !== 'separate_uid' || probe.uidRange === undefined) return null;
  return probe.uidRange.count;
}

export function capacityStatus(
  config: Pick<TurnhostConfig, 'turns'>,
  choice: CapacityChoice,
  probe: WorkerHostStatus | null,
): CapacityStatus {
  const configured = config.turns.maxConcurrent;
  const rangeSize = uidRangeSize(probe);
  const capped = rangeSize !== null && rangeSize < configured;
  const maxConcurrent = capped ? rangeSize : configured;
  const { derived } = choice;
  const origin =
    choice.source === 'derived'
      ? `turns.maxConcurrent derived from the host: ${describeDerivation(derived)}`
      : `turns.maxConcurrent configured as ${configured} (the host's derived default would be ${derived.value})`;
  const cap = capped
    ? `; capped at ${rangeSize} by the worker uid range (separate_uid: each running turn holds one uid; widen uid_range in the helper config to raise it)`
    : '';
  return {
    maxConcurrent,
    configured,
    source: choice.source,
    cappedBy: capped ? 'uid_range' : null,
    uidRangeSize: rangeSize,
    derived: {
      value: derived.value,
      memoryBound: derived.memoryBound,
      cpuBound: derived.cpuBound,
      memoryBytes: derived.host.memoryBytes,
      cpus: derived.host.cpus,
      memoryLimitBytes: derived.memoryLimitBytes,
    },
    reason: `${maxConcurrent} turns at once: ${origin}${cap}`,
  };
}
