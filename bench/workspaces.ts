/**
 * Workspaces: create + first turn + delete, ROUNDS times, through the real turn manager with
 * the identity helper (a leased uid, its directory, a leased launch of /bin/true, the release),
 * against a bare mkdir + chown + rm -rf of a directory measured in the same run (and the same
 * command as a plain turn, interleaved); p50 and p95
 * of each step and ratios. Then the leak check: after every workspace was deleted, no
 * directory in the workspaces root, no lease record, no held uid lock of the range, no turn
 * cgroup leaf and no process of the range's uids.
 * Run as root after `make build-ts build-native`: npx tsx bench/workspaces.ts [ROUNDS=200]
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { createTurnHarness, runTurn } from '../test/support/turn-harness.js';

const ROUNDS = Number(process.argv[2] ?? 200);
if (!Number.isInteger(ROUNDS) || ROUNDS < 1) throw new Error('ROUNDS must be a positive integer');
const SLOT = 89;
const UID_LOCK_DIR = '/run/turnhost-uid-locks';

const leaseDir = `/run/turnhost-bench-leases-${process.pid}`;
const root = `/var/lib/turnhost-bench-workspaces-${process.pid}`;
const harness = await createTurnHarness({
  slot: SLOT,
  workspaces: { root, uidLeaseDir: leaseDir },
  configure: (config) => (config.turns.preparedWorkers = 0),
});
const workspaces = harness.workspaces;

const quantile = (values: number[], q: number): number => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? 0;
};
const time = async (body: () => unknown): Promise<number> => {
  const start = performance.now();
  await body();
  return performance.now() - start;
};

// Baseline: what a workspace is at the least, a directory given to a uid and removed again.
const baseline: number[] = [];
for (let i = 0; i < ROUNDS; i++) {
  const dir = path.join(root, `bare-${i}`);
  baseline.push(
    await time(() => {
      fs.mkdirSync(dir, { mode: 0o700 });
      fs.chownSync(dir, harness.uidRange.first, harness.uidRange.first);
      fs.writeFileSync(path.join(dir, 'file'), 'x');
      execFileSync('rm', ['-rf', '--', dir]);
    }),
  );
}

const create: number[] = [];
const turn: number[] = [];
const remove: number[] = [];
const total: number[] = [];
// The same command as a plain turn (no workspace, a fresh uid), interleaved: what a workspace adds to a turn.
const plain: number[] = [];
for (let i = 0; i < ROUNDS; i++) {
  const id = `bench-${i}`;
  let ran = '';
  const t0 = performance.now();
  create.push(
    await time(async () => {
      const made = await workspaces.create({ id });
      if (!made.ok) throw new Error(made.detail);
    }),
  );
  turn.push(
    await time(async () => {
      const run = await runTurn(harness, { argv: ['/bin/sh', '-c', 'echo x > file'], workspace: id });
      ran = run.result.status;
    }),
  );
  if (ran !== 'ok') throw new Error(`turn ${i}: ${ran}`);
  remove.push(
    await time(async () => {
      const deleted = await workspaces.delete(id);
      if (!deleted.ok) throw new Error(deleted.detail);
    }),
  );
  total.push(performance.now() - t0);
  plain.push(await time(() => runTurn(harness, { argv: ['/bin/sh', '-c', 'echo x > /tmp/file'] })));
}

// Leak check.
const directoriesLeft = fs.readdirSync(root).length;
const leaseRecordsLeft = fs.existsSync(leaseDir)
  ? fs.readdirSync(leaseDir).filter((n) => !n.startsWith('.')).length
  : 0;
const rangeUids = new Set(Array.from({ length: harness.uidRange.count }, (_, i) => harness.uidRange.first + i));
const lockInodes = new Set(
  fs
    .readdirSync(UID_LOCK_DIR)
    .filter((name) => rangeUids.has(Number(name)))
    .map((name) => String(fs.statSync(path.join(UID_LOCK_DIR, name)).ino)),
);
const locksHeld = fs
  .readFileSync('/proc/locks', 'utf8')
  .split('\n')
  .filter((line) => lockInodes.has(line.split(/\s+/)[5]?.split(':')[2] ?? '')).length;
const processesLeft = fs
  .readdirSync('/proc')
  .filter((pid) => /^[0-9]+$/.test(pid))
  .filter((pid) => {
    try {
      const line = fs
        .readFileSync(`/proc/${pid}/status`, 'utf8')
        .split('\n')
        .find((l) => l.startsWith('Uid:'));
      // A zombie is no process any more: it holds no uid lock and runs nothing.
      const zombie = /^State:\s+Z/m.test(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
      return rangeUids.has(Number(line?.split(/\s+/)[1])) && !zombie;
    } catch {
      return false;
    }
  }).length;
const subtreeName = `turnhost-test-${SLOT}-${process.pid}`;
const cgroupLeaves = execFileSync(
  'find',
  ['/sys/fs/cgroup', '-mindepth', '2', '-type', 'd', '-path', `*/${subtreeName}/*`],
  {
    encoding: 'utf8',
  },
)
  .split('\n')
  .filter((line) => line !== '' && !/\/(turns|prepared)$/.test(line)).length;

await harness.close();
fs.rmSync(leaseDir, { recursive: true, force: true });
fs.rmSync(root, { recursive: true, force: true });

const row = (name: string, values: number[]) =>
  console.log(
    `${name.padEnd(34)} p50 ${quantile(values, 0.5).toFixed(2).padStart(8)} ms  p95 ${quantile(values, 0.95).toFixed(2).padStart(8)} ms  p50 ratio ${(quantile(values, 0.5) / quantile(baseline, 0.5)).toFixed(1)}x`,
  );
console.log(`${ROUNDS} rounds each, separate_uid (identity helper, leased uid)`);
row('mkdir + chown + rm -rf (baseline)', baseline);
row('workspace create', create);
row('first turn (/bin/sh echo)', turn);
row('plain turn, no workspace', plain);
row('workspace delete', remove);
row('create + first turn + delete', total);
console.log(
  `leak check after ${ROUNDS} workspaces: directories ${directoriesLeft}, lease records ${leaseRecordsLeft}, uid locks held ${locksHeld}, turn cgroup leaves ${cgroupLeaves}, processes of the range ${processesLeft}`,
);
if (directoriesLeft + leaseRecordsLeft + locksHeld + cgroupLeaves + processesLeft > 0) process.exitCode = 1;
