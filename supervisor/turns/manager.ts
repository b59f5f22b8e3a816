/**
 * The turn manager: the only way to start a worker. Each turn runs the one lifecycle
 * (lifecycle.ts); this module keeps the running turns and the recently finished ones, the
 * prepared-worker pool, and the durable records.
 */
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { fail, ok } from '../../core/result.js';
import { probeMode } from '../probes/index.js';
import { createWorkspaceService } from '../workspaces/service.js';
import { helperLocation } from './worker-process.js';
import { kernelRelayReport } from '../../proxy/relay/kernel-relay.js';
import { prepareLaunchEnvironment } from './launch-environment.js';
import { launchTurn, prepareWorker, type Worker, type WorkspaceLease } from './lifecycle.js';
import { createOutputChannel } from './output.js';
import { createPreparedWorkerPool } from './prepared-workers.js';
import { recoverInterruptedTurns } from './recovery.js';
import type { RunningTurn } from './running-turn.js';
import { deleteSession, pruneSessions, type SessionDeps } from './sessions.js';
import { createTurnRecordStore, type TurnRecordStore } from './store.js';
import { workerKey, type WorkerSpec } from './turn-request.js';
import { requestStdin, validateTurnRequest } from './validate.js';
import type { TurnAttachment, TurnManager, TurnManagerDeps, TurnRecord, TurnResult } from './types.js';

const RECENT_TURNS_KEPT = 64;

function newTurnId(): string {
  return `turn_${randomBytes(9).toString('base64url')}`;
}

