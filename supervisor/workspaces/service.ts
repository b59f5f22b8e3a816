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
import path from 'node:path';
import { ID_DETAIL, isValidId } from '../../api/schema/ids.js';
import type { Logger } from '../../core/log.js';
import { fail, ok, type Result } from '../../core/result.js';
import { validateRelativePath, type WriteReceipt } from '../fs/guard.js';
import type { HelperLocation } from '../identity/helper-process.js';
import type { RemoveReceipt } from '../fs/guard-entries.js';
import { ArchiveExtraction, type ArchiveExtractOutcome } from './archive-extract.js';
import { ArchiveSource } from './archive-read.js';
import { isTop, makeTreeDirectory, readTreeEntry, removeTreeEntry, writeTreeFile, type TreeRead } from './files.js';
import {
  adoptWorkspaceLease,
  leaseWorkspace,
  makeSharedDirectory,
  measureWorkspace,
  mountWorkspaceImage,
  removeWorkspaceTree,
  type SharedLauncherState,
  type WorkspaceCap,
} from './storage.js';
import { DeleteRetries } from './delete-retry.js';
import { UsageCache } from './usage-cache.js';
import { createWorkspaceStore, type WorkspaceRecord, type WorkspaceStore } from './store.js';
import type {
  WorkspaceFailure,
  WorkspaceFileFailure,
  WorkspaceMeasure,
  WorkspaceServiceDeps,
  WorkspaceUsage,
  WorkspaceView,
} from './types.js';

type Deletion = Promise<Result<WorkspaceUsage, WorkspaceFailure>>;

function newWorkspaceId(): string {
  return `ws_${randomBytes(9)
    .toString('base64url')
    .replace(/[^A-Za-z0-9_-]/g, '_')}`;
}

/** A filesystem without room (bytes or inodes) as a refusal: the workspace's filesystem is full. */
const NO_SPACE = /\b(ENOSPC|EDQUOT)\b|No space left on device|Disk quota exceeded/;

/** A failure that is a full filesystem, answered as the workspace being full (HTTP 409). */
function asFull<R extends string>(
  workspace: WorkspaceView,
  failure: { ok: false; reason: R; detail: string },
): { ok: false; reason: R | 'workspace_full'; detail: string } {
  if (!NO_SPACE.test(failure.detail)) return failure;
  return fail(
    'workspace_full',
    `workspace ${workspace.id} is full (its filesystem has no room left: workspaces.maxBytes, maxFiles): ${failure.detail}`,
  );
}

export class WorkspaceService {
  private readonly store: WorkspaceStore;
  private readonly log: Logger;
  /** One delete per workspace at a time (see `delete`). */
  private readonly inFlight = new Map<string, Deletion>();
  private readonly usageCache = new UsageCache();
  private shared: SharedLauncherState = { launcher: null, problem: 'the shared_uid launcher is not ready yet' };

  /** Half-done deletes, tried again without a restart (delete-retry.ts). */
  private readonly retries: DeleteRetries;

  constructor(private readonly deps: WorkspaceServiceDeps) {
    this.store = createWorkspaceStore(deps.db);
    this.log = deps.logger.child({ component: 'workspaces' });
    this.retries = new DeleteRetries(
      (id) => this.retryDelete(id),
      (id, attempt, detail, retryInMs) => this.deleteFailed(id, attempt, detail, retryInMs),
      deps.deleteRetry,
    );
  }

  /** Shutdown: no delete retry starts after this. */
  close(): void {
    this.retries.close();
  }

