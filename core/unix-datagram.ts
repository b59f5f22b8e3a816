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
import { errnoName, lastErrno, libc } from './libc.js';
import { fail, ok, type Result } from './result.js';

const AF_UNIX = 1;
const SOCK_DGRAM = 2;
const SOCK_NONBLOCK = 0o4000;
const SOCK_CLOEXEC = 0o2000000;
const MSG_NOSIGNAL = 0x4000;
/** sizeof(struct sockaddr_un): sa_family_t, then sun_path[108]. */
export const SOCKADDR_UN_SIZE = 110;

interface DatagramSys {
  socket(domain: number, type: number, protocol: number): number;
  sendto(fd: number, data: Buffer, length: number, flags: number, address: Buffer, addressLength: number): number;
  close(fd: number): number;
}

let sys: DatagramSys | undefined;

function bindings(): DatagramSys {
  if (sys) return sys;
  const lib = libc();
  sys = {
    socket: lib.func('int socket(int, int, int)') as DatagramSys['socket'],
    sendto: lib.func('long sendto(int, const void *, size_t, int, const void *, uint32_t)') as DatagramSys['sendto'],
    close: lib.func('int close(int)') as DatagramSys['close'],
  };
  return sys;
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
  const fd = bindings().socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail('socket_failed', `socket(AF_UNIX, SOCK_DGRAM): ${errnoName(lastErrno())}`);
  return ok({ fd });
}

export type SendFailure = 'would_block' | 'too_large' | 'send_failed';

/** One datagram to `address`; never blocks (a full receiver is `would_block`). */
export function sendDatagram(fd: number, address: SocketAddress, data: Buffer): Result<{}, SendFailure> {
  const sent = bindings().sendto(fd, data, data.length, MSG_NOSIGNAL, address.bytes, address.length);
  if (sent === data.length) return ok({});
  if (sent >= 0) return fail('send_failed', `sendto sent ${sent} of ${data.length} bytes`);
  const errno = lastErrno();
  const name = errnoName(errno);
  if (errno === 11) return fail('would_block', 'the receiver is not keeping up (EAGAIN)');
  if (errno === 90) return fail('too_large', `${data.length} bytes is more than one datagram takes (EMSGSIZE)`);
  return fail('send_failed', `sendto: ${name}`);
}

export function closeDatagramSocket(fd: number): void {
  bindings().close(fd);
}
