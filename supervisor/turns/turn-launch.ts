/**
 * What the steps of one worker's life (lifecycle.ts, "Theory of operation") share. The launch
 * starts as a `TurnLaunch` and each step that establishes or acquires something hands the next
 * one a wider context (`ProbedLaunch`, `AcquiredLaunch`, ...): a step can only use what the
 * steps before it produced. Every context of one launch holds the same disposal scope.
 */
import type { TurnCgroup, CgroupSubtree } from '../../cgroup/types.js';
import type { Logger } from '../../core/log.js';
import type { IdentityMode } from '../../core/modes.js';
import { fail, type Ok, type Result } from '../../core/result.js';
import type { TurnProxy } from '../../proxy/server.js';
import type { RootHandle } from '../fs/guard.js';
import type { HelperLocation } from '../identity/helper-process.js';
import type { ModeProbe } from '../probes/index.js';
import { DisposalScope } from './disposal-scope.js';
import type { LaunchEnvironment } from './launch-environment.js';
import type { ListenerChannel } from './listener-channel.js';
import type { LaunchFailure, Turn } from './running-turn.js';
import type { WorkerSpec } from './turn-request.js';
import type { TurnView } from '../view/descriptor.js';
import type { WorkerConnection } from './worker-connection.js';

/** What the claim of a worker came to. */
export type ClaimOutcome =
  /** The worker took the turn: the turn's own promises tell the rest. */
  | { kind: 'bound' }
  /** No worker ever ran for the turn: refused (and recorded as the failure says). */
  | { kind: 'refused'; failure: LaunchFailure }
  /** The worker failed the claim's checks and was stopped; nothing was recorded for the turn. */
  | { kind: 'unusable'; detail: string };

/** The state one `workerLifecycle` call shares with its `Worker` handle. */
export interface WorkerState {
  name: string;
  spec: WorkerSpec;
  /** Set for a worker started for a waiting turn: it may stop an idle prepared worker for a uid. */
  makeRoom: (() => Promise<boolean>) | null;
  claimed: Promise<Turn | null>;
  claim(turn: Turn | null): void;
  outcome(result: ClaimOutcome): void;
  readied(result: Result): void;
  exited(): void;
  connection: WorkerConnection | null;
  /** The turn the worker serves, once claimed. */
  turn: Turn | null;
}

/** What every step of one worker's life starts from. */
export interface TurnLaunch {
  env: LaunchEnvironment;
  worker: WorkerState;
  spec: WorkerSpec;
  name: string;
  logger: Logger;
  /** Every acquisition defers its release here at once: a failure at step N undoes N-1..1. */
  scope: DisposalScope;
}

/** A step that may refuse the turn before any worker process exists. */
export type LaunchStep<T extends object> = Ok<T> | LaunchFailure;

/** 1. The boundary this mode's probe established, and the helper that will build it. */
export interface ProbedLaunch extends TurnLaunch {
  probe: ModeProbe;
  identity: IdentityMode;
  separate: boolean;
  helper: HelperLocation;
  /** The helper binary and config as probed: the claim checks that they did not change. */
  stampAtProbe: string;
  cgroupSubtree: CgroupSubtree;
}

/** 2. What was acquired for the worker, each release deferred onto the scope. */
export interface AcquiredLaunch extends ProbedLaunch {
  /** separate_uid: where the helper's search for a free uid starts (a workspace's: its uid). */
  uidHint: number | null;
  cgroup: TurnCgroup;
  view: TurnView;
  /** The view's host entries at the launch: the claim checks that they did not change. */
  fingerprint: string;
  channel: ListenerChannel;
}

/** 3. The worker process (the helper's monitor), decoded by its connection. */
export interface SpawnedLaunch extends AcquiredLaunch {
  connection: WorkerConnection;
}

/** 4. The worker's boot, and the helper's launch report. */
export interface BootedLaunch extends SpawnedLaunch {
  /** Whether the worker can serve a turn; a later step (the proxy) may still fail it. */
  ready: Result;
  /** The uid the helper reported, or without a report the one it was expected to take. */
  uid: number;
  /** The turn's /tmp; null when the worker never got as far as the launch report. */
  temp: RootHandle | null;
}

/** 5. The worker's egress proxy; when it could not start, `ready` holds the same failure. */
export interface ProxiedLaunch extends BootedLaunch {
  proxy: Result<TurnProxy>;
}

/** 7. A worker that passed the claim's checks for `turn`. */
export interface ClaimedLaunch extends ProxiedLaunch {
  turn: Turn;
  proxy: Ok<TurnProxy>;
}

export function beginLaunch(env: LaunchEnvironment, worker: WorkerState): TurnLaunch {
  return {
    env,
    worker,
    spec: worker.spec,
    name: worker.name,
    logger: env.deps.logger.child({ worker: worker.name }),
    scope: new DisposalScope(),
  };
}

/** Before a worker process exists, a failure refuses the turn that claimed it (if any yet). */
export async function refuseBeforeWorker(launch: TurnLaunch, failure: LaunchFailure): Promise<void> {
  const { worker, scope } = launch;
  worker.readied(fail(failure.reason, failure.detail));
  await scope.dispose();
  const turn = await worker.claimed;
  if (turn) worker.outcome({ kind: 'refused', failure: turn.refuse(failure) });
  worker.exited();
}

/** Ends every process of the worker: its cgroup, else (a worker that left it) its monitor. */
export function killWorker(launch: SpawnedLaunch): void {
  const killed = launch.cgroup.kill();
  if (killed.ok) return;
  launch.logger.warn('cgroup kill incomplete; killing the worker through its monitor', { detail: killed.detail });
  launch.connection.stop();
}
