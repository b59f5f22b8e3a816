/**
 * Passing one file descriptor over a unix socket (SCM_RIGHTS), with a short payload, through
 * koffi. Node cannot: libuv reads plain sockets with read(2), which drops passed fds.
 *
 * The message lives in one koffi allocation laid out by hand (x86_64):
 *   0   struct msghdr (56 bytes): name NULL, iov -> IOV, iovlen 1, control -> CONTROL
 *   64  struct iovec (16 bytes): base -> PAYLOAD, len
 *   80  payload (up to MAX_PAYLOAD bytes)
 *   112 control: struct cmsghdr (len u64, level i32, type i32) + room for two fds
 * Room for two fds means a message carrying more than one is seen (and every fd received is
 * closed again), not silently cut to the first.
 */
import fs from 'node:fs';
import koffi from 'koffi';
import {
  EAGAIN,
  errnoName,
  lastErrno,
  libcFunction,
  MSG_CMSG_CLOEXEC,
  MSG_CTRUNC,
  MSG_DONTWAIT,
  MSG_NOSIGNAL,
  MSG_TRUNC,
  SCM_RIGHTS,
  SOL_SOCKET,
} from './linux-abi.js';
import { fail, ok, type Result } from './result.js';

const MAX_PAYLOAD = 32;
const SIZE = 144;
const IOV_OFFSET = 64;
const PAYLOAD_OFFSET = 80;
const CONTROL_OFFSET = 112;
const CMSG_HEADER = 16;
/** CMSG_SPACE(2 * sizeof(int)) */
const CONTROL_SPACE = 24;

type MessageCall = (fd: number, message: unknown, flags: number) => number;
const sendmsg: MessageCall = (fd, message, flags) =>
  (libcFunction('long sendmsg(int, void *, int)') as MessageCall)(fd, message, flags);
const recvmsg: MessageCall = (fd, message, flags) =>
  (libcFunction('long recvmsg(int, void *, int)') as MessageCall)(fd, message, flags);

interface Message {
  memory: unknown;
  bytes: Buffer;
  free(): void;
}

/** A zeroed message with its pointers set: `payloadLength` bytes of payload, `controlLength` of control. */
function message(payloadLength: number, controlLength: number): Message {
  const memory: unknown = koffi.alloc('uint8_t', SIZE);
  const base = koffi.address(memory);
  const bytes = Buffer.from(koffi.view(memory, SIZE));
  bytes.fill(0);
  bytes.writeBigUInt64LE(base + BigInt(IOV_OFFSET), 16);
  bytes.writeBigUInt64LE(1n, 24);
  bytes.writeBigUInt64LE(base + BigInt(CONTROL_OFFSET), 32);
  bytes.writeBigUInt64LE(BigInt(controlLength), 40);
  bytes.writeBigUInt64LE(base + BigInt(PAYLOAD_OFFSET), IOV_OFFSET);
  bytes.writeBigUInt64LE(BigInt(payloadLength), IOV_OFFSET + 8);
  return { memory, bytes, free: () => koffi.free(memory) };
}

/** Sends `payload` (1..MAX_PAYLOAD bytes) with `fd` attached, in one message. */
export function sendFd(socketFd: number, fd: number, payload: Buffer): Result<{}, 'send_failed'> {
  if (payload.length < 1 || payload.length > MAX_PAYLOAD)
    return fail('send_failed', `the payload must be 1..${MAX_PAYLOAD} bytes`);
  const m = message(payload.length, CMSG_HEADER + 8);
  try {
    payload.copy(m.bytes, PAYLOAD_OFFSET);
    m.bytes.writeBigUInt64LE(BigInt(CMSG_HEADER + 4), CONTROL_OFFSET);
    m.bytes.writeInt32LE(SOL_SOCKET, CONTROL_OFFSET + 8);
    m.bytes.writeInt32LE(SCM_RIGHTS, CONTROL_OFFSET + 12);
    m.bytes.writeInt32LE(fd, CONTROL_OFFSET + CMSG_HEADER);
    const sent = sendmsg(socketFd, m.memory, MSG_NOSIGNAL);
    if (sent < 0) return fail('send_failed', `sendmsg failed: ${errnoName(lastErrno())}`);
    if (sent !== payload.length) return fail('send_failed', `sendmsg sent ${sent} of ${payload.length} bytes`);
    return ok({});
  } finally {
    m.free();
  }
}

export type ReceiveFailure = 'nothing_received' | 'malformed_message';

/** The fds a received control block carries (at most two fit), to use or to close. */
function receivedFds(bytes: Buffer): number[] {
  const length = Number(bytes.readBigUInt64LE(CONTROL_OFFSET));
  const level = bytes.readInt32LE(CONTROL_OFFSET + 8);
  const type = bytes.readInt32LE(CONTROL_OFFSET + 12);
  if (level !== SOL_SOCKET || type !== SCM_RIGHTS || length < CMSG_HEADER) return [];
  const count = Math.min(Math.floor((length - CMSG_HEADER) / 4), 2);
  return Array.from({ length: count }, (_, i) => bytes.readInt32LE(CONTROL_OFFSET + CMSG_HEADER + 4 * i));
}

function closeAll(fds: number[]): void {
  for (const fd of fds) fs.closeSync(fd);
}

/**
 * One message already waiting on `socketFd` (never blocks): its payload and exactly one fd,
 * close-on-exec. Anything else (no message, EOF, a cut payload or control block, no fd, two
 * fds, another control message) is refused, and every fd it carried is closed.
 */
export function receiveFd(socketFd: number): Result<{ fd: number; payload: Buffer }, ReceiveFailure> {
  const m = message(MAX_PAYLOAD, CONTROL_SPACE);
  try {
    const received = recvmsg(socketFd, m.memory, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (received < 0) {
      const errno = lastErrno();
      return fail(
        'nothing_received',
        errno === EAGAIN ? 'no message is waiting' : `recvmsg failed: ${errnoName(errno)}`,
      );
    }
    const controlLength = Number(m.bytes.readBigUInt64LE(40));
    const fds = controlLength >= CMSG_HEADER ? receivedFds(m.bytes) : [];
    const flags = m.bytes.readInt32LE(48);
    const refuse = (detail: string): Result<never, ReceiveFailure> => {
      closeAll(fds);
      return fail('malformed_message', detail);
    };
    if (received === 0) return refuse('the sender closed without a message');
    if ((flags & (MSG_TRUNC | MSG_CTRUNC)) !== 0) return refuse('the message was longer than expected');
    if (fds.length !== 1) return refuse(`the message carries ${fds.length} file descriptors, not one`);
    return ok({ fd: fds[0]!, payload: Buffer.from(m.bytes.subarray(PAYLOAD_OFFSET, PAYLOAD_OFFSET + received)) });
  } finally {
    m.free();
  }
}
