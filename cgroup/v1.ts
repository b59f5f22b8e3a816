/**
 * cgroup v1 backend for hybrid hosts: a `<name>` directory under the process's OWN cgroup in
 * each of the memory, pids, cpu (and cpuacct, freezer) hierarchies, and one turn leaf per
 * hierarchy under it. Never beside cgroups other software owns. v1 has no cgroup.kill and no
 * oom.group: kill freezes (when a freezer hierarchy exists) and SIGKILLs every listed process.
 */
import path from 'node:path';
import { fail, ok, type Result } from '../core/result.js';
import type { CgroupController, CgroupLayout } from './types.js';
import {
  assertNoSymlinks,
  ensureDirectory,
  killPid,
  readCounters,
  readInteger,
  readPids,
  readTrimmed,
  waitUntil,
  type CgroupFileFailure,
  type CgroupFs,
} from './files.js';
import { CPU_PERIOD_USEC, cpuQuotaUsec } from './v2.js';
import type {
  CgroupLimits,
  CgroupSubtreeV1,
  ControllerReasons,
  PrepareFailure,
  TurnCgroupCounters,
  TurnCgroupLeaves,
  V1HierarchyName,
  V1TurnHierarchy,
} from './types.js';

const CONTROLLERS: CgroupController[] = ['memory', 'pids', 'cpu'];
const KILL_WAIT_MS = 2_000;
const FREEZE_WAIT_MS = 500;
const REMOVE_WAIT_MS = 1_000;

interface OwnHierarchy {
  controller: V1HierarchyName;
  ownDir: string;
  writable: boolean;
  memsw?: boolean;
}

function ownHierarchies(layout: CgroupLayout, unavailable: ControllerReasons): OwnHierarchy[] {
  const found: OwnHierarchy[] = [];
  for (const controller of CONTROLLERS) {
    const hierarchy = layout.v1.find((h) => h.controller === controller);
    if (hierarchy === undefined) {
      unavailable[controller] ??= `controller ${controller} has no cgroup v1 hierarchy`;
    } else if (!hierarchy.writable) {
      unavailable[controller] = `own v1 ${controller} cgroup ${hierarchy.ownDir} is not writable`;
    } else {
      found.push(hierarchy);
    }
  }
  // cpuacct co-mounted with cpu (cpu,cpuacct) shares its directory: one leaf serves both.
  for (const aux of layout.v1Aux ?? []) {
    if (aux.writable && !found.some((h) => h.ownDir === aux.ownDir)) found.push(aux);
  }
  return found;
}

export function prepareV1Subtree(
  layout: CgroupLayout,
  name: string,
  cgfs: CgroupFs,
): Result<{ subtree: CgroupSubtreeV1 }, PrepareFailure> {
  const unavailable: ControllerReasons = { ...layout.unavailable };
  const hierarchies: V1TurnHierarchy[] = [];
  const owned = ownHierarchies(layout, unavailable);
  // Check every path before creating anything, so a refusal leaves no directory behind.
  for (const own of owned) {
    const checked = assertNoSymlinks(own.ownDir);
    if (!checked.ok) return checked;
  }
  for (const own of owned) {
    const made = ensureDirectory(cgfs, own.ownDir, name);
    if (!made.ok) return fail('cgroup_setup_failed', made.detail);
    hierarchies.push({
      controller: own.controller,
      turnsDir: made.dir,
      ...(own.memsw === undefined ? {} : { memsw: own.memsw }),
    });
  }
  if (!hierarchies.some((h) => CONTROLLERS.includes(h.controller as CgroupController))) {
    return fail('no_cgroup_backend', 'no writable cgroup v1 hierarchy for memory, pids or cpu');
  }
  return ok({ subtree: { backend: 'cgroup_v1', hierarchies, unavailable, fs: cgfs } });
}

function limitWrites(h: V1TurnHierarchy, requested: CgroupLimits): Array<[string, string]> {
  if (h.controller === 'memory' && requested.memory !== undefined) {
    const bytes = String(requested.memory);
    // memsw bounds memory+swap; equal to the memory limit it means "no swap". It must be
    // written after memory.limit_in_bytes (the kernel keeps memsw >= memory).
    return [
      ['memory.limit_in_bytes', bytes],
      ...(h.memsw === true ? ([['memory.memsw.limit_in_bytes', bytes]] as Array<[string, string]>) : []),
      ['memory.oom_control', '0'],
    ];
  }
  if (h.controller === 'pids' && requested.pids !== undefined) return [['pids.max', String(requested.pids)]];
  if (h.controller === 'cpu' && requested.cpu !== undefined) {
    return [
      ['cpu.cfs_period_us', String(CPU_PERIOD_USEC)],
      ['cpu.cfs_quota_us', String(cpuQuotaUsec(requested.cpu))],
    ];
  }
  return [];
}

