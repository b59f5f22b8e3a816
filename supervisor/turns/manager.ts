/**
 * The turn manager: the only way to start a worker. Each turn runs the one lifecycle
 * (lifecycle.ts); this module keeps the running turns and the recently finished ones, the
 * prepared-worker pool, and the durable records. The workspaces it runs turns on come from
 * outside (`TurnWorkspaces`): the daemon wires the workspace service in (supervisor/compose.ts).
 */
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { fail, ok, type Fail, type Result } from '../../core/result.js';
import { kernelRelayReport } from '../../proxy/relay/kernel-relay.js';
import type { HostWriteRoots, HostWriteTurn } from '../fs/host-write.js';
import { prepareLaunchEnvironment, type LaunchEnvironment } from './launch-environment.js';
import { launchTurn, prepareWorker, type Worker, type WorkspaceLease } from './lifecycle.js';
import { ENDED_TURN_CONTROLS, OutputFiles, outputAttachment, TurnOutput } from './output.js';
import { createPreparedWorkerPool, type PreparedWorkerPool } from './prepared-workers.js';
import { recoverInterruptedTurns } from './recovery.js';
import type { RunningTurn } from './running-turn.js';
import {
  deleteSession,
  listSessions,
  pruneSessions,
  type SessionDeleteFailure,
  type SessionDeletion,
  type SessionDeps,
  type SessionPage,
  type SessionPageQuery,
} from './sessions.js';
import { createTurnRecordStore, type TurnRecordStore } from './store.js';
import { workerKey, type WorkerSpec } from './turn-request.js';
import { requestStdin, validateTurnRequest } from './validate.js';
import type {
  DrainSource,
  OutputOffsets,
  TurnAttachment,
  TurnCreateFailure,
  TurnLoad,
  TurnManager as TurnManagerSurface,
  TurnManagerDeps,
  TurnOutputReader,
  TurnPage,
  TurnPageQuery,
  TurnRecord,
  TurnRequest,
  TurnResult,
  TurnWorkspaces,
} from './types.js';

type CreateOutcome = Awaited<ReturnType<TurnManagerSurface['create']>>;
type CreateRefusal = Fail<TurnCreateFailure> & { field?: string };

function newTurnId(): string {
  return `turn_${randomBytes(9).toString('base64url')}`;
}

/** Turns per session that are launching or running: such a session cannot be deleted. */
class SessionHolds {
  private readonly active = new Map<string, number>();

  has(sessionId: string): boolean {
    return this.active.has(sessionId);
  }

  /** Holds the session until the returned release is called (once; later calls do nothing). */
  hold(sessionId: string): () => void {
    this.active.set(sessionId, (this.active.get(sessionId) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (this.active.get(sessionId) ?? 1) - 1;
      if (left > 0) this.active.set(sessionId, left);
      else this.active.delete(sessionId);
    };
  }
}

export class TurnManager implements TurnManagerSurface {
  private readonly running = new Map<string, RunningTurn>();
  /** Callers waiting for a running turn to end (waitForEnd); each removes itself when done. */
  private readonly endWaiters = new Map<string, Set<() => void>>();
  private readonly sessionHolds = new SessionHolds();
  /**
   * Sessions whose delete is under way: from its first check to its end no turn of the session,
   * and no turn on a workspace bound to it, may start (the delete awaits its workspaces' removal).
   */
  private readonly deletingSessions = new Set<string>();
  /**
   * Workspace turns between their workspace claim and their place in `running`: a delete counts
   * them as running, so no tree is removed under a turn that is starting. The claim and the
   * entry here happen in one synchronous step, as do a delete's last check and its state change.
   */
  private readonly launching = new Map<string, string>();
  private readonly sessionDeps: SessionDeps;
  /** Drain mode: no new turn is admitted while it is on (setDraining). */
  private draining = false;
  private readonly pool: PreparedWorkerPool<Worker, WorkerSpec>;

  /**
   * Recovers what a dead supervisor left (interrupted turns and their cgroup leaves, then
   * half-made or half-deleted workspaces), then starts the prepared-worker pool.
   */
  static async start(deps: TurnManagerDeps, workspaces: TurnWorkspaces): Promise<TurnManager> {
    const records = createTurnRecordStore(deps.db);
    const launchEnv = prepareLaunchEnvironment(deps, records);
    const outputs = new OutputFiles(deps.config.dataDir);
    recoverInterruptedTurns(launchEnv, outputs);
    launchEnv.workspaceUsage = (id) => workspaces.usage(id);
    workspaces.useSharedLauncher(launchEnv.sharedLauncher, launchEnv.sharedLauncherProblem);
    // Before any turn: a workspace half made or half removed by a crash is settled first.
    await workspaces.recover();
    return new TurnManager(deps, workspaces, records, launchEnv, outputs);
  }

