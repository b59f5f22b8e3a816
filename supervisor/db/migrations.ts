/**
 * Schema migrations, applied in order by `PRAGMA user_version`. Migration N (1-based) moves the
 * schema from version N-1 to N. Append new migrations; never edit a released one, because
 * databases in the field already carry its effects.
 */
export interface Migration {
  description: string;
  sql: string;
}

export const MIGRATIONS: readonly Migration[] = [
  {
    description: 'governance events, turns, store metadata',
    sql: `
      CREATE TABLE events (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        session_id TEXT,
        turn_id TEXT,
        at TEXT NOT NULL,
        kind TEXT NOT NULL,
        schema_version INTEGER NOT NULL,
        actor TEXT NOT NULL,
        model TEXT,
        profile TEXT,
        payload TEXT NOT NULL
      );
      -- Every filtered query is "filter = ? AND id > ? ORDER BY id LIMIT ?": (filter, id) serves it
      -- as one index range scan.
      CREATE INDEX events_session_id ON events (session_id, id);
      CREATE INDEX events_turn_id ON events (turn_id, id);
      CREATE INDEX events_kind_id ON events (kind, id);
      -- Retention pruning only ever touches unbound events.
      CREATE INDEX events_unbound_at ON events (at) WHERE session_id IS NULL;

      CREATE TABLE turns (
        id TEXT PRIMARY KEY,
        session_id TEXT NOT NULL,
        mode TEXT NOT NULL,
        profile TEXT NOT NULL,
        state TEXT NOT NULL,
        identity TEXT,
        worker_uid INTEGER,
        cgroup_paths TEXT,
        created_at TEXT NOT NULL,
        ended_at TEXT,
        tty INTEGER NOT NULL DEFAULT 0,
        result_json TEXT
      );
      CREATE INDEX turns_session_id ON turns (session_id);

      -- Small key/value facts the store keeps about itself (e.g. the digest of the last
      -- replayed fallback log, so a crash between replay commit and log truncation cannot
      -- replay the same events twice).
      CREATE TABLE store_meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
      );
    `,
  },
  {
    description: 'workspaces, and the workspace a turn ran in',
    sql: `
      -- A workspace: a directory <workspaces.root>/<id> and, with an identity helper, the uid
      -- leased to it. state: creating (the lease or directory may be half made: boot removes it),
      -- ready, deleting (the release may be half done: boot finishes it).
      CREATE TABLE workspaces (
        id TEXT PRIMARY KEY,
        session_id TEXT,
        uid INTEGER,
        identity TEXT NOT NULL,
        path TEXT NOT NULL,
        state TEXT NOT NULL,
        created_at TEXT NOT NULL,
        last_used_at TEXT
      );
      CREATE INDEX workspaces_session_id ON workspaces (session_id);
      ALTER TABLE turns ADD COLUMN workspace_id TEXT;
      CREATE INDEX turns_workspace_id ON turns (workspace_id);
      -- The session retention groups bound events by session; this serves it without the rows.
      CREATE INDEX events_session_id_at ON events (session_id, at);
    `,
  },
  {
    description: 'what a turn ran: argv, cwd, env names, limits, timeout',
    sql: `
      -- JSON arrays and objects; env_names_json holds names only, never a value.
      ALTER TABLE turns ADD COLUMN argv_json TEXT;
      ALTER TABLE turns ADD COLUMN cwd TEXT;
      ALTER TABLE turns ADD COLUMN env_names_json TEXT;
      ALTER TABLE turns ADD COLUMN limits_json TEXT;
      ALTER TABLE turns ADD COLUMN timeout_seconds REAL;
    `,
  },
];
