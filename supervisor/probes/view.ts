/**
 * The masked worker view, verified: the identity helper (or the shared_uid launcher) builds the
 * launch view of a sentinel tree (one protected path of each mode, one hidden path) and reports
 * what the worker identity sees; any difference from the profile's promise is a requirement
 * that makes the mode unavailable. The supervisor's own state must not be visible either.
 * Decisions: docs/filesystem-view.md.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Result } from '../../core/result.js';
import type { HelperProfile } from '../identity/helper-descriptor.js';
import type { HelperViewEntry, HelperViewRequest } from '../identity/helper-view.js';

const HOST_TMP = '/tmp';
const HOST_VAR_TMP = '/var/tmp';
const HOST_SHM = '/dev/shm';

/** Runs the helper's `view` operation (injected: the daemon binds it to the helper or the launcher). */
export type HelperViewProbe = (
  request: HelperViewRequest,
) => Promise<Result<{ workerUid: number; viewBuilt: boolean; entries: HelperViewEntry[] }>>;

/** What the view probe saw a worker able to do, for the root-server warning. */
export interface ViewFacts {
  /** A root-owned 0600 file of the sentinel tree was readable (null: this supervisor could not plant one). */
  rootOwnedReadable: boolean | null;
  /** A world-writable file of the read-only host tree was writable. */
  hostWritable: boolean;
}

export interface ViewProbeResult {
  /** Why the view does not hold; absent when it holds. */
  requirement?: string;
  facts: ViewFacts | null;
}

interface SentinelTree {
  base: string;
  workspace: string;
  hostOnly: string;
  /** Host files the view replaces with its own filesystems; each must be gone. */
  replaced: Array<{ path: string; what: string }>;
  /** A root-owned 0600 file; null when this process is not root. */
  rootOnly: string | null;
  hidden: string;
  cleanup: string[];
}

function worldWritableFile(file: string, content: string): void {
  fs.writeFileSync(file, content);
  fs.chmodSync(file, 0o666);
}

/** A sentinel in a host directory the view replaces, when this process may write there. */
function plantReplaced(dir: string, tree: SentinelTree, what: string): void {
  const file = path.join(dir, `turnhost-view-probe-${process.pid}-${Date.now()}`);
  try {
    worldWritableFile(file, 'sentinel\n');
  } catch {
    return;
  }
  tree.cleanup.push(file);
  tree.replaced.push({ path: file, what });
}

/**
 * World-writable sentinels: a refused write can only come from the view's mounts. The tree
 * lives under the host's /tmp, which the view replaces: `hostOnly` must not be seen.
 */
function plantSentinels(): SentinelTree {
  const base = fs.mkdtempSync(path.join(HOST_TMP, 'turnhost-view-probe-'));
  fs.chmodSync(base, 0o755);
  const workspace = path.join(base, 'workspace');
  fs.mkdirSync(path.join(workspace, 'masked-dir'), { recursive: true });
  for (const dir of [workspace, path.join(workspace, 'masked-dir')]) fs.chmodSync(dir, 0o777);
  worldWritableFile(path.join(workspace, 'masked-file'), 'sentinel\n');
  worldWritableFile(path.join(workspace, 'masked-dir/inner'), 'sentinel\n');
  worldWritableFile(path.join(workspace, 'read-only'), 'sentinel\n');
  const hidden = path.join(workspace, 'hidden');
  fs.mkdirSync(hidden, { mode: 0o777 });
  worldWritableFile(path.join(hidden, 'inner'), 'sentinel\n');
  const hostOnly = path.join(base, 'host-only');
  worldWritableFile(hostOnly, 'sentinel\n');
  let rootOnly: string | null = null;
  if (process.geteuid?.() === 0) {
    rootOnly = path.join(workspace, 'root-only');
    fs.writeFileSync(rootOnly, 'sentinel\n', { mode: 0o600 });
  }
  const tree: SentinelTree = { base, workspace, hostOnly, replaced: [], rootOnly, hidden, cleanup: [] };
  plantReplaced(HOST_VAR_TMP, tree, "the host's /var/tmp must be replaced by the turn's own");
  plantReplaced(HOST_SHM, tree, "the host's /dev/shm must be replaced by the turn's own");
  plantReplaced('/run', tree, "the host's /run must be replaced by a fresh one");
  return tree;
}

interface Expectation {
  path: string;
  what: string;
  holds: (entry: HelperViewEntry) => boolean;
}

const absentOrEmpty = (e: HelperViewEntry): boolean => !e.exists || (e.empty === true && !e.write);

/** The host's network interfaces but lo (at most 8: the request has room for 64 paths). */
function hostInterfacePaths(): string[] {
  try {
    return fs
      .readdirSync('/sys/class/net')
      .filter((name) => name !== 'lo')
      .slice(0, 8)
      .map((name) => path.join('/sys/class/net', name));
  } catch {
    return [];
  }
}

/** The view's /sys is a sysfs of the turn's network namespace and shows no cgroup but its own. */
function sysExpectations(profile: HelperProfile): Expectation[] {
  const list: Expectation[] = hostInterfacePaths().map((iface) => ({
    path: iface,
    what: "the host's network interfaces must be invisible in /sys",
    holds: (e: HelperViewEntry) => !e.exists,
  }));
  list.push(
    { path: '/sys/fs/cgroup', what: "no cgroup but the turn's own may show in /sys/fs/cgroup", holds: absentOrEmpty },
    { path: '/sys', what: '/sys must be read-only', holds: (e) => !e.write },
  );
  if (profile === 'governed')
    list.push({ path: '/sys/class/net/lo', what: "/sys must be a sysfs of the turn's own", holds: (e) => e.exists });
  return list;
}