  private constructor(
    private readonly deps: TurnManagerDeps,
    private readonly workspaces: TurnWorkspaces,
    private readonly records: TurnRecordStore,
    private readonly launchEnv: LaunchEnvironment,
    private readonly outputs: OutputFiles,
  ) {
    this.sessionDeps = {
      db: deps.db,
      events: deps.events,
      logger: deps.logger.child({ component: 'sessions' }),
      isBusy: (sessionId) => this.sessionHolds.has(sessionId),
      removeTurnOutput: (turnId) => outputs.remove(turnId),
    };
    this.pool = createPreparedWorkerPool<Worker, WorkerSpec>({
      capacity: deps.config.turns.preparedWorkers,
      idleMs: deps.config.turns.preparedWorkerIdleSeconds * 1000,
      keyOf: workerKey,
      prepare: (spec) => prepareWorker(launchEnv, spec),
      stop: (worker) => worker.retire(),
      logger: deps.logger.child({ component: 'prepared-workers' }),
    });
  }

  async create(body: unknown): Promise<CreateOutcome> {
    const validated = validateTurnRequest(body, this.deps.config);
    if (!validated.ok) return validated;
    const request = validated.request;
    const id = request.turnId ?? newTurnId();
    const refused = this.refuseCreate(id, request.sessionId);
    if (refused) return refused;
    const claimed = this.claimWorkspace(id, request);
    if (!claimed.ok) return claimed;
    return this.launch(id, request, claimed.lease);
  }

  get(id: string): TurnRecord | undefined {
    return this.running.get(id)?.record ?? this.records.get(id);
  }

  list(filter?: { sessionId?: string }): TurnRecord[] {
    const stored = this.records.list({ sessionId: filter?.sessionId });
    return stored.map((r) => this.running.get(r.id)?.record ?? r);
  }

  page(query: TurnPageQuery): Result<TurnPage, 'store_unavailable'> {
    try {
      const page = this.records.page(query);
      return ok({ ...page, turns: page.turns.map((r) => this.running.get(r.id)?.record ?? r) });
    } catch (error) {
      this.deps.logger.error('turn listing failed', { detail: (error as Error).message });
      return fail('store_unavailable', 'the turn records could not be read');
    }
  }

  listSessions(query: SessionPageQuery): Result<SessionPage, 'store_unavailable'> {
    return listSessions(this.sessionDeps, query);
  }

  async deleteSession(
    sessionId: string,
  ): Promise<Result<{ deleted: SessionDeletion }, SessionDeleteFailure | 'workspaces_unavailable'>> {
    if (this.sessionHolds.has(sessionId)) return fail('session_busy', `a turn of session ${sessionId} is running`);
    if (this.deletingSessions.has(sessionId)) return fail('session_busy', `session ${sessionId} is being deleted`);
    this.deletingSessions.add(sessionId);
    try {
      // The session's workspaces go first: a turn of another session may run on one, and then
      // nothing is deleted; their receipts are the session's events and go with it.
      const removed = await this.workspaces.deleteForSession(sessionId);
      if (!removed.ok)
        return removed.reason === 'workspace_busy'
          ? fail('session_busy', `session ${sessionId}: ${removed.detail}`)
          : fail('workspaces_unavailable', `session ${sessionId}: ${removed.detail}`);
      return deleteSession(this.sessionDeps, sessionId, {
        trigger: 'api',
        workspacesDeleted: removed.deleted.length,
      });
    } finally {
      this.deletingSessions.delete(sessionId);
    }
  }

  pruneSessions(now = new Date()): Result<{ deleted: SessionDeletion[] }, 'store_unavailable'> {
    return pruneSessions(this.sessionDeps, {
      now,
      retentionDays: this.deps.config.events.sessionRetentionDays,
      // A workspace keeps its session: retention never deletes a tree someone may still use.
      beforeDelete: (sessionId) =>
        this.workspaces.list({ sessionId }).length > 0
          ? fail('session_has_workspaces', `session ${sessionId} has workspaces; delete them or the session`)
          : ok({}),
    });
  }

