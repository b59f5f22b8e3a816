/**
 * A workspace subtree as a tar stream (GET /api/workspaces/:id/archive). The walk holds a
 * directory fd per level, each opened beneath its held parent with O_NOFOLLOW|O_DIRECTORY and
 * checked against the entry it was listed as, so a turn swapping a directory for a link while
 * the archive is read can make an entry go missing but never bring anything from outside the
 * workspace into it. Regular single-link files and directories are stored; a symlink is stored
 * as a symlink (its target text, never followed); anything else (a hard-linked file, a device, a
 * FIFO, a socket, an entry that changed under the walk) is skipped and counted.
 */
import fs from 'node:fs';
import {
  O_CLOEXEC,
  O_NOFOLLOW,
  O_NONBLOCK,
  O_RDONLY,
  RESOLVE_BENEATH,
  RESOLVE_NO_SYMLINKS,
} from '../../core/linux-abi.js';
import { fail, ok, type Result } from '../../core/result.js';
import { closeQuietly, listEntries, openDirBeneath } from '../fs/dirs.js';
import { closeChain, closeRoot, openRoot, walkDirectories, type HeldDir, type RootHandle } from '../fs/guard.js';
import { cName, fileType, fstat, lstatat, openat2, pread, sameIdentity, type FileStat } from '../fs/sys.js';
import { isTop } from './files.js';
import { tarEnd, tarHeader, tarPadding } from './tar-format.js';
import type { WorkspaceFileFailure } from './types.js';
import { validateRelativePath } from '../fs/guard.js';

const LEAF_FLAGS = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
const CHUNK_BYTES = 64 * 1024;
const MAX_DEPTH = 256;

/** What an archive held, and what the walk left out. */
export interface ArchiveReadReceipt {
  files: number;
  directories: number;
  symlinks: number;
  /** Content bytes of the files. */
  bytes: number;
  /** Entries left out: special files, hard-linked files, entries that changed while walked, too deep. */
  skipped: number;
}

/**
 * The held directory an archive is read from; `chunks()` yields the archive, `close()` (also
 * run when the generator is returned early) lets go of every fd.
 */
export class ArchiveSource {
  readonly receipt: ArchiveReadReceipt = { files: 0, directories: 0, symlinks: 0, bytes: 0, skipped: 0 };
  private closed = false;

  private constructor(
    private readonly root: RootHandle,
    private readonly chain: HeldDir[],
  ) {}

  /** Opens `rel` (`''` or `.`: the whole workspace) beneath `dir`, refusing anything but a real directory. */
  static open(dir: string, rel: string): Result<{ source: ArchiveSource }, WorkspaceFileFailure> {
    const components = isTop(rel) ? ok({ components: [] as string[] }) : validateRelativePath(rel);
    if (!components.ok) return components;
    const root = openRoot(dir);
    if (!root.ok) return fail('workspaces_unavailable', root.detail);
    const walked = walkDirectories(root, components.components, false);
    if (!walked.ok) {
      closeRoot(root);
      return walked;
    }
    return ok({ source: new ArchiveSource(root, walked.chain) });
  }

  *chunks(): Generator<Buffer, void, undefined> {
    try {
      yield* this.directory(this.chain[this.chain.length - 1]!.fd, [], 0);
      yield tarEnd();
    } finally {
      this.close();
    }
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    closeChain(this.chain);
    closeRoot(this.root);
  }

  private *directory(dirFd: number, prefix: Buffer[], depth: number): Generator<Buffer, void, undefined> {
    const listed = listEntries(dirFd);
    if (!listed.ok) {
      this.receipt.skipped += 1;
      return;
    }
    for (const raw of listed.names) {
      const name = cName(raw);
      const st = lstatat(dirFd, name);
      if (!st.ok) {
        // Removed since the listing: it is not there any more.
        if (st.reason !== 'ENOENT') this.receipt.skipped += 1;
        continue;
      }
      const components = [...prefix, raw];
      const type = fileType(st.stat.mode);
      if (type === 'directory') yield* this.subdirectory(dirFd, name, st.stat, components, depth);
      else if (type === 'file') yield* this.file(dirFd, name, components);
      else if (type === 'symlink') yield* this.symlink(dirFd, raw, st.stat, components);
      else this.receipt.skipped += 1;
    }
  }

