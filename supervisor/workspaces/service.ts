/**
 * Workspaces: a directory `<workspaces.root>/<id>` that outlives turns, and (separate_uid) the
 * worker uid the identity helper leases to it for its whole life. Every turn on a workspace runs
 * as that uid; no other workspace or unleased turn ever gets it. In shared_uid mode the
 * supervisor makes the directory itself (every turn has its uid) and the separation between
 * workspaces is the view's: a turn sees its own workspace and nothing else of the root.
 * Decisions: docs/workspaces.md.
 *
 * Crash safety: the row is written `creating` before the helper is asked and `deleting` before
 * the release; `recover()` at boot removes a half-made workspace and finishes a half delete.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import type Database from 'better-sqlite3';
import type { EventSink } from '../../core/events.js';
import type { Logger } from '../../core/log.js';
import { fail, ok, type Result } from '../../core/result.js';
import type { TurnhostConfig } from '../config/types.js';
import { closeRoot, openRoot } from '../fs/guard.js';
import { WalkErrors, walkTree } from '../fs/tree.js';
import { runHelperLease } from '../identity/helper-lease.js';
import type { HelperFailureReason, HelperLocation } from '../identity/helper-process.js';
import { runHelperRelease, runHelperUsage } from '../identity/helper-workspace-tree.js';
import { createWorkspaceStore, type WorkspaceRecord, type WorkspaceStore } from './store.js';

export type { WorkspaceRecord } from './store.js';

export const WORKSPACE_ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

export type WorkspaceFailure =
  | 'invalid_request'
  | 'workspace_not_found'
  | 'workspace_exists'
  | 'workspace_busy'
  | 'workspace_full'
  | 'workspaces_unconfigured'
  | 'workspaces_unavailable';

export interface WorkspaceUsage {
  bytes: number;
  files: number;
}

export interface WorkspaceView extends WorkspaceRecord {
  turnsRunning: number;
}

/** What the service needs of the turns: which run on a workspace, and how to end them. */
export interface WorkspaceTurns {
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
}

export interface WorkspaceService {
  create(options: { id?: string; sessionId?: string }): Promise<Result<{ workspace: WorkspaceView }, WorkspaceFailure>>;
  get(id: string): WorkspaceView | undefined;
  list(filter?: { sessionId?: string }): WorkspaceView[];
  usage(id: string): Promise<Result<WorkspaceUsage, WorkspaceFailure>>;
  /** Refused (workspace_busy) while a turn runs on it, unless `cancel`: then its turns end first. */
  delete(id: string, options?: { cancel?: boolean }): Promise<Result<WorkspaceUsage, WorkspaceFailure>>;
  /**
   * Deletes every workspace bound to the session; a turn on one (of any session) refuses it
   * (`workspace_busy`) before any is removed, and the first failure stops. Answers what was removed.
   */
  deleteForSession(sessionId: string): Promise<Result<{ deleted: string[] }, WorkspaceFailure>>;
  /** A turn starts on the workspace: its record, if it is ready. */
  claimForTurn(id: string): Result<{ workspace: WorkspaceRecord }, WorkspaceFailure>;
  /** Finishes what a crash left half done (boot). */
  recover(): Promise<void>;
}

function newWorkspaceId(): string {
  return `ws_${randomBytes(9)
    .toString('base64url')
    .replace(/[^A-Za-z0-9_-]/g, '_')}`;
}

/** A helper refusal as a workspace failure: a turn holding the uid is busy, anything else unavailable. */
function helperFailure(what: string, failure: { reason: HelperFailureReason; detail: string }) {
  if (failure.reason === 'workspace_busy') return fail('workspace_busy' as const, `${what}: ${failure.detail}`);
  return fail(
    'workspaces_unavailable' as const,
    `${what}: the identity helper refused (${failure.reason}): ${failure.detail}`,
  );
}

/** Shared mode's own measure: every entry beneath, never following a link (apparent sizes). */
function measureTree(dir: string): Result<WorkspaceUsage> {
  const root = openRoot(dir);
  if (!root.ok) return fail(root.reason, root.detail);
  let bytes = 0;
  let files = 0;
  const errors = new WalkErrors();
  try {
    walkTree(
      root.fd,
      {
        entry: (entry) => {
          bytes += entry.stat.size;
          files += 1;
        },
      },
      errors,
    );
  } finally {
    closeRoot(root);
  }
  if (errors.count > 0) return fail('walk_failed', errors.recorded.join('; '));
  return ok({ bytes, files });
}

