/**
 * Durable workspace records (`workspaces` table, migration 2). The state column makes creation
 * and deletion crash-safe: a row is written `creating` before anything exists on disk and
 * `deleting` before anything is removed, so boot knows what to finish (workspaces/service.ts).
 */
import type Database from 'better-sqlite3';

type WorkspaceState = 'creating' | 'ready' | 'deleting';

export interface WorkspaceRecord {
  id: string;
  sessionId: string | null;
  /** The leased uid (separate_uid), or null (shared_uid: the supervisor's own). */
  uid: number | null;
  identity: 'separate_uid' | 'shared_uid';
  path: string;
  state: WorkspaceState;
  createdAt: string;
  lastUsedAt: string | null;
}

interface WorkspaceRow {
  id: string;
  session_id: string | null;
  uid: number | null;
  identity: string;
  path: string;
  state: string;
  created_at: string;
  last_used_at: string | null;
}

function fromRow(row: WorkspaceRow): WorkspaceRecord {
  return {
    id: row.id,
    sessionId: row.session_id,
    uid: row.uid,
    identity: row.identity as WorkspaceRecord['identity'],
    path: row.path,
    state: row.state as WorkspaceState,
    createdAt: row.created_at,
    lastUsedAt: row.last_used_at,
  };
}

export interface WorkspaceStore {
  insert(record: WorkspaceRecord): void;
  setReady(id: string, uid: number | null): void;
  setDeleting(id: string): void;
  touch(id: string, at: string): void;
  remove(id: string): void;
  get(id: string): WorkspaceRecord | undefined;
  list(filter?: { sessionId?: string }): WorkspaceRecord[];
  /** Rows a crash left half made or half removed. */
  unsettled(): WorkspaceRecord[];
}

export function createWorkspaceStore(db: Database.Database): WorkspaceStore {
  const insert = db.prepare(
    `INSERT INTO workspaces (id, session_id, uid, identity, path, state, created_at, last_used_at)
     VALUES (@id, @sessionId, @uid, @identity, @path, @state, @createdAt, @lastUsedAt)`,
  );
  const setReady = db.prepare(`UPDATE workspaces SET state = 'ready', uid = ? WHERE id = ?`);
  const setDeleting = db.prepare(`UPDATE workspaces SET state = 'deleting' WHERE id = ?`);
  const touch = db.prepare(`UPDATE workspaces SET last_used_at = ? WHERE id = ?`);
  const remove = db.prepare(`DELETE FROM workspaces WHERE id = ?`);
  const getOne = db.prepare(`SELECT * FROM workspaces WHERE id = ?`);
  const listAll = db.prepare(`SELECT * FROM workspaces ORDER BY created_at, id`);
  const listSession = db.prepare(`SELECT * FROM workspaces WHERE session_id = ? ORDER BY created_at, id`);
  const unsettled = db.prepare(`SELECT * FROM workspaces WHERE state != 'ready' ORDER BY created_at, id`);
  return {
    insert: (record) => insert.run(record),
    setReady: (id, uid) => setReady.run(uid, id),
    setDeleting: (id) => setDeleting.run(id),
    touch: (id, at) => touch.run(at, id),
    remove: (id) => remove.run(id),
    get: (id) => {
      const row = getOne.get(id) as WorkspaceRow | undefined;
      return row ? fromRow(row) : undefined;
    },
    list: (filter) =>
      ((filter?.sessionId ? listSession.all(filter.sessionId) : listAll.all()) as WorkspaceRow[]).map(fromRow),
    unsettled: () => (unsettled.all() as WorkspaceRow[]).map(fromRow),
  };
}