  private *subdirectory(
    parentFd: number,
    name: Buffer,
    listedAs: FileStat,
    components: Buffer[],
    depth: number,
  ): Generator<Buffer, void, undefined> {
    if (depth >= MAX_DEPTH) {
      this.receipt.skipped += 1;
      return;
    }
    const opened = openDirBeneath(parentFd, name);
    if (!opened.ok) {
      // Swapped for a link or a file since it was listed: not followed, not stored.
      this.receipt.skipped += 1;
      return;
    }
    try {
      const held = fstat(opened.fd);
      if (!held.ok || !sameIdentity(held.stat, listedAs)) {
        this.receipt.skipped += 1;
        return;
      }
      yield tarHeader({ ...headerFields(joined(components), held.stat), kind: 'directory', size: 0 });
      this.receipt.directories += 1;
      yield* this.directory(opened.fd, components, depth + 1);
    } finally {
      closeQuietly(opened.fd);
    }
  }

  private *file(parentFd: number, name: Buffer, components: Buffer[]): Generator<Buffer, void, undefined> {
    const opened = openat2(parentFd, name, { flags: LEAF_FLAGS, resolve: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS });
    if (!opened.ok) {
      if (opened.reason !== 'ENOENT') this.receipt.skipped += 1;
      return;
    }
    try {
      const st = fstat(opened.fd);
      // What was opened is what is stored: a regular file with one link (a hard link could name
      // a file outside the workspace, as the guard's reads refuse it too).
      if (!st.ok || fileType(st.stat.mode) !== 'file' || st.stat.nlink !== 1) {
        this.receipt.skipped += 1;
        return;
      }
      const size = st.stat.size;
      yield tarHeader({ ...headerFields(joined(components), st.stat), kind: 'file', size });
      yield* contentOf(opened.fd, size);
      yield tarPadding(size);
      this.receipt.files += 1;
      this.receipt.bytes += size;
    } finally {
      closeQuietly(opened.fd);
    }
  }

  private *symlink(dirFd: number, raw: Buffer, st: FileStat, components: Buffer[]): Generator<Buffer, void, undefined> {
    // The held directory's own fd names it: the last component is read, never followed.
    let target: Buffer;
    try {
      target = fs.readlinkSync(Buffer.concat([Buffer.from(`/proc/self/fd/${dirFd}/`), raw]), { encoding: 'buffer' });
    } catch {
      this.receipt.skipped += 1;
      return;
    }
    yield tarHeader({ ...headerFields(joined(components), st), kind: 'symlink', size: 0, linkName: target });
    this.receipt.symlinks += 1;
  }
}

function joined(components: Buffer[]): Buffer {
  const parts: Buffer[] = [];
  components.forEach((component, i) => {
    if (i > 0) parts.push(Buffer.from('/'));
    parts.push(component);
  });
  return Buffer.concat(parts);
}

function headerFields(name: Buffer, st: FileStat) {
  return { name, mode: st.mode & 0o7777, uid: st.uid, gid: st.gid, mtimeSeconds: Math.floor(st.mtimeMs / 1000) };
}

/**
 * Exactly `size` bytes of a held file: a file that shrank since its header is padded with zeros
 * and one that grew is cut, so the archive stays well formed.
 */
function* contentOf(fd: number, size: number): Generator<Buffer, void, undefined> {
  let offset = 0;
  while (offset < size) {
    const chunk = Buffer.alloc(Math.min(CHUNK_BYTES, size - offset));
    const read = pread(fd, chunk, offset);
    const bytes = read.ok ? read.bytes : 0;
    if (bytes === 0) {
      yield Buffer.alloc(size - offset);
      return;
    }
    yield chunk.subarray(0, bytes);
    offset += bytes;
  }
}
