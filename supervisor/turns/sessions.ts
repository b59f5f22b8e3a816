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

/** One session as listed: what carries its id, and when it was first and last active. */
interface SessionSummary {
  id: string;
  /** Turn records of the session. */
  turns: number;
  /** Workspaces bound to it. */
  workspaces: number;
  /** Governance events bound to it. */
  events: number;
  /** Its oldest event or turn start. */
  firstActivity: string;
  /** Its newest event, turn start or turn end. */
  lastActivity: string;
}

export interface SessionPage {
  sessions: SessionSummary[];
  /** The next page's `after` (an opaque cursor), null on the last page. */
  nextAfter: string | null;
}

export interface SessionPageQuery {
  after?: string;
  limit?: number;
}

const DEFAULT_SESSION_PAGE = 100;
export const MAX_SESSION_PAGE = 1000;

/**
 * The cursor is the last listed session's first activity and id, base64url-encoded: a
 * session's first activity never changes while it lives (its events and turns go only with it),
 * so paging in that order never repeats or skips a session that existed throughout.
 */
export function decodeSessionCursor(cursor: string): { first: string; id: string } | null {
  if (!/^[A-Za-z0-9_-]{1,700}$/.test(cursor)) return null;
  try {
    const value: unknown = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    if (!Array.isArray(value) || value.length !== 2) return null;
    const [first, id] = value as unknown[];
    return typeof first === 'string' && typeof id === 'string' ? { first, id } : null;
  } catch {
    return null;
  }
}

const encodeSessionCursor = (first: string, id: string): string =>
  Buffer.from(JSON.stringify([first, id])).toString('base64url');

interface SessionRow {
  id: string;
  first: string;
  last: string;
  turns: number;
  workspaces: number;
  events: number;
}

const sessionPageStatements = new WeakMap<Database.Database, Database.Statement<unknown[], SessionRow>>();

function sessionPageStatement(db: Database.Database): Database.Statement<unknown[], SessionRow> {
  let statement = sessionPageStatements.get(db);
  if (!statement) {
    // A session is what carries its id: its events and its turn records (as for delete and retention).
    statement = db.prepare<unknown[], SessionRow>(
      `WITH activity AS (
         SELECT session_id, at FROM events WHERE session_id IS NOT NULL
         UNION ALL SELECT session_id, created_at FROM turns
         UNION ALL SELECT session_id, ended_at FROM turns WHERE ended_at IS NOT NULL
       ), sessions AS (
         SELECT session_id AS id, min(at) AS first, max(at) AS last FROM activity GROUP BY session_id
       )
       SELECT id, first, last,
         (SELECT count(*) FROM turns WHERE session_id = sessions.id) AS turns,
         (SELECT count(*) FROM workspaces WHERE session_id = sessions.id) AS workspaces,
         (SELECT count(*) FROM events WHERE session_id = sessions.id) AS events
       FROM sessions
       WHERE @first IS NULL OR first < @first OR (first = @first AND id < @id)
       ORDER BY first DESC, id DESC
       LIMIT @limit`,
    );
    sessionPageStatements.set(db, statement);
  }
  return statement;
}

/**
 * One page of sessions, the most recently begun first. `after` must have been checked with
 * decodeSessionCursor.
 */
export function listSessions(
  deps: Pick<SessionDeps, 'db' | 'logger'>,
  query: SessionPageQuery,
): Result<SessionPage, 'store_unavailable'> {
  const limit = query.limit ?? DEFAULT_SESSION_PAGE;
  const cursor = query.after === undefined ? null : decodeSessionCursor(query.after);
  let rows: SessionRow[];
  try {
    // One row more than the page tells whether another page follows.
    rows = sessionPageStatement(deps.db).all({
      first: cursor?.first ?? null,
      id: cursor?.id ?? null,
      limit: limit + 1,
    });
  } catch (error) {
    deps.logger.error('session list failed', { detail: (error as Error).message });
    return fail('store_unavailable', 'the session store could not be read');
  }
  const shown = rows.slice(0, limit);
  const last = shown.at(-1);
  return ok({
    sessions: shown.map((row) => ({
      id: row.id,
      turns: row.turns,
      workspaces: row.workspaces,
      events: row.events,
      firstActivity: row.first,
      lastActivity: row.last,
    })),
    nextAfter: rows.length > limit && last ? encodeSessionCursor(last.first, last.id) : null,
  });
}