export function createWorkspaceService(deps: WorkspaceServiceDeps): WorkspaceService {
  const store: WorkspaceStore = createWorkspaceStore(deps.db);
  const log = deps.logger.child({ component: 'workspaces' });

  const rootOf = (): Result<{ root: string }, WorkspaceFailure> => {
    const root = deps.config().workspaces.root;
    if (root === null)
      return fail('workspaces_unconfigured', 'workspaces are not configured (workspaces.root is null)');
    return ok({ root });
  };
  const view = (record: WorkspaceRecord): WorkspaceView => ({
    ...record,
    turnsRunning: deps.turns.running(record.id).length,
  });
  const event = (kind: string, sessionId: string | null, payload: Record<string, unknown>) =>
    deps.events.append({ sessionId, turnId: null, kind, actor: 'server', model: null, profile: null, payload });

  const usageOf = async (record: WorkspaceRecord): Promise<Result<WorkspaceUsage, WorkspaceFailure>> => {
    if (record.identity === 'separate_uid') {
      const helper = deps.helper();
      if (!helper)
        return fail('workspaces_unavailable', 'the workspace has a leased uid but no identity helper is configured');
      const measured = await runHelperUsage(helper, { lease: record.id, workspace: record.path });
      return measured.ok ? ok({ bytes: measured.bytes, files: measured.files }) : helperFailure('usage', measured);
    }
    const measured = measureTree(record.path);
    return measured.ok
      ? ok({ bytes: measured.bytes, files: measured.files })
      : fail('workspaces_unavailable', `usage of ${record.id}: ${measured.detail}`);
  };

  /** Removes the directory and lease of a record in `creating` or `deleting` state, then its row. */
  const remove = async (record: WorkspaceRecord): Promise<Result<WorkspaceUsage, WorkspaceFailure>> => {
    let removed: WorkspaceUsage;
    if (record.identity === 'separate_uid') {
      const helper = deps.helper();
      if (!helper)
        return fail('workspaces_unavailable', 'the workspace has a leased uid but no identity helper is configured');
      const released = await runHelperRelease(helper, { lease: record.id, workspace: record.path });
      if (!released.ok) {
        // No lease (a create that died before the helper wrote it, or a release that finished
        // before the row went): nothing of the helper's remains; only an empty directory might.
        if (released.reason !== 'lease_refused' || hasLeftovers(record.path)) return helperFailure('release', released);
        removed = { bytes: 0, files: 0 };
      } else {
        removed = { bytes: released.removedBytes, files: released.removedFiles };
      }
    } else {
      const measured = measureTree(record.path);
      removed = measured.ok ? measured : { bytes: 0, files: 0 };
      try {
        // rm never follows a symlink: a link in the tree is removed, not its target.
        fs.rmSync(record.path, { recursive: true, force: true });
      } catch (error) {
        return fail('workspaces_unavailable', `removing ${record.id}: ${(error as Error).message}`);
      }
    }
    store.remove(record.id);
    return ok(removed);
  };

  const inFlight = new Map<string, Promise<Result<WorkspaceUsage, WorkspaceFailure>>>();

  /** A delete (any state but creating: a half-done one is retried); the caller serialises per id. */
  async function deleteOnce(
    id: string,
    options: { cancel?: boolean },
  ): Promise<Result<WorkspaceUsage, WorkspaceFailure>> {
    const record = store.get(id);
    if (!record || record.state === 'creating') return fail('workspace_not_found', `no workspace ${id}`);
    const running = deps.turns.running(id);
    if (running.length > 0) {
      if (!options.cancel)
        return fail(
          'workspace_busy',
          `${running.length} turn(s) run on workspace ${id}; end them first or delete with cancel=1`,
        );
      await Promise.all(running.map((turnId) => deps.turns.cancelAndWait(turnId)));
    }
    if (deps.turns.running(id).length > 0) return fail('workspace_busy', `a turn started on workspace ${id} meanwhile`);
    store.setDeleting(id);
    const removed = await remove({ ...record, state: 'deleting' });
    if (!removed.ok) {
      log.warn('workspace delete incomplete', { workspaceId: id, detail: removed.detail });
      return removed;
    }
    event('workspace_deleted', record.sessionId, {
      workspaceId: id,
      bytesRemoved: removed.bytes,
      filesRemoved: removed.files,
    });
    return removed;
  }

  const service: WorkspaceService = {
    async create(options) {
      const rooted = rootOf();
      if (!rooted.ok) return rooted;
      const id = options.id ?? newWorkspaceId();
      if (!WORKSPACE_ID_PATTERN.test(id))
        return fail('invalid_request', 'id: expected 1-64 characters of [A-Za-z0-9_-]');
      if (store.get(id)) return fail('workspace_exists', `workspace ${id} already exists`);
      const helper = deps.helper();
      const record: WorkspaceRecord = {
        id,
        sessionId: options.sessionId ?? null,
        uid: null,
        identity: helper ? 'separate_uid' : 'shared_uid',
        path: path.join(rooted.root, id),
        state: 'creating',
        createdAt: new Date().toISOString(),
        lastUsedAt: null,
      };
      store.insert(record);
      if (helper) {
        const start = await deps.uidSearchStart();
        if (!start.ok) {
          store.remove(id);
          return fail('workspaces_unavailable', `no verified worker uid range: ${start.detail}`);
        }
        const leased = await runHelperLease(helper, { lease: id, workspace: record.path, uid: start.uid });
        if (!leased.ok) {
          await remove(record);
          if (leased.reason === 'uid_in_use')
            return fail('workspaces_unavailable', `no free worker uid for a workspace: ${leased.detail}`);
          return helperFailure('lease', leased);
        }
        record.uid = leased.uid;
      } else {
        try {
          // Shared mode: the supervisor's own directory; only the view keeps other turns out.
          fs.mkdirSync(record.path, { mode: 0o700 });
        } catch (error) {
          store.remove(id);
          const code = (error as NodeJS.ErrnoException).code;
          if (code === 'EEXIST') return fail('workspace_exists', `workspace directory ${id} already exists`);
          return fail('workspaces_unavailable', `creating ${id}: ${(error as Error).message}`);
        }
      }
      store.setReady(id, record.uid);
      record.state = 'ready';
      event('workspace_created', record.sessionId, { workspaceId: id, uid: record.uid, identity: record.identity });
      log.info('workspace created', { workspaceId: id, uid: record.uid });
      return ok({ workspace: view(record) });
    },

    get: (id) => {
      const record = store.get(id);
      return record ? view(record) : undefined;
    },

    list: (filter) => store.list(filter).map(view),

    async usage(id) {
      const record = store.get(id);
      if (!record || record.state !== 'ready') return fail('workspace_not_found', `no workspace ${id}`);
      return usageOf(record);
    },

    delete(id, options = {}) {
      // One delete per workspace at a time: a second caller shares the first one's outcome
      // (two releases of one lease would race each other and record the receipt twice).
      const pending = inFlight.get(id);
      if (pending) return pending;
      const deleting = deleteOnce(id, options).finally(() => inFlight.delete(id));
      inFlight.set(id, deleting);
      return deleting;
    },

    async deleteForSession(sessionId) {
      const deleted: string[] = [];
      const bound = store.list({ sessionId });
      const inUse = bound.find((record) => deps.turns.running(record.id).length > 0);
      if (inUse) return fail('workspace_busy', `a turn runs on workspace ${inUse.id}`);
      // A workspace still being created would be made after the session's records are gone.
      const creating = bound.find((record) => record.state === 'creating');
      if (creating) return fail('workspace_busy', `workspace ${creating.id} is being created`);
      for (const record of bound) {
        const removed = await service.delete(record.id);
        if (removed.ok) deleted.push(record.id);
        else if (removed.reason !== 'workspace_not_found') return removed;
      }
      return ok({ deleted });
    },

    claimForTurn(id) {
      const record = store.get(id);
      if (!record || record.state !== 'ready') return fail('workspace_not_found', `no workspace ${id}`);
      const now = new Date().toISOString();
      store.touch(id, now);
      return ok({ workspace: { ...record, lastUsedAt: now } });
    },

    async recover() {
      for (const record of store.unsettled()) {
        const removed = await remove(record);
        if (removed.ok) {
          log.info('unfinished workspace removed', { workspaceId: record.id, state: record.state });
          if (record.state === 'deleting')
            event('workspace_deleted', record.sessionId, {
              workspaceId: record.id,
              bytesRemoved: removed.bytes,
              filesRemoved: removed.files,
            });
        } else {
          log.warn('unfinished workspace kept', { workspaceId: record.id, detail: removed.detail });
        }
      }
    },
  };
  return service;
}

/** Whether a directory holds anything (a missing one holds nothing). */
function hasLeftovers(dir: string): boolean {
  try {
    return fs.readdirSync(dir).length > 0;
  } catch {
    return false;
  }
}
