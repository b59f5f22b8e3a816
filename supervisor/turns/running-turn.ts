/**
 * A turn as the manager and its clients see it: its durable record, its output, its events,
 * cancel and timeout, attach, and its held roots for host writes. The lifecycle (lifecycle.ts)
 * drives it through its steps: `bind` (a worker serves it: the record is stored), `started`,
 * `finish`; or `refuse` when no worker ever ran for it.
 */
import path from 'node:path';
import type { Logger } from '../../core/log.js';
import { serverTurnEvent, type TurnAttribution } from '../../core/events.js';
import type { ResolvedLimits } from '../../core/limits.js';
import { profileFor, type IdentityMode } from '../../core/modes.js';
import { closeRoot, type RootHandle } from '../fs/guard.js';
import type { HostWriteRoots, HostWriteTurn } from '../fs/host-write.js';
import type { ForwardableSignal } from './worker-protocol.js';
import type { LaunchEnvironment } from './launch-environment.js';
import { outputAttachment, type TurnOutput } from './output.js';
import { finishedWithoutRun } from './turn-result.js';
import { fail, ok } from '../../core/result.js';
import type {
  InputOutcome,
  OutputOffsets,
  TurnAttachment,
  TurnCreateFailure,
  TurnRecord,
  TurnRequest,
  TurnResult,
} from './types.js';
import type { WorkerConnection } from './worker-connection.js';

/** Why a turn got no worker: one shape for every refusal, naming the field or the requirement. */
export interface LaunchFailure {
  ok: false;
  reason: TurnCreateFailure;
  detail: string;
  field?: string;
  requirement?: string;
}

export type LaunchOutcome = { ok: true; turn: RunningTurn } | LaunchFailure;

export interface RunningTurn {
  record: TurnRecord;
  done: Promise<TurnResult>;
  stop(reason: 'cancelled' | 'timeout'): void;
  attach(offsets?: OutputOffsets): TurnAttachment;
  /** The turn's output: its files and counts. */
  readonly output: TurnOutput;
  /** Writes the command's whole input and ends it; attach input is refused from then on. */
  provideInput(data: Buffer, why: string): void;
  /** The held roots for host writes while the worker runs; null once it has exited. */
  hostWriteTarget(): { roots: HostWriteRoots; turn: HostWriteTurn } | null;
}

/** A refusal because the boundary cannot be had: a requirement the operator can act on. */
export function hostRefusal(requirement: string): LaunchFailure {
  return { ok: false, reason: 'worker_host_unsupported', detail: requirement, requirement };
}

/** The worker that serves a turn, as far as the turn needs to know it. */
export interface ServingWorker {
  identity: IdentityMode;
  uid: number;
  cgroupPaths: readonly string[];
  /** The turn's /tmp; null when the worker never got as far as the helper's launch report. */
  temp: RootHandle | null;
  connection: WorkerConnection;
  /** Ends every process of the worker (its cgroup). */
  kill(): void;
}

export class Turn implements RunningTurn {
  readonly record: TurnRecord;
  readonly attribution: TurnAttribution;
  readonly done: Promise<TurnResult>;
  /** Resolves when the command started, or the turn ended or was refused before it did. */
  readonly launched: Promise<LaunchOutcome>;
  private resolveDone!: (result: TurnResult) => void;
  private resolveLaunched!: (outcome: LaunchOutcome) => void;
  private worker: ServingWorker | null = null;
  private stopReason: 'cancelled' | 'timeout' | null = null;
  private timer: NodeJS.Timeout | null = null;
  private rootsOpen = false;
  private boundAt = Date.now();
  /** Why the command's input is closed (shared by every attachment); null while open. */
  private inputClosed: string | null = null;

  constructor(
    private readonly env: LaunchEnvironment,
    readonly request: TurnRequest & { turnId: string },
    readonly output: TurnOutput,
    private readonly workspace: RootHandle,
    limits: ResolvedLimits,
  ) {
    this.record = {
      id: request.turnId,
      sessionId: request.sessionId,
      mode: request.mode,
      profile: profileFor(request.mode),
      state: 'starting',
      identity: 'shared_uid',
      workerUid: null,
      createdAt: new Date().toISOString(),
      endedAt: null,
      tty: request.tty !== undefined,
      result: null,
      workspaceId: request.workspace ?? null,
      argv: [...request.argv],
      cwd: request.cwd,
      envNames: Object.keys(request.env ?? {}).sort(),
      limits: { ...limits },
      timeoutSeconds: request.timeoutSeconds ?? env.deps.config.turns.defaultTimeoutSeconds,
    };
    this.attribution = {
      sessionId: request.sessionId,
      turnId: request.turnId,
      profile: this.record.profile,
      model: request.model ?? null,
    };
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
    this.launched = new Promise((resolve) => (this.resolveLaunched = resolve));
  }

  private get log() {
    return this.env.deps.logger.child({ turnId: this.record.id });
  }

  /** Milliseconds since a worker took the turn: its result's duration. */
  elapsedMs(): number {
    return Date.now() - this.boundAt;
  }

  /** Why the supervisor stopped it, if it did. */
  stoppedFor(): 'cancelled' | 'timeout' | null {
    return this.stopReason;
  }

  /**
   * No worker ever ran for this turn. A refusal of the boundary is recorded (a `launch_refused`
   * record and a `worker_host_refusal` event); other failures (capacity) leave no record.
   */
  refuse(failure: LaunchFailure): LaunchFailure {
    closeRoot(this.workspace);
    if (failure.reason === 'worker_host_unsupported') {
      const requirement = failure.requirement ?? failure.detail;
      const refused = finishedWithoutRun(this.record, 'launch_refused', requirement);
      this.env.records.insert(refused, []);
      this.recordHostRefusal(requirement);
      this.log.warn('turn refused: worker host unsupported', { requirement });
      if (refused.result) this.resolveDone(refused.result);
    }
    this.resolveLaunched(failure);
    return failure;
  }