  async create(options: {
    id?: string;
    sessionId?: string;
  }): Promise<Result<{ workspace: WorkspaceView }, WorkspaceFailure>> {
    const root = this.deps.config().workspaces.root;
    if (root === null)
      return fail('workspaces_unconfigured', 'workspaces are not configured (workspaces.root is null)');
    const id = options.id ?? newWorkspaceId();
    if (!isValidId(id)) return fail('invalid_request', `id: ${ID_DETAIL}`);
    if (this.store.get(id)) return fail('workspace_exists', `workspace ${id} already exists`);
    const helper = this.deps.helper();
    const record: WorkspaceRecord = {
      id,
      sessionId: options.sessionId ?? null,
      uid: null,
      identity: helper ? 'separate_uid' : 'shared_uid',
      path: path.join(root, id),
      state: 'creating',
      createdAt: new Date().toISOString(),
      lastUsedAt: null,
    };
    this.store.insert(record);
    const made = await this.makeTree(record, helper);
    if (!made.ok) return made;
    record.uid = made.uid;
    const imaged = await this.makeImage(record);
    if (!imaged.ok) return imaged;
    this.store.setReady(id, record.uid);
    record.state = 'ready';
    this.event('workspace_created', record.sessionId, { workspaceId: id, uid: record.uid, identity: record.identity });
    this.log.info('workspace created', { workspaceId: id, uid: record.uid });
    return ok({ workspace: this.view(record) });
  }

  get(id: string): WorkspaceView | undefined {
    const record = this.store.get(id);
    return record ? this.view(record) : undefined;
  }

  list(filter?: { sessionId?: string }): WorkspaceView[] {
    return this.store.list(filter).map((record) => this.view(record));
  }

  /** The workspace of an id a client gave, when it is ready (or, `orDeleting`, also half deleted: a retry). */
  find(
    id: string,
    options: { orDeleting?: boolean } = {},
  ): Result<{ workspace: WorkspaceView }, 'workspace_not_found'> {
    const found = isValidId(id) ? this.get(id) : undefined;
    if (!found || !(found.state === 'ready' || (options.orDeleting === true && found.state === 'deleting')))
      return fail('workspace_not_found', `no workspace ${isValidId(id) ? id : '(malformed id)'}`);
    return ok({ workspace: found });
  }

  /**
   * What the workspace holds: measured in a helper process, never on the event loop. A
   * measurement is reused until a host write, a turn or a delete may have changed the tree, and
   * concurrent callers share one in flight (usage-cache.ts).
   */
  async usage(id: string): Promise<Result<WorkspaceMeasure, WorkspaceFailure>> {
    const record = this.store.get(id);
    if (!record || record.state !== 'ready') return fail('workspace_not_found', `no workspace ${id}`);
    const turnRuns = () => this.deps.turns.running(id).length > 0;
    return this.usageCache.measure(id, turnRuns, () => measureWorkspace(record, this.deps.helper(), this.shared));
  }

  /** The shared_uid launcher (turns/launch-environment.ts) that measures and removes shared_uid trees. */
  useSharedLauncher(launcher: HelperLocation | null, problem: string | null): void {
    this.shared = launcher
      ? { launcher }
      : { launcher: null, problem: problem ?? 'the shared_uid launcher is unavailable' };
  }

  /** Refused (workspace_busy) while a turn runs on it, unless `cancel`: then its turns end first. */
  delete(id: string, options: { cancel?: boolean } = {}): Deletion {
    return this.deleteSerialized(id, options, false);
  }

  /** `retry`: the attempt is the retry timer's own, which schedules the next itself. */
  private deleteSerialized(id: string, options: { cancel?: boolean }, retry: boolean): Deletion {
    // One delete per workspace at a time: a second caller shares the first one's outcome
    // (two releases of one lease would race each other and record the receipt twice).
    const pending = this.inFlight.get(id);
    if (pending) return pending;
    const deleting = this.deleteOnce(id, options, retry).finally(() => this.inFlight.delete(id));
    this.inFlight.set(id, deleting);
    return deleting;
  }

  /**
   * Deletes every workspace bound to the session; a turn on one (of any session) refuses it
   * (`workspace_busy`) before any is removed, and the first failure stops. Answers what was removed.
   */
  async deleteForSession(sessionId: string): Promise<Result<{ deleted: string[] }, WorkspaceFailure>> {
    const deleted: string[] = [];
    const bound = this.store.list({ sessionId });
    const inUse = bound.find((record) => this.deps.turns.running(record.id).length > 0);
    if (inUse) return fail('workspace_busy', `a turn runs on workspace ${inUse.id}`);
    // A workspace still being created would be made after the session's records are gone.
    const creating = bound.find((record) => record.state === 'creating');
    if (creating) return fail('workspace_busy', `workspace ${creating.id} is being created`);
    for (const record of bound) {
      const removed = await this.delete(record.id);
      if (removed.ok) deleted.push(record.id);
      else if (removed.reason !== 'workspace_not_found') return removed;
    }
    return ok({ deleted });
  }

