/**
 * Workspaces: what the service answers, what it is built from, and the little it needs of the
 * turns. The turn manager and the workspace service are siblings; the daemon wires each to the
 * other through these narrow shapes (supervisor/compose.ts).
 */
import type Database from 'better-sqlite3';
import type { EventSink } from '../../core/events.js';
import type { Logger } from '../../core/log.js';
import type { Result } from '../../core/result.js';
import type { TurnhostConfig } from '../config/types.js';
import type { EntryRefusal } from '../fs/guard-entries.js';
import type { HelperLocation } from '../identity/helper-process.js';
import type { DeleteRetryOptions } from './delete-retry.js';
import type { WorkspaceRecord } from './store.js';

export type WorkspaceFailure =
  | 'invalid_request'
  | 'workspace_not_found'
  | 'workspace_exists'
  | 'workspace_busy'
  | 'workspace_full'
  | 'workspace_owned_elsewhere'
  | 'workspaces_unconfigured'
  | 'workspaces_unavailable';

/** A host read or write of a workspace file: the workspace's refusal or the fs guard's. */
export type WorkspaceFileFailure = WorkspaceFailure | EntryRefusal;

export interface WorkspaceUsage {
  bytes: number;
  files: number;
}

/** A measurement: with `image`, the workspace is its own filesystem and the cap is a real bound. */
export interface WorkspaceMeasure extends WorkspaceUsage {
  image: boolean;
}

export interface WorkspaceView extends WorkspaceRecord {
  turnsRunning: number;
}

/** What the service needs of the turns: which run on a workspace, and how to end them. */
interface WorkspaceTurns {
  running(workspaceId: string): string[];
  /** Cancels the turn and resolves when it has ended. */
  cancelAndWait(turnId: string): Promise<void>;
}

export interface WorkspaceServiceDeps {
  config: () => TurnhostConfig;
  db: Database.Database;
  events: EventSink;
  logger: Logger;
  /** The identity helper (separate_uid), or null: shared_uid, the supervisor makes directories itself. */
  helper: () => HelperLocation | null;
  /** Where the helper's search for a free uid starts (the first uid of its verified range). */
  uidSearchStart: () => Promise<Result<{ uid: number }>>;
  turns: WorkspaceTurns;
  /** The backoff of half-done deletes (delete-retry.ts); its defaults when absent. */
  deleteRetry?: DeleteRetryOptions;
}
