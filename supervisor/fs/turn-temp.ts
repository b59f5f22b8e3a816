/**
 * The per-turn temp directory: created by the supervisor under a supervisor-owned parent
 * that no worker can write, handed to the worker uid, held by a directory fd for the turn,
 * and measured and purged through held fds once the worker's processes are dead. Nothing
 * inside is ever followed: hard-linked and special files are counted and unlinked as names.
 * See docs/fs-guard.md ("Turn temp").
 */
import { basename, dirname, join } from 'node:path';
import { fail, ok, type Result } from '../../core/result.js';
import { closeQuietly, openDirBeneath } from './dirs.js';
import { closeRoot, openRoot, validateRelativePath, type FsRefusal, type RootHandle } from './guard.js';
import {
  AT_REMOVEDIR,
  cName,
  fchmod,
  fchown,
  fileType,
  fstat,
  lstatat,
  mkdirat,
  sameIdentity,
  unlinkat,
} from './sys.js';
import { walkTree, WalkErrors, type TreeEntry } from './tree.js';

const TURN_TEMP_MODE = 0o700;

export interface TurnTempUsage {
  /** Regular files with one link. */
  files: number;
  /** Bytes of those files; a hard-linked file's inode may live outside the turn, so it is not counted. */
  bytes: number;
  /** Regular files with more than one link: counted, unlinked as names, never opened. */
  linkedFiles: number;
  /** Symlinks, FIFOs, sockets and devices: counted, unlinked as names, never followed. */
  specialFiles: number;
  directories: number;
}

export interface TurnTempPurge extends TurnTempUsage {
  outcome: 'purged' | 'partial';
  /** The first few failures (relative names only); `errorCount` counts them all. */
  errors: string[];
  errorCount: number;
}

/** The `turn_temp_purge` event payload. */
export interface TurnTempPurgePayload {
  files: number;
  bytes: number;
  linkedFiles: number;
  specialFiles: number;
  outcome: 'purged' | 'partial';
}

export interface CreateTurnTempOptions {
  /** Supervisor-owned directory (owned by this process's euid, not group- or world-writable). */
  parentDir: string;
  /** One path component, e.g. the turn id. */
  name: string;
  uid: number;
  gid: number;
  /**
   * 'worker' (default): chowned to uid/gid here (needs root). 'self': left owned by this
   * process; the identity helper hands it to the worker at launch (docs/fs-guard.md).
   */
  owner?: 'worker' | 'self';
}

/**
 * Creates `parentDir/name` (mode 0700, owned by the worker uid, or by this process with
 * `owner: 'self'`) and holds it. The worker
 * owns the directory's contents but not its entry in the parent, so the held fd and the
 * path keep naming the same directory for the whole turn.
 */
export function createTurnTemp(options: CreateTurnTempOptions): Result<RootHandle, FsRefusal> {
  const name = validateRelativePath(options.name);
  if (!name.ok || name.components.length !== 1) return fail('invalid_path', 'name must be a single path component');
  if (!isId(options.uid) || !isId(options.gid))
    return fail('invalid_option', 'uid and gid must be non-negative integers');
  const parent = openRoot(options.parentDir);
  if (!parent.ok) return parent;
  try {
    const trusted = checkSupervisorOwned(parent.fd, options.parentDir);
    if (!trusted.ok) return trusted;
    return makeHeldTemp(parent.fd, options);
  } finally {
    closeRoot(parent);
  }
}

function isId(value: number): boolean {
  return Number.isSafeInteger(value) && value >= 0 && value < 0xffffffff;
}

function checkSupervisorOwned(fd: number, path: string): Result<{}, FsRefusal> {
  const st = fstat(fd);
  if (!st.ok) return fail('io_error', `${path}: ${st.detail}`);
  if (st.stat.uid !== process.geteuid?.())
    return fail('alias_denied', `${path} must be owned by the supervisor (uid ${process.geteuid?.()})`);
  if ((st.stat.mode & 0o022) !== 0) return fail('alias_denied', `${path} must not be group- or world-writable`);
  return ok({});
}