  /** A worker serves this turn from now on: the record is stored, the timeout runs, output flows. */
  bind(worker: ServingWorker): void {
    this.worker = worker;
    this.boundAt = Date.now();
    this.rootsOpen = true;
    this.record.identity = worker.identity;
    this.record.workerUid = worker.uid;
    this.env.records.insert(this.record, [...worker.cgroupPaths]);
    const stream = this.record.tty ? 'pty' : 'stdout';
    worker.connection.readOutput(({ stream: from, data }) =>
      this.output.push(from === 'stderr' ? 'stderr' : stream, data),
    );
    const timeoutSeconds = this.request.timeoutSeconds ?? this.env.deps.config.turns.defaultTimeoutSeconds;
    this.timer = setTimeout(() => this.stop('timeout'), timeoutSeconds * 1000);
  }

  /** The claim's checks or the listener hand-over refused the launch: a `worker_host_refusal` event. */
  refuseLaunch(detail: string, why: string): void {
    this.recordHostRefusal(detail);
    this.log.warn(why, { detail });
  }

  started(details: { cgroup: string | null; limits: ResolvedLimits }): void {
    this.record.state = 'running';
    this.env.records.update(this.record);
    this.env.deps.events.append(
      serverTurnEvent(this.attribution, 'worker_launch', {
        mode: this.record.mode,
        profile: this.record.profile,
        identity: this.record.identity,
        workerUid: this.record.workerUid,
        command: path.basename(this.request.argv[0] ?? ''),
        cgroup: details.cgroup,
        limits: details.limits,
        // From the request to the command started: the metrics' launch latency.
        launchMs: Date.now() - Date.parse(this.record.createdAt),
      }),
    );
    this.resolveLaunched({ ok: true, turn: this });
  }

  /** The worker has exited: host writes stop. */
  workerExited(): void {
    this.rootsOpen = false;
    if (this.timer) clearTimeout(this.timer);
  }

  finish(result: TurnResult): void {
    result.output = this.output.counts();
    this.record.state = 'finished';
    this.record.endedAt = new Date().toISOString();
    this.record.result = result;
    this.env.records.update(this.record);
    this.env.deps.events.append(
      serverTurnEvent(this.attribution, 'worker_exit', {
        status: result.status,
        exitCode: result.exitCode,
        signal: result.signal,
        durationMs: result.durationMs,
        usage: result.usage,
        limitHits: result.limitHits,
        // Why it failed or did not start, for an operator reading the events alone.
        ...(result.detail !== undefined ? { detail: result.detail } : {}),
        ...(result.spawnError !== undefined ? { spawnError: result.spawnError } : {}),
      }),
    );
    logFinished(this.log, result);
    this.output.end(result);
    this.resolveLaunched({ ok: true, turn: this });
    this.resolveDone(result);
  }

  /** Releases what the turn itself holds (its workspace root); after the worker's disposal. */
  release(): void {
    closeRoot(this.workspace);
  }

  stop(reason: 'cancelled' | 'timeout'): void {
    if (this.record.state === 'finished' || this.stopReason) return;
    this.stopReason = reason;
    this.worker?.kill();
  }

  private writeInput(data: Buffer): InputOutcome {
    if (this.inputClosed !== null) return fail('input_closed', this.inputClosed);
    if (this.record.state === 'finished') return fail('input_closed', 'the turn has finished');
    this.worker?.connection.writeInput(data);
    return ok({});
  }

  private endInput(why: string): InputOutcome {
    if (this.inputClosed !== null) return fail('input_closed', this.inputClosed);
    this.inputClosed = why;
    this.worker?.connection.endInput();
    return ok({});
  }

  provideInput(data: Buffer, why: string): void {
    this.writeInput(data);
    this.endInput(why);
  }

  attach(offsets: OutputOffsets = {}): TurnAttachment {
    return outputAttachment(this.output, offsets, {
      write: (data) => this.writeInput(data),
      endInput: () => this.endInput('the input was ended (eof)'),
      resize: (cols, rows) => this.worker?.connection.send({ type: 'resize', cols, rows }),
      signal: (signal) => this.worker?.connection.send({ type: 'signal', signal: signal as ForwardableSignal }),
      holdOutput: () => this.worker?.connection.holdOutput() ?? null,
    });
  }

  hostWriteTarget(): { roots: HostWriteRoots; turn: HostWriteTurn } | null {
    if (!this.rootsOpen || !this.worker) return null;
    return {
      roots: { workspace: this.workspace, temp: this.worker.temp },
      turn: {
        sessionId: this.record.sessionId,
        turnId: this.record.id,
        profile: this.record.profile,
        model: this.request.model ?? null,
      },
    };
  }

  private recordHostRefusal(requirement: string): void {
    this.env.deps.events.append(
      serverTurnEvent(this.attribution, 'worker_host_refusal', {
        mode: this.record.mode,
        requirement,
        trigger: 'turn',
      }),
    );
  }
}

/**
 * A launch that failed (refused, or the worker lost) is the operator's to look at: a warning
 * with its reason. A command's own outcome, a nonzero exit included, is the caller's: info.
 */
function logFinished(log: Logger, result: TurnResult): void {
  const fields = {
    status: result.status,
    exitCode: result.exitCode,
    durationMs: result.durationMs,
    ...(result.detail !== undefined ? { detail: result.detail } : {}),
  };
  if (result.status === 'launch_refused') log.warn('turn launch failed', fields);
  else if (result.status === 'internal_error') log.warn('turn failed', fields);
  else log.info('turn finished', fields);
}
