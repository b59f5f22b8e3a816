/**
 * The masked worker view, verified: the identity helper builds the launch view of a sentinel
 * tree (one protected path of each mode, a turn temp) and reports what the worker identity
 * sees; any difference from the profile's promise is a requirement that makes the mode
 * unavailable. Decisions: docs/filesystem-view.md.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Result } from '../../core/result.js';
import type { HelperProfile, HelperViewEntry, HelperViewRequest } from '../identity/helper-client.js';

const HOST_TMP = '/tmp';

/** Runs the helper's `view` operation (injected: the daemon binds it to the configured helper). */
export type HelperViewProbe = (
  request: HelperViewRequest,
) => Promise<Result<{ workerUid: number; viewBuilt: boolean; entries: HelperViewEntry[] }>>;

interface SentinelTree {
  base: string;
  workspace: string;
  /** Null when this process may not hand a directory to the worker uid (not root). */
  temp: string | null;
  hostOnly: string;
}

function worldWritableFile(file: string, content: string): void {
  fs.writeFileSync(file, content);
  fs.chmodSync(file, 0o666);
}

function workerOwnedDirectory(dir: string, workerUid: number): string | null {
  fs.mkdirSync(dir, { mode: 0o700 });
  try {
    fs.chownSync(dir, workerUid, workerUid);
    return dir;
  } catch {
    return null;
  }
}

/**
 * World-writable sentinels: a refused write can only come from the view's mounts. The tree
 * lives under the host's /tmp, which the view replaces: `hostOnly` must not be seen.
 */
function plantSentinels(workerUid: number): SentinelTree {
  const base = fs.mkdtempSync(path.join(HOST_TMP, 'turnhost-view-probe-'));
  fs.chmodSync(base, 0o755);
  const workspace = path.join(base, 'workspace');
  const temp = path.join(base, 'temp');
  fs.mkdirSync(path.join(workspace, 'masked-dir'), { recursive: true });
  for (const dir of [workspace, path.join(workspace, 'masked-dir')]) fs.chmodSync(dir, 0o777);
  worldWritableFile(path.join(workspace, 'masked-file'), 'sentinel\n');
  worldWritableFile(path.join(workspace, 'masked-dir/inner'), 'sentinel\n');
  worldWritableFile(path.join(workspace, 'read-only'), 'sentinel\n');
  const hostOnly = path.join(base, 'host-only');
  worldWritableFile(hostOnly, 'sentinel\n');
  return { base, workspace, temp: workerOwnedDirectory(temp, workerUid), hostOnly };
}

interface Expectation {
  path: string;
  what: string;
  holds: (entry: HelperViewEntry) => boolean;
}

function expectations(tree: SentinelTree, profile: HelperProfile): Expectation[] {
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
    { path: tree.hostOnly, what: "the host's /tmp must be replaced by a fresh one", holds: (e) => !e.exists },
    { path: '/proc/1', what: "other users' processes must be invisible in /proc", holds: (e) => !e.exists },
    { path: '/etc', what: 'host system directories must be read-only', holds: (e) => !e.write },
  ];
  if (tree.temp !== null) list.push({ path: tree.temp, what: 'the turn temp must be writable', holds: (e) => e.write });
  if (profile === 'governed') {
    list.push({ path: tree.workspace, what: 'the workspace must be writable', holds: (e) => e.write });
  } else {
    list.push({ path: tree.workspace, what: 'the workspace must be read-only', holds: (e) => e.read && !e.write });
    list.push({ path: '/etc/shadow', what: '/etc/shadow must be absent', holds: (e) => !e.exists });
    list.push({ path: '/home', what: '/home must be absent', holds: (e) => !e.exists });
  }
  return list;
}

/** Undefined when the view holds; otherwise a requirement naming what failed. */
export async function probeMaskedView(
  run: HelperViewProbe,
  profile: HelperProfile,
  workerUid: number,
): Promise<string | undefined> {
  let tree: SentinelTree;
  try {
    tree = plantSentinels(workerUid);
  } catch (error) {
    return `the ${profile} worker view could not be verified: sentinel tree: ${(error as Error).message}`;
  }
  try {
    const checks = expectations(tree, profile);
    const answer = await run({
      uid: workerUid,
      profile,
      workspace: tree.workspace,
      ...(tree.temp !== null ? { temp: tree.temp } : {}),
      protect: [
        { mode: 'mask_file', path: 'masked-file' },
        { mode: 'mask_directory', path: 'masked-dir' },
        { mode: 'read_only', path: 'read-only' },
      ],
      paths: checks.map((check) => check.path),
    });
    if (!answer.ok) return `the ${profile} worker view cannot be built: ${answer.detail}`;
    const broken = checks.find((check, index) => {
      const entry = answer.entries[index];
      return entry === undefined || entry.path !== check.path || !check.holds(entry);
    });
    return broken === undefined
      ? undefined
      : `the ${profile} worker view does not hold: ${broken.what} (${broken.path})`;
  } finally {
    fs.rmSync(tree.base, { recursive: true, force: true });
  }
}