  /** A turn starts on the workspace: its record, if it is ready. */
  claimForTurn(id: string): Result<{ workspace: WorkspaceRecord }, WorkspaceFailure> {
    const record = this.store.get(id);
    if (!record || record.state !== 'ready') return fail('workspace_not_found', `no workspace ${id}`);
    const now = new Date().toISOString();
    this.store.touch(id, now);
    return ok({ workspace: { ...record, lastUsedAt: now } });
  }

  /** Finishes what a crash left half done, after adopting the leases an older release left without owner (boot). */
  async recover(): Promise<void> {
    await this.adoptLegacyLeases();
    await this.reattachImages();
    for (const record of this.store.unsettled()) {
      const removed = await this.remove(record);
      if (!removed.ok) {
        this.log.warn('unfinished workspace kept; retried later', { workspaceId: record.id, detail: removed.detail });
        this.retries.schedule(record.id, 0, removed.detail);
        continue;
      }
      this.log.info('unfinished workspace removed', { workspaceId: record.id, state: record.state });
      if (record.state === 'deleting') this.deletedEvent(record, removed);
    }
  }

  /**
   * Leases recorded by an older release name no owner, and the helper refuses them to every
   * owner; this instance's rows prove which are its own (the uid each row holds). A lease that
   * is another instance's stays refused, and its workspace is reported.
   */
  private async adoptLegacyLeases(): Promise<void> {
    const helper = this.deps.helper();
    if (!helper) return;
    for (const record of this.store.list()) {
      if (record.identity !== 'separate_uid' || record.state === 'creating') continue;
      const adopted = await adoptWorkspaceLease(record, helper);
      if (!adopted.ok)
        this.log.warn('workspace lease not adopted', {
          workspaceId: record.id,
          reason: adopted.reason,
          detail: adopted.detail,
        });
    }
  }

  /**
   * A workspace's own filesystem is mounted in the supervisor's mount namespace, which a reboot
   * or a restart (a new namespace under systemd) loses: every ready workspace that has an image
   * gets it back before any turn or host write can reach its directory. One that cannot is
   * logged; its usage then fails (the helper refuses to measure the directory beneath an
   * unmounted image), so no turn starts on it and no host write lands in it until it is back.
   */
  private async reattachImages(): Promise<void> {
    for (const record of this.store.list()) {
      if (record.state !== 'ready') continue;
      const attached = await mountWorkspaceImage(record, this.deps.helper(), this.shared, null);
      if (!attached.ok)
        this.log.warn('workspace image not re-attached', {
          workspaceId: record.id,
          reason: attached.reason,
          detail: attached.detail,
        });
      else if (attached.image === 'attached') this.log.info('workspace image re-attached', { workspaceId: record.id });
    }
  }

  /**
   * Where a host read or write goes: a valid path (checked first) in a ready workspace. With
   * `top`, `''` and `.` name the workspace itself (a listing).
   */
  fileTarget(
    id: string,
    rel: string,
    options: { top?: boolean } = {},
  ): Result<{ workspace: WorkspaceView }, 'invalid_path' | 'workspace_not_found'> & { field?: string } {
    if (options.top === true && isTop(rel)) return this.find(id);
    const valid = validateRelativePath(rel);
    if (!valid.ok) return { ...fail('invalid_path', `path: ${valid.detail}`), field: 'path' };
    return this.find(id);
  }

  /** A directory's listing, or a file's bytes (at most `fs.hostWriteMaxBytes`). */
  readEntry(workspace: WorkspaceView, rel: string): Result<TreeRead, WorkspaceFileFailure> {
    return readTreeEntry(workspace.path, rel, this.deps.config().fs.hostWriteMaxBytes);
  }

