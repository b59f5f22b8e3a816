/**
 * The worker's egress listener: a TCP socket listening on 127.0.0.1 inside the worker's
 * loopback-only network namespace, on which the worker never accepts. At boot the worker
 * sends a copy to the supervisor over the listener channel (fd 4, SCM_RIGHTS), and the turn's
 * proxy serves it (supervisor/turns/listener-channel.ts); at launch the worker closes its own copy. A
 * command's connection to it thus reaches the proxy directly, and it can only come from inside
 * this namespace: loopback belongs to it.
 */
import { boundInet4, loopbackSockaddr, AF_INET, SOCKADDR_IN_SIZE } from '../core/inet4.js';
import { errnoName, lastErrno, libc } from '../core/libc.js';
import { fail, ok, type Result } from '../core/result.js';
import { sendFd } from '../core/scm-rights.js';
import { LISTENER_CHANNEL_FD, LISTENER_HANDOVER_PAYLOAD } from './protocol.js';

const SOCK_STREAM = 1;
const SOCK_NONBLOCK = 0o4000;
const SOCK_CLOEXEC = 0o2000000;
/** Node's own default: connections wait here between the command's connect and the proxy's accept. */
const BACKLOG = 511;

interface ListenerSys {
  socket(domain: number, type: number, protocol: number): number;
  bind(fd: number, address: Buffer, length: number): number;
  listen(fd: number, backlog: number): number;
  close(fd: number): number;
}

let sys: ListenerSys | undefined;

function bindings(): ListenerSys {
  if (sys) return sys;
  const lib = libc();
  sys = {
    socket: lib.func('int socket(int, int, int)'),
    bind: lib.func('int bind(int, void *, uint32_t)'),
    listen: lib.func('int listen(int, int)'),
    close: lib.func('int close(int)'),
  };
  return sys;
}

export interface EgressListener {
  fd: number;
  port: number;
}

/** Listens on 127.0.0.1 at `port` (0: the kernel picks one). */
export function openEgressListener(port = 0): Result<EgressListener, 'listen_failed'> {
  const calls = bindings();
  const fd = calls.socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail('listen_failed', `socket(AF_INET) failed: ${errnoName(lastErrno())}`);
  const failed = (call: string): Result<never, 'listen_failed'> => {
    const detail = `${call} on 127.0.0.1:${port} failed: ${errnoName(lastErrno())}`;
    calls.close(fd);
    return fail('listen_failed', detail);
  };
  if (calls.bind(fd, loopbackSockaddr(port), SOCKADDR_IN_SIZE) !== 0) return failed('bind');
  if (calls.listen(fd, BACKLOG) !== 0) return failed('listen');
  const bound = boundInet4(fd);
  if (!bound.ok) {
    calls.close(fd);
    return fail('listen_failed', bound.detail);
  }
  return ok({ fd, port: bound.port });
}

export function closeEgressListener(listener: EgressListener): void {
  bindings().close(listener.fd);
}

/** Sends a copy of the listener to the supervisor, then closes the channel: there is one hand-over. */
export function handOverEgressListener(listener: EgressListener): Result<{}, 'handover_failed'> {
  const sent = sendFd(LISTENER_CHANNEL_FD, listener.fd, LISTENER_HANDOVER_PAYLOAD);
  bindings().close(LISTENER_CHANNEL_FD);
  if (!sent.ok) return fail('handover_failed', `the listener channel (fd ${LISTENER_CHANNEL_FD}): ${sent.detail}`);
  return ok({});
}
