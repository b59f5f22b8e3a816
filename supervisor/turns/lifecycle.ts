/**
 * One worker's life, and the turn it serves, top to bottom.
 *
 * Theory of operation
 * -------------------
 * Four processes take part in a turn:
 *
 *   supervisor  uid `turnhost` (or root). Trusted. Holds the API, the database, the proxy.
 *   helper      identity-helper/, setuid root (run directly by a root supervisor). Trusts
 *               only its own root-owned config: the supervisor may ask, the config decides.
 *   worker      worker/ (C, executed from the helper's fd), as the worker uid, no capabilities, no_new_privs, in new
 *               cgroup/net/ipc/uts/mount/pid namespaces with the filesystem view. Our code, trusted
 *               until the command exists; after that only what the supervisor can read for
 *               itself (/proc, the cgroup) is believed over what the worker reports.
 *   command     the turn's program, as the worker uid, under the worker's seccomp filter.
 *               Never trusted.
 *
 * Their fds at each step:
 *
 *   supervisor → helper   0-2 the worker's stdio (pipes), 3 the protocol socket (the launch
 *                         descriptor is written there first), 4 the listener channel (a unix
 *                         SOCK_SEQPACKET pair; the supervisor keeps the other end). Empty env.
 *   helper → worker       the helper keeps 0-3, and 4 only when it is the listener channel,
 *                         closes every other fd and clears FD_CLOEXEC on what it keeps,
 *                         drops to the worker uid and execs the worker with the descriptor's env.
 *   worker                refuses any fd outside that rule, marks 3 close-on-exec, installs
 *                         seccomp, opens its egress listener (127.0.0.1 in its namespace), sends
 *                         a copy on 4, says `ready` on 3, then waits for `launch`.
 *   worker → command      the command gets 0-2 only (pipes, or a pty), in a new session, with the
 *                         proxy variables pointing at the listener the supervisor now serves.
 *
 * In shared_uid mode (no helper configured) the same helper binary runs unprivileged in its
 * `--shared` mode (shared-launcher.ts): the same namespaces, view and empty capability sets,
 * the worker keeping the supervisor's uid (inside a user namespace unless the supervisor is
 * root), with the same fds.
 *
 * The sequence (`workerLifecycle`, below) calls each mechanism once, in this order; every
 * acquisition defers its release onto one disposal scope at once, so a failure at any step
 * releases what the steps before it took, newest first:
 *
 *   1. probe the mode, now (never cached): the identity, and the helper that builds it;
 *   2. acquire: a uid hint (separate_uid), the cgroup leaf, the view keys, the listener channel;
 *   3. start the worker (the helper's monitor) and its connection;
 *   4. ready, with the helper's launch report (the uid it got, the turn's /tmp);
 *   5. the runtime directory and the egress proxy, for the uid the helper reported;
 *   6. the claim: a direct launch is claimed already; a prepared worker waits here for a turn;
 *   7. the claim's checks: view and helper unchanged, the live process attested (a worker
 *      that fails them, or that no turn claims, is stopped and released);
 *   8. bind the turn (its record names the worker); 9. serve the egress listener;
 *   10. launch the command; 11. started; 12. exit: the cgroup killed, the pipes drained, the
 *   result read; 13. dispose the scope; 14. record the result and its events.
 *
 * Steps 1-5 are in launch-steps.ts, 6-14 in turn-steps.ts; what they share is the launch
 * context of turn-launch.ts. A prepared worker (prepared-workers.ts) is this same sequence
 * paused at the claim.
 */
import { fail, type Result } from '../../core/result.js';
import { launchPhaseClock } from '../observe/launch-phases.js';
import { openRoot } from '../fs/guard.js';
import { acquireHoldings, awaitReady, probeBoundary, spawnWorkerProcess, startEgressProxy } from './launch-steps.js';
import type { LaunchEnvironment } from './launch-environment.js';
import type { TurnOutput } from './output.js';
import { preparedWorkerName, type PreparedWorkerPool } from './prepared-workers.js';
import { hostRefusal, Turn, type LaunchOutcome } from './running-turn.js';
import { beginLaunch, refuseBeforeWorker, type ClaimOutcome, type WorkerState } from './turn-launch.js';
import { resolveWorkerSpec, workerKey, type WorkerSpec } from './turn-request.js';
import {
  awaitClaim,
  awaitExit,
  awaitStart,
  bindTurn,
  checkClaim,
  launchCommand,
  recordResult,
  retireWorker,
  serveEgressListener,
} from './turn-steps.js';
import type { TurnRequest } from './types.js';