  /** Makes a directory with its parents, owned as the workspace's turns need (files.ts). */
  async makeDirectory(workspace: WorkspaceView, rel: string): Promise<Result<{ made: number }, WorkspaceFileFailure>> {
    const made = await makeTreeDirectory(workspace, rel, this.deps.helper());
    if (!made.ok) return this.refused(workspace, 'mkdir', rel, asFull(workspace, made));
    this.event('workspace_directory_made', workspace.sessionId, {
      workspaceId: workspace.id,
      path: rel,
      made: made.made,
    });
    return made;
  }

  /** Removes a file, link or empty directory, or with `recursive` a tree; never the workspace itself. */
  removeEntry(workspace: WorkspaceView, rel: string, recursive: boolean): Result<RemoveReceipt, WorkspaceFileFailure> {
    const removed = removeTreeEntry(workspace.path, rel, recursive);
    if (!removed.ok) return this.refused(workspace, 'delete', rel, removed);
    this.event('workspace_entry_removed', workspace.sessionId, { workspaceId: workspace.id, path: rel, ...removed });
    return removed;
  }

  /**
   * A host write of a workspace file: refused when it would take the workspace past
   * `workspaces.maxBytes` or the workspace is being deleted; its receipt is a `host_write` event.
   */
  async writeFile(
    workspace: WorkspaceView,
    rel: string,
    data: Buffer,
    mode: 'create' | 'replace',
  ): Promise<Result<WriteReceipt, WorkspaceFileFailure>> {
    const config = this.deps.config();
    const usage = await this.usage(workspace.id);
    if (!usage.ok) return usage;
    // A workspace that is its own filesystem is bounded by it (the write meets ENOSPC); one
    // without is only measured against the configured cap.
    const maxBytes = config.workspaces.maxBytes;
    if (!usage.image && maxBytes !== null && usage.bytes + data.length > maxBytes)
      return fail(
        'workspace_full',
        `workspace ${workspace.id} holds ${usage.bytes} bytes; ${data.length} more exceed its cap of ${maxBytes} (workspaces.maxBytes)`,
      );
    // The read above awaited: a delete may have begun meanwhile. From this check to the end of
    // the write nothing yields, so the write never lands in a tree being removed.
    const parents = await this.makeParents(workspace, rel);
    if (!parents.ok) return this.refused(workspace, 'write', rel, asFull(workspace, parents));
    if (this.store.get(workspace.id)?.state !== 'ready')
      return fail('workspace_not_found', `no workspace ${workspace.id} (being deleted)`);
    this.usageCache.invalidate(workspace.id);
    const written = writeTreeFile(workspace.path, rel, data, {
      mode,
      maxBytes: config.fs.hostWriteMaxBytes,
      parents: parents.made,
    });
    if (!written.ok) return this.refused(workspace, 'write', rel, asFull(workspace, written));
    this.event('host_write', workspace.sessionId, {
      path: rel,
      bytes: written.bytes,
      sha256: written.sha256,
      replaced: written.replaced,
    });
    return written;
  }

