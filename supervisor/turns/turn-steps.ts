/**
 * Steps 6 to 14 of a worker's life (lifecycle.ts, "Theory of operation"): from the claim of a
 * ready worker by a turn to the turn's result. A worker no turn claims, or that fails the
 * claim's checks, is stopped and released here (`retireWorker`); one that passes serves its
 * turn to the end: launch, exit, disposal of the scope, the result and its events.
 */
import { fail, ok, type Result } from '../../core/result.js';
import type { HelperLocation } from '../identity/helper-process.js';
import type { Turn } from './running-turn.js';
import { receiveWorkerListener } from './listener-channel.js';
import { commandEnv } from './turn-request.js';
import { killWorker, type ClaimedLaunch, type ProxiedLaunch } from './turn-launch.js';
import { buildResult } from './turn-result.js';
import { TURN_TMP_PATH } from './turn-tmp.js';
import type { TurnResult } from './types.js';
import { viewFingerprint } from '../view/descriptor.js';
import { attestWorker, type AttestationExpectation } from './worker-attestation.js';
import type { WorkerConnection } from './worker-connection.js';
import { helperStamp } from './worker-process.js';
import { brokerEnv } from './turn-brokers.js';

/** 6. The claim: the worker says whether it is ready; a prepared one waits here for a turn. */
export function awaitClaim(launch: ProxiedLaunch): Promise<Turn | null> {
  launch.worker.readied(launch.ready);
  return launch.worker.claimed;
}

/**
 * 7. The claim's checks: the view's host entries and the helper unchanged since the launch,
 * and the live process attested (credentials, namespaces, cgroup membership). A worker that
 * never got ready still takes the turn that claimed it: the turn's result says why nothing ran.
 */
export function checkClaim(launch: ProxiedLaunch, turn: Turn | null): Result<ClaimedLaunch> {
  const { ready, proxy, connection, separate, uid } = launch;
  if (!turn) return fail('unclaimed', 'no turn claimed the worker');
  if (!proxy.ok) return proxy;
  if (!ready.ok) return ok({ ...launch, turn, proxy });
  const usable = checkClaimFacts(connection, {
    monitorPid: connection.pid ?? -1,
    identity: launch.identity,
    uid,
    gid: separate ? uid : (process.getgid?.() ?? 0),
    groupsMayStay: !separate && uid !== 0,
    cgroupPaths: launch.cgroup.paths,
    helper: launch.helper,
    stampAtProbe: launch.stampAtProbe,
    view: launch.view,
    fingerprint: launch.fingerprint,
  });
  return usable.ok ? ok({ ...launch, turn, proxy }) : usable;
}

interface ClaimFacts extends Omit<AttestationExpectation, 'procRoot'> {
  helper: HelperLocation;
  stampAtProbe: string;
  view: Parameters<typeof viewFingerprint>[0];
  fingerprint: string;
}

/** Whether a worker booted earlier may serve a turn now (docs/probes.md, "Worker attestation"). */
function checkClaimFacts(connection: WorkerConnection, facts: ClaimFacts): Result {
  if (viewFingerprint(facts.view) !== facts.fingerprint)
    return fail('view_changed', 'the workspace or a protected path changed since the worker was launched');
  if (connection.pid === undefined || connection.ended)
    return fail('worker_attestation_failed', 'worker attestation: the worker is no longer running');
  if (helperStamp(facts.helper) !== facts.stampAtProbe) {
    return fail(
      'worker_attestation_failed',
      'worker attestation: the identity helper or its config changed since the worker was launched',
    );
  }
  return attestWorker(facts);
}

/** 7, failed: a worker no turn claimed, or that failed the claim's checks, is stopped and released. */
export async function retireWorker(launch: ProxiedLaunch, turn: Turn | null, detail: string): Promise<void> {
  const { connection } = launch;
  // The worker may have left its leaf (one way its attestation fails); it also ends itself
  // when its protocol fd closes, which covers a worker this supervisor may not signal.
  killWorker(launch);
  connection.stop();
  await connection.closed();
  await launch.scope.dispose();
  if (turn) launch.worker.outcome({ kind: 'unusable', detail });
}

