/**
 * The one place libc is loaded through koffi. Each mechanism declares the functions it needs
 * from `libc()` in its own module, so a reader finds every syscall next to the code using it.
 * x86_64 only: syscall numbers used with `syscall()` are the x86_64 ones.
 */
import koffi, { type LibraryHandle } from 'koffi';

let lib: LibraryHandle | undefined;

export function libc(): LibraryHandle {
  lib ??= koffi.load('libc.so.6');
  return lib;
}

/** errno of the last failed koffi call on this thread. */
export function lastErrno(): number {
  return koffi.errno();
}

const ERRNO_NAMES: Record<number, string> = {
  1: 'EPERM',
  2: 'ENOENT',
  3: 'ESRCH',
  4: 'EINTR',
  5: 'EIO',
  9: 'EBADF',
  11: 'EAGAIN',
  12: 'ENOMEM',
  13: 'EACCES',
  16: 'EBUSY',
  17: 'EEXIST',
  18: 'EXDEV',
  20: 'ENOTDIR',
  21: 'EISDIR',
  22: 'EINVAL',
  24: 'EMFILE',
  27: 'EFBIG',
  28: 'ENOSPC',
  30: 'EROFS',
  36: 'ENAMETOOLONG',
  38: 'ENOSYS',
  39: 'ENOTEMPTY',
  40: 'ELOOP',
  95: 'EOPNOTSUPP',
};

export function errnoName(errno: number): string {
  return ERRNO_NAMES[errno] ?? `errno ${errno}`;
}
