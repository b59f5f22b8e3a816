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

export class WorkspaceStore {
  private readonly insertStatement: Database.Statement;
  private readonly setReadyStatement: Database.Statement;
  private readonly setDeletingStatement: Database.Statement;
  private readonly touchStatement: Database.Statement;
  private readonly removeStatement: Database.Statement;
  private readonly getStatement: Database.Statement;
  private readonly listAllStatement: Database.Statement;
  private readonly listSessionStatement: Database.Statement;
  private readonly unsettledStatement: Database.Statement;

  constructor(db: Database.Database) {
    this.insertStatement = db.prepare(
      `INSERT INTO workspaces (id, session_id, uid, identity, path, state, created_at, last_used_at)
     VALUES (@id, @sessionId, @uid, @identity, @path, @state, @createdAt, @lastUsedAt)`,
    );
    this.setReadyStatement = db.prepare(`UPDATE workspaces SET state = 'ready', uid = ? WHERE id = ?`);
    this.setDeletingStatement = db.prepare(`UPDATE workspaces SET state = 'deleting' WHERE id = ?`);
    this.touchStatement = db.prepare(`UPDATE workspaces SET last_used_at = ? WHERE id = ?`);
    this.removeStatement = db.prepare(`DELETE FROM workspaces WHERE id = ?`);
    this.getStatement = db.prepare(`SELECT * FROM workspaces WHERE id = ?`);
    this.listAllStatement = db.prepare(`SELECT * FROM workspaces ORDER BY created_at, id`);
    this.listSessionStatement = db.prepare(`SELECT * FROM workspaces WHERE session_id = ? ORDER BY created_at, id`);
    this.unsettledStatement = db.prepare(`SELECT * FROM workspaces WHERE state != 'ready' ORDER BY created_at, id`);
  }

  insert(record: WorkspaceRecord): void {
    this.insertStatement.run(record);
  }

  setReady(id: string, uid: number | null): void {
    this.setReadyStatement.run(uid, id);
  }

  setDeleting(id: string): void {
    this.setDeletingStatement.run(id);
  }

  touch(id: string, at: string): void {
    this.touchStatement.run(at, id);
  }

  remove(id: string): void {
    this.removeStatement.run(id);
  }

  get(id: string): WorkspaceRecord | undefined {
    const row = this.getStatement.get(id) as WorkspaceRow | undefined;
    return row ? fromRow(row) : undefined;
  }

  list(filter?: { sessionId?: string }): WorkspaceRecord[] {
    const rows = filter?.sessionId ? this.listSessionStatement.all(filter.sessionId) : this.listAllStatement.all();
    return (rows as WorkspaceRow[]).map(fromRow);
  }

  /** Rows a crash left half made or half removed. */
  unsettled(): WorkspaceRecord[] {
    return (this.unsettledStatement.all() as WorkspaceRow[]).map(fromRow);
  }
}

export function createWorkspaceStore(db: Database.Database): WorkspaceStore {
  return new WorkspaceStore(db);
}