function makeHeldTemp(parentFd: number, options: CreateTurnTempOptions): Result<RootHandle, FsRefusal> {
  const name = cName(options.name);
  const made = mkdirat(parentFd, name, TURN_TEMP_MODE);
  if (!made.ok)
    return made.reason === 'EEXIST'
      ? fail('exists', `turn temp ${options.name} already exists`)
      : fail('io_error', made.detail);
  const opened = openDirBeneath(parentFd, name);
  if (!opened.ok) return fail('io_error', opened.detail);
  const abandon = (detail: string): Result<RootHandle, FsRefusal> => {
    closeQuietly(opened.fd);
    unlinkat(parentFd, name, AT_REMOVEDIR);
    return fail('io_error', `turn temp ${options.name}: ${detail}`);
  };
  if (options.owner !== 'self') {
    const owned = fchown(opened.fd, options.uid, options.gid);
    if (!owned.ok) return abandon(owned.detail);
  }
  const moded = fchmod(opened.fd, TURN_TEMP_MODE);
  if (!moded.ok) return abandon(moded.detail);
  const st = fstat(opened.fd);
  if (!st.ok) return abandon(st.detail);
  return ok({ fd: opened.fd, path: join(options.parentDir, options.name), dev: st.stat.dev, ino: st.stat.ino });
}

function classify(stat: TreeEntry['stat']): 'file' | 'linked' | 'special' {
  if (fileType(stat.mode) !== 'file') return 'special';
  return stat.nlink > 1 ? 'linked' : 'file';
}

function emptyUsage(): TurnTempUsage {
  return { files: 0, bytes: 0, linkedFiles: 0, specialFiles: 0, directories: 0 };
}

function count(usage: TurnTempUsage, entry: TreeEntry): void {
  const kind = classify(entry.stat);
  if (kind === 'file') {
    usage.files++;
    usage.bytes += entry.stat.size;
  } else if (kind === 'linked') {
    usage.linkedFiles++;
  } else {
    usage.specialFiles++;
  }
}

/** Measures the tree beneath the root without changing it. */
export function measureTurnTemp(root: RootHandle): TurnTempUsage & { errors: string[]; errorCount: number } {
  const usage = emptyUsage();
  const errors = new WalkErrors();
  walkTree(
    root.fd,
    {
      entry: (entry) => count(usage, entry),
      leaveDirectory: () => usage.directories++,
    },
    errors,
  );
  return { ...usage, errors: errors.recorded, errorCount: errors.count };
}

/**
 * Unlinks everything beneath the root, depth first, each name relative to its held parent.
 * Call only after the worker's processes are dead: a live writer could refill the tree.
 * With `removeRoot`, the root directory itself is removed too (after checking that its
 * path still names the held directory) and the handle is closed.
 */
export function purgeTurnTemp(root: RootHandle, options: { removeRoot?: boolean } = {}): TurnTempPurge {
  const usage = emptyUsage();
  const errors = new WalkErrors();
  walkTree(
    root.fd,
    {
      entry: (entry) => {
        count(usage, entry);
        const removed = unlinkat(entry.parentFd, entry.name, 0);
        if (!removed.ok) errors.add(entry.components, removed.detail);
      },
      leaveDirectory: (entry) => {
        usage.directories++;
        const removed = unlinkat(entry.parentFd, entry.name, AT_REMOVEDIR);
        if (!removed.ok) errors.add(entry.components, removed.detail);
      },
    },
    errors,
  );
  if (options.removeRoot) removeRootDirectory(root, errors);
  return {
    ...usage,
    outcome: errors.count === 0 ? 'purged' : 'partial',
    errors: errors.recorded,
    errorCount: errors.count,
  };
}

function removeRootDirectory(root: RootHandle, errors: WalkErrors): void {
  const parent = openRoot(dirname(root.path));
  closeRoot(root);
  if (!parent.ok) {
    errors.add([], `parent of the turn temp: ${parent.detail}`);
    return;
  }
  try {
    const name = cName(basename(root.path));
    const st = lstatat(parent.fd, name);
    if (!st.ok || !sameIdentity(st.stat, root)) {
      errors.add([], 'the turn temp path no longer names the held directory; not removed');
      return;
    }
    const removed = unlinkat(parent.fd, name, AT_REMOVEDIR);
    if (!removed.ok) errors.add([], removed.detail);
  } finally {
    closeRoot(parent);
  }
}

export function turnTempPurgePayload(purge: TurnTempPurge): TurnTempPurgePayload {
  const { files, bytes, linkedFiles, specialFiles, outcome } = purge;
  return { files, bytes, linkedFiles, specialFiles, outcome };
}