  cancel(id: string): Result<{ turn: TurnRecord }, 'not_found' | 'not_running'> {
    const turn = this.running.get(id);
    if (!turn)
      return this.records.exists(id)
        ? fail('not_running', `turn ${id} has already finished`)
        : fail('not_found', `no turn ${id}`);
    turn.stop('cancelled');
    return ok({ turn: turn.record });
  }

  attach(
    id: string,
    offsets: OutputOffsets = {},
  ): Result<{ attachment: TurnAttachment }, 'not_found' | 'invalid_offset'> & { field?: string } {
    const turn = this.running.get(id);
    const output = turn?.output ?? this.finishedOutput(id);
    if (output === null) return fail('not_found', `no turn ${id}`);
    for (const [stream, offset] of Object.entries(offsets) as Array<[keyof OutputOffsets, number]>) {
      const field = stream === 'stderr' ? 'stderrOffset' : 'offset';
      const state = output.stream(stream);
      if (state === null) return { ...fail('invalid_offset', `${field}: turn ${id} has no ${stream} stream`), field };
      if (offset > state.kept)
        return { ...fail('invalid_offset', `${field}: beyond the ${state.kept} bytes kept of ${stream}`), field };
    }
    return ok({ attachment: turn ? turn.attach(offsets) : outputAttachment(output, offsets, ENDED_TURN_CONTROLS) });
  }

  output(id: string): Result<{ output: TurnOutputReader }, 'not_found'> {
    const output = this.running.get(id)?.output ?? this.finishedOutput(id);
    return output === null ? fail('not_found', `no turn ${id}`) : ok({ output });
  }

  async waitForEnd(id: string, seconds: number, signal: AbortSignal): Promise<void> {
    if (!this.running.has(id) || signal.aborted) return;
    await new Promise<void>((resolve) => {
      const waiters = this.endWaiters.get(id) ?? new Set<() => void>();
      this.endWaiters.set(id, waiters);
      const done = (): void => {
        clearTimeout(timer);
        signal.removeEventListener('abort', done);
        waiters.delete(done);
        if (waiters.size === 0 && this.endWaiters.get(id) === waiters) this.endWaiters.delete(id);
        resolve();
      };
      // Unref'd: a wait never keeps the process alive, and close() ends every turn (so every wait).
      const timer = setTimeout(done, seconds * 1000).unref();
      signal.addEventListener('abort', done, { once: true });
      waiters.add(done);
    });
  }

  /** Held roots for host writes (supervisor/http/host-write-route.ts). */
  roots(id: string): Result<{ roots: HostWriteRoots; turn: HostWriteTurn }, 'not_found' | 'turn_finished'> {
    const turn = this.running.get(id);
    const target = turn?.hostWriteTarget();
    if (target) return ok(target);
    if (turn || this.records.exists(id))
      return fail('turn_finished', `turn ${id} has finished; host writes are closed`);
    return fail('not_found', `no turn ${id}`);
  }

  async wait(id: string): Promise<TurnResult | undefined> {
    const turn = this.running.get(id);
    if (turn) return turn.done;
    return this.records.get(id)?.result ?? undefined;
  }

  preparedWorkers(): { ready: number; starting: number } {
    return this.pool.counts();
  }

  load(): TurnLoad {
    return {
      turnsRunning: this.running.size,
      maxTurns: this.deps.config.turns.maxConcurrent,
      draining: this.draining,
    };
  }

  setDraining(draining: boolean, source: DrainSource): boolean {
    if (this.draining === draining) return false;
    this.draining = draining;
    const turnsRunning = this.running.size;
    this.deps.events.append({
      sessionId: null,
      turnId: null,
      kind: 'host_drain',
      actor: 'operator',
      model: null,
      profile: null,
      payload: { draining, source, turnsRunning },
    });
    this.deps.logger.info(draining ? 'draining: new turns are refused' : 'drain ended: new turns are taken', {
      source,
      turnsRunning,
    });
    return true;
  }

  egressRelay(): ReturnType<TurnManagerSurface['egressRelay']> {
    return kernelRelayReport();
  }

  /** The turns running or being launched on a workspace (what the workspace service asks). */
  turnsOnWorkspace(workspaceId: string): string[] {
    return [
      ...[...this.running.values()]
        .filter((turn) => turn.record.workspaceId === workspaceId)
        .map((turn) => turn.record.id),
      ...[...this.launching].filter(([, id]) => id === workspaceId).map(([turnId]) => turnId),
    ];
  }

