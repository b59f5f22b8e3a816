/**
 * Boot-time recovery: every turn leaf still present was left by a crash. Each is killed, its
 * stats read, and removed; the turn manager records `worker_recovered` for each entry.
 */
import type { Result } from '../core/result.js';
import { listTurnCgroups, openTurnCgroup } from './turn-cgroup.js';
import { type CgroupSubtree, type TurnCgroupStats } from './types.js';

export interface ReapedTurnCgroup {
  turnId: string;
  paths: string[];
  stats: TurnCgroupStats;
  killedProcesses: number;
  /** ok, or why the leaf could not be emptied or removed (it stays for the next boot). */
  outcome: Result;
}

export function reapStaleTurnCgroups(subtree: CgroupSubtree): ReapedTurnCgroup[] {
  const reaped: ReapedTurnCgroup[] = [];
  for (const turnId of listTurnCgroups(subtree)) {
    const opened = openTurnCgroup(subtree, turnId);
    if (!opened.ok) continue;
    const { cgroup } = opened;
    const killed = cgroup.kill();
    const stats = cgroup.stats();
    reaped.push({
      turnId,
      paths: cgroup.paths,
      stats,
      killedProcesses: killed.ok ? killed.killedProcesses : 0,
      outcome: killed.ok ? cgroup.remove() : killed,
    });
  }
  return reaped;
}
