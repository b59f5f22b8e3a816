/**
 * Synchronous koffi bindings for the directory-fd syscalls the fs guard is built on.
 * Every call answers a typed value carrying the errno name; nothing here throws for a
 * failed syscall. Names are passed as NUL-terminated byte buffers so a directory entry read
 * with getdents64 can be handed back to the kernel byte for byte, whatever its encoding.
 * Synchronous on purpose: koffi's async calls are ~30x slower (build-machine facts).
 */
import {
  AT_SYMLINK_NOFOLLOW,
  close as closeFd,
  errnoName,
  lastErrno,
  libcFunction,
  S_IFBLK,
  S_IFCHR,
  S_IFDIR,
  S_IFIFO,
  S_IFLNK,
  S_IFMT,
  S_IFREG,
  S_IFSOCK,
  SYS_OPENAT2,
} from '../../core/linux-abi.js';

const OPEN_HOW_SIZE = 24;
const STAT_SIZE = 144;

export type SysOk<T extends object> = { ok: true } & T;
/** `reason` is the errno name (`ENOENT`, `ELOOP`, ...); `errno` its number. */
export type SysFail = { ok: false; reason: string; errno: number; detail: string };
export type SysResult<T extends object = {}> = SysOk<T> | SysFail;

export interface FileStat {
  dev: bigint;
  ino: bigint;
  nlink: number;
  mode: number;
  uid: number;
  gid: number;
  size: number;
  mtimeMs: number;
}

type Fn = (...args: unknown[]) => unknown;

interface Bindings {
  openat: Fn;
  openat2: Fn;
  mkdirat: Fn;
  renameat2: Fn;
  unlinkat: Fn;
  fstat: Fn;
  fstatat: Fn;
  fsync: Fn;
  fchmod: Fn;
  fchown: Fn;
  pwrite: Fn;
  pread: Fn;
  getdents64: Fn;
}

let bound: Bindings | undefined;

function bindings(): Bindings {
  if (bound) return bound;
  bound = {
    openat: libcFunction('int openat(int, const uint8_t *, int, uint32_t)') as Fn,
    // syscall(2) with openat2's argument types fixed: a variadic call costs a type per argument.
    openat2: libcFunction('long syscall(long, int, const uint8_t *, const void *, size_t)') as Fn,
    mkdirat: libcFunction('int mkdirat(int, const uint8_t *, uint32_t)') as Fn,
    renameat2: libcFunction('int renameat2(int, const uint8_t *, int, const uint8_t *, uint32_t)') as Fn,
    unlinkat: libcFunction('int unlinkat(int, const uint8_t *, int)') as Fn,
    fstat: libcFunction('int fstat(int, _Out_ void *)') as Fn,
    fstatat: libcFunction('int fstatat(int, const uint8_t *, _Out_ void *, int)') as Fn,
    fsync: libcFunction('int fsync(int)') as Fn,
    fchmod: libcFunction('int fchmod(int, uint32_t)') as Fn,
    fchown: libcFunction('int fchown(int, uint32_t, uint32_t)') as Fn,
    pwrite: libcFunction('intptr_t pwrite(int, const void *, size_t, int64_t)') as Fn,
    pread: libcFunction('intptr_t pread(int, _Out_ void *, size_t, int64_t)') as Fn,
    getdents64: libcFunction('intptr_t getdents64(int, _Out_ void *, size_t)') as Fn,
  };
  return bound;
}

/** A NUL-terminated copy of a name for the kernel. */
export function cName(name: string | Buffer): Buffer {
  const bytes = typeof name === 'string' ? Buffer.from(name, 'utf8') : name;
  const out = Buffer.allocUnsafe(bytes.length + 1);
  bytes.copy(out);
  out[bytes.length] = 0;
  return out;
}

function failed(call: string): SysFail {
  const errno = lastErrno();
  const reason = errnoName(errno);
  return { ok: false, reason, errno, detail: `${call} failed: ${reason}` };
}

/** libc's convention: a negative return is a failure with its reason in errno; `success` shapes any other. */
function checked<T extends object>(call: string, rc: unknown, success: (value: number) => T): SysResult<T> {
  const value = Number(rc);
  return value < 0 ? failed(call) : { ok: true, ...success(value) };
}

const fdValue = (fd: number) => ({ fd });
const byteCount = (bytes: number) => ({ bytes });
const noValue = () => ({});

