/**
 * The supervisor's end of the worker's listener hand-over. Before spawning a worker the
 * supervisor makes a unix SOCK_SEQPACKET pair; the worker gets one end as fd 4, sends a copy of
 * its egress listener on it before `ready` (worker/src/boot.c) and closes it. The
 * supervisor takes that one message and refuses (closing what came) anything but a TCP socket
 * listening on 127.0.0.1 that lives in a network namespace other than the supervisor's own.
 *
 * Why that is enough to serve it without a peer check: loopback belongs to its namespace, so
 * every connection accepted on it comes from a process inside the namespace it was created in.
 * The worker creates it at boot, before anything but its own code runs, and a worker can create
 * sockets only in its own namespace; a socket of the host's namespace (the one place where
 * other processes could reach it) is what the namespace check refuses.
 *
 * Unlike copying the fd out of the worker (pidfd_getfd), this needs no privilege over the
 * worker: it works for the packaged non-root supervisor and workers of other uids.
 *
 * Before the worker exists, the identity helper sends one message of its own on the same
 * channel: the launch report (`launched <uid>` with the view's /tmp, a tmpfs of the turn's
 * own). It comes first, because it is sent before the worker is exec'd; nothing the worker
 * does can precede it.
 */
import fs from 'node:fs';
import { boundInet4 } from '../../core/inet4.js';
import {
  AF_INET,
  AF_UNIX,
  close,
  errnoName,
  getsockopt,
  IPPROTO_TCP,
  lastErrno,
  libcFunction,
  SO_ACCEPTCONN,
  SO_DOMAIN,
  SO_NETNS_COOKIE,
  SO_PROTOCOL,
  SO_TYPE,
  SOCK_CLOEXEC,
  SOCK_DGRAM,
  SOCK_SEQPACKET,
  SOCK_STREAM,
  socket,
  SOL_SOCKET,
} from '../../core/linux-abi.js';
import { fail, ok, type Result } from '../../core/result.js';
import { receiveFd } from '../../core/scm-rights.js';
import { LISTENER_HANDOVER_PAYLOAD } from './worker-protocol.js';

type SocketPair = (domain: number, type: number, protocol: number, fds: Int32Array) => number;
const socketpair: SocketPair = (domain, type, protocol, fds) =>
  (libcFunction('int socketpair(int, int, int, _Out_ int *sv)') as SocketPair)(domain, type, protocol, fds);

export interface ListenerChannel {
  /** Kept by the supervisor (close-on-exec). */
  supervisorFd: number;
  /** Given to the worker as fd 4, then closed here (close-on-exec until the spawn dup2()s it). */
  workerFd: number;
}

export function openListenerChannel(): Result<ListenerChannel, 'channel_failed'> {
  const fds = new Int32Array(2);
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) !== 0) {
    return fail('channel_failed', `socketpair(AF_UNIX, SOCK_SEQPACKET) failed: ${errnoName(lastErrno())}`);
  }
  return ok({ supervisorFd: fds[0]!, workerFd: fds[1]! });
}

export function closeChannelEnd(fd: number): void {
  close(fd);
}

type Refused = Result<never, 'listener_refused'>;

function refused(detail: string): Refused {
  return fail('listener_refused', `the worker's egress listener: ${detail}`);
}

function socketOption(fd: number, name: number, size: 4 | 8): bigint | null {
  const value = Buffer.alloc(size);
  const length = Buffer.alloc(4);
  length.writeUInt32LE(size);
  if (getsockopt(fd, SOL_SOCKET, name, value, length) !== 0 || length.readUInt32LE() !== size) return null;
  return size === 4 ? BigInt(value.readInt32LE()) : value.readBigUInt64LE();
}

function intOption(fd: number, name: number): number | null {
  const value = socketOption(fd, name, 4);
  return value === null ? null : Number(value);
}

