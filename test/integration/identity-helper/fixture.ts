/**
 * Shared setup for the identity-helper tests (integration and escape): builds the helper
 * (hardened + ASan) and the native report program under a lock, writes root-owned configs,
 * runs raw descriptors, and makes test cgroups beneath this process's own v1 pids cgroup.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import type { HelperLaunchDescriptor } from '../../../supervisor/identity/helper-descriptor.js';
import { spawnHelperLaunch } from '../../../supervisor/identity/helper-launch.js';
import { runHelperLease } from '../../../supervisor/identity/helper-lease.js';
import type { HelperLocation } from '../../../supervisor/identity/helper-process.js';
import { writeHelperConfig, type HelperConfigSpec } from '../../../supervisor/identity/helper-config.js';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
export const helperDir = path.join(repoRoot, 'identity-helper');
export const asanHelper = path.join(helperDir, 'build/identity-helper-asan');
export const reportSelf = path.join(repoRoot, 'test/native/build/report-self');
const buildLock = path.join(os.tmpdir(), 'turnhost-identity-helper-build.lock');

/** Test files run in parallel: flock keeps two `make` runs from writing the same binary. */
export function buildNative(): void {
  execFileSync('flock', [buildLock, 'make', '-s', '-C', helperDir, 'all', 'asan'], { stdio: 'inherit' });
  execFileSync('flock', [buildLock, 'make', '-s', '-C', path.join(repoRoot, 'test/native'), 'all'], {
    stdio: 'inherit',
  });
}

/** A uid range unique to this test process, so concurrent files never share worker uids. */
export function uniqueUidRange(): { first: number; count: number } {
  return { first: 1_800_000 + (process.pid % 10_000) * 20, count: 20 };
}

export function tempDir(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `turnhost-${prefix}-`));
  fs.chmodSync(dir, 0o755); // worker and test users must traverse it
  return dir;
}

export type ConfigOptions = Pick<HelperConfigSpec, 'uidRange'> & Partial<HelperConfigSpec>;

/** Writes `dir/name` with the product's writer; unset keys default to a root caller running report-self. */
export function writeConfig(dir: string, options: ConfigOptions, name = 'helper.conf'): string {
  const file = path.join(dir, name);
  writeHelperConfig(file, {
    callerGroup: '0',
    cgroupRoots: [],
    workerExec: reportSelf,
    workerArgs: [],
    // The worker programs live in the checkout, which may sit under /tmp (a fresh tmpfs in the view).
    viewPaths: [repoRoot],
    ...options,
  });
  return file;
}