export async function createTurnManager(deps: TurnManagerDeps): Promise<TurnManager> {
  const records: TurnRecordStore = createTurnRecordStore(deps.db);
  const running = new Map<string, RunningTurn>();
  /** Recently finished turns keep their output backlog, so a client that attaches late still gets it. */
  const recent = new Map<string, RunningTurn>();
  const retire = (id: string, turn: RunningTurn): void => {
    running.delete(id);
    recent.set(id, turn);
    for (const oldest of recent.keys()) {
      if (recent.size <= RECENT_TURNS_KEPT) break;
      recent.delete(oldest);
    }
  };
  /** Turns per session that are launching or running: such a session cannot be deleted. */
  const activeInSession = new Map<string, number>();
  const holdSession = (sessionId: string): (() => void) => {
    activeInSession.set(sessionId, (activeInSession.get(sessionId) ?? 0) + 1);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      const left = (activeInSession.get(sessionId) ?? 1) - 1;
      if (left > 0) activeInSession.set(sessionId, left);
      else activeInSession.delete(sessionId);
    };
  };
  const sessionDeps: SessionDeps = {
    db: deps.db,
    events: deps.events,
    logger: deps.logger.child({ component: 'sessions' }),
    isBusy: (sessionId) => activeInSession.has(sessionId),
  };
  /**
   * Sessions whose delete is under way: from its first check to its end no turn of the session,
   * and no turn on a workspace bound to it, may start (the delete awaits its workspaces' removal).
   */
  const deletingSessions = new Set<string>();
  /** A deleted session's finished turns leave the attach backlog too. */
  const forgetSession = (sessionId: string): void => {
    for (const [id, turn] of recent) if (turn.record.sessionId === sessionId) recent.delete(id);
  };
  const launchEnv = prepareLaunchEnvironment(deps, records);
  recoverInterruptedTurns(launchEnv);
  let uidSearchStart: number | null = null;
  /**
   * Workspace turns between their workspace claim and their place in `running`: a delete counts
   * them as running, so no tree is removed under a turn that is starting. The claim and the
   * entry here happen in one synchronous step, as do a delete's last check and its state change.
   */
  const launching = new Map<string, string>();
  const workspaces = createWorkspaceService({
    config: () => deps.config,
    db: deps.db,
    events: deps.events,
    logger: deps.logger,
    helper: () => helperLocation(deps.config),
    // Only where the helper's search starts: the helper itself decides which uid is free.
    uidSearchStart: async () => {
      if (uidSearchStart !== null) return ok({ uid: uidSearchStart });
      const probe = await probeMode(deps.probeContext, 'ordinary', 'check');
      if (probe.uidRange) uidSearchStart = probe.uidRange.first;
      return probe.uidRange
        ? ok({ uid: probe.uidRange.first })
        : fail(
            'uid_range_unverified',
            probe.availability.requirement ?? 'the identity helper gave no verified uid range',
          );
    },
    turns: {
      running: (workspaceId) => [
        ...[...running.values()]
          .filter((turn) => turn.record.workspaceId === workspaceId)
          .map((turn) => turn.record.id),
        ...[...launching].filter(([, id]) => id === workspaceId).map(([turnId]) => turnId),
      ],
      cancelAndWait: async (turnId) => {
        const turn = running.get(turnId);
        if (!turn) return;
        turn.stop('cancelled');
        await turn.done;
      },
    },
  });
  launchEnv.workspaceUsage = (id) => workspaces.usage(id);
  // Before any turn: a workspace half made or half removed by a crash is settled first.
  await workspaces.recover();
  const pool = createPreparedWorkerPool<Worker, WorkerSpec>({
    capacity: deps.config.turns.preparedWorkers,
    idleMs: deps.config.turns.preparedWorkerIdleSeconds * 1000,
    keyOf: workerKey,
    prepare: (spec) => prepareWorker(launchEnv, spec),
    stop: (worker) => worker.retire(),
    logger: deps.logger.child({ component: 'prepared-workers' }),
  });

  const manager: TurnManager = {
    async create(body) {
      const validated = validateTurnRequest(body, deps.config);
      if (!validated.ok) return validated;
      const request = validated.request;
      const id = request.turnId ?? newTurnId();
      if (running.has(id) || records.exists(id))
        return { ...fail('conflict', `turn ${id} already exists`), field: 'turnId' };
      if (running.size >= deps.config.turns.maxConcurrent)
        return fail(
          'capacity_exhausted',
          `${running.size} turns are running; the limit is ${deps.config.turns.maxConcurrent} (turns.maxConcurrent)`,
        );

      if (deletingSessions.has(request.sessionId))
        return { ...fail('conflict', `session ${request.sessionId} is being deleted`), field: 'sessionId' };
      let workspaceLease: WorkspaceLease | undefined;
      if (request.workspace !== undefined) {
        const boundTo = workspaces.get(request.workspace)?.sessionId;
        if (boundTo != null && deletingSessions.has(boundTo))
          return {
            ...fail('conflict', `workspace ${request.workspace} goes with session ${boundTo}, which is being deleted`),
            field: 'workspace',
          };
        const claimed = workspaces.claimForTurn(request.workspace);
        if (!claimed.ok)
          return { ok: false, reason: 'invalid_request', detail: `workspace: ${claimed.detail}`, field: 'workspace' };
        const { workspace } = claimed;
        workspaceLease = { id: workspace.id, uid: workspace.uid, path: workspace.path };
        request.cwd = request.cwd === '.' ? workspace.path : path.join(workspace.path, request.cwd);
        launching.set(id, workspace.id);
      }
      const output = createOutputChannel();
      // Held from before the launch's first await, so a delete of the session cannot slip in.
      const releaseSession = holdSession(request.sessionId);
      let launched: Awaited<ReturnType<typeof launchTurn>>;
      try {
        launched = await launchTurn(launchEnv, pool, { ...request, turnId: id }, output, workspaceLease);
      } catch (error) {
        launching.delete(id);
        releaseSession();
        throw error;
      }
      // Out of `launching` and into `running` in one step: a delete never sees neither.
      launching.delete(id);
      if (!launched.ok) {
        releaseSession();
        return launched;
      }
      const turn = launched.turn;
      void turn.done.then(releaseSession);
      const stdin = requestStdin(request);
      if (stdin !== null) turn.provideInput(stdin, 'the input was given with the turn request (stdin)');
      running.set(id, turn);
      void turn.done.then(() => retire(id, turn));
      return ok({ turn: turn.record });
    },

    get: (id) => running.get(id)?.record ?? records.get(id),

    list: (filter) => {
      const stored = records.list({ sessionId: filter?.sessionId });
      return stored.map((r) => running.get(r.id)?.record ?? r);
    },

    page(query) {
      try {
        const page = records.page(query);
        return ok({ ...page, turns: page.turns.map((r) => running.get(r.id)?.record ?? r) });
      } catch (error) {
        deps.logger.error('turn listing failed', { detail: (error as Error).message });
        return fail('store_unavailable', 'the turn records could not be read');
      }
    },

    async deleteSession(sessionId) {
      if (activeInSession.has(sessionId)) return fail('session_busy', `a turn of session ${sessionId} is running`);
      if (deletingSessions.has(sessionId)) return fail('session_busy', `session ${sessionId} is being deleted`);
      deletingSessions.add(sessionId);
      try {
        // The session's workspaces go first: a turn of another session may run on one, and then
        // nothing is deleted; their receipts are the session's events and go with it.
        const removed = await workspaces.deleteForSession(sessionId);
        if (!removed.ok)
          return removed.reason === 'workspace_busy'
            ? fail('session_busy', `session ${sessionId}: ${removed.detail}`)
            : fail('workspaces_unavailable', `session ${sessionId}: ${removed.detail}`);
        const deleted = deleteSession(sessionDeps, sessionId, {
          trigger: 'api',
          workspacesDeleted: removed.deleted.length,
        });
        if (deleted.ok) forgetSession(sessionId);
        return deleted;
      } finally {
        deletingSessions.delete(sessionId);
      }
    },

    pruneSessions(now = new Date()) {
      const pruned = pruneSessions(sessionDeps, {
        now,
        retentionDays: deps.config.events.sessionRetentionDays,
        // A workspace keeps its session: retention never deletes a tree someone may still use.
        beforeDelete: (sessionId) =>
          workspaces.list({ sessionId }).length > 0
            ? fail('session_has_workspaces', `session ${sessionId} has workspaces; delete them or the session`)
            : ok({}),
      });
      if (pruned.ok) for (const { sessionId } of pruned.deleted) forgetSession(sessionId);
      return pruned;
    },

    cancel(id) {
      const turn = running.get(id);
      if (!turn)
        return records.exists(id)
          ? fail('not_running', `turn ${id} has already finished`)
          : fail('not_found', `no turn ${id}`);
      turn.stop('cancelled');
      return ok({ turn: turn.record });
    },

    attach(id) {
      const turn = running.get(id) ?? recent.get(id);
      const record = turn?.record ?? records.get(id);
      if (!record) return fail('not_found', `no turn ${id}`);
      const attachment: TurnAttachment = turn ? turn.attach() : finishedAttachment(record);
      return ok({ attachment });
    },

    // Held roots for host writes (supervisor/http/host-write-route.ts).
    roots(id) {
      const turn = running.get(id);
      const target = turn?.hostWriteTarget();
      if (target) return ok(target);
      if (turn || records.exists(id)) return fail('turn_finished', `turn ${id} has finished; host writes are closed`);
      return fail('not_found', `no turn ${id}`);
    },

    async wait(id) {
      const turn = running.get(id);
      if (turn) return turn.done;
      return records.get(id)?.result ?? undefined;
    },

    preparedWorkers: () => pool.counts(),

    egressRelay: () => kernelRelayReport(),

    workspaces,

    async close() {
      const pending = [...running.values()];
      for (const turn of pending) turn.stop('cancelled');
      await Promise.all(pending.map((t) => t.done));
      await pool.close();
      launchEnv.close();
    },
  };
  return manager;
}

/** Attaching to a finished turn replays only its exit record. */
function finishedAttachment(record: TurnRecord): TurnAttachment {
  const result = record.result as TurnResult;
  return {
    onEvent: (listener) => listener({ type: 'exit', result }),
    write: () => fail('input_closed', 'the turn has finished'),
    endInput: () => fail('input_closed', 'the turn has finished'),
    resize: () => undefined,
    signal: () => undefined,
    pauseOutput: () => undefined,
    resumeOutput: () => undefined,
    detach: () => undefined,
  };
}
