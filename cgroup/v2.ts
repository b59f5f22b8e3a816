/**
 * cgroup v2 backend: a delegated subtree `<own>/{supervisor,<turns>/<turnId>}`. The supervisor's
 * processes move into the `supervisor` leaf because a cgroup with processes cannot enable
 * controllers for its children ("no internal processes").
 */
import path from 'node:path';
import { SUPERVISOR_LEAF } from './discover.js';
import { fail, ok, type Result } from '../core/result.js';
import type { CgroupController, CgroupV2Facts } from './types.js';
import {
  assertNoSymlinks,
  ensureDirectory,
  readCounters,
  readInteger,
  readPids,
  waitUntil,
  type CgroupFs,
} from './files.js';
import type {
  CgroupLimits,
  CgroupSubtreeV2,
  ControllerReasons,
  PrepareFailure,
  TurnCgroupCounters,
  TurnCgroupLeaves,
} from './types.js';

const CONTROLLERS: CgroupController[] = ['memory', 'pids', 'cpu'];
export const CPU_PERIOD_USEC = 100_000;
/** The kernel refuses a cpu.max quota below 1 ms. */
const CPU_MIN_QUOTA_USEC = 1_000;
const KILL_WAIT_MS = 2_000;

/** Quota per CPU_PERIOD_USEC for a (fractional) number of CPUs; v1 cfs_quota_us uses it too. */
export function cpuQuotaUsec(cpus: number): number {
  return Math.max(CPU_MIN_QUOTA_USEC, Math.round(cpus * CPU_PERIOD_USEC));
}

export function cpuMaxValue(cpus: number): string {
  return `${cpuQuotaUsec(cpus)} ${CPU_PERIOD_USEC}`;
}

function moveProcesses(cgfs: CgroupFs, fromDir: string, toDir: string): Result {
  for (const pid of readPids(cgfs, path.join(fromDir, 'cgroup.procs'))) {
    const moved = cgfs.write(path.join(toDir, 'cgroup.procs'), String(pid));
    // A process that exited meanwhile is not an error.
    if (!moved.ok && moved.reason !== 'cgroup_no_such_process') return moved;
  }
  return ok({});
}

/** Enables each controller with its own write, so one refusal does not hide the others. */
function enableControllers(
  cgfs: CgroupFs,
  dir: string,
  wanted: CgroupController[],
  unavailable: ControllerReasons,
): CgroupController[] {
  const enabled: CgroupController[] = [];
  for (const controller of wanted) {
    const written = cgfs.write(path.join(dir, 'cgroup.subtree_control'), `+${controller}`);
    if (written.ok) enabled.push(controller);
    else unavailable[controller] = `enabling ${controller} in ${dir} failed: ${written.detail}`;
  }
  return enabled;
}

export function prepareV2Subtree(
  facts: CgroupV2Facts,
  layoutUnavailable: ControllerReasons,
  turnsName: string,
  cgfs: CgroupFs,
): Result<{ subtree: CgroupSubtreeV2 }, PrepareFailure> {
  if (facts.ownCgroup === '/' || facts.ownCgroup === '') {
    return fail('cgroup_not_delegated', 'the process is in the cgroup2 root, which is not a delegated subtree');
  }
  if (!facts.writable) {
    return fail('cgroup_not_delegated', `own cgroup ${facts.ownDir} is not writable by this process (no delegation)`);
  }
  const checked = assertNoSymlinks(facts.ownDir);
  if (!checked.ok) return checked;

  const unavailable: ControllerReasons = { ...layoutUnavailable };
  const offered = CONTROLLERS.filter((c) => {
    if (facts.controllers.includes(c)) return true;
    unavailable[c] ??= `controller ${c} is not offered in ${facts.ownDir}/cgroup.controllers`;
    return false;
  });

  // With DelegateSubgroup=supervisor (or after a previous prepare) this leaf exists and this
  // process is already in it: the move is then a no-op.
  const supervisor = ensureDirectory(cgfs, facts.ownDir, SUPERVISOR_LEAF);
  if (!supervisor.ok) return fail('cgroup_setup_failed', supervisor.detail);
  const moved = moveProcesses(cgfs, facts.ownDir, supervisor.dir);
  if (!moved.ok) return fail('cgroup_setup_failed', `moving the supervisor into its leaf: ${moved.detail}`);

  const atOwn = enableControllers(cgfs, facts.ownDir, offered, unavailable);
  const turns = ensureDirectory(cgfs, facts.ownDir, turnsName);
  if (!turns.ok) return fail('cgroup_setup_failed', turns.detail);
  const controllers = enableControllers(cgfs, turns.dir, atOwn, unavailable);
  return ok({
    subtree: { backend: 'cgroup_v2', ownDir: facts.ownDir, turnsDir: turns.dir, controllers, unavailable, fs: cgfs },
  });
}

