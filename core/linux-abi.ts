/**
 * The Linux ABI as this code uses it: the numeric constants passed to and read back from the
 * kernel, the one koffi handle on libc, and the calls bound through it. x86_64 and glibc only:
 * the values and the syscall numbers used with `syscall()` are the x86_64 ones.
 *
 * A mechanism binds the calls only it makes with `libcFunction(prototype)` next to the code
 * using them; a call several modules make (close, socket, fcntl, ...) is exported here once.
 * Every binding is made on first use and kept, one per prototype. Module state is per isolate,
 * so a worker thread (the proxy's kernel relay) binds its own: koffi bindings belong to the
 * isolate that made them.
 */
import koffi, { type LibraryHandle } from 'koffi';

// open(2), openat2(2), *at(2) flags.
export const O_RDONLY = 0;
export const O_WRONLY = 0o1;
export const O_CREAT = 0o100;
export const O_EXCL = 0o200;
export const O_NONBLOCK = 0o4000;
export const O_DIRECTORY = 0o200000;
export const O_NOFOLLOW = 0o400000;
export const O_CLOEXEC = 0o2000000;
export const AT_FDCWD = -100;
export const AT_SYMLINK_NOFOLLOW = 0x100;
export const AT_REMOVEDIR = 0x200;
export const RENAME_NOREPLACE = 1;
export const RESOLVE_NO_SYMLINKS = 0x04;
export const RESOLVE_BENEATH = 0x08;

// st_mode file types.
export const S_IFMT = 0o170000;
export const S_IFREG = 0o100000;
export const S_IFDIR = 0o040000;
export const S_IFLNK = 0o120000;
export const S_IFIFO = 0o010000;
export const S_IFSOCK = 0o140000;
export const S_IFCHR = 0o020000;
export const S_IFBLK = 0o060000;

// fcntl(2).
export const FD_CLOEXEC = 1;
export const F_SETFD = 2;
export const F_DUPFD_CLOEXEC = 1030;
export const F_SETPIPE_SZ = 1031;

// Sockets: socket(2) families and types, socket options, message flags, shutdown(2).
export const AF_UNIX = 1;
export const AF_INET = 2;
export const AF_PACKET = 17;
export const AF_VSOCK = 40;
export const SOCK_STREAM = 1;
export const SOCK_DGRAM = 2;
export const SOCK_SEQPACKET = 5;
export const SOCK_NONBLOCK = 0o4000;
export const SOCK_CLOEXEC = 0o2000000;
export const IPPROTO_TCP = 6;
export const SOL_SOCKET = 1;
export const SCM_RIGHTS = 1;
export const SO_TYPE = 3;
export const SO_PEERCRED = 17;
export const SO_ACCEPTCONN = 30;
export const SO_PROTOCOL = 38;
export const SO_DOMAIN = 39;
export const SO_NETNS_COOKIE = 71;
export const MSG_CTRUNC = 0x08;
export const MSG_TRUNC = 0x20;
export const MSG_DONTWAIT = 0x40;
export const MSG_NOSIGNAL = 0x4000;
export const MSG_CMSG_CLOEXEC = 0x40000000;
export const SHUT_WR = 1;

// epoll(7), splice(2).
export const EPOLLIN = 0x001;
export const EPOLLOUT = 0x004;
export const EPOLLERR = 0x008;
export const EPOLLHUP = 0x010;
export const EPOLL_CTL_ADD = 1;
export const EPOLL_CTL_DEL = 2;
export const EPOLL_CTL_MOD = 3;
/** `struct epoll_event` is packed on x86_64: u32 events, u64 data. */
export const EPOLL_EVENT_SIZE = 12;
export const SPLICE_F_MOVE = 1;
export const SPLICE_F_NONBLOCK = 2;

// getrusage(2).
export const RUSAGE_CHILDREN = -1;

// syscall(2) numbers.
export const SYS_OPENAT2 = 437;
export const SYS_LANDLOCK_CREATE_RULESET = 444;

// errno values.
export const EPERM = 1;
const ENOENT = 2;
const ESRCH = 3;
export const EINTR = 4;
const EIO = 5;
const EBADF = 9;
export const EAGAIN = 11;
const ENOMEM = 12;
const EACCES = 13;
const EBUSY = 16;
const EEXIST = 17;
const EXDEV = 18;
const ENOTDIR = 20;
const EISDIR = 21;
const EINVAL = 22;
const EMFILE = 24;
const EFBIG = 27;
const ENOSPC = 28;
const EROFS = 30;
const ENAMETOOLONG = 36;
export const ENOSYS = 38;
const ENOTEMPTY = 39;
const ELOOP = 40;
export const EMSGSIZE = 90;
export const EOPNOTSUPP = 95;

/** The errnos `errnoName` spells out; any other is reported by number. */
const NAMED_ERRNOS = {
  EPERM,
  ENOENT,
  ESRCH,
  EINTR,
  EIO,
  EBADF,
  EAGAIN,
  ENOMEM,
  EACCES,
  EBUSY,
  EEXIST,
  EXDEV,
  ENOTDIR,
  EISDIR,
  EINVAL,
  EMFILE,
  EFBIG,
  ENOSPC,
  EROFS,
  ENAMETOOLONG,
  ENOSYS,
  ENOTEMPTY,
  ELOOP,
  EOPNOTSUPP,
};
const ERRNO_NAMES = new Map<number, string>(Object.entries(NAMED_ERRNOS).map(([name, errno]) => [errno, name]));

export function errnoName(errno: number): string {
  return ERRNO_NAMES.get(errno) ?? `errno ${errno}`;
}

/** errno of the last failed koffi call on this thread. */
export function lastErrno(): number {
  return koffi.errno();
}

let lib: LibraryHandle | undefined;

function libc(): LibraryHandle {
  lib ??= koffi.load('libc.so.6');
  return lib;
}

const bound = new Map<string, LibcFunction>();

/** A bound libc function: cast it to its TypeScript signature where it is declared. */
export type LibcFunction = ReturnType<LibraryHandle['func']>;

/** The libc function `prototype` declares (koffi's C-like syntax), bound on first use. */
export function libcFunction(prototype: string): LibcFunction {
  let fn = bound.get(prototype);
  if (fn === undefined) {
    fn = libc().func(prototype);
    bound.set(prototype, fn);
  }
  return fn;
}

export function close(fd: number): number {
  return (libcFunction('int close(int)') as (fd: number) => number)(fd);
}

export function socket(domain: number, type: number, protocol: number): number {
  return (libcFunction('int socket(int, int, int)') as typeof socket)(domain, type, protocol);
}

export function getsockopt(fd: number, level: number, name: number, value: Buffer, length: Buffer): number {
  return (libcFunction('int getsockopt(int, int, int, void *, void *)') as typeof getsockopt)(
    fd,
    level,
    name,
    value,
    length,
  );
}

/** fcntl(2) with an int argument: every command used here takes one. */
export function fcntl(fd: number, command: number, argument: number): number {
  return (libcFunction('int fcntl(int, int, int)') as typeof fcntl)(fd, command, argument);
}

/** syscall(2), variadic: each argument after the number is preceded by its koffi type name. */
export function syscall(number: number, ...typedArguments: unknown[]): number | bigint {
  return (libcFunction('long syscall(long, ...)') as (number: number, ...rest: unknown[]) => number | bigint)(
    number,
    ...typedArguments,
  );
}
