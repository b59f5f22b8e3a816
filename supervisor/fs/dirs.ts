/**
 * Directory-fd primitives shared by the guard, the turn temp purge and the scratch pruner:
 * open one component beneath a held directory without following anything, and list a held
 * directory's entries as raw name bytes.
 */
import {
  O_CLOEXEC,
  O_DIRECTORY,
  O_NOFOLLOW,
  O_RDONLY,
  RESOLVE_BENEATH,
  RESOLVE_NO_SYMLINKS,
} from '../../core/linux-abi.js';
import { close, getdents64, openat, openat2, type SysResult } from './sys.js';

const DIR_OPEN_FLAGS = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
const DOT = Buffer.from('.\0');
const DENTS_BUFFER_BYTES = 64 * 1024;
/** struct linux_dirent64: d_ino u64, d_off s64, d_reclen u16, d_type u8, d_name[]. */
const DIRENT_RECLEN_OFFSET = 16;
const DIRENT_NAME_OFFSET = 19;

/**
 * Opens a single name beneath a held directory as a directory. RESOLVE_BENEATH and
 * RESOLVE_NO_SYMLINKS make the kernel refuse a symlink (ELOOP) or an escape (EXDEV) even if
 * `name` were ever more than one component; O_NOFOLLOW|O_DIRECTORY cover the last one.
 */
export function openDirBeneath(parentFd: number, name: Buffer): SysResult<{ fd: number }> {
  return openat2(parentFd, name, { flags: DIR_OPEN_FLAGS, resolve: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS });
}

/**
 * Lists a held directory's entries (without `.` and `..`) as raw names, not NUL-terminated. Reads through a fresh fd of the
 * same directory so the caller's fd offset is untouched and the listing starts at 0.
 */
export function listEntries(dirFd: number): SysResult<{ names: Buffer[] }> {
  const opened = openat(dirFd, DOT, DIR_OPEN_FLAGS);
  if (!opened.ok) return opened;
  try {
    const names: Buffer[] = [];
    const buf = Buffer.alloc(DENTS_BUFFER_BYTES);
    for (;;) {
      const read = getdents64(opened.fd, buf);
      if (!read.ok) return read;
      if (read.bytes === 0) return { ok: true, names };
      collectNames(buf, read.bytes, names);
    }
  } finally {
    closeQuietly(opened.fd);
  }
}

function collectNames(buf: Buffer, length: number, into: Buffer[]): void {
  let offset = 0;
  while (offset < length) {
    const reclen = buf.readUInt16LE(offset + DIRENT_RECLEN_OFFSET);
    const start = offset + DIRENT_NAME_OFFSET;
    const end = buf.indexOf(0, start);
    const name = Buffer.from(buf.subarray(start, end));
    if (!isDotEntry(name)) into.push(name);
    offset += reclen;
  }
}

function isDotEntry(name: Buffer): boolean {
  return (name.length === 1 && name[0] === 0x2e) || (name.length === 2 && name[0] === 0x2e && name[1] === 0x2e);
}

/** Close on a cleanup path: a failure there has nothing left to undo. */
export function closeQuietly(fd: number): void {
  close(fd);
}
