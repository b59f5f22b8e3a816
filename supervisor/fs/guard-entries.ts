/**
 * Directory operations of the fs guard (docs/fs-guard.md, "Listing, directories, removal"):
 * list a directory, make one with its parents, remove an entry or a whole tree. Each reaches its
 * target through the guard's chain of held O_NOFOLLOW directory fds, so a worker changing the
 * tree at the same moment can make an operation fail but never point it outside the root.
 */
import { AT_REMOVEDIR } from '../../core/linux-abi.js';
import { fail, ok, type Result } from '../../core/result.js';
import { closeQuietly, listEntries, openDirBeneath } from './dirs.js';
import {
  closeChain,
  validateRelativePath,
  walkDirectories,
  type FsRefusal,
  type HeldDir,
  type RootHandle,
} from './guard.js';
import { WalkErrors, walkTree } from './tree.js';
import { cName, fileType, fstat, lstatat, sameIdentity, unlinkat, type FileStat } from './sys.js';

/** The guard's refusals, and a directory with entries removed without `recursive`. */
export type EntryRefusal = FsRefusal | 'not_empty';

type EntryType = 'file' | 'directory' | 'symlink' | 'other';

export interface DirectoryEntry {
  /** The name as UTF-8 (a byte sequence that is not UTF-8 shows U+FFFD). */
  name: string;
  type: EntryType;
  size: number;
  /** Permission and special bits (07777). */
  mode: number;
  /** ISO 8601. */
  mtime: string;
}

export interface RemoveReceipt {
  /** Entries removed that are not directories, and their apparent bytes. */
  files: number;
  bytes: number;
  directories: number;
}

function entryType(mode: number): EntryType {
  const type = fileType(mode);
  return type === 'file' || type === 'directory' || type === 'symlink' ? type : 'other';
}

function describe(name: string, stat: FileStat): DirectoryEntry {
  return {
    name,
    type: entryType(stat.mode),
    size: stat.size,
    mode: stat.mode & 0o7777,
    mtime: new Date(stat.mtimeMs).toISOString(),
  };
}

/** The components of a directory path: empty or `.` is the root itself. */
function directoryComponents(rel: string): Result<{ components: string[] }, 'invalid_path'> {
  if (rel === '' || rel === '.') return ok({ components: [] });
  return validateRelativePath(rel);
}

/** Runs `use` on the held directory `rel` names (the root for `''`), then closes the chain. */
function withDirectory<T extends object, R extends string>(
  root: RootHandle,
  rel: string,
  use: (dir: HeldDir) => Result<T, R>,
): Result<T, R | FsRefusal> {
  const path = directoryComponents(rel);
  if (!path.ok) return path;
  const walked = walkDirectories(root, path.components, false);
  if (!walked.ok) return walked;
  try {
    return use(walked.chain[walked.chain.length - 1]!);
  } finally {
    closeChain(walked.chain);
  }
}

/**
 * The entries of the directory `rel` (`''` or `.`: the root), sorted by name, each described
 * by fstatat without following it. A regular file at `rel` is `not_a_directory`.
 */
export function listDirectory(root: RootHandle, rel: string): Result<{ entries: DirectoryEntry[] }, FsRefusal> {
  return withDirectory(root, rel, (dir) => {
    const listed = listEntries(dir.fd);
    if (!listed.ok) return fail('io_error', `listing ${JSON.stringify(rel || '.')}: ${listed.detail}`);
    const entries: DirectoryEntry[] = [];
    for (const raw of listed.names) {
      const st = lstatat(dir.fd, cName(raw));
      // Removed between the listing and the stat: it is not there any more.
      if (!st.ok && st.reason === 'ENOENT') continue;
      if (!st.ok) return fail('io_error', `${JSON.stringify(raw.toString('utf8'))}: ${st.detail}`);
      entries.push(describe(raw.toString('utf8'), st.stat));
    }
    entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    return ok({ entries });
  });
}

/** What `rel` is, not followed: its entry as a listing would show it. */
export function statEntry(root: RootHandle, rel: string): Result<{ entry: DirectoryEntry }, FsRefusal> {
  const path = validateRelativePath(rel);
  if (!path.ok) return path;
  const leaf = path.components[path.components.length - 1]!;
  return withDirectory(root, path.components.slice(0, -1).join('/'), (dir) => {
    const st = lstatat(dir.fd, cName(leaf));
    if (!st.ok)
      return st.reason === 'ENOENT'
        ? fail('not_found', `${JSON.stringify(rel)} does not exist`)
        : fail('io_error', `${JSON.stringify(rel)}: ${st.detail}`);
    return ok({ entry: describe(leaf, st.stat) });
  });
}

