/**
 * Depth-first walk of a directory tree through held directory fds. Nothing is ever
 * followed: each entry is classified with fstatat(AT_SYMLINK_NOFOLLOW), only real
 * directories are descended into (opened beneath their held parent, identity-checked), and
 * every callback receives the held parent fd and the raw name, so callers act with *at()
 * calls relative to that parent.
 */
import { closeQuietly, listEntries, openDirBeneath } from './dirs.js';
import { cName, fileType, fstat, lstatat, sameIdentity, type FileStat } from './sys.js';

const MAX_TREE_DEPTH = 256;
const MAX_RECORDED_ERRORS = 20;

export interface TreeEntry {
  parentFd: number;
  /** The entry's name, NUL-terminated for *at() calls. */
  name: Buffer;
  stat: FileStat;
  /** Raw names from the walk's root to this entry, the entry's own name last. */
  components: Buffer[];
}

export interface TreeVisitor {
  /** Every entry that is not a directory. */
  entry(entry: TreeEntry): void;
  /** A directory, after all its children were visited and its fd closed. */
  leaveDirectory?(entry: TreeEntry): void;
}

/** Bounded list of what went wrong during a walk; `count` keeps counting past the bound. */
export class WalkErrors {
  readonly recorded: string[] = [];
  count = 0;

  add(components: Buffer[], detail: string): void {
    this.count++;
    if (this.recorded.length < MAX_RECORDED_ERRORS) this.recorded.push(`${relativeName(components) || '.'}: ${detail}`);
  }
}

export function relativeName(components: Buffer[]): string {
  return components.map((c) => c.toString('utf8')).join('/');
}

/** Walks everything beneath `dirFd` (the directory itself is not visited). */
export function walkTree(dirFd: number, visitor: TreeVisitor, errors: WalkErrors): void {
  walkDirectory(dirFd, [], visitor, errors);
}

function walkDirectory(dirFd: number, prefix: Buffer[], visitor: TreeVisitor, errors: WalkErrors): void {
  const listed = listEntries(dirFd);
  if (!listed.ok) {
    errors.add(prefix, listed.detail);
    return;
  }
  for (const raw of listed.names) {
    const components = [...prefix, raw];
    const name = cName(raw);
    const st = lstatat(dirFd, name);
    if (!st.ok) {
      if (st.reason !== 'ENOENT') errors.add(components, st.detail);
      continue;
    }
    const entry: TreeEntry = { parentFd: dirFd, name, stat: st.stat, components };
    if (fileType(st.stat.mode) !== 'directory') {
      visitor.entry(entry);
      continue;
    }
    descend(entry, visitor, errors);
    visitor.leaveDirectory?.(entry);
  }
}

function descend(entry: TreeEntry, visitor: TreeVisitor, errors: WalkErrors): void {
  if (entry.components.length > MAX_TREE_DEPTH) {
    errors.add(entry.components, `deeper than ${MAX_TREE_DEPTH} levels, not descended`);
    return;
  }
  const opened = openDirBeneath(entry.parentFd, entry.name);
  if (!opened.ok) {
    errors.add(entry.components, opened.detail);
    return;
  }
  try {
    const held = fstat(opened.fd);
    if (!held.ok || !sameIdentity(held.stat, entry.stat)) {
      errors.add(entry.components, 'directory was replaced while being walked');
      return;
    }
    walkDirectory(opened.fd, entry.components, visitor, errors);
  } finally {
    closeQuietly(opened.fd);
  }
}