  /**
   * Extracts a tar stream into the directory `rel` (made with its parents), entry by entry, within
   * the workspace's byte cap (archive-extract.ts). A refusal leaves the entries before it
   * extracted; its `workspace_archive_refused` event names the entry and counts them.
   */
  async extractArchive(
    workspace: WorkspaceView,
    rel: string,
    source: AsyncIterable<Buffer>,
  ): Promise<ArchiveExtractOutcome> {
    const config = this.deps.config();
    const usage = await this.usage(workspace.id);
    if (!usage.ok) return { ...usage, extracted: { files: 0, directories: 0, bytes: 0 } };
    const helper = this.deps.helper();
    const extraction = new ArchiveExtraction(
      rel,
      {
        makeDirectory: (dir) => makeTreeDirectory(workspace, dir, helper),
        writeFile: (file, data, executable) => {
          // Checked where nothing yields before the write: a delete begun meanwhile stops it.
          if (this.store.get(workspace.id)?.state !== 'ready')
            return fail('workspace_not_found', `no workspace ${workspace.id} (being deleted)`);
          this.usageCache.invalidate(workspace.id);
          const maxBytes = config.fs.hostWriteMaxBytes;
          return writeTreeFile(workspace.path, file, data, {
            mode: 'replace',
            maxBytes,
            parents: 'existing',
            executable,
          });
        },
      },
      {
        // No cap configured: only the per-file and entry limits bound an upload.
        budgetBytes:
          config.workspaces.maxBytes === null
            ? Number.MAX_SAFE_INTEGER
            : Math.max(0, config.workspaces.maxBytes - usage.bytes),
        maxFileBytes: config.fs.hostWriteMaxBytes,
      },
    );
    const extracted = await extraction.run(source);
    this.usageCache.invalidate(workspace.id);
    if (!extracted.ok) {
      this.event('workspace_archive_refused', workspace.sessionId, {
        workspaceId: workspace.id,
        path: rel.slice(0, 1024),
        reason: extracted.reason,
        entry: extracted.entry ?? null,
        detail: extracted.detail.slice(0, 2048),
        ...extracted.extracted,
      });
      return extracted;
    }
    this.event('workspace_archive_extracted', workspace.sessionId, {
      workspaceId: workspace.id,
      path: rel,
      files: extracted.files,
      directories: extracted.directories,
      bytes: extracted.bytes,
    });
    return extracted;
  }

  /**
   * The directory `rel` held open as a tar stream (archive-read.ts). `finished` records its
   * `workspace_archive_read` event once the stream ended or was dropped.
   */
  openArchive(workspace: WorkspaceView, rel: string): Result<{ source: ArchiveSource }, WorkspaceFileFailure> {
    const opened = ArchiveSource.open(workspace.path, rel);
    if (!opened.ok) return this.refused(workspace, 'archive', rel, opened);
    return opened;
  }

  /** The receipt of an archive read: what it held and whether the client got all of it. */
  archiveRead(workspace: WorkspaceView, rel: string, source: ArchiveSource, complete: boolean): void {
    this.event('workspace_archive_read', workspace.sessionId, {
      workspaceId: workspace.id,
      path: rel,
      complete,
      ...source.receipt,
    });
  }

  /**
   * The parents of a file about to be written. In separate_uid the helper makes them (owned by
   * the lease's uid) and the write then only uses them (`existing`); in shared_uid the guard's
   * own walk makes them.
   */
  private async makeParents(
    workspace: WorkspaceView,
    rel: string,
  ): Promise<Result<{ made: 'create' | 'existing' }, WorkspaceFileFailure>> {
    const slash = rel.lastIndexOf('/');
    if (workspace.identity === 'shared_uid' || slash < 0) return ok({ made: 'create' });
    const made = await makeTreeDirectory(workspace, rel.slice(0, slash), this.deps.helper());
    return made.ok ? ok({ made: 'existing' }) : made;
  }

  /** A refused file operation: its `workspace_file_refused` receipt, then the failure as it was. */
  private refused<R extends string>(
    workspace: WorkspaceView,
    operation: 'write' | 'mkdir' | 'delete' | 'archive',
    rel: string,
    failure: { ok: false; reason: R; detail: string },
  ): { ok: false; reason: R; detail: string } {
    this.event('workspace_file_refused', workspace.sessionId, {
      workspaceId: workspace.id,
      operation,
      path: rel.slice(0, 1024),
      reason: failure.reason,
    });
    return failure;
  }

  /** The new workspace's directory: leased and made by the helper, or made here (shared_uid). */
  private async makeTree(
    record: WorkspaceRecord,
    helper: HelperLocation | null,
  ): Promise<Result<{ uid: number | null }, WorkspaceFailure>> {
    if (!helper) {
      const made = makeSharedDirectory(record);
      if (!made.ok) this.store.remove(record.id);
      return made.ok ? ok({ uid: null }) : made;
    }
    const start = await this.deps.uidSearchStart();
    if (!start.ok) {
      this.store.remove(record.id);
      return fail('workspaces_unavailable', `no verified worker uid range: ${start.detail}`);
    }
    const leased = await leaseWorkspace(record, helper, start.uid);
    if (!leased.ok) await this.remove(record);
    return leased;
  }