function expectations(
  tree: SentinelTree,
  profile: HelperProfile,
  ownState: readonly string[],
  kept: readonly string[],
): Expectation[] {
  const ws = (name: string) => path.join(tree.workspace, name);
  const list: Expectation[] = [
    {
      path: ws('masked-file'),
      what: 'a mask_file path must read empty and refuse writes',
      holds: (e) => e.exists && e.empty === true && !e.write,
    },
    {
      path: ws('masked-dir'),
      what: 'a mask_directory path must be an empty read-only directory',
      holds: (e) => e.exists && e.empty === true && !e.write,
    },
    {
      path: ws('read-only'),
      what: 'a read_only path must keep its content and refuse writes',
      holds: (e) => e.read && e.empty === false && !e.write,
    },
    { path: tree.hidden, what: 'a hidden path must be an empty read-only directory', holds: absentOrEmpty },
    { path: tree.hostOnly, what: "the host's /tmp must be replaced by a fresh one", holds: (e) => !e.exists },
    ...tree.replaced.map(({ path: file, what }) => ({ path: file, what, holds: (e: HelperViewEntry) => !e.exists })),
    // The worker's pid namespace starts at 1; the supervisor's own pid is far above.
    {
      path: `/proc/${process.pid}`,
      what: 'processes outside the turn must be invisible in /proc',
      holds: (e) => !e.exists,
    },
    { path: '/etc', what: 'host system directories must be read-only', holds: (e) => !e.write },
    { path: HOST_TMP, what: "the turn's /tmp must be writable", holds: (e) => e.write },
    { path: HOST_SHM, what: "the turn's /dev/shm must be writable", holds: (e) => e.write },
    { path: '/dev/log', what: "the host's /dev must be replaced (no /dev/log socket)", holds: (e) => !e.exists },
    ...sysExpectations(profile),
    ...ownState.map((file) => ({
      path: file,
      what: "the supervisor's own state must never be visible",
      holds: absentOrEmpty,
    })),
    // A hidden path above the worker's program must not hide it (a nested mask keeps it).
    ...kept.map((file) => ({
      path: file,
      what: 'a kept path (view_path) must stay visible',
      holds: (e: HelperViewEntry) => e.exists && e.read && e.empty !== true,
    })),
  ];
  if (profile === 'governed') {
    list.push({ path: tree.workspace, what: 'the workspace must be writable', holds: (e) => e.write });
  } else {
    list.push({ path: tree.workspace, what: 'the workspace must be read-only', holds: (e) => e.read && !e.write });
    list.push({ path: '/etc/shadow', what: '/etc/shadow must be absent', holds: (e) => !e.exists });
    list.push({ path: '/home', what: '/home must be absent', holds: (e) => !e.exists });
  }
  return list;
}

/**
 * Builds the view of the sentinel tree through `run`, with the turns' hidden paths added, and
 * checks every promise. `workerUid` is the separate uid to use (absent: shared mode, the
 * launcher uses the supervisor's own); `ownState` are the supervisor's data directory, token and
 * helper config as hidden from real turns; `kept` the paths the turns' views keep for the
 * worker's program, each of which must stay readable.
 */
export async function probeMaskedView(
  run: HelperViewProbe,
  profile: HelperProfile,
  options: { workerUid?: number; hide: readonly string[]; ownState: readonly string[]; kept?: readonly string[] },
): Promise<ViewProbeResult> {
  let tree: SentinelTree;
  try {
    tree = plantSentinels();
  } catch (error) {
    return {
      requirement: `the ${profile} worker view could not be verified: sentinel tree: ${(error as Error).message}`,
      facts: null,
    };
  }
  try {
    const ownState = options.ownState.filter((file) => fs.existsSync(file));
    const checks = expectations(tree, profile, ownState, options.kept ?? []);
    const facts: Expectation[] = [
      ...(tree.rootOnly === null ? [] : [{ path: tree.rootOnly, what: 'fact', holds: () => true }]),
      { path: '/etc/hostname', what: 'fact', holds: () => true },
    ];
    const answer = await run({
      ...(options.workerUid === undefined ? {} : { uid: options.workerUid }),
      profile,
      workspace: tree.workspace,
      protect: [
        { mode: 'mask_file', path: 'masked-file' },
        { mode: 'mask_directory', path: 'masked-dir' },
        { mode: 'read_only', path: 'read-only' },
      ],
      hide: [tree.hidden, ...options.hide.slice(0, 31)],
      paths: [...checks, ...facts].map((check) => check.path),
    });
    if (!answer.ok) return { requirement: `the ${profile} worker view cannot be built: ${answer.detail}`, facts: null };
    const broken = checks.find((check, index) => {
      const entry = answer.entries[index];
      return entry === undefined || entry.path !== check.path || !check.holds(entry);
    });
    const factEntries = answer.entries.slice(checks.length);
    const viewFacts: ViewFacts = {
      rootOwnedReadable: tree.rootOnly === null ? null : (factEntries[0]?.read ?? false),
      hostWritable: factEntries[factEntries.length - 1]?.write ?? true,
    };
    return broken === undefined
      ? { facts: viewFacts }
      : { requirement: `the ${profile} worker view does not hold: ${broken.what} (${broken.path})`, facts: viewFacts };
  } finally {
    for (const file of tree.cleanup) fs.rmSync(file, { force: true });
    fs.rmSync(tree.base, { recursive: true, force: true });
  }
}
