/**
 * The worker's egress listener: a TCP socket listening on 127.0.0.1 inside the worker's
 * loopback-only network namespace, on which the worker never accepts. At boot the worker
 * sends a copy to the supervisor over the listener channel (fd 4, SCM_RIGHTS), and the turn's
 * proxy serves it (supervisor/turns/listener-channel.ts); at launch the worker closes its own copy. A
 * command's connection to it thus reaches the proxy directly, and it can only come from inside
 * this namespace: loopback belongs to it.
 */
import { boundInet4, loopbackSockaddr, SOCKADDR_IN_SIZE } from '../../core/inet4.js';
import {
  AF_INET,
  close,
  errnoName,
  lastErrno,
  libcFunction,
  SOCK_CLOEXEC,
  SOCK_NONBLOCK,
  SOCK_STREAM,
  socket,
} from '../../core/linux-abi.js';
import { fail, ok, type Result } from '../../core/result.js';
import { sendFd } from '../../core/scm-rights.js';
import { LISTENER_CHANNEL_FD, LISTENER_HANDOVER_PAYLOAD } from '../../supervisor/turns/worker-protocol.js';

/** Node's own default: connections wait here between the command's connect and the proxy's accept. */
const BACKLOG = 511;

const bind = (fd: number, address: Buffer, length: number): number =>
  (libcFunction('int bind(int, void *, uint32_t)') as typeof bind)(fd, address, length);
const listen = (fd: number, backlog: number): number =>
  (libcFunction('int listen(int, int)') as typeof listen)(fd, backlog);

export interface EgressListener {
  fd: number;
  port: number;
}

/** Listens on 127.0.0.1 at `port` (0: the kernel picks one). */
export function openEgressListener(port = 0): Result<EgressListener, 'listen_failed'> {
  const fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail('listen_failed', `socket(AF_INET) failed: ${errnoName(lastErrno())}`);
  const failed = (call: string): Result<never, 'listen_failed'> => {
    const detail = `${call} on 127.0.0.1:${port} failed: ${errnoName(lastErrno())}`;
    close(fd);
    return fail('listen_failed', detail);
  };
  if (bind(fd, loopbackSockaddr(port), SOCKADDR_IN_SIZE) !== 0) return failed('bind');
  if (listen(fd, BACKLOG) !== 0) return failed('listen');
  const bound = boundInet4(fd);
  if (!bound.ok) {
    close(fd);
    return fail('listen_failed', bound.detail);
  }
  return ok({ fd, port: bound.port });
}

/** Sends a copy of the listener to the supervisor, then closes the channel: there is one hand-over. */
export function handOverEgressListener(listener: EgressListener): Result<{}, 'handover_failed'> {
  const sent = sendFd(LISTENER_CHANNEL_FD, listener.fd, LISTENER_HANDOVER_PAYLOAD);
  close(LISTENER_CHANNEL_FD);
  if (!sent.ok) return fail('handover_failed', `the listener channel (fd ${LISTENER_CHANNEL_FD}): ${sent.detail}`);
  return ok({});
}
