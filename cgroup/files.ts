/**
 * Cgroup file access with typed results. Every path the backends touch is built from a
 * subtree directory that `assertNoSymlinks` accepted plus names this module validated, and
 * files are opened with O_NOFOLLOW, so a symlink planted anywhere on the way is refused.
 * The backends take a `CgroupFs` so unit tests can run the same logic over a plain directory.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fail, ok, type Result } from '../core/result.js';

export type CgroupFileFailure =
  | 'cgroup_file_missing'
  | 'cgroup_exists'
  | 'cgroup_busy'
  | 'cgroup_no_such_process'
  | 'cgroup_io_failed'
  | 'cgroup_path_refused';

export interface CgroupFs {
  read(file: string): Result<{ text: string }, CgroupFileFailure>;
  /** One write(2) of `value`; cgroup files take one value per write. */
  write(file: string, value: string): Result<{}, CgroupFileFailure>;
  mkdir(dir: string): Result<{}, CgroupFileFailure>;
  rmdir(dir: string): Result<{}, CgroupFileFailure>;
  /** Names of the subdirectories of `dir` (symlinks and files are not listed). */
  subdirectories(dir: string): Result<{ names: string[] }, CgroupFileFailure>;
  exists(file: string): boolean;
}

function failureFor(op: string, target: string, error: unknown): ReturnType<typeof fail<CgroupFileFailure>> {
  const code = (error as NodeJS.ErrnoException).code ?? 'unknown';
  const reason: CgroupFileFailure =
    code === 'ENOENT'
      ? 'cgroup_file_missing'
      : code === 'EEXIST'
        ? 'cgroup_exists'
        : code === 'EBUSY' || code === 'ENOTEMPTY'
          ? 'cgroup_busy'
          : code === 'ESRCH'
            ? 'cgroup_no_such_process'
            : code === 'ELOOP'
              ? 'cgroup_path_refused'
              : 'cgroup_io_failed';
  return fail(reason, `${op} ${target}: ${code}`);
}

export const hostCgroupFs: CgroupFs = {
  read(file) {
    try {
      const fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
      try {
        return ok({ text: fs.readFileSync(fd, 'utf8') });
      } finally {
        fs.closeSync(fd);
      }
    } catch (error) {
      return failureFor('read', file, error);
    }
  },
  write(file, value) {
    try {
      const flags = fs.constants.O_WRONLY | fs.constants.O_TRUNC | fs.constants.O_NOFOLLOW;
      const fd = fs.openSync(file, flags);
      try {
        fs.writeSync(fd, value);
      } finally {
        fs.closeSync(fd);
      }
      return ok({});
    } catch (error) {
      return failureFor(`write ${JSON.stringify(value)} to`, file, error);
    }
  },
  mkdir(dir) {
    try {
      fs.mkdirSync(dir, { mode: 0o755 });
      return ok({});
    } catch (error) {
      return failureFor('mkdir', dir, error);
    }
  },
  rmdir(dir) {
    try {
      fs.rmdirSync(dir);
      return ok({});
    } catch (error) {
      return failureFor('rmdir', dir, error);
    }
  },
  subdirectories(dir) {
    try {
      const entries = fs.readdirSync(dir, { withFileTypes: true });
      return ok({ names: entries.filter((e) => e.isDirectory()).map((e) => e.name) });
    } catch (error) {
      return failureFor('list', dir, error);
    }
  },
  exists(file) {
    return fs.existsSync(file);
  },
};

/** Refuses a relative or unnormalised path and any path with a symlink component. */
export function assertNoSymlinks(dir: string): Result<{}, 'cgroup_path_refused'> {
  if (!path.isAbsolute(dir) || path.resolve(dir) !== dir) {
    return fail('cgroup_path_refused', `cgroup path ${dir} is not absolute and normalised`);
  }
  let current = '/';
  for (const part of dir.split('/').filter(Boolean)) {
    current = path.join(current, part);
    let stat: fs.Stats;
    try {
      stat = fs.lstatSync(current);
    } catch (error) {
      return fail('cgroup_path_refused', `cgroup path ${current}: ${(error as NodeJS.ErrnoException).code}`);
    }
    if (stat.isSymbolicLink()) return fail('cgroup_path_refused', `cgroup path component ${current} is a symlink`);
    if (!stat.isDirectory()) return fail('cgroup_path_refused', `cgroup path component ${current} is not a directory`);
  }
  return ok({});
}

/** Creates `parent/name` or accepts an existing directory there; refuses anything else. */
export function ensureDirectory(
  cgfs: CgroupFs,
  parent: string,
  name: string,
): Result<{ dir: string }, CgroupFileFailure> {
  const dir = path.join(parent, name);
  const made = cgfs.mkdir(dir);
  if (!made.ok && made.reason !== 'cgroup_exists') return made;
  const checked = assertNoSymlinks(dir);
  return checked.ok ? ok({ dir }) : checked;
}

/** Parses "key value" lines (cpu.stat, memory.events, pids.events, memory.oom_control). */
function parseKeyedCounters(text: string): Map<string, number> {
  const counters = new Map<string, number>();
  for (const line of text.split('\n')) {
    const [key, value, extra] = line.trim().split(/\s+/);
    if (key === undefined || value === undefined || extra !== undefined) continue;
    if (!/^\d+$/.test(value)) continue;
    counters.set(key, Number(value));
  }
  return counters;
}

export function readCounters(cgfs: CgroupFs, file: string): Map<string, number> | null {
  const read = cgfs.read(file);
  return read.ok ? parseKeyedCounters(read.text) : null;
}

export function readTrimmed(cgfs: CgroupFs, file: string): string | null {
  const read = cgfs.read(file);
  return read.ok ? read.text.trim() : null;
}

/** A single non-negative integer file (pids.peak, memory.peak, cpuacct.usage); null when absent. */
export function readInteger(cgfs: CgroupFs, file: string): number | null {
  const text = readTrimmed(cgfs, file);
  return text !== null && /^\d+$/.test(text) ? Number(text) : null;
}

/** Pids listed in a cgroup.procs or tasks file; an unreadable file lists none. */
export function readPids(cgfs: CgroupFs, file: string): number[] {
  const read = cgfs.read(file);
  if (!read.ok) return [];
  return read.text
    .split('\n')
    .filter((line) => /^\d+$/.test(line))
    .map(Number);
}

/** Blocks the thread for `ms`; used only inside bounded waits for the kernel to empty a cgroup. */
function sleepSync(ms: number): void {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}

/** Polls `done` with growing pauses until it holds or `budgetMs` has passed. */
export function waitUntil(done: () => boolean, budgetMs: number): boolean {
  const deadline = Date.now() + budgetMs;
  let pause = 1;
  while (!done()) {
    if (Date.now() >= deadline) return false;
    sleepSync(pause);
    pause = Math.min(pause * 2, 20);
  }
  return true;
}

/** SIGKILL one pid; a pid that is already gone counts as not killed. */
export function killPid(pid: number): boolean {
  try {
    process.kill(pid, 'SIGKILL');
    return true;
  } catch {
    return false;
  }
}
