/**
 * Turn cgroup overhead: launching a trivial command 200 times bare vs inside a fresh turn
 * cgroup (create, join every leaf, kill, stats, remove), as a ratio measured in the same run,
 * then a cleanup check: no leaf, process or fd left behind.
 * Run as root: npx tsx bench/turn-cgroup.ts [TURNS]   (the VM tier runs the compiled copy with fewer turns)
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import { performance } from 'node:perf_hooks';
import { discoverCgroupLayout } from '../cgroup/discover.js';
import { createTurnCgroup, listTurnCgroups, prepareCgroupSubtree, removeCgroupSubtree } from '../cgroup/turn-cgroup.js';

const TURNS = Number(process.argv[2] ?? 200);
if (!Number.isInteger(TURNS) || TURNS < 1) throw new Error('TURNS must be a positive integer');

function launch(joinPaths: string[]): void {
  const join = joinPaths.map((p) => `echo $$ > '${p}/cgroup.procs'`).join('; ');
  const script = join === '' ? 'exec true' : `${join}; exec true`;
  const run = spawnSync('sh', ['-c', script], { stdio: 'ignore' });
  if (run.status !== 0) throw new Error(`launch failed: ${run.status}`);
}

function timeTurns(body: (i: number) => void): number {
  const start = performance.now();
  for (let i = 0; i < TURNS; i++) body(i);
  return (performance.now() - start) / TURNS;
}

const prepared = prepareCgroupSubtree(discoverCgroupLayout({ proc: '/proc', sysFsCgroup: '/sys/fs/cgroup' }), {
  name: `thbench-${process.pid}`,
});
if (!prepared.ok) throw new Error(`${prepared.reason}: ${prepared.detail}`);
const { subtree } = prepared;
const fdsBefore = fs.readdirSync('/proc/self/fd').length;

const bareMs = timeTurns(() => launch([]));
const withCgroupMs = timeTurns((i) => {
  const created = createTurnCgroup(subtree, `bench-${i}`, { memory: 256 * 1024 * 1024, pids: 64, cpu: 1 });
  if (!created.ok) throw new Error(created.detail);
  launch(created.cgroup.paths);
  const killed = created.cgroup.kill();
  if (!killed.ok) throw new Error(killed.detail);
  created.cgroup.stats();
  const removed = created.cgroup.remove();
  if (!removed.ok) throw new Error(removed.detail);
});

const leavesLeft = listTurnCgroups(subtree).length;
const fdsAfter = fs.readdirSync('/proc/self/fd').length;
const removedSubtree = removeCgroupSubtree(subtree);

console.log(`backend ${subtree.backend}, ${TURNS} turns each`);
console.log(`bare launch           ${bareMs.toFixed(2)} ms/turn (baseline)`);
console.log(`launch in turn cgroup ${withCgroupMs.toFixed(2)} ms/turn  ratio ${(withCgroupMs / bareMs).toFixed(2)}x`);
console.log(
  `cleanup: ${leavesLeft} leaves left, fds ${fdsBefore} -> ${fdsAfter}, subtree removed: ${removedSubtree.ok}`,
);