function limitWrites(requested: CgroupLimits): Array<[CgroupController, string, string]> {
  const writes: Array<[CgroupController, string, string]> = [];
  if (requested.memory !== undefined) {
    writes.push(['memory', 'memory.max', String(requested.memory)]);
    writes.push(['memory', 'memory.swap.max', '0']);
    writes.push(['memory', 'memory.oom.group', '1']);
  }
  if (requested.pids !== undefined) writes.push(['pids', 'pids.max', String(requested.pids)]);
  if (requested.cpu !== undefined) writes.push(['cpu', 'cpu.max', cpuMaxValue(requested.cpu)]);
  return writes;
}

export function createV2Leaf(
  subtree: CgroupSubtreeV2,
  turnId: string,
  requested: CgroupLimits,
): Result<{ leaves: TurnCgroupLeaves }, 'cgroup_exists' | 'cgroup_setup_failed'> {
  const dir = path.join(subtree.turnsDir, turnId);
  const made = subtree.fs.mkdir(dir);
  if (!made.ok) return fail(made.reason === 'cgroup_exists' ? 'cgroup_exists' : 'cgroup_setup_failed', made.detail);
  const leaves = openV2Leaf(subtree, turnId);
  for (const [controller, file, value] of limitWrites(requested)) {
    if (!subtree.controllers.includes(controller)) {
      leaves.absent[controller] = subtree.unavailable[controller] ?? `controller ${controller} unavailable`;
      continue;
    }
    const written = subtree.fs.write(path.join(dir, file), value);
    if (!written.ok) {
      subtree.fs.rmdir(dir);
      return fail('cgroup_setup_failed', written.detail);
    }
    leaves.applied[controller] = requested[controller];
  }
  return ok({ leaves });
}

function populated(cgfs: CgroupFs, dir: string): boolean {
  const events = readCounters(cgfs, path.join(dir, 'cgroup.events'));
  // Unreadable events on an existing leaf: assume populated, so callers never skip a kill.
  if (events === null) return cgfs.exists(dir);
  return events.get('populated') !== 0;
}

function readV2Counters(cgfs: CgroupFs, dir: string): TurnCgroupCounters {
  const cpu = readCounters(cgfs, path.join(dir, 'cpu.stat'));
  const memoryEvents = readCounters(cgfs, path.join(dir, 'memory.events'));
  const pidsEvents = readCounters(cgfs, path.join(dir, 'pids.events'));
  const oomKill = memoryEvents?.get('oom_kill');
  const oomGroupKill = memoryEvents?.get('oom_group_kill');
  return {
    cpuUsec: cpu?.get('usage_usec') ?? null,
    nrThrottled: cpu?.get('nr_throttled') ?? null,
    throttledUsec: cpu?.get('throttled_usec') ?? null,
    memoryPeakBytes: readInteger(cgfs, path.join(dir, 'memory.peak')),
    oomKills: oomKill === undefined && oomGroupKill === undefined ? null : (oomKill ?? 0) + (oomGroupKill ?? 0),
    pidsPeak: readInteger(cgfs, path.join(dir, 'pids.peak')),
    pidsCurrent: readInteger(cgfs, path.join(dir, 'pids.current')),
    pidsMaxEvents: pidsEvents?.get('max') ?? null,
  };
}

export function openV2Leaf(subtree: CgroupSubtreeV2, turnId: string): TurnCgroupLeaves {
  const cgfs = subtree.fs;
  const dir = path.join(subtree.turnsDir, turnId);
  return {
    turnId,
    backend: 'cgroup_v2',
    paths: [dir],
    applied: {},
    absent: {},
    kill() {
      const before = readPids(cgfs, path.join(dir, 'cgroup.procs')).length;
      const written = cgfs.write(path.join(dir, 'cgroup.kill'), '1');
      if (!written.ok) return written;
      if (!waitUntil(() => !populated(cgfs, dir), KILL_WAIT_MS)) {
        return fail('cgroup_kill_incomplete', `${dir} still populated after cgroup.kill`);
      }
      return ok({ killedProcesses: before });
    },
    counters: () => readV2Counters(cgfs, dir),
    isEmpty: () => !populated(cgfs, dir),
    remove() {
      const removed = cgfs.rmdir(dir);
      return removed.ok || removed.reason === 'cgroup_file_missing' ? ok({}) : removed;
    },
  };
}
