/**
 * The worker entry (dist/worker/main.js): the first code that runs as the worker uid.
 * fd 0-2 are the command's stdio, fd 3 the protocol socket, fd 4 the listener channel
 * (docs/worker-protocol.md).
 *
 * Sequence: check inherited fds -> install the seccomp filter -> open the egress listener
 * (127.0.0.1 in this network namespace; never accepted on here) and send a copy to the
 * supervisor on fd 4 -> report `ready` -> read the launch message (a prepared worker waits
 * here until a turn claims it; the turn's proxy serves the listener before it is sent) ->
 * close this copy -> start the command in a new session, its proxy variables pointing at the
 * listener -> report `started` -> forward resize/signal -> report `exit` and exit 0.
 * Any failure before the command starts answers `error` with a stable code and exits 1.
 */
import { markCloseOnExec } from '../core/fds.js';
import { checkInheritedFds } from './fds.js';
import { PROTOCOL_FD } from './protocol.js';
import { closeEgressListener, handOverEgressListener, openEgressListener } from './egress-listener.js';
import { openChannel, expectLaunch, type Channel } from './channel.js';
import { SPAWN_ERROR_EXIT_CODES, startCommand, type RunningCommand } from './command.js';
import type { ForwardableSignal, LaunchMessage, WorkerErrorCode } from './protocol.js';
import { childrenRusage } from './rusage.js';
import { makeUndumpable } from './dumpable.js';
import { compilePolicy } from '../core/seccomp/policy.js';
import { installSeccompFilter } from './seccomp/install.js';
import { CodedError } from '../core/result.js';

// Before this module opens anything of its own.
const inheritedFds = checkInheritedFds();
// Before the command can exist: out of its reach for the worker's whole life.
const undumpable = makeUndumpable();

const MAX_ERROR_DETAIL_CHARS = 1000;
/** Signals delivered to the worker itself are passed on to the command's group. */
const RELAYED_WORKER_SIGNALS: readonly ForwardableSignal[] = ['SIGTERM', 'SIGINT', 'SIGHUP'];

async function refuse(channel: Channel, code: WorkerErrorCode, detail: string): Promise<number> {
  await channel.send({ type: 'error', code, detail: detail.slice(0, MAX_ERROR_DETAIL_CHARS) });
  await channel.close();
  return 1;
}

function proxyEnv(port: number): Record<string, string> {
  const url = `http://127.0.0.1:${port}`;
  const env: Record<string, string> = {};
  for (const name of ['HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY']) {
    env[name] = url;
    env[name.toLowerCase()] = url;
  }
  env.NO_PROXY = env.no_proxy = 'localhost,127.0.0.1';
  return env;
}

function followControl(channel: Channel, command: RunningCommand): void {
  channel.listen((event) => {
    if (event.kind === 'closed') {
      // Nobody is left to report to or to take orders from: end the command.
      command.signalGroup('SIGKILL');
      return;
    }
    if (event.kind === 'invalid') {
      void channel.send({
        type: 'error',
        code: 'protocol_invalid',
        detail: event.detail.slice(0, MAX_ERROR_DETAIL_CHARS),
      });
      return;
    }
    const message = event.message;
    if (message.type === 'resize') command.resize(message);
    else if (message.type === 'signal') command.signalGroup(message.signal);
    else void channel.send({ type: 'error', code: 'protocol_invalid', detail: 'launch was already received' });
  });
  for (const signal of RELAYED_WORKER_SIGNALS) process.on(signal, () => command.signalGroup(signal));
}

/** The proxy variables win over same-named variables of the launch environment. */
function commandEnv(launch: LaunchMessage, egressPort: number): Record<string, string> {
  return launch.egress ? { ...launch.env, ...proxyEnv(egressPort) } : launch.env;
}

function flushStdout(): Promise<void> {
  return new Promise((resolve) => process.stdout.write('', () => resolve()));
}

async function main(): Promise<number> {
  const cloexec = markCloseOnExec(PROTOCOL_FD);
  const channel = openChannel(PROTOCOL_FD);
  if (!inheritedFds.ok) return refuse(channel, 'unexpected_fds', inheritedFds.detail);
  if (!undumpable.ok) return refuse(channel, 'undumpable_failed', undumpable.detail);
  if (!cloexec.ok) return refuse(channel, 'unexpected_fds', cloexec.detail);

  // The policy does not depend on the turn: the filter is in place before the worker waits.
  const compiled = compilePolicy();
  if (!compiled.ok) return refuse(channel, 'seccomp_failed', compiled.detail);
  const installed = installSeccompFilter(compiled.program);
  if (!installed.ok) return refuse(channel, 'seccomp_failed', `${installed.reason}: ${installed.detail}`);
  // Connections wait in the listener's backlog until the proxy serves it; before the launch
  // no command exists that could make one.
  const listener = openEgressListener();
  if (!listener.ok) return refuse(channel, 'egress_failed', listener.detail);
  // Before `ready`: the supervisor takes the copy when it reads `ready` or later, never waiting for it.
  const handedOver = handOverEgressListener(listener);
  if (!handedOver.ok) return refuse(channel, 'egress_failed', handedOver.detail);
  await channel.send({ type: 'ready' });

  const launched = expectLaunch(await channel.next());
  // The proxy holds its own copy by now (or none: no egress, and connections are refused).
  closeEgressListener(listener);
  if (!launched.ok) return refuse(channel, launched.reason, launched.detail);
  const launch = launched.launch;

  const started = await startCommand({
    argv: launch.argv,
    cwd: launch.cwd,
    env: commandEnv(launch, listener.port),
    tty: launch.tty,
  });
  if (!started.ok && started.reason !== 'spawn_failed') {
    // The command could not start, but the turn ran: its exit is the shell's 127 or 126.
    await channel.send({
      type: 'exit',
      exitCode: SPAWN_ERROR_EXIT_CODES[started.reason],
      signal: null,
      rusage: { userCpuUsec: 0, systemCpuUsec: 0, maxRssKiB: 0 },
      spawnError: started.reason,
      detail: started.detail.slice(0, MAX_ERROR_DETAIL_CHARS),
    });
    await channel.close();
    return 0;
  }
  if (!started.ok) return refuse(channel, 'spawn_failed', started.detail);
  const command = started.command;
  await channel.send({ type: 'started', pid: command.pid });
  followControl(channel, command);

  const exit = await command.exited;
  const usage = childrenRusage();
  // getrusage on a valid buffer cannot fail; if it does, the worker has no honest exit record.
  if (!usage.ok) throw new CodedError(usage.reason, usage.detail);
  if (launch.tty) await flushStdout();
  await channel.send({ type: 'exit', exitCode: exit.exitCode, signal: exit.signal, rusage: usage.rusage });
  await channel.close();
  return 0;
}

process.exit(await main());
