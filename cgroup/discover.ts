/**
 * Discovers this process's cgroup layout from `<proc>/self/cgroup` and `<proc>/self/mountinfo`,
 * then checks what it may write. Nothing is cached: every call re-reads the kernel's answer.
 *
 * Path mapping: mount points in mountinfo are host paths ("/sys/fs/cgroup/memory"). When
 * `roots.sysFsCgroup` is not "/sys/fs/cgroup", a mount point beneath /sys/fs/cgroup has that
 * prefix replaced by `roots.sysFsCgroup`, and any other mount point is placed beneath it, so
 * tests can point discovery at a constructed tree. All paths in the answer are mapped paths.
 */
import fs from 'node:fs';
import path from 'node:path';
import type {
  CgroupController,
  CgroupLayout,
  CgroupV1AuxHierarchy,
  CgroupV1Hierarchy,
  CgroupV2Facts,
} from './types.js';

export interface CgroupRoots {
  proc: string;
  sysFsCgroup: string;
}

const HOST_CGROUP_ROOT = '/sys/fs/cgroup';
const CONTROLLERS: readonly CgroupController[] = ['memory', 'pids', 'cpu'];
const AUX_CONTROLLERS: readonly CgroupV1AuxHierarchy['controller'][] = ['cpuacct', 'freezer'];

interface CgroupMembership {
  /** 0 for the unified (v2) hierarchy. */
  hierarchyId: number;
  controllers: string[];
  path: string;
}

interface CgroupMount {
  root: string;
  mountPoint: string;
  fsType: 'cgroup' | 'cgroup2';
  superOptions: string[];
}

/** Parses `<proc>/self/cgroup` ("hierarchy-id:controller-list:path" per line). */
export function parseProcCgroup(text: string): CgroupMembership[] {
  const memberships: CgroupMembership[] = [];
  for (const line of text.split('\n')) {
    if (line === '') continue;
    const first = line.indexOf(':');
    const second = line.indexOf(':', first + 1);
    if (first < 0 || second < 0) continue;
    const hierarchyId = Number(line.slice(0, first));
    if (!Number.isInteger(hierarchyId)) continue;
    const list = line.slice(first + 1, second);
    memberships.push({
      hierarchyId,
      controllers: list === '' ? [] : list.split(','),
      path: line.slice(second + 1),
    });
  }
  return memberships;
}

/** mountinfo escapes space, tab, newline and backslash as octal. */
function unescapeMountField(field: string): string {
  return field.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));
}

/** Parses the cgroup and cgroup2 entries of `<proc>/self/mountinfo`. */
export function parseCgroupMounts(text: string): CgroupMount[] {
  const mounts: CgroupMount[] = [];
  for (const line of text.split('\n')) {
    const separator = line.indexOf(' - ');
    if (separator < 0) continue;
    const before = line.slice(0, separator).split(' ');
    const after = line.slice(separator + 3).split(' ');
    const fsType = after[0];
    const root = before[3];
    const mountPoint = before[4];
    if ((fsType !== 'cgroup' && fsType !== 'cgroup2') || root === undefined || mountPoint === undefined) continue;
    mounts.push({
      root: unescapeMountField(root),
      mountPoint: unescapeMountField(mountPoint),
      fsType,
      superOptions: (after[2] ?? '').split(','),
    });
  }
  return mounts;
}

/** Maps a host mount point beneath the configured cgroup root (see the module comment). */
export function mapMountPoint(mountPoint: string, sysFsCgroup: string): string {
  if (sysFsCgroup === HOST_CGROUP_ROOT) return mountPoint;
  if (mountPoint === HOST_CGROUP_ROOT || mountPoint.startsWith(HOST_CGROUP_ROOT + '/')) {
    return path.join(sysFsCgroup, mountPoint.slice(HOST_CGROUP_ROOT.length));
  }
  return path.join(sysFsCgroup, mountPoint);
}

/**
 * The directory of `cgroupPath` under a mount whose root is `mountRoot`, or null when the
 * cgroup is not visible through that mount (it lies outside the mounted subtree).
 */
function cgroupDirUnder(mountDir: string, mountRoot: string, cgroupPath: string): string | null {
  if (mountRoot === '/') return path.resolve(mountDir, '.' + cgroupPath);
  if (cgroupPath === mountRoot) return mountDir;
  if (!cgroupPath.startsWith(mountRoot + '/')) return null;
  return path.resolve(mountDir, '.' + cgroupPath.slice(mountRoot.length));
}

function writable(target: string): boolean {
  try {
    fs.accessSync(target, fs.constants.W_OK);
    return true;
  } catch {
    return false;
  }
}

function readControllers(dir: string): string[] {
  try {
    return fs.readFileSync(path.join(dir, 'cgroup.controllers'), 'utf8').trim().split(/\s+/).filter(Boolean);
  } catch {
    return [];
  }
}

function readText(file: string): string {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return '';
  }
}

/**
 * The supervisor's own leaf is `<delegated>/supervisor` when the unit has
 * `DelegateSubgroup=supervisor`, or when this process already moved itself there
 * (cgroup/v2.ts): the delegated subtree it manages is then the parent.
 */
export const SUPERVISOR_LEAF = 'supervisor';

function delegatedRoot(ownPath: string, processDir: string): { ownCgroup: string; ownDir: string } {
  if (
    path.posix.basename(ownPath) !== SUPERVISOR_LEAF ||
    !fs.existsSync(path.join(path.dirname(processDir), 'cgroup.subtree_control'))
  ) {
    return { ownCgroup: ownPath, ownDir: processDir };
  }
  return { ownCgroup: path.posix.dirname(ownPath), ownDir: path.dirname(processDir) };
}