export interface RawRun {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs `command` with `descriptor` as fd 3 (a file), synchronously. */
export function runWithDescriptor(command: string[], descriptor: Buffer | string, dir: string): RawRun {
  const file = path.join(dir, `descriptor-${process.hrtime.bigint()}`);
  fs.writeFileSync(file, descriptor);
  const fd = fs.openSync(file, 'r');
  try {
    const [program, ...args] = command;
    const run = spawnSync(program ?? '', args, { stdio: ['ignore', 'pipe', 'pipe', fd], encoding: 'utf8' });
    return { code: run.status, stdout: run.stdout, stderr: run.stderr };
  } finally {
    fs.closeSync(fd);
  }
}

export function runHelperRaw(
  configPath: string,
  descriptor: Buffer | string,
  dir: string,
  helper = asanHelper,
): RawRun {
  return runWithDescriptor([helper, '--config', configPath], descriptor, dir);
}

/** A launch whose caller sends nothing on the protocol socket: its stdin closed, its output collected until it exits. */
export function runHelperLaunch(helper: HelperLocation, descriptor: HelperLaunchDescriptor): Promise<RawRun> {
  const { child, protocol } = spawnHelperLaunch(helper, descriptor, { stdio: 'pipe' });
  protocol.on('error', () => undefined);
  child.stdin?.end();
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  return new Promise((resolve) =>
    child.on('close', (code) => {
      protocol.destroy();
      resolve({ code, stdout, stderr });
    }),
  );
}

/** Leases `<workspaceRoot>/<id>` searching from `uid`; a refusal throws with its reason. */
export async function leaseWorkspace(
  helper: HelperLocation,
  workspaceRoot: string,
  id: string,
  uid: number,
): Promise<{ uid: number; existing: boolean }> {
  const result = await runHelperLease(helper, { uid, lease: id, workspace: path.join(workspaceRoot, id) });
  if (!result.ok) throw new Error(`${result.reason}: ${result.detail}`);
  return { uid: result.uid, existing: result.existing };
}

/** This process's v1 pids cgroup directory (never a sibling owned by other software). */
function ownPidsCgroupDir(): string {
  const line = fs
    .readFileSync('/proc/self/cgroup', 'utf8')
    .split('\n')
    .find((entry) => /^\d+:pids:/.test(entry));
  if (line === undefined) throw new Error('no v1 pids cgroup in /proc/self/cgroup');
  const relative = line.slice(line.indexOf(':pids:') + ':pids:'.length);
  return path.join('/sys/fs/cgroup/pids', relative);
}

/** A parent test cgroup (the configured cgroup_root) with one leaf beneath it. */
export function makeTestCgroup(tag: string): { root: string; leaf: string; remove: () => void } {
  removeStaleTestCgroups();
  const root = path.join(ownPidsCgroupDir(), `turnhost-test-ih-${tag}-${process.pid}`);
  const leaf = path.join(root, 'turn-1');
  fs.mkdirSync(leaf, { recursive: true });
  return { root, leaf, remove: () => removeTestCgroup(root, leaf) };
}

/** Test cgroups left by a test process that was killed before its teardown ran. */
function removeStaleTestCgroups(): void {
  const parent = ownPidsCgroupDir();
  for (const name of fs.readdirSync(parent)) {
    const owner = /^turnhost-test-ih-[a-z]+-(\d+)$/.exec(name)?.[1];
    if (owner === undefined || fs.existsSync(`/proc/${owner}`)) continue;
    removeTestCgroup(path.join(parent, name), path.join(parent, name, 'turn-1'));
  }
}

function removeTestCgroup(root: string, leaf: string): void {
  for (const dir of [leaf, root]) {
    for (const pid of readProcs(dir)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    for (let attempt = 0; attempt < 50; attempt++) {
      try {
        fs.rmdirSync(dir);
        break;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code === 'ENOENT') break;
        execFileSync('sleep', ['0.05']);
      }
    }
  }
}

function readProcs(dir: string): number[] {
  try {
    return fs.readFileSync(path.join(dir, 'cgroup.procs'), 'utf8').split('\n').filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** Lines of report-self, grouped by their first word. */
export function parseReport(stdout: string): Map<string, string[]> {
  const report = new Map<string, string[]>();
  for (const line of stdout.split('\n')) {
    const space = line.indexOf(' ');
    if (space <= 0) continue;
    const key = line.slice(0, space);
    report.set(key, [...(report.get(key) ?? []), line.slice(space + 1)]);
  }
  return report;
}

export function descriptorText(lines: string[]): string {
  return ['turnhost-descriptor 2', ...lines, 'end'].join('\n') + '\n';
}

/**
 * The view keys every launch carries (docs/filesystem-view.md): a governed view of a shared
 * workspace under `dir`, created on first use.
 */
export function viewKeys(dir: string): { profile: 'governed'; workspace: string } {
  const workspace = path.join(dir, 'view-workspace');
  fs.mkdirSync(workspace, { recursive: true, mode: 0o777 });
  return { profile: 'governed', workspace };
}

export function viewLines(dir: string): string[] {
  const keys = viewKeys(dir);
  return [`profile ${keys.profile}`, `workspace ${keys.workspace}`];
}
