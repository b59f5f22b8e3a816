/**
 * A workspace's tree on disk: making it, measuring it, removing it. With a leased uid
 * (separate_uid) the identity helper does each (the tree belongs to the uid it leases); in
 * shared_uid mode the directory is the supervisor's own, made here, and measured and removed by
 * the shared launcher (the helper in shared mode): an fd-relative walk in a process of its own,
 * which no path length, unreadable directory or file count a turn leaves can defeat or stall.
 * Either mode's usage walk is bounded in entries and time; a walk a bound stopped is no measure.
 */
import fs from 'node:fs';
import { fail, ok, type Result } from '../../core/result.js';
import { runHelperLease } from '../identity/helper-lease.js';
import type { HelperFailureReason, HelperLocation } from '../identity/helper-process.js';
import { runHelperRelease, runHelperUsage, type WorkspaceTreeUsage } from '../identity/helper-workspace-tree.js';
import { runHelperImage, type WorkspaceImageState } from '../identity/helper-workspace-image.js';
import { runSharedRelease, runSharedUsage } from '../identity/shared-workspace-tree.js';
import { NON_ROOT_SHARED_CAP } from '../probes/workspaces.js';
import type { WorkspaceRecord } from './store.js';
import type { WorkspaceFailure, WorkspaceMeasure, WorkspaceUsage } from './types.js';

const NO_HELPER = 'the workspace has a leased uid but no identity helper is configured';

/**
 * A helper refusal as a workspace failure: a turn holding the uid is busy, another supervisor
 * instance's lease (one helper config, two supervisors) is owned elsewhere, anything else unavailable.
 */
function helperFailure(what: string, failure: { reason: HelperFailureReason; detail: string }) {
  if (failure.reason === 'workspace_busy') return fail('workspace_busy' as const, `${what}: ${failure.detail}`);
  if (failure.reason === 'lease_owner_mismatch')
    return fail('workspace_owned_elsewhere' as const, `${what}: ${failure.detail}`);
  return fail(
    'workspaces_unavailable' as const,
    `${what}: the identity helper refused (${failure.reason}): ${failure.detail}`,
  );
}

/** The shared launcher that walks shared_uid trees, or why there is none. */
export type SharedLauncherState = { launcher: HelperLocation } | { launcher: null; problem: string };

/** The helper's refusal to measure the directory beneath an image that is not mounted. */
const IMAGE_DETACHED = /its image is not attached/;

/**
 * What a workspace holds now. A workspace whose image lost its mount (unmounted by hand, or a
 * mount namespace gone) is attached again first, as boot would: never measured, written or run
 * in beneath it.
 */
export async function measureWorkspace(
  record: WorkspaceRecord,
  helper: HelperLocation | null,
  shared: SharedLauncherState,
): Promise<Result<WorkspaceMeasure, WorkspaceFailure>> {
  let measured = await walkWorkspace(record, helper, shared);
  if (!measured.ok && IMAGE_DETACHED.test(measured.detail)) {
    const attached = await mountWorkspaceImage(record, helper, shared, null);
    if (!attached.ok) return attached;
    measured = await walkWorkspace(record, helper, shared);
  }
  if (!measured.ok) return measured;
  // A lower bound is no measure: every cap check would pass on it.
  if (!measured.complete)
    return fail(
      'workspaces_unavailable',
      `usage of ${record.id}: the measurement stopped at its bound or at a directory it may not read (at least ${measured.files} files, ${measured.bytes} bytes)`,
    );
  return ok({ bytes: measured.bytes, files: measured.files, image: measured.image });
}

/** The bounded usage walk of the workspace's mode: the helper's with a leased uid, else the shared launcher's. */
async function walkWorkspace(
  record: WorkspaceRecord,
  helper: HelperLocation | null,
  shared: SharedLauncherState,
): Promise<Result<WorkspaceTreeUsage, WorkspaceFailure>> {
  if (record.identity === 'separate_uid') {
    if (!helper) return fail('workspaces_unavailable', NO_HELPER);
    const measured = await runHelperUsage(helper, { lease: record.id, workspace: record.path });
    return measured.ok ? measured : helperFailure('usage', measured);
  }
  if (!shared.launcher) return fail('workspaces_unavailable', `usage of ${record.id}: ${shared.problem}`);
  const measured = await runSharedUsage(shared.launcher, { lease: record.id, workspace: record.path });
  return measured.ok ? measured : helperFailure('usage', measured);
}

/** The byte and inode cap of a new workspace's filesystem (workspaces.maxBytes, maxFiles). */
export interface WorkspaceCap {
  maxBytes: number;
  maxFiles: number | null;
}

/**
 * Who may mount a workspace's image, or why nobody here can: the identity helper (setuid root)
 * for a leased workspace; for a shared_uid one the shared launcher, when the supervisor is root.
 */