/**
 * Makes the directory `rel` and its missing parents (mode `dirMode`, no umask). An existing
 * directory is kept (`made: 0`); a file or a link on the way is refused.
 */
export function makeDirectory(root: RootHandle, rel: string, dirMode: number): Result<{ made: number }, FsRefusal> {
  const path = validateRelativePath(rel);
  if (!path.ok) return path;
  const walked = walkDirectories(root, path.components, true, dirMode);
  if (!walked.ok) return walked;
  closeChain(walked.chain);
  return ok({ made: walked.made });
}

/** Empties the held directory `fd`: every entry beneath, children first, no link followed. */
function removeContents(fd: number, receipt: RemoveReceipt): Result<{}, EntryRefusal> {
  const errors = new WalkErrors();
  walkTree(
    fd,
    {
      entry: (entry) => {
        const removed = unlinkat(entry.parentFd, entry.name, 0);
        if (!removed.ok) return errors.add(entry.components, removed.detail);
        receipt.files += 1;
        receipt.bytes += entry.stat.size;
      },
      leaveDirectory: (entry) => {
        const removed = unlinkat(entry.parentFd, entry.name, AT_REMOVEDIR);
        if (!removed.ok) return errors.add(entry.components, removed.detail);
        receipt.directories += 1;
      },
    },
    errors,
  );
  return errors.count === 0 ? ok({}) : fail('io_error', `removing: ${errors.recorded.join('; ')}`);
}

/** Removes a directory entry of the held `parent`: with `recursive`, its contents first. */
function removeDirectory(
  parent: HeldDir,
  name: Buffer,
  stat: FileStat,
  recursive: boolean,
  label: string,
): Result<RemoveReceipt, EntryRefusal> {
  const receipt: RemoveReceipt = { files: 0, bytes: 0, directories: 0 };
  if (recursive) {
    const opened = openDirBeneath(parent.fd, name);
    if (!opened.ok) return fail('topology_changed', `${label} changed while being opened`);
    try {
      const held = fstat(opened.fd);
      if (!held.ok || !sameIdentity(held.stat, stat)) return fail('topology_changed', `${label} was replaced`);
      const emptied = removeContents(opened.fd, receipt);
      if (!emptied.ok) return emptied;
    } finally {
      closeQuietly(opened.fd);
    }
  }
  const removed = unlinkat(parent.fd, name, AT_REMOVEDIR);
  if (removed.ok) return ok({ ...receipt, directories: receipt.directories + 1 });
  if (removed.reason === 'ENOTEMPTY' || removed.reason === 'EEXIST')
    return fail(
      'not_empty',
      recursive
        ? `${label} gained entries while being removed`
        : `${label} is a directory that is not empty (recursive=1 removes it with its contents)`,
    );
  if (removed.reason === 'ENOENT') return fail('topology_changed', `${label} vanished while being removed`);
  return fail('io_error', `${label}: ${removed.detail}`);
}

/**
 * Removes `rel`: a file, link or special file (the entry itself, never what a link names), an
 * empty directory, or with `recursive` a whole tree. The root itself is never removed.
 */
export function removeEntry(
  root: RootHandle,
  rel: string,
  options: { recursive: boolean },
): Result<RemoveReceipt, EntryRefusal> {
  const path = validateRelativePath(rel);
  if (!path.ok) return path;
  const label = JSON.stringify(rel);
  const leaf = cName(path.components[path.components.length - 1]!);
  return withDirectory(root, path.components.slice(0, -1).join('/'), (parent) => {
    const st = lstatat(parent.fd, leaf);
    if (!st.ok)
      return st.reason === 'ENOENT'
        ? fail('not_found', `${label} does not exist`)
        : fail('io_error', `${label}: ${st.detail}`);
    if (fileType(st.stat.mode) === 'directory') return removeDirectory(parent, leaf, st.stat, options.recursive, label);
    const removed = unlinkat(parent.fd, leaf, 0);
    if (!removed.ok)
      return removed.reason === 'ENOENT'
        ? fail('not_found', `${label} does not exist`)
        : removed.reason === 'EISDIR'
          ? fail('topology_changed', `${label} became a directory`)
          : fail('io_error', `${label}: ${removed.detail}`);
    return ok({ files: 1, bytes: st.stat.size, directories: 0 });
  });
}
