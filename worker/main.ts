/**
 * The worker entry (dist/worker/main.js): the first code that runs as the worker uid.
 * fd 0-2 are the command's stdio, fd 3 the protocol socket (docs/worker-protocol.md).
 *
 * Sequence: check inherited fds -> install the seccomp filter -> listen with the egress bridge
 * -> report `ready` -> read the launch message (a prepared worker waits here until a turn
 * claims it) -> point the bridge at the turn's proxy socket (or close it: no egress) -> start
 * the command in a new session -> report `started` -> forward resize/signal -> report `exit`
 * and exit 0.
 * Any failure before the command starts answers `error` with a stable code and exits 1.
 */
import { checkInheritedFds, markCloseOnExec, PROTOCOL_FD } from './fds.js';
import { kernelRelay, type RelayReport } from '../relay/kernel-relay.js';
import { startEgressBridge, type EgressBridge } from './bridge.js';
import { openChannel, expectLaunch, type Channel } from './channel.js';
import { startCommand, type RunningCommand } from './command.js';
import { MAX_RELAY_FAILURE_CHARS, type ForwardableSignal, type LaunchMessage, type WorkerErrorCode } from './protocol.js';
import { childrenRusage } from './rusage.js';
import { compilePolicy } from './seccomp/policy.js';
import { installSeccompFilter } from './seccomp/install.js';
import { CodedError } from '../core/result.js';

// Before this module opens anything of its own.
const inheritedFds = checkInheritedFds();

const MAX_ERROR_DETAIL_CHARS = 1000;
/** Signals delivered to the worker itself are passed on to the command's group. */
const RELAYED_WORKER_SIGNALS: readonly ForwardableSignal[] = ['SIGTERM', 'SIGINT', 'SIGHUP'];

async function refuse(channel: Channel, code: WorkerErrorCode, detail: string): Promise<number> {
  await channel.send({ type: 'error', code, detail: detail.slice(0, MAX_ERROR_DETAIL_CHARS) });
  await channel.close();
  return 1;
}

/** The relay's report as the exit message carries it: the failure cut to the protocol's bound. */
function relayReportForExit(report: RelayReport): RelayReport {
  return { ...report, failure: report.failure?.slice(0, MAX_RELAY_FAILURE_CHARS) ?? null };
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
      void channel.send({ type: 'error', code: 'protocol_invalid', detail: event.detail.slice(0, MAX_ERROR_DETAIL_CHARS) });
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
function commandEnv(launch: LaunchMessage, bridge: EgressBridge): Record<string, string> {
  if (!launch.egress) return launch.env;
  bridge.target(launch.egress.socketPath);
  return { ...launch.env, ...proxyEnv(bridge.port) };
}

function flushStdout(): Promise<void> {
  return new Promise((resolve) => process.stdout.write('', () => resolve()));
}

async function main(): Promise<number> {
  const cloexec = markCloseOnExec(PROTOCOL_FD);
  const channel = openChannel(PROTOCOL_FD);
  if (!inheritedFds.ok) return refuse(channel, 'unexpected_fds', inheritedFds.detail);
  if (!cloexec.ok) return refuse(channel, 'unexpected_fds', cloexec.detail);

  // The policy does not depend on the turn: the filter is in place before the worker waits.
  const compiled = compilePolicy();
  if (!compiled.ok) return refuse(channel, 'seccomp_failed', compiled.detail);
  const installed = installSeccompFilter(compiled.program);
  if (!installed.ok) return refuse(channel, 'seccomp_failed', `${installed.reason}: ${installed.detail}`);
  // Listening costs nothing while the worker waits, and a turn without egress closes it again.
  // The relay thread starts after the filter, so the filter binds it too.
  const kernel = kernelRelay();
  const listening = await startEgressBridge({ kernel });
  if (!listening.ok) return refuse(channel, 'egress_failed', listening.detail);
  const bridge = listening;
  await channel.send({ type: 'ready' });

  const launched = expectLaunch(await channel.next());
  if (!launched.ok) return refuse(channel, launched.reason, launched.detail);
  const launch = launched.launch;
  if (!launch.egress) {
    await bridge.close();
    void kernel.stop();
  }

  const started = await startCommand({ argv: launch.argv, cwd: launch.cwd, env: commandEnv(launch, bridge), tty: launch.tty });
  if (!started.ok) {
    await bridge.close();
    return refuse(channel, 'spawn_failed', started.detail);
  }
  const command = started.command;
  await channel.send({ type: 'started', pid: command.pid });
  followControl(channel, command);

  const exit = await command.exited;
  // Before the exit report: the supervisor closes the proxy on it, and should find every
  // connection of the command already closed on this side.
  await bridge.close();
  const usage = childrenRusage();
  // getrusage on a valid buffer cannot fail; if it does, the worker has no honest exit record.
  if (!usage.ok) throw new CodedError(usage.reason, usage.detail);
  if (launch.tty) await flushStdout();
  const bridgeRelay = launch.egress ? relayReportForExit(kernel.report()) : null;
  await channel.send({ type: 'exit', exitCode: exit.exitCode, signal: exit.signal, rusage: usage.rusage, bridgeRelay });
  await channel.close();
  return 0;
}

process.exit(await main());
