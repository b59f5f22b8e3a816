/**
 * A shared_uid workspace's tree, measured and removed by the shared launcher (the identity
 * helper in shared mode, identity-helper/src/shared-tree.c): the same fd-relative walk as a
 * leased workspace's, in a process of its own with the supervisor's own privilege. Removal
 * never depends on a path (no PATH_MAX) and gives back to the owner a directory a turn made
 * unreadable; measurement never blocks the supervisor's event loop and is bounded in entries
 * and time.
 */
import { fail, ok, type Result } from '../../core/result.js';
import type { WorkspaceLeaseRequest } from './helper-lease.js';
import {
  countField,
  parseReceipt,
  runHelperOperation,
  type HelperFailureReason,
  type HelperLocation,
} from './helper-process.js';
import { parseUsageAnswer, type WorkspaceTreeUsage } from './helper-workspace-tree.js';

/**
 * The descriptor names an owner for every tree op; shared mode keeps no lease records, so the
 * helper compares none, and this instance's own id (when it has one) is what it sends.
 */
function ownerOf(launcher: HelperLocation): string {
  return launcher.owner ?? 'shared_mode';
}

/** Removes `<workspace_root>/<lease>` and everything beneath it; an absent one removes nothing. */
export async function runSharedRelease(
  launcher: HelperLocation,
  request: WorkspaceLeaseRequest,
): Promise<Result<{ removedBytes: number; removedFiles: number }, HelperFailureReason>> {
  const run = await runHelperOperation(launcher, { op: 'release', owner: ownerOf(launcher), ...request });
  if (!run.ok) return run;
  const receipt = parseReceipt(run.stdout);
  const removedBytes = countField(receipt, 'removed_bytes');
  const removedFiles = countField(receipt, 'removed_files');
  if (removedBytes === null || removedFiles === null)
    return fail('helper_output_invalid', 'shared release answer lacks removed_bytes or removed_files');
  return ok({ removedBytes, removedFiles });
}

/** Allocated bytes and entries that are not directories of `<workspace_root>/<lease>`. */
export async function runSharedUsage(
  launcher: HelperLocation,
  request: WorkspaceLeaseRequest,
): Promise<Result<WorkspaceTreeUsage, HelperFailureReason>> {
  const run = await runHelperOperation(launcher, { op: 'usage', owner: ownerOf(launcher), ...request });
  if (!run.ok) return run;
  return parseUsageAnswer(run.stdout, 'shared usage');
}
