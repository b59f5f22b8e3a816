/**
 * Taking a connected socket away from Node so the kernel relay can own it. Node offers no API
 * for this, so the few internals used are checked one by one; any surprise means "not
 * adoptable" and the caller keeps relaying in Node. Nothing may be buffered on Node's side
 * (unread or unwritten bytes, a seen EOF): those bytes would be lost to the relay.
 */
import type net from 'node:net';
import { fail, ok, type Result } from '../../core/result.js';
import { spliceSys } from './splice-sys.js';

interface StreamHandleInternals {
  fd?: unknown;
  writeQueueSize?: unknown;
}

interface SocketInternals {
  _handle?: StreamHandleInternals | null;
  _readableState?: { ended?: unknown };
}

/** The socket's fd when Node holds nothing for it; checks only, changes nothing. */
export function adoptableFd(socket: net.Socket): Result<{ fd: number }, 'not_adoptable'> {
  const internals = socket as unknown as SocketInternals;
  const handle = internals._handle;
  if (socket.destroyed || socket.connecting || !handle) return fail('not_adoptable', 'the socket is not connected');
  if (typeof handle.fd !== 'number' || handle.fd < 0) return fail('not_adoptable', 'the socket has no fd');
  if (socket.readableLength !== 0 || internals._readableState?.ended !== false) {
    return fail('not_adoptable', 'Node holds unread bytes or an EOF of this socket');
  }
  if (socket.writableLength !== 0 || handle.writeQueueSize !== 0 || socket.writableEnded) {
    return fail('not_adoptable', 'Node holds unwritten bytes of this socket');
  }
  return ok({ fd: handle.fd });
}

/**
 * Duplicates each socket's fd, then destroys the Node sockets (closing Node's fds, not the
 * connections). All or nothing: on failure no socket was touched.
 */
export function detachSockets(sockets: readonly net.Socket[]): Result<{ fds: number[] }, 'not_adoptable'> {
  const fds: number[] = [];
  for (const socket of sockets) {
    const adoptable = adoptableFd(socket);
    if (!adoptable.ok) return adoptable;
    fds.push(adoptable.fd);
  }
  const sys = spliceSys();
  const duplicates: number[] = [];
  for (const fd of fds) {
    const duplicate = sys.dupCloexec(fd);
    if (duplicate < 0) {
      for (const taken of duplicates) sys.close(taken);
      return fail('not_adoptable', `cannot duplicate fd ${fd}`);
    }
    duplicates.push(duplicate);
  }
  for (const socket of sockets) socket.destroy();
  return ok({ fds: duplicates });
}

/** Takes one socket from Node: its fd duplicated, the Node socket destroyed. */
export function detachSocket(socket: net.Socket): Result<{ fd: number }, 'not_adoptable'> {
  const detached = detachSockets([socket]);
  return detached.ok ? ok({ fd: detached.fds[0]! }) : detached;
}

/**
 * A duplicate of the fd of a socket Node keeps (a forward request's client or upstream side),
 * for the relay to write to: Node must hold no unwritten byte of it now and write none until
 * the relay is done with it. Node may go on reading it; the relay never does (length 0).
 */
export function borrowFd(socket: net.Socket): Result<{ fd: number }, 'not_adoptable'> {
  const internals = socket as unknown as SocketInternals;
  const handle = internals._handle;
  if (socket.destroyed || socket.connecting || !handle || typeof handle.fd !== 'number' || handle.fd < 0)
    return fail('not_adoptable', 'the socket is not connected');
  if (socket.writableLength !== 0 || handle.writeQueueSize !== 0 || socket.writableEnded)
    return fail('not_adoptable', 'Node holds unwritten bytes of this socket');
  const duplicate = spliceSys().dupCloexec(handle.fd);
  if (duplicate < 0) return fail('not_adoptable', `cannot duplicate fd ${handle.fd}`);
  return ok({ fd: duplicate });
}