  /** Cancels a running turn and resolves once it has ended (at once for a turn not running). */
  async cancelAndWait(turnId: string): Promise<void> {
    const turn = this.running.get(turnId);
    if (!turn) return;
    turn.stop('cancelled');
    await turn.done;
  }

  async close(): Promise<void> {
    const pending = [...this.running.values()];
    for (const turn of pending) turn.stop('cancelled');
    await Promise.all(pending.map((t) => t.done));
    await this.pool.close();
    this.launchEnv.close();
  }

  /** A turn that may not be created now: its id is taken, the host drains, the capacity is used, its session is going. */
  private refuseCreate(id: string, sessionId: string): CreateRefusal | null {
    if (this.running.has(id) || this.records.exists(id))
      return { ...fail('conflict', `turn ${id} already exists`), field: 'turnId' };
    // Before the cap: a draining host says so even when it is also full.
    if (this.draining)
      return fail(
        'draining',
        'the host is draining: it takes no new turns until drain mode is turned off (turnhost drain --off)',
      );
    const { maxConcurrent } = this.deps.config.turns;
    if (this.running.size >= maxConcurrent)
      return fail(
        'capacity_exhausted',
        `${this.running.size} turns are running; the limit is ${maxConcurrent} (turns.maxConcurrent)`,
      );
    if (this.deletingSessions.has(sessionId))
      return { ...fail('conflict', `session ${sessionId} is being deleted`), field: 'sessionId' };
    return null;
  }

  /**
   * A workspace turn claims its workspace and makes its cwd absolute inside it; from here until
   * the turn is running, `launching` counts it on the workspace.
   */
  private claimWorkspace(
    id: string,
    request: TurnRequest,
  ): { ok: true; lease: WorkspaceLease | undefined } | CreateRefusal {
    if (request.workspace === undefined) return { ok: true, lease: undefined };
    const boundTo = this.workspaces.get(request.workspace)?.sessionId;
    if (boundTo != null && this.deletingSessions.has(boundTo))
      return {
        ...fail('conflict', `workspace ${request.workspace} goes with session ${boundTo}, which is being deleted`),
        field: 'workspace',
      };
    const claimed = this.workspaces.claimForTurn(request.workspace);
    if (!claimed.ok)
      return { ok: false, reason: 'invalid_request', detail: `workspace: ${claimed.detail}`, field: 'workspace' };
    const { workspace } = claimed;
    request.cwd = request.cwd === '.' ? workspace.path : path.join(workspace.path, request.cwd);
    this.launching.set(id, workspace.id);
    return { ok: true, lease: { id: workspace.id, uid: workspace.uid, path: workspace.path } };
  }

  /** Launches the validated turn; resolves once its worker runs it (or refused it). */
  private async launch(id: string, request: TurnRequest, workspaceLease?: WorkspaceLease): Promise<CreateOutcome> {
    // Held from before the launch's first await, so a delete of the session cannot slip in.
    const releaseSession = this.sessionHolds.hold(request.sessionId);
    let launched: Awaited<ReturnType<typeof launchTurn>>;
    try {
      const output = TurnOutput.open(
        this.outputs,
        id,
        request.tty !== undefined,
        this.deps.config.turns.outputRetainBytes,
        this.deps.logger.child({ turnId: id, component: 'output' }),
      );
      launched = await launchTurn(this.launchEnv, this.pool, { ...request, turnId: id }, output, workspaceLease);
    } catch (error) {
      this.launching.delete(id);
      releaseSession();
      this.outputs.remove(id);
      throw error;
    }
    // Out of `launching` and into `running` in one step: a delete never sees neither.
    this.launching.delete(id);
    if (!launched.ok) {
      releaseSession();
      // No command ran: there is no output to keep (a refused turn's record says so).
      this.outputs.remove(id);
      return launched;
    }
    const turn = launched.turn;
    void turn.done.then(releaseSession);
    const stdin = requestStdin(request);
    if (stdin !== null) turn.provideInput(stdin, 'the input was given with the turn request (stdin)');
    this.running.set(id, turn);
    void turn.done.then(() => this.retire(id));
    return ok({ turn: turn.record });
  }

  private retire(id: string): void {
    this.running.delete(id);
    for (const done of [...(this.endWaiters.get(id) ?? [])]) done();
  }

  /** A finished turn's output from its files and its record; null when there is no such turn. */
  private finishedOutput(id: string): TurnOutput | null {
    const record = this.records.get(id);
    if (!record?.result) return null;
    return TurnOutput.finished(this.outputs, id, record.tty, record.result);
  }
}
