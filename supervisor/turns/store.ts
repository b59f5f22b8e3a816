/**
 * Durable turn records in the supervisor database (`turns` table, migrations 1-3). A turn that was
 * running when the supervisor died is found here at boot and marked interrupted.
 */
import type Database from 'better-sqlite3';
import type { TurnFilter, TurnPage, TurnPageQuery, TurnRecord, TurnResult } from './types.js';

export const TURN_STATES: ReadonlyArray<TurnRecord['state']> = ['starting', 'running', 'finished'];
const DEFAULT_TURN_PAGE = 100;
export const MAX_TURN_PAGE = 1000;

/**
 * The filters as a table, in the order their terms appear in the query. A filter on another
 * column is one entry here (and its field in TurnFilter).
 */
const TURN_FILTER_COLUMNS: ReadonlyArray<{ key: keyof TurnFilter; column: string }> = [
  { key: 'sessionId', column: 'session_id' },
  { key: 'state', column: 'state' },
  { key: 'workspaceId', column: 'workspace_id' },
];

/** A cursor as the store writes it; anything else is refused before it reaches SQL. */
export const TURN_CURSOR_PATTERN = /^[0-9]{1,15}$/;

interface TurnRow {
  id: string;
  session_id: string;
  mode: string;
  profile: string;
  state: string;
  identity: string | null;
  worker_uid: number | null;
  cgroup_paths: string | null;
  created_at: string;
  ended_at: string | null;
  tty: number;
  result_json: string | null;
  workspace_id?: string | null;
  argv_json?: string | null;
  cwd?: string | null;
  env_names_json?: string | null;
  limits_json?: string | null;
  timeout_seconds?: number | null;
}

const parsed = (json: string | null | undefined): unknown => (json ? JSON.parse(json) : null);

function fromRow(row: TurnRow): TurnRecord {
  return {
    id: row.id,
    sessionId: row.session_id,
    mode: row.mode as TurnRecord['mode'],
    profile: row.profile as TurnRecord['profile'],
    state: row.state as TurnRecord['state'],
    identity: (row.identity ?? 'shared_uid') as TurnRecord['identity'],
    workerUid: row.worker_uid,
    createdAt: row.created_at,
    endedAt: row.ended_at,
    tty: row.tty === 1,
    result: row.result_json ? (JSON.parse(row.result_json) as TurnResult) : null,
    workspaceId: row.workspace_id ?? null,
    argv: parsed(row.argv_json) as string[] | null,
    cwd: row.cwd ?? null,
    envNames: parsed(row.env_names_json) as string[] | null,
    limits: parsed(row.limits_json) as TurnRecord['limits'],
    timeoutSeconds: row.timeout_seconds ?? null,
  };
}

/** The columns an insert and an update both write. */
function recordParams(turn: TurnRecord) {
  return {
    id: turn.id,
    sessionId: turn.sessionId,
    mode: turn.mode,
    profile: turn.profile,
    state: turn.state,
    identity: turn.identity,
    workerUid: turn.workerUid,
    createdAt: turn.createdAt,
    endedAt: turn.endedAt,
    tty: turn.tty ? 1 : 0,
    result: turn.result ? JSON.stringify(turn.result) : null,
  };
}

/** What ran, as stored: written once, with the record. */
function ranParams(turn: TurnRecord) {
  const json = (value: unknown): string | null => (value === null ? null : JSON.stringify(value));
  return {
    argv: json(turn.argv),
    cwd: turn.cwd,
    envNames: json(turn.envNames),
    limits: json(turn.limits),
    timeoutSeconds: turn.timeoutSeconds,
  };
}

type PageRow = TurnRow & { cursor: number };

/** Turn record writes and reads over prepared statements on the supervisor database. */
export class TurnRecordStore {
  private readonly insertStatement: Database.Statement;
  private readonly updateStatement: Database.Statement;
  private readonly setPathsStatement: Database.Statement;
  private readonly getOneStatement: Database.Statement;
  private readonly listAllStatement: Database.Statement;
  private readonly listSessionStatement: Database.Statement;
  private readonly unfinishedStatement: Database.Statement;
  private readonly pageStatements = new Map<string, Database.Statement<unknown[], PageRow>>();

