/**
 * Opens the supervisor's SQLite database: a 0600 file, WAL, bounded busy wait, foreign keys,
 * and every pending migration applied in one transaction each.
 */
import fs from 'node:fs';
import path from 'node:path';
import Database from 'better-sqlite3';
import { fail, ok, type Result } from '../../core/result.js';
import { MIGRATIONS, type Migration } from './migrations.js';

const DEFAULT_BUSY_TIMEOUT_MS = 2000;

export interface OpenDatabaseOptions {
  /** How long a write waits for another connection's lock before failing. */
  busyTimeoutMs?: number;
  /** Only tests pass their own list. */
  migrations?: readonly Migration[];
}

export function openDatabase(
  databasePath: string,
  options: OpenDatabaseOptions = {},
): Result<{ db: Database.Database }, 'database_unavailable'> {
  const migrations = options.migrations ?? MIGRATIONS;
  let db: Database.Database | undefined;
  try {
    createPrivateFile(databasePath);
    db = new Database(databasePath);
    db.pragma(`busy_timeout = ${Math.max(0, Math.trunc(options.busyTimeoutMs ?? DEFAULT_BUSY_TIMEOUT_MS))}`);
    const mode = db.pragma('journal_mode = WAL', { simple: true });
    if (mode !== 'wal') throw new Error(`journal_mode is ${String(mode)}, WAL required`);
    // FULL syncs the WAL at each commit: a governance event acknowledged as stored survives power loss.
    db.pragma('synchronous = FULL');
    db.pragma('foreign_keys = ON');
    applyMigrations(db, migrations);
    return ok({ db });
  } catch (error) {
    db?.close();
    return fail('database_unavailable', `cannot open database ${databasePath}: ${describeError(error)}`);
  }
}

/**
 * Creates the file 0600 before SQLite sees it (SQLite gives its -wal/-shm files the same mode),
 * and tightens an existing file that is wider.
 */
function createPrivateFile(databasePath: string): void {
  fs.mkdirSync(path.dirname(databasePath), { recursive: true, mode: 0o700 });
  const fd = fs.openSync(databasePath, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_NOFOLLOW, 0o600);
  try {
    fs.fchmodSync(fd, 0o600);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * Each migration runs in an IMMEDIATE transaction that re-reads `user_version` under the write
 * lock: two processes opening a new database at once must not both apply the same migration.
 */
function applyMigrations(db: Database.Database, migrations: readonly Migration[]): void {
  const schemaVersion = (): number => db.pragma('user_version', { simple: true }) as number;
  const refuseNewer = (current: number): void => {
    if (current > migrations.length) {
      throw new Error(
        `schema version ${current} is newer than this build knows (${migrations.length}); refusing to use it`,
      );
    }
  };
  refuseNewer(schemaVersion());
  for (let version = 1; version <= migrations.length; version++) {
    if (schemaVersion() >= version) continue;
    const migration = migrations[version - 1]!;
    db.transaction(() => {
      const current = schemaVersion();
      refuseNewer(current);
      if (current >= version) return;
      db.exec(migration.sql);
      db.pragma(`user_version = ${version}`);
    }).immediate();
  }
}

export function describeError(error: unknown): string {
  if (error instanceof Error) {
    const code = (error as { code?: unknown }).code;
    return typeof code === 'string' ? `${code}: ${error.message}` : error.message;
  }
  return String(error);
}