function imageMounter(
  record: WorkspaceRecord,
  helper: HelperLocation | null,
  shared: SharedLauncherState,
): { mounter: HelperLocation } | { mounter: null; requirement: string } {
  if (record.identity === 'separate_uid')
    return helper ? { mounter: helper } : { mounter: null, requirement: NO_HELPER };
  if (process.geteuid?.() !== 0) return { mounter: null, requirement: NON_ROOT_SHARED_CAP };
  return shared.launcher ? { mounter: shared.launcher } : { mounter: null, requirement: shared.problem };
}

/**
 * With `cap`, makes and mounts a new workspace's own filesystem; without, re-attaches the one it
 * has (boot). A workspace nobody here may mount an image for answers `none` (its cap, if any,
 * is only measured: the probe reports it).
 */
export async function mountWorkspaceImage(
  record: WorkspaceRecord,
  helper: HelperLocation | null,
  shared: SharedLauncherState,
  cap: WorkspaceCap | null,
): Promise<Result<{ image: WorkspaceImageState }, WorkspaceFailure>> {
  const who = imageMounter(record, helper, shared);
  if (!who.mounter) return ok({ image: 'none' as const });
  const mounted = await runHelperImage(who.mounter, {
    lease: record.id,
    workspace: record.path,
    ...(cap ? { cap } : {}),
  });
  return mounted.ok ? mounted : helperFailure('image', mounted);
}

/** Leases a uid to the workspace and has the helper make its directory as that uid. */
export async function leaseWorkspace(
  record: WorkspaceRecord,
  helper: HelperLocation,
  uidSearchStart: number,
): Promise<Result<{ uid: number }, WorkspaceFailure>> {
  const leased = await runHelperLease(helper, { lease: record.id, workspace: record.path, uid: uidSearchStart });
  if (leased.ok) return ok({ uid: leased.uid });
  if (leased.reason === 'uid_in_use')
    return fail('workspaces_unavailable', `no free worker uid for a workspace: ${leased.detail}`);
  return helperFailure('lease', leased);
}

/**
 * Boot: a lease an older release recorded without an owner becomes this instance's, proven by
 * the uid this instance's own row holds for it (a lease already ours answers the same).
 */
export async function adoptWorkspaceLease(
  record: WorkspaceRecord,
  helper: HelperLocation,
): Promise<Result<{}, WorkspaceFailure>> {
  if (record.uid === null) return ok({});
  const adopted = await runHelperLease(helper, {
    lease: record.id,
    workspace: record.path,
    uid: record.uid,
    adopt: true,
  });
  return adopted.ok ? ok({}) : helperFailure('adopt', adopted);
}

/** Shared mode: the supervisor's own directory; only the view keeps other turns out. */
export function makeSharedDirectory(record: WorkspaceRecord): Result<{}, WorkspaceFailure> {
  try {
    fs.mkdirSync(record.path, { mode: 0o700 });
    return ok({});
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return fail('workspace_exists', `workspace directory ${record.id} already exists`);
    return fail('workspaces_unavailable', `creating ${record.id}: ${(error as Error).message}`);
  }
}

/** Removes the directory and the lease of a workspace; answers what it held. The row is the caller's. */
export async function removeWorkspaceTree(
  record: WorkspaceRecord,
  helper: HelperLocation | null,
  shared: SharedLauncherState,
): Promise<Result<WorkspaceUsage, WorkspaceFailure>> {
  if (record.identity === 'separate_uid') {
    if (!helper) return fail('workspaces_unavailable', NO_HELPER);
    const released = await runHelperRelease(helper, { lease: record.id, workspace: record.path });
    if (released.ok) return ok({ bytes: released.removedBytes, files: released.removedFiles });
    // A create refused because the id's lease is another owner's made nothing of ours: its row
    // goes, and the other owner's workspace is left as it is.
    if (released.reason === 'lease_owner_mismatch' && record.state === 'creating') return ok({ bytes: 0, files: 0 });
    // No lease (a create that died before the helper wrote it, or a release that finished
    // before the row went): nothing of the helper's remains; only an empty directory might.
    if (released.reason !== 'lease_refused' || hasLeftovers(record.path)) return helperFailure('release', released);
    return ok({ bytes: 0, files: 0 });
  }
  if (!shared.launcher) return fail('workspaces_unavailable', `removing ${record.id}: ${shared.problem}`);
  const removed = await runSharedRelease(shared.launcher, { lease: record.id, workspace: record.path });
  return removed.ok
    ? ok({ bytes: removed.removedBytes, files: removed.removedFiles })
    : helperFailure('release', removed);
}

/** Whether a directory holds anything (a missing one holds nothing). */
function hasLeftovers(dir: string): boolean {
  try {
    return fs.readdirSync(dir).length > 0;
  } catch {
    return false;
  }
}