/** A workspace turn's lease, as the manager resolved it from the workspace record. */
export interface WorkspaceLease {
  id: string;
  /** The leased uid, or null for a workspace made in shared_uid mode. */
  uid: number | null;
  path: string;
}

/** A started worker, from its launch to its end; a prepared one waits at the claim. */
export interface Worker {
  name: string;
  key: string;
  /** Settles when the worker waits for its launch message, or failed to get there. */
  readonly ready: Promise<Result>;
  readonly ended: boolean;
  onEnd(listener: () => void): void;
  /** Gives the worker to `turn`; settles once it is bound to it, or refused or unusable. */
  claim(turn: Turn): Promise<ClaimOutcome>;
  /** Stops a worker no turn claimed, releasing what it holds. */
  retire(): Promise<void>;
}

function startWorker(
  env: LaunchEnvironment,
  spec: WorkerSpec,
  name: string,
  options: { makeRoom?: () => Promise<boolean> } = {},
): Worker {
  let claim!: (turn: Turn | null) => void;
  let readied!: (result: Result) => void;
  let outcome: ((result: ClaimOutcome) => void) | null = null;
  const endListeners: Array<() => void> = [];
  let ended = false;
  const state: WorkerState = {
    name,
    spec,
    makeRoom: options.makeRoom ?? null,
    claimed: new Promise((resolve) => (claim = resolve)),
    claim: (turn) => claim(turn),
    outcome: (result) => outcome?.(result),
    readied: (result) => readied(result),
    exited: () => {
      ended = true;
      for (const listener of endListeners.splice(0)) listener();
    },
    connection: null,
    turn: null,
  };
  const ready = new Promise<Result>((resolve) => (readied = resolve));
  const life = workerLifecycle(env, state).catch((error: unknown) => {
    env.deps.logger.error('worker lifecycle failed', { worker: name, detail: (error as Error).stack ?? String(error) });
    state.readied(fail('internal', String(error)));
    state.outcome({ kind: 'refused', failure: hostRefusal(`the worker lifecycle failed: ${String(error)}`) });
  });
  return {
    name,
    key: workerKey(spec),
    ready,
    get ended() {
      return ended || (state.connection?.ended ?? false);
    },
    onEnd: (listener) => (ended ? listener() : endListeners.push(listener)),
    claim(turn) {
      const settled = new Promise<ClaimOutcome>((resolve) => (outcome = resolve));
      state.claim(turn);
      return settled;
    },
    async retire() {
      state.claim(null);
      await life;
    },
  };
}

/**
 * The one sequence every worker goes through, whether a turn asked for it now or the pool
 * prepared it for the next turn. Each step that can fail ends the worker here; what was
 * acquired is released by the scope, newest first.
 */
async function workerLifecycle(env: LaunchEnvironment, worker: WorkerState): Promise<void> {
  const launch = beginLaunch(env, worker);
  const clock = launchPhaseClock(worker.name);
  clock.mark('begin');
  // 1. The mode's probe: the identity, and the helper that builds it.
  const probed = await probeBoundary(launch);
  if (!probed.ok) return refuseBeforeWorker(launch, probed);
  clock.mark('probed');
  // 2. Acquire: uid hint, cgroup leaf, view keys, listener channel.
  const acquired = await acquireHoldings(probed);
  if (!acquired.ok) return refuseBeforeWorker(launch, acquired);
  clock.mark('acquired');
  // 3. Start the worker in the turn's cgroup, namespaces and view.
  const spawned = spawnWorkerProcess(acquired);
  if (!spawned.ok) return refuseBeforeWorker(launch, spawned);
  clock.mark('spawned');
  // 4. Ready, and the helper's launch report (the uid, the turn's /tmp).
  const booted = await awaitReady(spawned);
  clock.mark('ready');
  // 5. The runtime directory and the egress proxy.
  const proxied = await startEgressProxy(booted);
  clock.mark('proxied');
  // 6. The claim: a prepared worker waits here for a turn.
  const turn = await awaitClaim(proxied);
  clock.mark('claimed');
  // 7. The claim's checks: view and helper unchanged, the live process attested.
  const claimed = checkClaim(proxied, turn);
  if (!claimed.ok) return retireWorker(proxied, turn, claimed.detail);
  // 8. Bind the turn.
  bindTurn(claimed);
  clock.mark('bound');
  // 9. Serve the egress listener.
  const served = await serveEgressListener(claimed);
  // 10. Launch the command.
  const refusal = launchCommand(claimed, served);
  clock.mark('launched');
  // 11. Started.
  await awaitStart(claimed);
  clock.mark('started');
  // 12. Exit: kill the cgroup, drain the pipes, read the result.
  const result = await awaitExit(claimed, refusal);
  clock.mark('exited');
  // 13. Dispose the scope, newest first (the turn's workspace root after it, in 14).
  await claimed.scope.dispose();
  clock.mark('disposed');
  // 14. Record the result and its events.
  await recordResult(claimed, result);
  clock.mark('recorded');
  clock.write(claimed.turn.record.id);
}