  constructor(private readonly db: Database.Database) {
    this.insertStatement = db.prepare(
      `INSERT INTO turns (id, session_id, mode, profile, state, identity, worker_uid, cgroup_paths, created_at, ended_at, tty, result_json, workspace_id,
                        argv_json, cwd, env_names_json, limits_json, timeout_seconds)
     VALUES (@id, @sessionId, @mode, @profile, @state, @identity, @workerUid, @cgroupPaths, @createdAt, @endedAt, @tty, @result, @workspaceId,
             @argv, @cwd, @envNames, @limits, @timeoutSeconds)`,
    );
    this.updateStatement = db.prepare(
      `UPDATE turns SET state = @state, identity = @identity, worker_uid = @workerUid, ended_at = @endedAt, result_json = @result WHERE id = @id`,
    );
    this.setPathsStatement = db.prepare(`UPDATE turns SET cgroup_paths = ? WHERE id = ?`);
    this.getOneStatement = db.prepare(`SELECT * FROM turns WHERE id = ?`);
    this.listAllStatement = db.prepare(`SELECT * FROM turns ORDER BY created_at DESC, id LIMIT ?`);
    this.listSessionStatement = db.prepare(
      `SELECT * FROM turns WHERE session_id = ? ORDER BY created_at DESC, id LIMIT ?`,
    );
    this.unfinishedStatement = db.prepare(`SELECT * FROM turns WHERE state != 'finished'`);
  }

  insert(turn: TurnRecord, cgroupPaths: string[]): void {
    this.insertStatement.run({
      ...recordParams(turn),
      cgroupPaths: JSON.stringify(cgroupPaths),
      workspaceId: turn.workspaceId ?? null,
      ...ranParams(turn),
    });
  }

  update(turn: TurnRecord): void {
    this.updateStatement.run(recordParams(turn));
  }

  setCgroupPaths(id: string, paths: string[]): void {
    this.setPathsStatement.run(JSON.stringify(paths), id);
  }

  get(id: string): TurnRecord | undefined {
    const row = this.getOneStatement.get(id) as TurnRow | undefined;
    return row ? fromRow(row) : undefined;
  }

  exists(id: string): boolean {
    return this.getOneStatement.get(id) !== undefined;
  }

  list({ sessionId, limit = 100 }: { sessionId?: string; limit?: number }): TurnRecord[] {
    const rows = sessionId ? this.listSessionStatement.all(sessionId, limit) : this.listAllStatement.all(limit);
    return (rows as TurnRow[]).map(fromRow);
  }

  page(query: TurnPageQuery): TurnPage {
    const limit = query.limit ?? DEFAULT_TURN_PAGE;
    const used = TURN_FILTER_COLUMNS.filter(({ key }) => query[key] !== undefined);
    const params: unknown[] = used.map(({ key }) => query[key]);
    if (query.after !== undefined) params.push(Number(query.after));
    // One row more than the page tells whether another page follows.
    const rows = this.pageStatement(used, query.after !== undefined).all(...params, limit + 1);
    const shown = rows.slice(0, limit);
    const last = shown.at(-1);
    return {
      turns: shown.map(fromRow),
      nextAfter: rows.length > limit && last ? String(last.cursor) : null,
    };
  }

  /** Turns not finished (a previous process died while they ran), with their cgroup paths. */
  unfinished(): Array<{ turn: TurnRecord; cgroupPaths: string[] }> {
    return (this.unfinishedStatement.all() as TurnRow[]).map((row) => ({
      turn: fromRow(row),
      cgroupPaths: row.cgroup_paths ? (JSON.parse(row.cgroup_paths) as string[]) : [],
    }));
  }

  /** One statement per combination of filters used and cursor, prepared on first use. */
  private pageStatement(
    used: ReadonlyArray<{ column: string }>,
    after: boolean,
  ): Database.Statement<unknown[], PageRow> {
    const key = `${used.map((f) => f.column).join(',')}|${after}`;
    let statement = this.pageStatements.get(key);
    if (!statement) {
      const where = [...used.map((f) => `${f.column} = ?`), ...(after ? ['rowid < ?'] : [])];
      statement = this.db.prepare<unknown[], PageRow>(
        `SELECT rowid AS cursor, * FROM turns ${where.length > 0 ? `WHERE ${where.join(' AND ')}` : ''} ORDER BY rowid DESC LIMIT ?`,
      );
      this.pageStatements.set(key, statement);
    }
    return statement;
  }
}

export function createTurnRecordStore(db: Database.Database): TurnRecordStore {
  return new TurnRecordStore(db);
}
