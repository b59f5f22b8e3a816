/**
 * IPv4 socket addresses for the koffi socket calls (x86_64 `struct sockaddr_in`, 16 bytes):
 * family u16 in host order, port u16 and address in network order, 8 bytes of zero.
 */
import { AF_INET, errnoName, lastErrno, libcFunction } from './linux-abi.js';
import { fail, ok, type Result } from './result.js';

export const SOCKADDR_IN_SIZE = 16;
const LOOPBACK = [127, 0, 0, 1] as const;

export function loopbackSockaddr(port: number): Buffer {
  const address = Buffer.alloc(SOCKADDR_IN_SIZE);
  address.writeUInt16LE(AF_INET, 0);
  address.writeUInt16BE(port, 2);
  Buffer.from(LOOPBACK).copy(address, 4);
  return address;
}

/** The address `fd` is bound to, when it is an IPv4 socket. */
export function boundInet4(fd: number): Result<{ address: string; port: number }, 'not_inet4'> {
  const getsockname = libcFunction('int getsockname(int, void *, void *)') as (
    fd: number,
    address: Buffer,
    length: Buffer,
  ) => number;
  // Room for any family's answer: a longer one is reported as truncated, never written past.
  const address = Buffer.alloc(128);
  const length = Buffer.alloc(4);
  length.writeUInt32LE(address.length);
  if (getsockname(fd, address, length) !== 0) return fail('not_inet4', `getsockname failed: ${errnoName(lastErrno())}`);
  const family = address.readUInt16LE(0);
  if (family !== AF_INET || length.readUInt32LE() !== SOCKADDR_IN_SIZE)
    return fail('not_inet4', `the socket's address family is ${family}, not AF_INET`);
  return ok({ address: [...address.subarray(4, 8)].join('.'), port: address.readUInt16BE(2) });
}