/** Starts a worker for the pool and waits until it is ready; null (logged) when it cannot be. */
export async function prepareWorker(env: LaunchEnvironment, spec: WorkerSpec): Promise<Worker | null> {
  const worker = startWorker(env, spec, preparedWorkerName());
  const ready = await worker.ready;
  if (ready.ok) return worker;
  env.deps.logger.info('no prepared worker', { mode: spec.mode, detail: ready.detail });
  await worker.retire();
  return null;
}

/**
 * A turn's launch: its spec and workspace root, then the worker prepared for its key if the
 * pool has one that passes the claim's checks, else a worker started for it now. Resolves once
 * the command started, or the turn ended or was refused before it did.
 */
export async function launchTurn(
  env: LaunchEnvironment,
  pool: PreparedWorkerPool<Worker, WorkerSpec>,
  request: TurnRequest & { turnId: string },
  output: TurnOutput,
  workspaceLease?: WorkspaceLease,
): Promise<LaunchOutcome> {
  const { deps } = env;
  const resolved = resolveWorkerSpec(deps.config, deps.env ?? process.env, request);
  if (!resolved.ok)
    return { ok: false, reason: 'invalid_request', detail: resolved.detail, field: resolved.field ?? 'limits' };
  const spec: WorkerSpec = workspaceLease
    ? { ...resolved.spec, lease: { id: workspaceLease.id, uid: workspaceLease.uid, path: workspaceLease.path } }
    : resolved.spec;
  const workspace = openRoot(request.cwd);
  if (!workspace.ok) return { ok: false, reason: 'invalid_request', detail: `cwd: ${workspace.detail}`, field: 'cwd' };
  const turn = new Turn(env, request, output, workspace, spec.limits);
  if (workspaceLease) {
    // A workspace that is its own filesystem is bounded by it: a full one still runs turns, and
    // a turn that deletes frees it. One without an image is only measured at the start (and the
    // end, in the result): over the cap it runs no turn until something removes files from it.
    const usage = env.workspaceUsage
      ? await env.workspaceUsage(workspaceLease.id)
      : fail('workspaces_unavailable', 'no workspace usage');
    if (!usage.ok) return turn.refuse(hostRefusal(`workspace ${workspaceLease.id} usage: ${usage.detail}`));
    const maxBytes = deps.config.workspaces.maxBytes;
    if (!usage.image && maxBytes !== null && usage.bytes > maxBytes)
      return turn.refuse(
        hostRefusal(
          `workspace ${workspaceLease.id} holds ${usage.bytes} bytes, above its cap of ${maxBytes} (workspaces.maxBytes)`,
        ),
      );
    // A workspace's turns start their own worker: a prepared one runs under no lease.
    const claim = await startWorker(env, spec, turn.record.id).claim(turn);
    if (claim.kind === 'refused') return claim.failure;
    if (claim.kind === 'unusable') return turn.refuse(hostRefusal(claim.detail));
    return turn.launched;
  }

  const prepared = await pool.take(workerKey(spec));
  let claim = prepared ? await prepared.claim(turn) : null;
  if (prepared && claim?.kind === 'unusable')
    deps.logger.warn('prepared worker not used', { preparedWorker: prepared.name, detail: claim.detail });
  if (claim === null || claim.kind === 'unusable') {
    claim = await startWorker(env, spec, turn.record.id, { makeRoom: () => pool.evictOne() }).claim(turn);
  }
  if (claim.kind === 'refused') return claim.failure;
  if (claim.kind === 'unusable') {
    return turn.refuse(hostRefusal(claim.detail));
  }
  // The next turn's worker starts once this one has ended: it would compete with this turn's
  // own start for the CPU, and a long turn would hold a second uid for nothing.
  void turn.done.then(() => setImmediate(() => pool.prepareFor(spec)));
  return turn.launched;
}
