/**
 * sd_notify(3), written small: state changes sent as datagrams to the socket systemd names in
 * NOTIFY_SOCKET (a path, or "@name" for an abstract socket), for a `Type=notify` unit:
 * `READY=1` once the listeners are bound and the boot probe has run, `STATUS=` with the probe's
 * summary, `RELOADING=1` … `READY=1` around a configuration reload, `STOPPING=1` when the stop
 * begins, and `WATCHDOG=1` every half `WATCHDOG_USEC` when the unit sets `WatchdogSec=`.
 *
 * Without NOTIFY_SOCKET (run from a shell, or a `Type=exec` unit) every call does nothing.
 * A notification that cannot be sent is logged once per kind and never stops the supervisor:
 * systemd then times the start out, which is the report the operator sees.
 */
import type { Logger } from '../../core/log.js';
import {
  closeDatagramSocket,
  openDatagramSocket,
  sendDatagram,
  unixAddress,
  type SocketAddress,
} from '../../core/unix-datagram.js';

export interface ServiceNotifier {
  /** True when NOTIFY_SOCKET named a socket this process can send to. */
  readonly active: boolean;
  /** Watchdog interval systemd asked for (WATCHDOG_USEC), in milliseconds, or null. */
  readonly watchdogMs: number | null;
  ready(status: string): void;
  status(status: string): void;
  reloading(): void;
  stopping(): void;
  /** Starts the WATCHDOG=1 pings (every half interval) when systemd asked for them. */
  startWatchdog(): void;
  close(): void;
}

/** Status texts are one line: systemd shows them in `systemctl status`. */
function statusLine(text: string): string {
  return text.replace(/[\r\n]+/g, ' ').slice(0, 1024);
}

/** CLOCK_MONOTONIC in microseconds, as systemd's RELOADING=1 wants it in MONOTONIC_USEC. */
function monotonicUsec(): bigint {
  return process.hrtime.bigint() / 1000n;
}

export function createServiceNotifier(options: {
  env: NodeJS.ProcessEnv;
  logger: Logger;
  /** The pid systemd expects (WATCHDOG_PID): the watchdog is ours only if it names this process. */
  pid?: number;
}): ServiceNotifier {
  const { env, logger } = options;
  const socketName = env['NOTIFY_SOCKET'];
  const watchdogPid = env['WATCHDOG_PID'];
  const watchdogUsec = Number(env['WATCHDOG_USEC']);
  // Read once and removed, as sd_notify's unset_environment does: programs the supervisor starts
  // (probes, the helper) have no business with the service manager's socket.
  delete env['NOTIFY_SOCKET'];
  delete env['WATCHDOG_PID'];
  delete env['WATCHDOG_USEC'];
  const inactive: ServiceNotifier = {
    active: false,
    watchdogMs: null,
    ready: () => undefined,
    status: () => undefined,
    reloading: () => undefined,
    stopping: () => undefined,
    startWatchdog: () => undefined,
    close: () => undefined,
  };
  if (socketName === undefined || socketName === '') return inactive;
  const parsed = unixAddress(socketName);
  if (!parsed.ok) {
    logger.warn('NOTIFY_SOCKET is not a usable socket address; systemd will not hear from the supervisor', {
      detail: parsed.detail,
    });
    return inactive;
  }
  const opened = openDatagramSocket();
  if (!opened.ok) {
    logger.warn('cannot open a socket for systemd notifications', { detail: opened.detail });
    return inactive;
  }
  const address: SocketAddress = parsed.address;
  const fd = opened.fd;
  const pid = options.pid ?? process.pid;
  const watchdogMs =
    Number.isSafeInteger(watchdogUsec) && watchdogUsec > 0 && (watchdogPid === undefined || Number(watchdogPid) === pid)
      ? Math.max(1, Math.floor(watchdogUsec / 1000))
      : null;
  const failedKinds = new Set<string>();
  let closed = false;
  let timer: NodeJS.Timeout | null = null;

  const send = (kind: string, lines: string[]): void => {
    if (closed) return;
    const sent = sendDatagram(fd, address, Buffer.from(lines.join('\n') + '\n', 'utf8'));
    if (sent.ok) {
      failedKinds.delete(kind);
      return;
    }
    if (failedKinds.has(kind)) return;
    failedKinds.add(kind);
    logger.warn('a systemd notification could not be sent', { notification: kind, detail: sent.detail });
  };

  return {
    active: true,
    watchdogMs,
    ready: (status) => send('ready', ['READY=1', `STATUS=${statusLine(status)}`, `MAINPID=${pid}`]),
    status: (status) => send('status', [`STATUS=${statusLine(status)}`]),
    reloading: () => send('reloading', ['RELOADING=1', `MONOTONIC_USEC=${monotonicUsec()}`]),
    stopping: () => {
      send('stopping', ['STOPPING=1', 'STATUS=stopping']);
      if (timer) clearInterval(timer);
      timer = null;
    },
    startWatchdog() {
      if (watchdogMs === null || timer !== null || closed) return;
      send('watchdog', ['WATCHDOG=1']);
      timer = setInterval(() => send('watchdog', ['WATCHDOG=1']), Math.max(1, Math.floor(watchdogMs / 2)));
      timer.unref();
    },
    close() {
      if (closed) return;
      if (timer) clearInterval(timer);
      timer = null;
      closed = true;
      closeDatagramSocket(fd);
    },
  };
}
