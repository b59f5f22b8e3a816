/**
 * The default of `turns.maxConcurrent`: how many turns this host can hold at once, derived from
 * the host (memory and cores) and the per-turn memory limit, so a large host is not held to a
 * small fixed number and a small host does not admit turns whose memory limits it cannot back:
 *
 *   min( floor(MEMORY_SHARE x host memory / limits.memory),  TURNS_PER_CPU x cores ),  at least 1
 *
 * The memory term leaves a fifth of the host to the supervisor, its proxies and everything else
 * and counts every turn at its full limit (a limit is a ceiling a turn may reach, and the kernel
 * reclaims from nobody when all reach it at once). Without a memory limit (disabled) the term is
 * absent. The cores term bounds the turns one scheduler shares: an agent's turn mostly waits (for
 * its model, the network, the operator), so many fit a core, but not without end.
 * A separate_uid worker uid range smaller than the result caps it further at run time: every
 * running turn holds one uid (the probes report that cap in the status).
 * docs/configuration.md ("Capacity") documents it for operators.
 */
import os from 'node:os';
import type { TurnhostConfig } from './types.js';

/** The share of the host's memory the turns' memory limits may add up to. */
export const MEMORY_SHARE = 0.8;
/** Turns per core: agent turns spend most of their life waiting. */
export const TURNS_PER_CPU = 64;

export interface HostCapacityFacts {
  memoryBytes: number;
  cpus: number;
}

export interface DerivedCapacity {
  value: number;
  /** floor(MEMORY_SHARE x memory / limit); null without a memory limit. */
  memoryBound: number | null;
  cpuBound: number;
  host: HostCapacityFacts;
  /** limits.memory in bytes; null when disabled or unset. */
  memoryLimitBytes: number | null;
}

/** Where the running `turns.maxConcurrent` came from. */
export interface CapacityChoice {
  /** `configured`: the file or TURNHOST_MAX_CONCURRENT_TURNS set it; `derived`: the formula above. */
  source: 'configured' | 'derived';
  /** The formula's answer, also when a configured value stands (so status can show both). */
  derived: DerivedCapacity;
}

export function hostCapacityFacts(): HostCapacityFacts {
  return { memoryBytes: os.totalmem(), cpus: os.availableParallelism() };
}

const BYTE_SUFFIX: Readonly<Record<string, number>> = { '': 1, K: 1024, M: 1024 ** 2, G: 1024 ** 3, T: 1024 ** 4 };

/**
 * `limits.memory` in bytes, in the grammar of supervisor/limits/parse.ts (which this floor
 * module may not import; the schema has already refused any other form). Null when the
 * operator disabled the memory limit or set none.
 */
export function configuredMemoryLimit(config: Pick<TurnhostConfig, 'limits' | 'limitsDisabled'>): number | null {
  if (config.limitsDisabled.includes('memory')) return null;
  const raw = config.limits.memory;
  if (raw === undefined) return null;
  const match = /^([1-9][0-9]*)([KMGT]?)$/i.exec(String(raw).trim());
  if (match === null) return null;
  const bytes = Number(match[1]) * (BYTE_SUFFIX[(match[2] ?? '').toUpperCase()] ?? NaN);
  return Number.isSafeInteger(bytes) && bytes > 0 ? bytes : null;
}

export function deriveMaxConcurrent(host: HostCapacityFacts, memoryLimitBytes: number | null): DerivedCapacity {
  const memoryBound =
    memoryLimitBytes === null ? null : Math.floor((MEMORY_SHARE * host.memoryBytes) / memoryLimitBytes);
  const cpuBound = TURNS_PER_CPU * Math.max(1, host.cpus);
  const value = Math.max(1, Math.min(cpuBound, memoryBound ?? cpuBound));
  return { value, memoryBound, cpuBound, host, memoryLimitBytes };
}

function gib(bytes: number): string {
  return `${(bytes / 1024 ** 3).toFixed(1)} GiB`;
}

/** The formula with this host's numbers, for the status and the boot log. */
export function describeDerivation(derived: DerivedCapacity): string {
  const cpuTerm = `${TURNS_PER_CPU} x ${derived.host.cpus} cores = ${derived.cpuBound}`;
  const memoryTerm =
    derived.memoryLimitBytes === null || derived.memoryBound === null
      ? 'no memory term (limits.memory disabled or unset)'
      : `${MEMORY_SHARE} x ${gib(derived.host.memoryBytes)} host memory / ${gib(derived.memoryLimitBytes)} limits.memory = ${derived.memoryBound}`;
  return `min(${memoryTerm}; ${cpuTerm}), at least 1: ${derived.value}`;
}
