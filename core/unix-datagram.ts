/**
 * Unix datagram sockets through koffi: what systemd's notification socket (NOTIFY_SOCKET) and
 * the journal's native socket take. Node has no AF_UNIX SOCK_DGRAM (its dgram module is UDP
 * only), so the few calls are made here. Sockets are close-on-exec (never inherited by a
 * worker or the helper) and non-blocking: a full receiver answers EAGAIN instead of stalling
 * the event loop.
 *
 * Addresses: an absolute path, or "@name" for an abstract socket (the form NOTIFY_SOCKET uses:
 * a leading NUL byte, then the name, with no terminating NUL counted in the length).
 */
import {
  AF_UNIX,
  close,
  EAGAIN,
  EMSGSIZE,
  errnoName,
  lastErrno,
  libcFunction,
  MSG_NOSIGNAL,
  SOCK_CLOEXEC,
  SOCK_DGRAM,
  SOCK_NONBLOCK,
  socket,
} from './linux-abi.js';
import { fail, ok, type Result } from './result.js';

/** sizeof(struct sockaddr_un): sa_family_t, then sun_path[108]. */
const SOCKADDR_UN_SIZE = 110;

type SendTo = (
  fd: number,
  data: Buffer,
  length: number,
  flags: number,
  address: Buffer,
  addressLength: number,
) => number;

function sendto(fd: number, data: Buffer, flags: number, address: SocketAddress): number {
  const call = libcFunction('long sendto(int, const void *, size_t, int, const void *, uint32_t)') as SendTo;
  return call(fd, data, data.length, flags, address.bytes, address.length);
}

export interface SocketAddress {
  bytes: Buffer;
  length: number;
}

/** A sockaddr_un for `address` ("/path" or "@abstract"), or why it cannot be one. */
export function unixAddress(address: string): Result<{ address: SocketAddress }, 'invalid_address'> {
  const bytes = Buffer.alloc(SOCKADDR_UN_SIZE);
  bytes.writeUInt16LE(AF_UNIX, 0);
  if (address.startsWith('@')) {
    const name = Buffer.from(address.slice(1), 'utf8');
    if (name.length === 0 || name.length > 107)
      return fail('invalid_address', `${address}: abstract name of 1-107 bytes expected`);
    name.copy(bytes, 3);
    return ok({ address: { bytes, length: 3 + name.length } });
  }
  if (!address.startsWith('/')) return fail('invalid_address', `${address}: an absolute path or @name expected`);
  const path = Buffer.from(address, 'utf8');
  if (path.length > 107 || path.includes(0)) return fail('invalid_address', `${address}: path longer than 107 bytes`);
  path.copy(bytes, 2);
  return ok({ address: { bytes, length: 2 + path.length + 1 } });
}

/** A fresh close-on-exec, non-blocking AF_UNIX SOCK_DGRAM socket. */
export function openDatagramSocket(): Result<{ fd: number }, 'socket_failed'> {
  const fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail('socket_failed', `socket(AF_UNIX, SOCK_DGRAM): ${errnoName(lastErrno())}`);
  return ok({ fd });
}

export type SendFailure = 'would_block' | 'too_large' | 'send_failed';

/** One datagram to `address`; never blocks (a full receiver is `would_block`). */
export function sendDatagram(fd: number, address: SocketAddress, data: Buffer): Result<{}, SendFailure> {
  const sent = sendto(fd, data, MSG_NOSIGNAL, address);
  if (sent === data.length) return ok({});
  if (sent >= 0) return fail('send_failed', `sendto sent ${sent} of ${data.length} bytes`);
  const errno = lastErrno();
  const name = errnoName(errno);
  if (errno === EAGAIN) return fail('would_block', 'the receiver is not keeping up (EAGAIN)');
  if (errno === EMSGSIZE) return fail('too_large', `${data.length} bytes is more than one datagram takes (EMSGSIZE)`);
  return fail('send_failed', `sendto: ${name}`);
}

export function closeDatagramSocket(fd: number): void {
  close(fd);
}
