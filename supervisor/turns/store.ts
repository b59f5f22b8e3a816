/**
 * Durable turn records in the supervisor database (`turns` table, migration 1). A turn that was
 * running when the supervisor died is found here at boot and marked interrupted.
 */
import type Database from 'better-sqlite3';
import type { TurnRecord, TurnResult } from './types.js';

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
}

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
  };
}

export interface TurnRecordStore {
  insert(turn: TurnRecord, cgroupPaths: string[]): void;
  update(turn: TurnRecord): void;
  setCgroupPaths(id: string, paths: string[]): void;
  get(id: string): TurnRecord | undefined;
  exists(id: string): boolean;
  list(filter: { sessionId?: string; limit?: number }): TurnRecord[];
  /** Turns not finished (a previous process died while they ran), with their cgroup paths. */
  unfinished(): Array<{ turn: TurnRecord; cgroupPaths: string[] }>;
}

export function createTurnRecordStore(db: Database.Database): TurnRecordStore {
  const insert = db.prepare(
    `INSERT INTO turns (id, session_id, mode, profile, state, identity, worker_uid, cgroup_paths, created_at, ended_at, tty, result_json, workspace_id)
     VALUES (@id, @sessionId, @mode, @profile, @state, @identity, @workerUid, @cgroupPaths, @createdAt, @endedAt, @tty, @result, @workspaceId)`,
  );
  const update = db.prepare(
    `UPDATE turns SET state = @state, identity = @identity, worker_uid = @workerUid, ended_at = @endedAt, result_json = @result WHERE id = @id`,
  );
  const setPaths = db.prepare(`UPDATE turns SET cgroup_paths = ? WHERE id = ?`);
  const getOne = db.prepare(`SELECT * FROM turns WHERE id = ?`);
  const listAll = db.prepare(`SELECT * FROM turns ORDER BY created_at DESC, id LIMIT ?`);
  const listSession = db.prepare(`SELECT * FROM turns WHERE session_id = ? ORDER BY created_at DESC, id LIMIT ?`);
  const unfinished = db.prepare(`SELECT * FROM turns WHERE state != 'finished'`);

  const params = (turn: TurnRecord) => ({
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
  });

  return {
    insert: (turn, cgroupPaths) =>
      insert.run({ ...params(turn), cgroupPaths: JSON.stringify(cgroupPaths), workspaceId: turn.workspaceId ?? null }),
    update: (turn) => update.run(params(turn)),
    setCgroupPaths: (id, paths) => setPaths.run(JSON.stringify(paths), id),
    get: (id) => {
      const row = getOne.get(id) as TurnRow | undefined;
      return row ? fromRow(row) : undefined;
    },
    exists: (id) => getOne.get(id) !== undefined,
    list: ({ sessionId, limit = 100 }) =>
      ((sessionId ? listSession.all(sessionId, limit) : listAll.all(limit)) as TurnRow[]).map(fromRow),
    unfinished: () =>
      (unfinished.all() as TurnRow[]).map((row) => ({
        turn: fromRow(row),
        cgroupPaths: row.cgroup_paths ? (JSON.parse(row.cgroup_paths) as string[]) : [],
      })),
  };
}