  /** The cap a new workspace gets from the configuration, or null (plain directories). */
  private cap(): WorkspaceCap | null {
    const { maxBytes, maxFiles } = this.deps.config().workspaces;
    return maxBytes === null ? null : { maxBytes, maxFiles };
  }

  /**
   * A new workspace's own filesystem when a cap is set and this host can mount one; a failure
   * removes the half-made workspace (its row is still `creating`).
   */
  private async makeImage(record: WorkspaceRecord): Promise<Result<{}, WorkspaceFailure>> {
    const cap = this.cap();
    if (cap === null) return ok({});
    const mounted = await mountWorkspaceImage(record, this.deps.helper(), this.shared, cap);
    if (mounted.ok) return ok({});
    await this.remove(record);
    return mounted;
  }

  /** A delete (any state but creating: a half-done one is retried); the caller serialises per id. */
  private async deleteOnce(id: string, options: { cancel?: boolean }, retry: boolean): Deletion {
    const record = this.store.get(id);
    if (!record || record.state === 'creating') return fail('workspace_not_found', `no workspace ${id}`);
    const running = this.deps.turns.running(id);
    if (running.length > 0) {
      if (!options.cancel)
        return fail(
          'workspace_busy',
          `${running.length} turn(s) run on workspace ${id}; end them first or delete with cancel=1`,
        );
      await Promise.all(running.map((turnId) => this.deps.turns.cancelAndWait(turnId)));
    }
    if (this.deps.turns.running(id).length > 0)
      return fail('workspace_busy', `a turn started on workspace ${id} meanwhile`);
    this.store.setDeleting(id);
    const removed = await this.remove({ ...record, state: 'deleting' });
    if (!removed.ok) {
      this.log.warn('workspace delete incomplete; retried later', { workspaceId: id, detail: removed.detail });
      if (!retry) this.retries.schedule(id, 0, removed.detail);
      return removed;
    }
    this.retries.cancel(id);
    this.deletedEvent(record, removed);
    return removed;
  }

  /**
   * One retry of a half-done delete: done when the workspace is gone (whoever removed it);
   * a row still `creating` (a create a crash interrupted) is removed as boot would.
   */
  private async retryDelete(id: string): Promise<Result> {
    const record = this.store.get(id);
    if (!record || record.state === 'ready') return ok({});
    if (record.state === 'creating') {
      const removed = await this.remove(record);
      return removed.ok ? ok({}) : removed;
    }
    const removed = await this.deleteSerialized(id, {}, true);
    if (removed.ok || removed.reason === 'workspace_not_found') return ok({});
    return removed;
  }

  private deleteFailed(id: string, attempt: number, detail: string, retryInMs: number): void {
    const record = this.store.get(id);
    this.log.warn('workspace delete failed; retrying', { workspaceId: id, attempt, detail, retryInMs });
    this.event('workspace_delete_failed', record?.sessionId ?? null, {
      workspaceId: id,
      attempt,
      detail: detail.slice(0, 1024),
      retryInSeconds: Math.ceil(retryInMs / 1000),
    });
  }

  /** Removes the directory and lease of a record in `creating` or `deleting` state, then its row. */
  private async remove(record: WorkspaceRecord): Deletion {
    this.usageCache.forget(record.id);
    const removed = await removeWorkspaceTree(record, this.deps.helper(), this.shared);
    if (removed.ok) this.store.remove(record.id);
    return removed;
  }

  private view(record: WorkspaceRecord): WorkspaceView {
    return { ...record, turnsRunning: this.deps.turns.running(record.id).length };
  }

  private deletedEvent(record: WorkspaceRecord, removed: WorkspaceUsage): void {
    this.event('workspace_deleted', record.sessionId, {
      workspaceId: record.id,
      bytesRemoved: removed.bytes,
      filesRemoved: removed.files,
    });
  }

  private event(kind: string, sessionId: string | null, payload: Record<string, unknown>): void {
    this.deps.events.append({ sessionId, turnId: null, kind, actor: 'server', model: null, profile: null, payload });
  }
}
