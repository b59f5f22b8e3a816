/**
 * Constructed /proc and /sys/fs/cgroup trees for probe tests (not a test file: it lives outside
 * the folders `make test` runs). Each tree is a fresh temporary directory.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { TurnhostConfig } from '../../supervisor/config/types.js';
import { defaultConfig } from '../../supervisor/config/load.js';

export interface ProbeTree {
  base: string;
  proc: string;
  sysFsCgroup: string;
  /** Creates a cgroup directory (relative to the cgroup root) with the given interface files. */
  cgroupDir(relative: string, files: Record<string, string>): string;
  cleanup(): void;
}

export interface ProbeTreeSpec {
  /** Lines of <proc>/self/cgroup. */
  cgroup: string[];
  /** Lines of <proc>/self/mountinfo. */
  mountinfo: string[];
  /** Contents of <proc>/sys/kernel/seccomp/actions_avail; omitted means the file is absent. */
  seccompActions?: string;
}

export function mountLine(
  id: number,
  root: string,
  mountPoint: string,
  fsType: 'cgroup' | 'cgroup2',
  superOptions: string,
): string {
  return `${id} 23 0:${id} ${root} ${mountPoint} rw,nosuid,nodev,noexec,relatime shared:${id} - ${fsType} ${fsType} ${superOptions}`;
}

export function buildProbeTree(spec: ProbeTreeSpec): ProbeTree {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-probe-tree-'));
  // Traversable by every uid, so a child running as nobody can read (but not write) the tree.
  fs.chmodSync(base, 0o755);
  const proc = path.join(base, 'proc');
  const sysFsCgroup = path.join(base, 'cgroup');
  fs.mkdirSync(path.join(proc, 'self'), { recursive: true });
  fs.mkdirSync(sysFsCgroup, { recursive: true });
  fs.writeFileSync(path.join(proc, 'self/cgroup'), spec.cgroup.join('\n') + '\n');
  fs.writeFileSync(path.join(proc, 'self/mountinfo'), spec.mountinfo.join('\n') + '\n');
  if (spec.seccompActions !== undefined) {
    fs.mkdirSync(path.join(proc, 'sys/kernel/seccomp'), { recursive: true });
    fs.writeFileSync(path.join(proc, 'sys/kernel/seccomp/actions_avail'), spec.seccompActions + '\n');
  }
  return {
    base,
    proc,
    sysFsCgroup,
    cgroupDir(relative, files) {
      const dir = path.join(sysFsCgroup, relative);
      fs.mkdirSync(dir, { recursive: true, mode: 0o755 });
      for (const [name, content] of Object.entries(files))
        fs.writeFileSync(path.join(dir, name), content, { mode: 0o644 });
      return dir;
    },
    cleanup() {
      fs.rmSync(base, { recursive: true, force: true });
    },
  };
}

const ALL_SECCOMP_ACTIONS = 'kill_process kill_thread trap errno user_notif trace log allow';

/** A systemd-style delegated v2 subtree with memory, pids and cpu. */
export function v2DelegatedTree(superOptions = 'rw,nsdelegate,memory_recursiveprot'): ProbeTree {
  const tree = buildProbeTree({
    cgroup: ['0::/system.slice/turnhost.service'],
    mountinfo: [mountLine(30, '/', '/sys/fs/cgroup', 'cgroup2', superOptions)],
    seccompActions: ALL_SECCOMP_ACTIONS,
  });
  tree.cgroupDir('system.slice/turnhost.service', {
    'cgroup.controllers': 'cpuset cpu io memory pids\n',
    'cgroup.procs': '',
    'cgroup.subtree_control': '',
  });
  return tree;
}

/** This build machine's shape: v1 memory/pids/cpu, cgroup2 at unified with only hugetlb. */
export function hybridTree(options: { memsw: boolean } = { memsw: true }): ProbeTree {
  const tree = buildProbeTree({
    cgroup: ['9:name=systemd:/', '8:pids:/', '4:memory:/process_api/abc', '2:cpu,cpuacct:/', '0::/'],
    mountinfo: [
      mountLine(32, '/', '/sys/fs/cgroup/cpu,cpuacct', 'cgroup', 'rw,cpu,cpuacct'),
      mountLine(35, '/', '/sys/fs/cgroup/memory', 'cgroup', 'rw,memory'),
      mountLine(39, '/', '/sys/fs/cgroup/pids', 'cgroup', 'rw,pids'),
      mountLine(40, '/', '/sys/fs/cgroup/systemd', 'cgroup', 'rw,xattr,name=systemd'),
      mountLine(41, '/', '/sys/fs/cgroup/unified', 'cgroup2', 'rw'),
    ],
    seccompActions: ALL_SECCOMP_ACTIONS,
  });
  tree.cgroupDir('unified', { 'cgroup.controllers': 'hugetlb\n', 'cgroup.procs': '', 'cgroup.subtree_control': '' });
  tree.cgroupDir('memory/process_api/abc', {
    'cgroup.procs': '',
    'memory.limit_in_bytes': '',
    ...(options.memsw ? { 'memory.memsw.limit_in_bytes': '' } : {}),
  });
  tree.cgroupDir('pids', { 'cgroup.procs': '', 'pids.max': 'max\n' });
  tree.cgroupDir('cpu,cpuacct', { 'cgroup.procs': '', 'cpu.cfs_quota_us': '-1\n' });
  return tree;
}

/** A complete config (the product's defaults, no limits configured) whose probe roots point at `tree`. */
export function probeConfig(
  tree: { proc: string; sysFsCgroup: string },
  overrides: Partial<TurnhostConfig> = {},
): TurnhostConfig {
  const defaults = defaultConfig({ installed: false, cwd: '/nonexistent' });
  return {
    ...defaults,
    dataDir: '/nonexistent',
    listen: { tcp: null, socket: null, allowNonLoopback: false },
    limits: {},
    turns: { ...defaults.turns, workspaceRoots: [] },
    probeRoots: { proc: tree.proc, sysFsCgroup: tree.sysFsCgroup },
    ...overrides,
  };
}
