/**
 * The one cgroup interface the turn manager uses. `prepareCgroupSubtree` runs once at boot and
 * picks the backend (v2 delegated subtree, or v1 under the process's own v1 cgroups);
 * `createTurnCgroup` makes the leaf (or one leaf per v1 hierarchy) that the identity helper
 * joins before exec. See docs/cgroups.md.
 */
import { fail, ok, type Result } from '../core/result.js';
import type { LimitHit, ResolvedLimits } from '../core/limits.js';
import type {
  CgroupLayout,
  CgroupLimits,
  CgroupSubtree,
  PrepareFailure,
  TurnCgroup,
  TurnCgroupCounters,
  TurnCgroupLeaves,
} from './types.js';
import { ID_DETAIL, isValidId } from '../api/schema/ids.js';
import { hostCgroupFs, type CgroupFs } from './files.js';
import { createV2Leaf, openV2Leaf, prepareV2Subtree } from './v2.js';
import { createV1Leaves, openV1Leaves, prepareV1Subtree } from './v1.js';

export interface PrepareOptions {
  /** Name of the turns parent (v2, default `turns`) or v1 subtree dir (default `turnhost`). */
  name?: string;
  fs?: CgroupFs;
}

/** v2 when every usable controller sits in cgroup2; v1 when the controllers sit in v1. */
export function prepareCgroupSubtree(
  layout: CgroupLayout,
  options: PrepareOptions = {},
): Result<{ subtree: CgroupSubtree }, PrepareFailure> {
  const cgfs = options.fs ?? hostCgroupFs;
  const backends = new Set(Object.values(layout.backendFor));
  // A subtree's directory name follows the turn id rule: both name cgroup directories.
  if (options.name !== undefined && !isValidId(options.name)) {
    return fail('invalid_name', `subtree name: ${ID_DETAIL}`);
  }
  if (backends.has('cgroup_v1')) {
    return prepareV1Subtree(layout, options.name ?? 'turnhost', cgfs);
  }
  if (backends.has('cgroup_v2') && layout.v2 !== null) {
    return prepareV2Subtree(layout.v2, layout.unavailable, options.name ?? 'turns', cgfs);
  }
  return fail('no_cgroup_backend', 'no cgroup backend can enforce memory, pids or cpu on this host');
}

function validateLimits(limits: ResolvedLimits): Result<{ requested: CgroupLimits }, 'invalid_limit'> {
  const requested: CgroupLimits = {};
  for (const name of ['memory', 'pids'] as const) {
    const value = limits[name];
    if (value === undefined) continue;
    if (!Number.isSafeInteger(value) || value <= 0) {
      return fail('invalid_limit', `limits.${name} must be a positive integer, got ${value}`);
    }
    requested[name] = value;
  }
  if (limits.cpu !== undefined) {
    if (!Number.isFinite(limits.cpu) || limits.cpu <= 0) {
      return fail('invalid_limit', `limits.cpu must be a positive number of CPUs, got ${limits.cpu}`);
    }
    requested.cpu = limits.cpu;
  }
  return ok({ requested });
}

function limitHitsFrom(counters: TurnCgroupCounters): LimitHit[] {
  const hits: LimitHit[] = [];
  if ((counters.oomKills ?? 0) > 0) hits.push('memory_oom');
  if ((counters.pidsMaxEvents ?? 0) > 0) hits.push('pids_max');
  if ((counters.nrThrottled ?? 0) > 0) hits.push('cpu_throttled');
  return hits;
}

function withStats(leaves: TurnCgroupLeaves): TurnCgroup {
  // `counters` stays on the object at run time; the type no longer offers it.
  const rest: Omit<TurnCgroupLeaves, 'counters'> = leaves;
  return {
    ...rest,
    stats() {
      // Through `leaves`: a backend's counters may read its own fields.
      const read = leaves.counters();
      return { ...read, limitHits: limitHitsFrom(read) };
    },
  };
}

export type CreateFailure = 'invalid_turn_id' | 'invalid_limit' | 'cgroup_exists' | 'cgroup_setup_failed';

export function createTurnCgroup(
  subtree: CgroupSubtree,
  turnId: string,
  limits: ResolvedLimits,
): Result<{ cgroup: TurnCgroup }, CreateFailure> {
  if (!isValidId(turnId)) return fail('invalid_turn_id', `turnId: ${ID_DETAIL}`);
  const validated = validateLimits(limits);
  if (!validated.ok) return validated;
  const created =
    subtree.backend === 'cgroup_v2'
      ? createV2Leaf(subtree, turnId, validated.requested)
      : createV1Leaves(subtree, turnId, validated.requested);
  return created.ok ? ok({ cgroup: withStats(created.leaves) }) : created;
}

/** An existing turn cgroup (left by a crash); applies nothing. */
export function openTurnCgroup(
  subtree: CgroupSubtree,
  turnId: string,
): Result<{ cgroup: TurnCgroup }, 'invalid_turn_id'> {
  if (!isValidId(turnId)) return fail('invalid_turn_id', `turnId: ${ID_DETAIL}`);
  const leaves = subtree.backend === 'cgroup_v2' ? openV2Leaf(subtree, turnId) : openV1Leaves(subtree, turnId);
  return ok({ cgroup: withStats(leaves) });
}

/** Names of the turn leaves present now (any hierarchy for v1); other names are ignored. */
export function listTurnCgroups(subtree: CgroupSubtree): string[] {
  const parents = subtree.backend === 'cgroup_v2' ? [subtree.turnsDir] : subtree.hierarchies.map((h) => h.turnsDir);
  const names = new Set<string>();
  for (const parent of parents) {
    const listed = subtree.fs.subdirectories(parent);
    if (listed.ok) listed.names.filter(isValidId).forEach((name) => names.add(name));
  }
  return [...names].sort();
}

/** Removes the turns parent(s); used at shutdown and by tests. Fails while leaves remain. */
export function removeCgroupSubtree(subtree: CgroupSubtree): Result {
  const parents = subtree.backend === 'cgroup_v2' ? [subtree.turnsDir] : subtree.hierarchies.map((h) => h.turnsDir);
  for (const parent of parents) {
    const removed = subtree.fs.rmdir(parent);
    if (!removed.ok && removed.reason !== 'cgroup_file_missing') return removed;
  }
  return ok({});
}

/** The directories turn leaves are created in: what the identity helper's `cgroup_root` must name. */
export function subtreeTurnRoots(subtree: CgroupSubtree): string[] {
  return subtree.backend === 'cgroup_v2' ? [subtree.turnsDir] : subtree.hierarchies.map((h) => h.turnsDir);
}
