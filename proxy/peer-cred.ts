/** The uid of the process on the other end of an accepted unix socket (SO_PEERCRED). */
import type net from 'node:net';
import { errnoName, getsockopt, lastErrno, SO_PEERCRED, SOL_SOCKET } from '../core/linux-abi.js';
import { fail, ok, type Result } from '../core/result.js';

/** struct ucred { pid_t pid; uid_t uid; gid_t gid; } */
const UCRED_SIZE = 12;
const UCRED_UID_OFFSET = 4;

/** Reused by every call: the call is synchronous, and every accepted connection makes one. */
const ucred = Buffer.alloc(UCRED_SIZE);
const ucredLength = Buffer.alloc(4);

function socketFd(socket: net.Socket): number | null {
  const fd = (socket as unknown as { _handle?: { fd?: unknown } })._handle?.fd;
  return typeof fd === 'number' && Number.isSafeInteger(fd) && fd >= 0 ? fd : null;
}

export function peerUid(socket: net.Socket): Result<{ uid: number; pid: number }, 'peer_unknown'> {
  const fd = socketFd(socket);
  if (fd === null) return fail('peer_unknown', 'the accepted socket has no file descriptor');
  ucred.fill(0);
  ucredLength.writeUInt32LE(UCRED_SIZE);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, ucred, ucredLength) !== 0) {
    return fail('peer_unknown', `getsockopt(SO_PEERCRED) failed: ${errnoName(lastErrno())}`);
  }
  if (ucredLength.readUInt32LE() !== UCRED_SIZE) return fail('peer_unknown', 'SO_PEERCRED answered an unexpected size');
  return ok({ pid: ucred.readInt32LE(0), uid: ucred.readUInt32LE(UCRED_UID_OFFSET) });
}
