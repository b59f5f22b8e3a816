/**
 * This process's open fds: listed from /proc/self/fd, and marked close-on-exec. Used by the
 * worker's inherited-fd check and by the supervisor before it spawns a worker.
 */
import fs from 'node:fs';
import { errnoName, F_SETFD, FD_CLOEXEC, fcntl, lastErrno } from './linux-abi.js';
import { fail, ok, type Result } from './result.js';

export interface OpenFd {
  fd: number;
  target: string;
}

/** The open fds of this process and what they point to, read from /proc/self/fd. */
export function listOpenFds(): Result<{ fds: OpenFd[] }, 'fd_list_failed'> {
  let names: string[];
  try {
    names = fs.readdirSync('/proc/self/fd');
  } catch (err) {
    return fail('fd_list_failed', `cannot list /proc/self/fd: ${(err as Error).message}`);
  }
  const fds: OpenFd[] = [];
  for (const name of names) {
    try {
      fds.push({ fd: Number(name), target: fs.readlinkSync(`/proc/self/fd/${name}`) });
    } catch (err) {
      // The directory fd readdirSync used is closed by now; nothing else closes on its own.
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
      return fail('fd_list_failed', `cannot read /proc/self/fd/${name}: ${(err as Error).message}`);
    }
  }
  return ok({ fds: fds.sort((a, b) => a.fd - b.fd) });
}

/**
 * An fd marked so stays out of every program this process starts: node-pty's forkpty child
 * and libuv's spawn close nothing themselves, they rely on FD_CLOEXEC.
 */
export function markCloseOnExec(fd: number): Result<{}, 'fcntl_failed'> {
  if (fcntl(fd, F_SETFD, FD_CLOEXEC) !== 0)
    return fail('fcntl_failed', `fcntl(${fd}, F_SETFD): ${errnoName(lastErrno())}`);
  return ok({});
}