export function openat(dirFd: number, name: Buffer, flags: number, mode = 0): SysResult<{ fd: number }> {
  return checked('openat', bindings().openat(dirFd, name, flags, mode), fdValue);
}

/** openat2 with `struct open_how { u64 flags; u64 mode; u64 resolve; }`. */
export function openat2(
  dirFd: number,
  name: Buffer,
  how: { flags: number; mode?: number; resolve: number },
): SysResult<{ fd: number }> {
  const buf = Buffer.alloc(OPEN_HOW_SIZE);
  buf.writeBigUInt64LE(BigInt(how.flags), 0);
  buf.writeBigUInt64LE(BigInt(how.mode ?? 0), 8);
  buf.writeBigUInt64LE(BigInt(how.resolve), 16);
  return checked('openat2', bindings().openat2(SYS_OPENAT2, dirFd, name, buf, OPEN_HOW_SIZE), fdValue);
}

export function mkdirat(dirFd: number, name: Buffer, mode: number): SysResult {
  return checked('mkdirat', bindings().mkdirat(dirFd, name, mode), noValue);
}

export function renameat2(
  oldDirFd: number,
  oldName: Buffer,
  newDirFd: number,
  newName: Buffer,
  flags: number,
): SysResult {
  return checked('renameat2', bindings().renameat2(oldDirFd, oldName, newDirFd, newName, flags), noValue);
}

export function unlinkat(dirFd: number, name: Buffer, flags: number): SysResult {
  return checked('unlinkat', bindings().unlinkat(dirFd, name, flags), noValue);
}

function parseStat(buf: Buffer): FileStat {
  return {
    dev: buf.readBigUInt64LE(0),
    ino: buf.readBigUInt64LE(8),
    nlink: Number(buf.readBigUInt64LE(16)),
    mode: buf.readUInt32LE(24),
    uid: buf.readUInt32LE(28),
    gid: buf.readUInt32LE(32),
    size: Number(buf.readBigInt64LE(48)),
    mtimeMs: Number(buf.readBigInt64LE(88)) * 1000 + Number(buf.readBigInt64LE(96)) / 1e6,
  };
}

export function fstat(fd: number): SysResult<{ stat: FileStat }> {
  const buf = Buffer.alloc(STAT_SIZE);
  return checked('fstat', bindings().fstat(fd, buf), () => ({ stat: parseStat(buf) }));
}

/** Always AT_SYMLINK_NOFOLLOW: a link is reported as a link, never resolved. */
export function lstatat(dirFd: number, name: Buffer): SysResult<{ stat: FileStat }> {
  const buf = Buffer.alloc(STAT_SIZE);
  return checked('fstatat', bindings().fstatat(dirFd, name, buf, AT_SYMLINK_NOFOLLOW), () => ({
    stat: parseStat(buf),
  }));
}

export function fsync(fd: number): SysResult {
  return checked('fsync', bindings().fsync(fd), noValue);
}

export function fchmod(fd: number, mode: number): SysResult {
  return checked('fchmod', bindings().fchmod(fd, mode), noValue);
}

export function fchown(fd: number, uid: number, gid: number): SysResult {
  return checked('fchown', bindings().fchown(fd, uid, gid), noValue);
}

export function close(fd: number): SysResult {
  return checked('close', closeFd(fd), noValue);
}

export function pwrite(fd: number, data: Buffer, offset: number): SysResult<{ bytes: number }> {
  return checked('pwrite', bindings().pwrite(fd, data, data.length, offset), byteCount);
}

export function pread(fd: number, into: Buffer, offset: number): SysResult<{ bytes: number }> {
  return checked('pread', bindings().pread(fd, into, into.length, offset), byteCount);
}

export function getdents64(dirFd: number, into: Buffer): SysResult<{ bytes: number }> {
  return checked('getdents64', bindings().getdents64(dirFd, into, into.length), byteCount);
}

export function fileType(mode: number): 'file' | 'directory' | 'symlink' | 'fifo' | 'socket' | 'device' | 'unknown' {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return 'file';
    case S_IFDIR:
      return 'directory';
    case S_IFLNK:
      return 'symlink';
    case S_IFIFO:
      return 'fifo';
    case S_IFSOCK:
      return 'socket';
    case S_IFCHR:
    case S_IFBLK:
      return 'device';
    default:
      return 'unknown';
  }
}

export function sameIdentity(a: { dev: bigint; ino: bigint }, b: { dev: bigint; ino: bigint }): boolean {
  return a.dev === b.dev && a.ino === b.ino;
}