/** 8. Bind the turn: its record names this worker; its timeout runs; its output flows. */
export function bindTurn(launch: ClaimedLaunch): void {
  const { worker, turn, logger } = launch;
  worker.turn = turn;
  launch.proxy.attribute(turn.attribution, logger.child({ turnId: turn.record.id, component: 'proxy' }));
  turn.bind({
    identity: launch.identity,
    uid: launch.uid,
    cgroupPaths: launch.cgroup.paths,
    temp: launch.temp,
    connection: launch.connection,
    kill: () => killWorker(launch),
  });
  worker.outcome({ kind: 'bound' });
}

/**
 * 9. Serve the egress listener the worker handed over; null when there is nothing to launch
 * (the worker never got ready, or its turn was stopped already).
 */
export async function serveEgressListener(launch: ClaimedLaunch): Promise<Result | null> {
  if (!launch.ready.ok || launch.turn.stoppedFor()) return null;
  const received = receiveWorkerListener(launch.channel.supervisorFd);
  return received.ok ? await launch.proxy.serveWorkerListener(received.fd) : received;
}

/**
 * 10. Launch the command once its listener is served; the refusal when it could not be. A
 * worker that never got ready, or was refused or stopped before its launch, waits no longer.
 */
export function launchCommand(launch: ClaimedLaunch, served: Result | null): string | null {
  const { turn } = launch;
  let refusal: string | null = null;
  if (served?.ok) {
    launch.connection.launch({
      type: 'launch',
      v: 1,
      argv: turn.request.argv,
      cwd: turn.request.cwd,
      env: {
        ...commandEnv(turn.request),
        ...brokerEnv(launch.spec.brokers, launch.proxy.egressPort()),
        TMPDIR: TURN_TMP_PATH,
      },
      tty: turn.request.tty ?? null,
      egress: true,
    });
  } else if (served) {
    refusal = served.detail;
    turn.refuseLaunch(served.detail, 'turn refused: the egress listener was not served');
  }
  if (!launch.ready.ok || refusal !== null || turn.stoppedFor()) killWorker(launch);
  return refusal;
}

/** 11. Started: the turn is running (its `worker_launch` event). */
export async function awaitStart(launch: ClaimedLaunch): Promise<void> {
  if (await launch.connection.started())
    launch.turn.started({ cgroup: launch.cgroup.paths[0] ?? null, limits: launch.spec.limits });
}

/**
 * 12. Exit. Background processes die with the turn, whatever the command did; a process that
 * holds the output pipes open would otherwise keep them from draining. The result is read now,
 * while the cgroup leaf (its counters) still exists.
 */
export async function awaitExit(launch: ClaimedLaunch, refusal: string | null): Promise<TurnResult> {
  const { connection, turn, ready } = launch;
  const report = await connection.exited();
  turn.workerExited();
  killWorker(launch);
  await connection.closed();
  return buildResult({
    stopReason: turn.stoppedFor(),
    exitMessage: report.exit,
    workerError: report.error ?? (ready.ok ? null : ready.detail),
    refusal: refusal ?? report.helperRefusal,
    workerExitCode: report.processExitCode,
    stats: launch.cgroup.stats(),
    durationMs: turn.elapsedMs(),
  });
}

/**
 * 14. Record the result and its events, once the scope is disposed (13): a workspace turn's
 * result says what its workspace holds now that no process of it runs, and every turn's what
 * its egress came to. The turn's workspace
 * root is let go last of all it held, before the record.
 */
export async function recordResult(launch: ClaimedLaunch, result: TurnResult): Promise<void> {
  const { env, turn, logger } = launch;
  // The scope's disposal closed the proxy: every connection it served is counted by now.
  result.egress = launch.proxy.egressSummary();
  const lease = launch.spec.lease;
  if (lease && env.workspaceUsage) {
    const usage = await env.workspaceUsage(lease.id);
    if (usage.ok) result.workspace = { id: lease.id, bytes: usage.bytes, files: usage.files };
    else logger.warn('workspace usage unavailable', { workspaceId: lease.id, detail: usage.detail });
  }
  turn.release();
  turn.finish(result);
}
