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

/** Status texts are one line: systemd shows them in `systemctl status`. */
function statusLine(text: string): string {
  return text.replace(/[\r\n]+/g, ' ').slice(0, 1024);
}

/** CLOCK_MONOTONIC in microseconds, as systemd's RELOADING=1 wants it in MONOTONIC_USEC. */
function monotonicUsec(): bigint {
  return process.hrtime.bigint() / 1000n;
}

interface ServiceNotifierOptions {
  env: NodeJS.ProcessEnv;
  logger: Logger;
  /** The pid systemd expects (WATCHDOG_PID): the watchdog is ours only if it names this process. */
  pid?: number;
}

/** What the service manager put in the environment for us. */
interface NotifyEnvironment {
  socketName: string | undefined;
  watchdogPid: string | undefined;
  watchdogUsec: number;
}

/** The socket notifications go to, opened. */
interface NotifyTarget {
  fd: number;
  address: SocketAddress;
}

/**
 * Reads NOTIFY_SOCKET, WATCHDOG_PID and WATCHDOG_USEC once and removes them, as sd_notify's
 * unset_environment does: programs the supervisor starts (probes, the helper) have no business
 * with the service manager's socket.
 */
function takeNotifyEnvironment(env: NodeJS.ProcessEnv): NotifyEnvironment {
  const taken = {
    socketName: env['NOTIFY_SOCKET'],
    watchdogPid: env['WATCHDOG_PID'],
    watchdogUsec: Number(env['WATCHDOG_USEC']),
  };
  delete env['NOTIFY_SOCKET'];
  delete env['WATCHDOG_PID'];
  delete env['WATCHDOG_USEC'];
  return taken;
}

/** Opens a socket for NOTIFY_SOCKET, or null (logged when the variable was set but unusable). */
function openNotifyTarget(socketName: string | undefined, logger: Logger): NotifyTarget | null {
  if (socketName === undefined || socketName === '') return null;
  const parsed = unixAddress(socketName);
  if (!parsed.ok) {
    logger.warn('NOTIFY_SOCKET is not a usable socket address; systemd will not hear from the supervisor', {
      detail: parsed.detail,
    });
    return null;
  }
  const opened = openDatagramSocket();
  if (!opened.ok) {
    logger.warn('cannot open a socket for systemd notifications', { detail: opened.detail });
    return null;
  }
  return { fd: opened.fd, address: parsed.address };
}

/** The watchdog interval in milliseconds, when systemd asked for one and it names this process. */
function watchdogInterval(requested: NotifyEnvironment, pid: number): number | null {
  const { watchdogPid, watchdogUsec } = requested;
  return Number.isSafeInteger(watchdogUsec) &&
    watchdogUsec > 0 &&
    (watchdogPid === undefined || Number(watchdogPid) === pid)
    ? Math.max(1, Math.floor(watchdogUsec / 1000))
    : null;
}

export class ServiceNotifier {
  /** True when NOTIFY_SOCKET named a socket this process can send to. */
  readonly active: boolean;
  /** Watchdog interval systemd asked for (WATCHDOG_USEC), in milliseconds, or null. */
  readonly watchdogMs: number | null;
  private readonly logger: Logger;
  private readonly pid: number;
  /** Null without a usable NOTIFY_SOCKET: then every call does nothing. */
  private readonly target: NotifyTarget | null;
  private readonly failedKinds = new Set<string>();
  private closed = false;
  private timer: NodeJS.Timeout | null = null;

  constructor(options: ServiceNotifierOptions) {
    const requested = takeNotifyEnvironment(options.env);
    this.logger = options.logger;
    this.pid = options.pid ?? process.pid;
    this.target = openNotifyTarget(requested.socketName, options.logger);
    this.active = this.target !== null;
    this.watchdogMs = this.target === null ? null : watchdogInterval(requested, this.pid);
  }

  ready(status: string): void {
    this.send('ready', ['READY=1', `STATUS=${statusLine(status)}`, `MAINPID=${this.pid}`]);
  }

  status(status: string): void {
    this.send('status', [`STATUS=${statusLine(status)}`]);
  }

  reloading(): void {
    this.send('reloading', ['RELOADING=1', `MONOTONIC_USEC=${monotonicUsec()}`]);
  }

  stopping(): void {
    this.send('stopping', ['STOPPING=1', 'STATUS=stopping']);
    this.stopWatchdog();
  }

  /** Starts the WATCHDOG=1 pings (every half interval) when systemd asked for them. */
  startWatchdog(): void {
    if (this.watchdogMs === null || this.timer !== null || this.closed) return;
    this.send('watchdog', ['WATCHDOG=1']);
    this.timer = setInterval(() => this.send('watchdog', ['WATCHDOG=1']), Math.max(1, Math.floor(this.watchdogMs / 2)));
    this.timer.unref();
  }

  close(): void {
    if (this.closed) return;
    this.stopWatchdog();
    this.closed = true;
    if (this.target !== null) closeDatagramSocket(this.target.fd);
  }

  private stopWatchdog(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  /** A notification that cannot be sent is logged once per kind until one of that kind goes through again. */
  private send(kind: string, lines: string[]): void {
    if (this.target === null || this.closed) return;
    const sent = sendDatagram(this.target.fd, this.target.address, Buffer.from(lines.join('\n') + '\n', 'utf8'));
    if (sent.ok) {
      this.failedKinds.delete(kind);
      return;
    }
    if (this.failedKinds.has(kind)) return;
    this.failedKinds.add(kind);
    this.logger.warn('a systemd notification could not be sent', { notification: kind, detail: sent.detail });
  }
}

export function createServiceNotifier(options: ServiceNotifierOptions): ServiceNotifier {
  return new ServiceNotifier(options);
}
