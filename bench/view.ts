/**
 * Cost of the masked worker view: the identity helper's `view` operation in the host
 * tree (fork, identity drop, one access check) as the baseline, next to the same operation
 * building the governed and the strict view, and a `launch` of /bin/true in each profile.
 * Root, after `make -C identity-helper all`: `npx tsx bench/view.ts [rounds=60]`.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const helper = path.join(repo, 'identity-helper/build/identity-helper');
const rounds = Number(process.argv[2] ?? 60);
const uid = 3_900_001;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-bench-view-'));
fs.chmodSync(dir, 0o755);
const workspace = path.join(dir, 'workspace');
const temp = path.join(dir, 'temp');
fs.mkdirSync(path.join(workspace, 'secrets'), { recursive: true });
fs.writeFileSync(path.join(workspace, '.env'), 'x');
fs.writeFileSync(path.join(workspace, 'ci.yml'), 'x');
fs.mkdirSync(temp);
fs.chownSync(temp, uid, uid);
const config = path.join(dir, 'helper.conf');
fs.writeFileSync(config, `uid_range ${uid} 1\ncaller_group 0\nworker_exec /bin/true\nview_path ${repo}\n`, {
  mode: 0o644,
});

const view = [
  'profile governed',
  `workspace ${workspace}`,
  `temp ${temp}`,
  'protect mask_file .env',
  'protect mask_directory secrets',
  'protect read_only ci.yml',
];
const cases: Array<[string, string[]]> = [
  ['view, host tree (baseline)', ['op view', `uid ${uid}`, 'profile governed', 'path /']],
  ['view, governed', ['op view', `uid ${uid}`, ...view, 'path /']],
  ['view, strict', ['op view', `uid ${uid}`, ...view.map((l) => l.replace('governed', 'strict')), 'path /']],
  ['launch /bin/true, governed', ['op launch', `uid ${uid}`, `gid ${uid}`, `cwd ${workspace}`, ...view]],
  [
    'launch /bin/true, strict',
    ['op launch', `uid ${uid}`, `gid ${uid}`, `cwd ${workspace}`, ...view.map((l) => l.replace('governed', 'strict'))],
  ],
];

function timeOnce(lines: string[]): number {
  const file = path.join(dir, 'descriptor');
  fs.writeFileSync(file, ['turnhost-descriptor 1', ...lines, 'end', ''].join('\n'));
  const fd = fs.openSync(file, 'r');
  const start = process.hrtime.bigint();
  const run = spawnSync(helper, ['--config', config], { stdio: ['ignore', 'pipe', 'pipe', fd] });
  const elapsed = Number(process.hrtime.bigint() - start) / 1e6;
  fs.closeSync(fd);
  if (run.status !== 0) throw new Error(`helper exited ${run.status}: ${run.stderr.toString()}`);
  return elapsed;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)] ?? NaN;
}

try {
  const results = cases.map(([name, lines]) => {
    for (let i = 0; i < 5; i++) timeOnce(lines);
    const samples = Array.from({ length: rounds }, () => timeOnce(lines));
    return { name, p50: median(samples) };
  });
  const baseline = results[0]!.p50;
  console.log(`rounds ${rounds}`);
  for (const { name, p50 } of results)
    console.log(`${name.padEnd(32)} p50 ${p50.toFixed(2).padStart(7)} ms  x${(p50 / baseline).toFixed(2)}`);
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