export function createV1Leaves(
  subtree: CgroupSubtreeV1,
  turnId: string,
  requested: CgroupLimits,
): Result<{ leaves: TurnCgroupLeaves }, 'cgroup_exists' | 'cgroup_setup_failed'> {
  const leaves = openV1Leaves(subtree, turnId);
  const created: string[] = [];
  const undo = (): void => created.forEach((dir) => subtree.fs.rmdir(dir));
  for (const h of subtree.hierarchies) {
    const dir = path.join(h.turnsDir, turnId);
    const made = subtree.fs.mkdir(dir);
    if (!made.ok) {
      undo();
      return fail(made.reason === 'cgroup_exists' ? 'cgroup_exists' : 'cgroup_setup_failed', made.detail);
    }
    created.push(dir);
    for (const [file, value] of limitWrites(h, requested)) {
      const written = subtree.fs.write(path.join(dir, file), value);
      if (!written.ok) {
        undo();
        return fail('cgroup_setup_failed', written.detail);
      }
    }
  }
  for (const controller of CONTROLLERS) {
    if (requested[controller] === undefined) continue;
    if (subtree.hierarchies.some((h) => h.controller === controller))
      leaves.applied[controller] = requested[controller];
    else leaves.absent[controller] = subtree.unavailable[controller] ?? `controller ${controller} unavailable`;
  }
  return ok({ leaves });
}

function readV1Counters(cgfs: CgroupFs, leafOf: (c: V1HierarchyName) => string | undefined): TurnCgroupCounters {
  const file = (controller: V1HierarchyName, name: string): string | undefined => {
    const dir = leafOf(controller);
    return dir === undefined ? undefined : path.join(dir, name);
  };
  const integer = (f: string | undefined): number | null => (f === undefined ? null : readInteger(cgfs, f));
  const counters = (f: string | undefined): Map<string, number> | null =>
    f === undefined ? null : readCounters(cgfs, f);

  const usageNs = integer(file('cpuacct', 'cpuacct.usage')) ?? integer(file('cpu', 'cpuacct.usage'));
  const cpuStat = counters(file('cpu', 'cpu.stat'));
  const throttledNs = cpuStat?.get('throttled_time');
  return {
    cpuUsec: usageNs === null ? null : Math.floor(usageNs / 1000),
    nrThrottled: cpuStat?.get('nr_throttled') ?? null,
    throttledUsec: throttledNs === undefined ? null : Math.floor(throttledNs / 1000),
    memoryPeakBytes: integer(file('memory', 'memory.max_usage_in_bytes')),
    oomKills: counters(file('memory', 'memory.oom_control'))?.get('oom_kill') ?? null,
    pidsPeak: integer(file('pids', 'pids.peak')),
    pidsCurrent: integer(file('pids', 'pids.current')),
    pidsMaxEvents: counters(file('pids', 'pids.events'))?.get('max') ?? null,
  };
}

/** An exiting task can keep a v1 cgroup busy for a moment after cgroup.procs is empty. */
function rmdirWhenIdle(cgfs: CgroupFs, dir: string): Result<{}, CgroupFileFailure> {
  let outcome: Result<{}, CgroupFileFailure> = cgfs.rmdir(dir);
  waitUntil(() => {
    if (outcome.ok || outcome.reason !== 'cgroup_busy') return true;
    outcome = cgfs.rmdir(dir);
    return false;
  }, REMOVE_WAIT_MS);
  return outcome;
}

export function openV1Leaves(subtree: CgroupSubtreeV1, turnId: string): TurnCgroupLeaves {
  const cgfs = subtree.fs;
  const leaves = subtree.hierarchies.map((h) => ({ controller: h.controller, dir: path.join(h.turnsDir, turnId) }));
  const leafOf = (controller: V1HierarchyName): string | undefined =>
    leaves.find((l) => l.controller === controller)?.dir;
  const listedPids = (): number[] => [
    ...new Set(leaves.flatMap((l) => readPids(cgfs, path.join(l.dir, 'cgroup.procs')))),
  ];

  const freezerDir = leafOf('freezer');
  /**
   * One round: freeze (frozen processes cannot fork), SIGKILL every listed process, thaw (the
   * kill is delivered on thaw). Without a freezer, a round just kills what is listed.
   */
  const killRound = (killed: Set<number>): boolean => {
    const state = freezerDir === undefined ? undefined : path.join(freezerDir, 'freezer.state');
    const frozen = state !== undefined && cgfs.write(state, 'FROZEN').ok;
    if (frozen) waitUntil(() => readTrimmed(cgfs, state) === 'FROZEN', FREEZE_WAIT_MS);
    const remaining = listedPids();
    remaining.forEach((pid) => killPid(pid) && killed.add(pid));
    if (frozen) cgfs.write(state, 'THAWED');
    return remaining.length === 0;
  };

  return {
    turnId,
    backend: 'cgroup_v1',
    paths: leaves.map((l) => l.dir),
    applied: {},
    absent: {},
    kill() {
      const killed = new Set<number>();
      const emptied = waitUntil(() => killRound(killed), KILL_WAIT_MS);
      if (!emptied) return fail('cgroup_kill_incomplete', `processes remain in ${leaves.map((l) => l.dir).join(', ')}`);
      return ok({ killedProcesses: killed.size });
    },
    counters: () => readV1Counters(cgfs, leafOf),
    isEmpty: () => listedPids().length === 0,
    remove() {
      for (const { dir } of leaves) {
        const removed = rmdirWhenIdle(cgfs, dir);
        if (!removed.ok && removed.reason !== 'cgroup_file_missing') return removed;
      }
      return ok({});
    },
  };
}
