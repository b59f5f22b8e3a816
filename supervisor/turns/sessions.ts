/**
 * Sessions as a whole: deleting one (its events and its turn records, in one transaction, with
 * an unbound `session_deleted` receipt), and the retention that deletes ended sessions whose
 * last activity is older than `events.sessionRetentionDays`. A session is the set of events
 * and turn records that carry its id; it has no row of its own.
 */
import type Database from 'better-sqlite3';
import type { EventSink } from '../../core/events.js';
import type { Logger } from '../../core/log.js';
import { fail, ok, type Fail, type Result } from '../../core/result.js';

export interface SessionDeletion {
  sessionId: string;
  /** Events deleted. */
  events: number;
  /** Turn records deleted. */
  turns: number;
  /** Workspaces bound to the session, deleted before its records (each with its own receipt). */
  workspaces: number;
}

export type SessionDeleteTrigger = 'api' | 'retention';
export type SessionDeleteFailure = 'not_found' | 'session_busy' | 'store_unavailable';

/**
 * Runs after the session was found idle and before anything is deleted; a failure stops the
 * delete (nothing is deleted) and is answered as it is. What else a session owns (and must go
 * with it) is deleted here.
 */
export type BeforeSessionDelete<R extends string = never> = (sessionId: string) => Result<object, R>;

export interface SessionDeps {
  db: Database.Database;
  events: EventSink;
  logger: Logger;
  /** A turn of the session runs or is being launched (the turn manager knows; the records may lag). */
  isBusy(sessionId: string): boolean;
  /** Removes a turn's kept output (supervisor/turns/output.ts), once its record is deleted. */
  removeTurnOutput(turnId: string): void;
}

interface SessionStatements {
  countEvents: Database.Statement<[string], { n: number }>;
  countTurns: Database.Statement<[string], { n: number }>;
  turnIds: Database.Statement<[string], { id: string }>;
  unfinishedTurns: Database.Statement<[string], { n: number }>;
  deleteEvents: Database.Statement<[string]>;
  deleteTurns: Database.Statement<[string]>;
  idleSince: Database.Statement<[string], { session_id: string; last: string }>;
}

const statements = new WeakMap<Database.Database, SessionStatements>();

function prepared(db: Database.Database): SessionStatements {
  let found = statements.get(db);
  if (!found) {
    found = {
      countEvents: db.prepare('SELECT count(*) AS n FROM events WHERE session_id = ?'),
      countTurns: db.prepare('SELECT count(*) AS n FROM turns WHERE session_id = ?'),
      turnIds: db.prepare('SELECT id FROM turns WHERE session_id = ?'),
      unfinishedTurns: db.prepare("SELECT count(*) AS n FROM turns WHERE session_id = ? AND state != 'finished'"),
      deleteEvents: db.prepare('DELETE FROM events WHERE session_id = ?'),
      deleteTurns: db.prepare('DELETE FROM turns WHERE session_id = ?'),
      // A session's last activity: its newest event, or its newest turn's end (or start).
      idleSince: db.prepare(
        `SELECT session_id, max(at) AS last FROM (
           SELECT session_id, at FROM events WHERE session_id IS NOT NULL
           UNION ALL
           SELECT session_id, coalesce(ended_at, created_at) AS at FROM turns
         ) GROUP BY session_id
         HAVING last < ?
            AND session_id NOT IN (SELECT session_id FROM turns WHERE state != 'finished')`,
      ),
    };
    statements.set(db, found);
  }
  return found;
}

/**
 * Deletes a session's events and turn records. Refused while a turn of it runs
 * (`session_busy`), for a session nothing carries (`not_found`), and when the database cannot
 * be written (`store_unavailable`); a refusal deletes nothing. The `session_deleted` receipt is
 * unbound, so it outlives the session.
 */
