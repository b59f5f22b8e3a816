/**
 * The worker's inherited-fd check. The identity helper keeps only 0-3 and the listener channel
 * at 4 before exec, and the supervisor opens everything close-on-exec, so any other host fd
 * here is a leak (an open directory fd alone defeats the filesystem view). Node has already opened its own
 * fds when the first line of JS runs, and it even marks some inherited fds close-on-exec,
 * so neither fd numbers nor FD_CLOEXEC tell its fds from inherited ones. The rule is by kind:
 *
 *   0, 1, 2   any kind (the command's stdio)
 *   3         must be a socket (the protocol fd)
 *   4         must be a socket (the listener channel, worker/egress-listener.ts)
 *   5+        only objects that carry no path and no host resource: anon inodes of the kinds
 *             Node/libuv create (eventpoll, eventfd, signalfd, timerfd, and io_uring: a Node
 *             linked against libuv >= 1.45, such as Debian 13's nodejs, opens one ring per
 *             event loop at start), and pipes whose both ends this process holds (libuv's
 *             self-pipes). A ring cannot be inherited from the host: the helper closes every
 *             fd above 4 before exec and the supervisor marks its own fds close-on-exec.
 *
 * Anything else (a file, a directory, a socket, a device, a lone pipe end) is
 * refused. docs/worker-protocol.md records the residual: a host pipe leaked with both ends
 * would pass this check.
 */
import { listOpenFds, type OpenFd } from '../core/fds.js';
import { fail, ok, type Result } from '../core/result.js';
import { LISTENER_CHANNEL_FD, PROTOCOL_FD } from './protocol.js';

const REQUIRED_SOCKETS = [PROTOCOL_FD, LISTENER_CHANNEL_FD];
const NODE_ANON_INODES = new Set([
  'anon_inode:[eventpoll]',
  'anon_inode:[eventfd]',
  'anon_inode:[signalfd]',
  'anon_inode:[timerfd]',
  'anon_inode:[io_uring]',
]);

/** Pure rule over a listing, so tests can exercise it with made-up tables. */
export function findUnexpectedFds(fds: readonly OpenFd[]): OpenFd[] {
  const pipeUses = new Map<string, number>();
  for (const { target } of fds) {
    if (target.startsWith('pipe:')) pipeUses.set(target, (pipeUses.get(target) ?? 0) + 1);
  }
  return fds.filter(({ fd, target }) => {
    if (fd <= 2) return false;
    if (REQUIRED_SOCKETS.includes(fd)) return !target.startsWith('socket:');
    if (NODE_ANON_INODES.has(target)) return false;
    return !(target.startsWith('pipe:') && pipeUses.get(target) === 2);
  });
}

/** Listings taken back to back before an fd outside the rule counts as inherited. */
const LISTINGS = 3;

export type FdLister = () => Result<{ fds: OpenFd[] }, 'fd_list_failed'>;

/**
 * Node's own threads open files for a moment while this thread lists them (V8 reads
 * /proc/sys/vm/overcommit_memory from a background thread: about 1 worker start in 150 saw it),
 * so an fd outside the rule counts only when its number is outside the rule in each of
 * LISTINGS listings. An inherited fd is in every one: nothing in the worker closes it, and
 * its kind does not change. The listing stops at the first one without such an fd.
 */
export function checkInheritedFds(list: FdLister = listOpenFds): Result<{ fds: OpenFd[] }, 'unexpected_fds'> {
  let persistent: OpenFd[] = [];
  for (let listing = 0; listing < LISTINGS; listing++) {
    const listed = list();
    if (!listed.ok) return fail('unexpected_fds', listed.detail);
    if (listing === 0) {
      for (const [fd, name] of [
        [PROTOCOL_FD, 'protocol'],
        [LISTENER_CHANNEL_FD, 'listener channel'],
      ] as const) {
        if (!listed.fds.some((f) => f.fd === fd)) return fail('unexpected_fds', `${name} fd ${fd} is not open`);
      }
    }
    const unexpected = findUnexpectedFds(listed.fds);
    persistent =
      listing === 0 ? unexpected : unexpected.filter((f) => persistent.some((earlier) => earlier.fd === f.fd));
    if (persistent.length === 0) return ok({ fds: listed.fds });
  }
  const found = persistent.map((f) => `${f.fd} -> ${f.target}`).join(', ');
  return fail(
    'unexpected_fds',
    `only fds 0-2, the protocol socket on fd 3, the listener channel on fd 4 and Node's own anon inodes and self-pipes may be open; found ${found}`,
  );
}