function checkListeningTcp(fd: number): Result<{ port: number }, 'listener_refused'> {
  if (intOption(fd, SO_DOMAIN) !== AF_INET) return refused('not an AF_INET socket');
  if (intOption(fd, SO_TYPE) !== SOCK_STREAM || intOption(fd, SO_PROTOCOL) !== IPPROTO_TCP)
    return refused('not a TCP socket');
  if (intOption(fd, SO_ACCEPTCONN) !== 1) return refused('not listening');
  const bound = boundInet4(fd);
  if (!bound.ok) return refused(bound.detail);
  if (bound.address !== '127.0.0.1') return refused(`bound to ${bound.address}:${bound.port}, not 127.0.0.1`);
  return ok({ port: bound.port });
}

let ownNamespaceCookie: bigint | null = null;

/** The cookie of this process's network namespace (it never changes namespace). */
function ownNamespace(): Result<{ cookie: bigint }, 'listener_refused'> {
  if (ownNamespaceCookie !== null) return ok({ cookie: ownNamespaceCookie });
  const probe = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (probe < 0) return refused(`no socket to read our own namespace: ${errnoName(lastErrno())}`);
  const cookie = socketOption(probe, SO_NETNS_COOKIE, 8);
  close(probe);
  if (cookie === null) return refused('SO_NETNS_COOKIE is unavailable (Linux >= 5.14 required)');
  ownNamespaceCookie = cookie;
  return ok({ cookie });
}

function checkOtherNamespace(fd: number): Result<{}, 'listener_refused'> {
  const own = ownNamespace();
  if (!own.ok) return own;
  const cookie = socketOption(fd, SO_NETNS_COOKIE, 8);
  if (cookie === null) return refused(`its network namespace is unknown: ${errnoName(lastErrno())}`);
  if (cookie === own.cookie) return refused("it lives in the supervisor's network namespace, not the worker's");
  return ok({});
}

function checkListener(fd: number): Result<{ port: number }, 'listener_refused'> {
  const tcp = checkListeningTcp(fd);
  if (!tcp.ok) return tcp;
  const namespace = checkOtherNamespace(fd);
  return namespace.ok ? tcp : namespace;
}

/**
 * The listener the worker sent (never waits: the worker sends before `ready`), as a
 * close-on-exec fd this process owns, and its port; or why not, with whatever came closed.
 */
export function receiveWorkerListener(supervisorFd: number): Result<{ fd: number; port: number }, 'listener_refused'> {
  const received = receiveFd(supervisorFd);
  if (!received.ok) return refused(received.detail);
  const fd = received.fd;
  const checked = received.payload.equals(LISTENER_HANDOVER_PAYLOAD)
    ? checkListener(fd)
    : refused('the message is not a listener hand-over');
  if (!checked.ok) {
    close(fd);
    return checked;
  }
  return ok({ fd, port: checked.port });
}

const LAUNCH_REPORT = /^launched (0|[1-9][0-9]{0,9})$/;
const TMPFS_MAGIC = 0x01021994;

export interface LaunchReport {
  /** The uid the helper gave the worker. */
  uid: number;
  /** The root of the view's /tmp (close-on-exec, owned by this process from now on). */
  tmpFd: number;
}

/**
 * The identity helper's launch report, read when the worker is ready (never waits): the
 * payload must be exactly `launched <uid>` and the fd the root directory of a tmpfs.
 */
export function receiveLaunchReport(supervisorFd: number): Result<LaunchReport, 'launch_report_refused'> {
  const received = receiveFd(supervisorFd);
  if (!received.ok) return fail('launch_report_refused', `the helper's launch report: ${received.detail}`);
  const { fd, payload } = received;
  const match = LAUNCH_REPORT.exec(payload.toString('latin1'));
  const refuse = (detail: string): Result<never, 'launch_report_refused'> => {
    close(fd);
    return fail('launch_report_refused', `the helper's launch report: ${detail}`);
  };
  if (match === null) return refuse('the message is not a launch report');
  let kind: { dir: boolean; tmpfs: boolean };
  try {
    const st = fs.fstatSync(fd);
    kind = { dir: st.isDirectory(), tmpfs: fs.statfsSync(`/proc/self/fd/${fd}`).type === TMPFS_MAGIC };
  } catch (error) {
    return refuse(`its /tmp cannot be read: ${(error as Error).message}`);
  }
  if (!kind.dir || !kind.tmpfs) return refuse('its /tmp is not the root of a tmpfs');
  return ok({ uid: Number(match[1]), tmpFd: fd });
}
