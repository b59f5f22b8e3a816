/**
 * A leased workspace's tree (identity-helper/src/workspace-lease.c, ops usage, release and mkdir,
 * the first two by way of tree-walk.c): usage measures it (bounded in entries and time, as in
 * shared mode), release removes it and then ends the lease, mkdir makes directories in it owned
 * by the lease's uid. Each works as root without following a link, which the supervisor itself
 * could not do safely (nor chown, when not root).
 */
import { fail, ok, type Result } from '../../core/result.js';
import type { WorkspaceLeaseRequest } from './helper-lease.js';
import {
  countField,
  decimalField,
  parseReceipt,
  runHelperOperation,
  type HelperFailureReason,
  type HelperLocation,
} from './helper-process.js';

/**
 * Ends a workspace: refused (workspace_busy) while a turn holds its uid or any process of the
 * uid lives; else removes its tree without following a link, then the lease.
 */
export async function runHelperRelease(
  helper: HelperLocation,
  request: WorkspaceLeaseRequest,
): Promise<Result<{ uid: number; removedBytes: number; removedFiles: number }, HelperFailureReason>> {
  const run = await runHelperOperation(helper, { op: 'release', owner: helper.owner, ...request });
  if (!run.ok) return run;
  const receipt = parseReceipt(run.stdout);
  const uid = decimalField(receipt, 'released');
  const removedBytes = countField(receipt, 'removed_bytes');
  const removedFiles = countField(receipt, 'removed_files');
  if (uid === null || removedBytes === null || removedFiles === null)
    return fail('helper_output_invalid', 'release answer lacks released, removed_bytes or removed_files');
  return ok({ uid, removedBytes, removedFiles });
}

/**
 * What a workspace tree holds (either identity mode): allocated bytes and entries that are not
 * directories; `complete: false` when a bound of the walk (entries, time) stopped it or a
 * directory could not be read, the counts then being a lower bound.
 */
export interface WorkspaceTreeUsage {
  bytes: number;
  files: number;
  complete: boolean;
  /** The workspace is its own mounted image: its filesystem bounds it (the counts are its statfs). */
  image: boolean;
}

/**
 * A usage answer, `bytes`, `files`, `complete yes|no` and `image yes|no`: all required in either mode (the
 * helper ships with the supervisor, so an answer without `complete` is a helper of another
 * release, never a complete measure).
 */
export function parseUsageAnswer(stdout: string, what: string): Result<WorkspaceTreeUsage, 'helper_output_invalid'> {
  const receipt = parseReceipt(stdout);
  const bytes = countField(receipt, 'bytes');
  const files = countField(receipt, 'files');
  const complete = receipt['complete'];
  const image = receipt['image'];
  if (
    bytes === null ||
    files === null ||
    (complete !== 'yes' && complete !== 'no') ||
    (image !== 'yes' && image !== 'no')
  )
    return fail('helper_output_invalid', `${what} answer lacks bytes, files, complete or image`);
  return ok({ bytes, files, complete: complete === 'yes', image: image === 'yes' });
}

/** What a leased workspace holds, within the helper's bounds. */
export async function runHelperUsage(
  helper: HelperLocation,
  request: WorkspaceLeaseRequest,
): Promise<Result<WorkspaceTreeUsage, HelperFailureReason>> {
  const run = await runHelperOperation(helper, { op: 'usage', owner: helper.owner, ...request });
  if (!run.ok) return run;
  return parseUsageAnswer(run.stdout, 'usage');
}

/**
 * Makes `dir` and its missing parents beneath a leased workspace, each new one owned by the
 * lease's uid (group the supervisor's, 02770) so the workspace's turns can write in it.
 */
export async function runHelperMakeDirectory(
  helper: HelperLocation,
  request: WorkspaceLeaseRequest & { dir: string },
): Promise<Result<{ made: number }, HelperFailureReason>> {
  const run = await runHelperOperation(helper, { op: 'mkdir', owner: helper.owner, ...request });
  if (!run.ok) return run;
  const made = decimalField(parseReceipt(run.stdout), 'made');
  if (made === null) return fail('helper_output_invalid', 'mkdir answer lacks made');
  return ok({ made });
}
