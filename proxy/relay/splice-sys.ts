/**
 * The system calls the kernel relay uses, declared once (x86_64, glibc). Loaded in whichever
 * thread calls `spliceSys()`: koffi bindings belong to their isolate.
 */
import { lastErrno, libc } from '../../core/libc.js';

export const EPOLLIN = 0x001;
export const EPOLLOUT = 0x004;
export const EPOLLERR = 0x008;
export const EPOLLHUP = 0x010;
export const EPOLL_CTL_ADD = 1;
export const EPOLL_CTL_DEL = 2;
export const EPOLL_CTL_MOD = 3;
export const SPLICE_F_MOVE = 1;
export const SPLICE_F_NONBLOCK = 2;
export const O_NONBLOCK = 0o4000;
export const O_CLOEXEC = 0o2000000;
export const F_DUPFD_CLOEXEC = 1030;
export const F_SETPIPE_SZ = 1031;
export const SHUT_WR = 1;
export const EINTR = 4;
export const EAGAIN = 11;
/** `struct epoll_event` is packed on x86_64: u32 events, u64 data. */
export const EPOLL_EVENT_SIZE = 12;

export interface SpliceSys {
  epollCreate(): number;
  epollCtl(epfd: number, op: number, fd: number, event: Buffer | null): number;
  epollWait(epfd: number, events: Buffer, maxEvents: number, timeoutMs: number): number;
  splice(fdIn: number, fdOut: number, length: number, flags: number): number;
  pipe(fds: Int32Array): number;
  eventfd(): number;
  read(fd: number, buffer: Buffer, length: number): number;
  write(fd: number, buffer: Buffer, length: number): number;
  shutdown(fd: number, how: number): number;
  close(fd: number): number;
  dupCloexec(fd: number): number;
  setPipeSize(fd: number, bytes: number): number;
  /** poll(2) of one fd without waiting: the revents bits (POLLIN/OUT/ERR/HUP equal the EPOLL ones), or -1. */
  readyNow(fd: number): number;
  errno(): number;
}

let bound: SpliceSys | undefined;

export function spliceSys(): SpliceSys {
  if (bound) return bound;
  const lib = libc();
  const epollCreate1 = lib.func('int epoll_create1(int flags)');
  const epollCtl = lib.func('int epoll_ctl(int epfd, int op, int fd, void *event)');
  const epollWait = lib.func('int epoll_wait(int epfd, void *events, int maxevents, int timeout)');
  const splice = lib.func(
    'long splice(int fd_in, void *off_in, int fd_out, void *off_out, size_t len, unsigned int flags)',
  );
  const pipe2 = lib.func('int pipe2(void *fds, int flags)');
  const eventfd = lib.func('int eventfd(unsigned int initval, int flags)');
  const read = lib.func('long read(int fd, void *buf, size_t count)');
  const write = lib.func('long write(int fd, void *buf, size_t count)');
  const shutdown = lib.func('int shutdown(int fd, int how)');
  const close = lib.func('int close(int fd)');
  const fcntl = lib.func('int fcntl(int fd, int cmd, int arg)');
  const poll = lib.func('int poll(void *fds, unsigned long nfds, int timeout)');
  const pollfd = Buffer.alloc(8);
  bound = {
    epollCreate: () => epollCreate1(O_CLOEXEC) as number,
    epollCtl: (epfd, op, fd, event) => epollCtl(epfd, op, fd, event) as number,
    epollWait: (epfd, events, maxEvents, timeoutMs) => epollWait(epfd, events, maxEvents, timeoutMs) as number,
    splice: (fdIn, fdOut, length, flags) => Number(splice(fdIn, null, fdOut, null, length, flags)),
    pipe: (fds) => pipe2(fds, O_NONBLOCK | O_CLOEXEC) as number,
    eventfd: () => eventfd(0, O_NONBLOCK | O_CLOEXEC) as number,
    read: (fd, buffer, length) => Number(read(fd, buffer, length)),
    write: (fd, buffer, length) => Number(write(fd, buffer, length)),
    shutdown: (fd, how) => shutdown(fd, how) as number,
    close: (fd) => close(fd) as number,
    dupCloexec: (fd) => fcntl(fd, F_DUPFD_CLOEXEC, 3) as number,
    setPipeSize: (fd, bytes) => fcntl(fd, F_SETPIPE_SZ, bytes) as number,
    readyNow: (fd) => {
      pollfd.writeInt32LE(fd, 0);
      pollfd.writeInt16LE(EPOLLIN | EPOLLOUT, 4);
      pollfd.writeInt16LE(0, 6);
      return (poll(pollfd, 1, 0) as number) < 0 ? -1 : pollfd.readUInt16LE(6);
    },
    errno: lastErrno,
  };
  return bound;
}