export function deleteSession<R extends string = never>(
  deps: SessionDeps,
  sessionId: string,
  options: { trigger: SessionDeleteTrigger; beforeDelete?: BeforeSessionDelete<R>; workspacesDeleted?: number },
): Result<{ deleted: SessionDeletion }, SessionDeleteFailure | R> {
  if (deps.isBusy(sessionId)) return fail('session_busy', `a turn of session ${sessionId} is running`);
  let statementsOf: SessionStatements;
  try {
    statementsOf = prepared(deps.db);
    if (statementsOf.unfinishedTurns.get(sessionId)!.n > 0)
      return fail('session_busy', `a turn of session ${sessionId} is running`);
    if (statementsOf.countEvents.get(sessionId)!.n === 0 && statementsOf.countTurns.get(sessionId)!.n === 0)
      return fail('not_found', `no session ${sessionId}`);
  } catch (error) {
    return unavailable(deps, error);
  }
  if (options.beforeDelete) {
    const before = options.beforeDelete(sessionId);
    if (!before.ok) return before;
  }
  let deleted: SessionDeletion;
  let turnIds: string[];
  try {
    // IMMEDIATE: the counts and the deletes see one state of the database.
    [deleted, turnIds] = deps.db
      .transaction((): [SessionDeletion, string[]] => {
        const ids = statementsOf.turnIds.all(sessionId).map((row) => row.id);
        const counts = {
          sessionId,
          events: statementsOf.deleteEvents.run(sessionId).changes,
          turns: statementsOf.deleteTurns.run(sessionId).changes,
          workspaces: options.workspacesDeleted ?? 0,
        };
        return [counts, ids];
      })
      .immediate();
  } catch (error) {
    return unavailable(deps, error);
  }
  // The output goes after its records: a crash in between leaves files no record names, which
  // the next start removes (supervisor/turns/recovery.ts); never a record whose output vanished.
  for (const turnId of turnIds) removeOutput(deps, turnId);
  deps.events.append({
    sessionId: null,
    turnId: null,
    kind: 'session_deleted',
    actor: options.trigger === 'api' ? 'user' : 'server',
    model: null,
    profile: null,
    payload: { ...deleted, trigger: options.trigger },
  });
  deps.logger.info('session deleted', { ...deleted, trigger: options.trigger });
  return ok({ deleted });
}

function removeOutput(deps: SessionDeps, turnId: string): void {
  try {
    deps.removeTurnOutput(turnId);
  } catch (error) {
    // The record is gone already; the next start removes what is left (recovery.ts).
    deps.logger.error('turn output not removed', { turnId, detail: (error as Error).message });
  }
}

function unavailable(deps: SessionDeps, error: unknown): Fail<'store_unavailable'> {
  deps.logger.error('session delete failed', { detail: (error as Error).message });
  return fail('store_unavailable', 'the session store could not be read or written');
}

/**
 * Ended sessions (no turn running or unfinished) whose last activity is older than
 * `retentionDays` before `now`. `retentionDays` 0 keeps every session.
 */
function sessionsPastRetention(db: Database.Database, now: Date, retentionDays: number): string[] {
  if (retentionDays <= 0) return [];
  const cutoff = new Date(now.getTime() - retentionDays * 86_400_000).toISOString();
  return prepared(db)
    .idleSince.all(cutoff)
    .map((row) => row.session_id);
}

/**
 * One retention pass: deletes each ended session past retention (trigger `retention`). A
 * session that became busy meanwhile is left for the next pass.
 */
export function pruneSessions<R extends string = never>(
  deps: SessionDeps,
  options: { now: Date; retentionDays: number; beforeDelete?: BeforeSessionDelete<R> },
): Result<{ deleted: SessionDeletion[] }, 'store_unavailable'> {
  let due: string[];
  try {
    due = sessionsPastRetention(deps.db, options.now, options.retentionDays);
  } catch (error) {
    return unavailable(deps, error);
  }
  const deleted: SessionDeletion[] = [];
  for (const sessionId of due) {
    const result = deleteSession(deps, sessionId, { trigger: 'retention', beforeDelete: options.beforeDelete });
    if (result.ok) deleted.push(result.deleted);
    else deps.logger.warn('session retention skipped a session', { sessionId, reason: result.reason });
  }
  return ok({ deleted });
}
