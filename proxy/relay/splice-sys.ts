/**
 * The system calls the kernel relay uses, as one interface a test can replace (x86_64, glibc).
 * Loaded in whichever thread calls `spliceSys()`: koffi bindings belong to their isolate.
 */
import {
  close,
  EPOLLIN,
  EPOLLOUT,
  F_DUPFD_CLOEXEC,
  F_SETPIPE_SZ,
  fcntl,
  lastErrno,
  libcFunction,
  O_CLOEXEC,
  O_NONBLOCK,
} from '../../core/linux-abi.js';

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
  type Call = (...args: unknown[]) => unknown;
  const epollCreate1 = libcFunction('int epoll_create1(int flags)') as Call;
  const epollCtl = libcFunction('int epoll_ctl(int epfd, int op, int fd, void *event)') as Call;
  const epollWait = libcFunction('int epoll_wait(int epfd, void *events, int maxevents, int timeout)') as Call;
  const splice = libcFunction(
    'long splice(int fd_in, void *off_in, int fd_out, void *off_out, size_t len, unsigned int flags)',
  ) as Call;
  const pipe2 = libcFunction('int pipe2(void *fds, int flags)') as Call;
  const eventfd = libcFunction('int eventfd(unsigned int initval, int flags)') as Call;
  const read = libcFunction('long read(int fd, void *buf, size_t count)') as Call;
  const write = libcFunction('long write(int fd, void *buf, size_t count)') as Call;
  const shutdown = libcFunction('int shutdown(int fd, int how)') as Call;
  const poll = libcFunction('int poll(void *fds, unsigned long nfds, int timeout)') as Call;
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
    close,
    dupCloexec: (fd) => fcntl(fd, F_DUPFD_CLOEXEC, 3),
    setPipeSize: (fd, bytes) => fcntl(fd, F_SETPIPE_SZ, bytes),
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