function discoverV2(memberships: CgroupMembership[], mounts: CgroupMount[], sysFsCgroup: string): CgroupV2Facts | null {
  const own = memberships.find((m) => m.hierarchyId === 0);
  if (own === undefined) return null;
  for (const mount of mounts) {
    if (mount.fsType !== 'cgroup2') continue;
    const mountPoint = mapMountPoint(mount.mountPoint, sysFsCgroup);
    const processDir = cgroupDirUnder(mountPoint, mount.root, own.path);
    if (processDir === null) continue;
    const { ownCgroup, ownDir } = delegatedRoot(own.path, processDir);
    return {
      mountPoint,
      nsdelegate: mount.superOptions.includes('nsdelegate'),
      ownCgroup,
      ownDir,
      writable: [ownDir, path.join(ownDir, 'cgroup.procs'), path.join(ownDir, 'cgroup.subtree_control')].every(
        writable,
      ),
      controllers: readControllers(ownDir),
    };
  }
  return null;
}

/** The process's own cgroup in the v1 hierarchy that holds `controller`, if one is mounted. */
function discoverV1<C extends string>(
  controller: C,
  memberships: CgroupMembership[],
  mounts: CgroupMount[],
  sysFsCgroup: string,
): { controller: C; mountPoint: string; ownCgroup: string; ownDir: string; writable: boolean } | null {
  const own = memberships.find((m) => m.hierarchyId !== 0 && m.controllers.includes(controller));
  if (own === undefined) return null;
  for (const mount of mounts) {
    if (mount.fsType !== 'cgroup' || !mount.superOptions.includes(controller)) continue;
    const mountPoint = mapMountPoint(mount.mountPoint, sysFsCgroup);
    const ownDir = cgroupDirUnder(mountPoint, mount.root, own.path);
    if (ownDir === null) continue;
    return {
      controller,
      mountPoint,
      ownCgroup: own.path,
      ownDir,
      writable: writable(ownDir) && writable(path.join(ownDir, 'cgroup.procs')),
    };
  }
  return null;
}

/** Controllers a v1 hierarchy can hold; named hierarchies (name=systemd) hold none. */
const V1_CONTROLLERS = new Set([
  'blkio',
  'cpu',
  'cpuacct',
  'cpuset',
  'devices',
  'freezer',
  'hugetlb',
  'memory',
  'misc',
  'net_cls',
  'net_prio',
  'perf_event',
  'pids',
  'rdma',
]);

function layoutKind(mounts: CgroupMount[]): CgroupLayout['kind'] {
  const hasV2 = mounts.some((m) => m.fsType === 'cgroup2');
  const hasV1Controllers = mounts.some(
    (m) => m.fsType === 'cgroup' && m.superOptions.some((o) => V1_CONTROLLERS.has(o)),
  );
  if (hasV2 && hasV1Controllers) return 'hybrid';
  if (hasV2) return 'v2';
  if (hasV1Controllers) return 'v1';
  return 'none';
}

function unavailableReason(
  controller: CgroupController,
  v2: CgroupV2Facts | null,
  v1: CgroupV1Hierarchy | undefined,
  uid: number,
): string {
  if (v2 !== null && v2.controllers.includes(controller)) {
    if (!v2.writable) return `no delegated cgroup: ${v2.ownDir} is not writable by uid ${uid}`;
    return `no nsdelegate on the cgroup2 mount ${v2.mountPoint}`;
  }
  if (v1 !== undefined) return `no delegated cgroup: ${v1.ownDir} is not writable by uid ${uid}`;
  if (v2 !== null) {
    return `controller ${controller} unavailable: not in ${path.join(v2.ownDir, 'cgroup.controllers')} and not bound to a cgroup v1 hierarchy of this process`;
  }
  return `controller ${controller} unavailable: no cgroup2 mount and no cgroup v1 ${controller} hierarchy in mountinfo`;
}

export function discoverCgroupLayout(roots: CgroupRoots): CgroupLayout {
  const memberships = parseProcCgroup(readText(path.join(roots.proc, 'self/cgroup')));
  const mounts = parseCgroupMounts(readText(path.join(roots.proc, 'self/mountinfo')));
  const v2 = discoverV2(memberships, mounts, roots.sysFsCgroup);
  const v1: CgroupV1Hierarchy[] = [];
  for (const controller of CONTROLLERS) {
    const hierarchy: CgroupV1Hierarchy | null = discoverV1(controller, memberships, mounts, roots.sysFsCgroup);
    if (hierarchy === null) continue;
    if (controller === 'memory')
      hierarchy.memsw = fs.existsSync(path.join(hierarchy.ownDir, 'memory.memsw.limit_in_bytes'));
    v1.push(hierarchy);
  }
  const v1Aux: CgroupV1AuxHierarchy[] = [];
  for (const controller of AUX_CONTROLLERS) {
    const hierarchy = discoverV1(controller, memberships, mounts, roots.sysFsCgroup);
    if (hierarchy !== null) v1Aux.push(hierarchy);
  }
  const uid = process.geteuid?.() ?? -1;
  const layout: CgroupLayout = { kind: layoutKind(mounts), v2, v1, v1Aux, unavailable: {}, backendFor: {} };
  for (const controller of CONTROLLERS) {
    const hierarchy = v1.find((h) => h.controller === controller);
    if (v2 !== null && v2.writable && v2.nsdelegate && v2.controllers.includes(controller)) {
      layout.backendFor[controller] = 'cgroup_v2';
    } else if (hierarchy !== undefined && hierarchy.writable) {
      layout.backendFor[controller] = 'cgroup_v1';
    } else {
      layout.unavailable[controller] = unavailableReason(controller, v2, hierarchy, uid);
    }
  }
  return layout;
}
