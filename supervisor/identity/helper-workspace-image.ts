/**
 * A workspace's own filesystem (identity-helper/src/workspace-image.c, op image): a sparse ext4
 * image of the byte cap's size on a loop device, mounted nosuid,nodev on the workspace
 * directory, so writes past the cap and files past the inode count fail with ENOSPC during a
 * turn. Made and mounted for a new, empty workspace; re-attached at boot. Root only: the setuid
 * helper (separate_uid), or the shared launcher of a root supervisor (shared_uid).
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

/** made: a new image; attached: mounted now; mounted: it already was; none: no image, none asked for. */
export type WorkspaceImageState = 'made' | 'attached' | 'mounted' | 'none';

const STATES: ReadonlySet<string> = new Set(['made', 'attached', 'mounted', 'none']);

/**
 * With `cap`, makes the workspace's image (when it has none; its directory must be empty) and
 * mounts it; without, mounts the image it already has, if any (the boot path).
 */
export async function runHelperImage(
  helper: HelperLocation,
  request: WorkspaceLeaseRequest & { cap?: { maxBytes: number; maxFiles: number | null } },
): Promise<Result<{ image: WorkspaceImageState }, HelperFailureReason>> {
  const { cap, ...named } = request;
  const run = await runHelperOperation(helper, {
    op: 'image',
    owner: helper.owner ?? 'shared_mode',
    ...named,
    ...(cap ? { maxBytes: cap.maxBytes } : {}),
    ...(cap && cap.maxFiles !== null ? { maxFiles: cap.maxFiles } : {}),
  });
  if (!run.ok) return run;
  const image = parseReceipt(run.stdout).image;
  if (image === undefined || !STATES.has(image))
    return fail('helper_output_invalid', 'image answer lacks image made|attached|mounted|none');
  return ok({ image: image as WorkspaceImageState });
}

/** What the image probe proved: the throwaway image's size, and how far it let writes and files go. */
export interface WorkspaceImageProbeReceipt {
  imageBytes: number;
  bytesWritten: number;
  filesMade: number;
}

/**
 * Proves that a workspace image bounds here (op image_probe): in the helper's own private
 * mount namespace, a throwaway image beneath `workspaceRoot` (a workspace_root of the helper's
 * config, matched exactly) is made, attached and mounted as a workspace's, and refuses a write
 * and a file past its size with ENOSPC; then nothing of it remains. A refusal's detail reads
 * `image_probe <step>: <why>`, the step naming the facility that failed (e.g. loop_attach).
 */
export async function runHelperImageProbe(
  helper: HelperLocation,
  workspaceRoot: string,
): Promise<Result<WorkspaceImageProbeReceipt, HelperFailureReason>> {
  const run = await runHelperOperation(helper, { op: 'image_probe', workspace: workspaceRoot });
  if (!run.ok) return run;
  const receipt = parseReceipt(run.stdout);
  const imageBytes = countField(receipt, 'image_bytes');
  const bytesWritten = countField(receipt, 'bytes_written');
  const filesMade = countField(receipt, 'files_made');
  if (receipt.image_probe !== 'enforced' || imageBytes === null || bytesWritten === null || filesMade === null)
    return fail('helper_output_invalid', 'image_probe answer lacks image_probe enforced and its counts');
  return ok({ imageBytes, bytesWritten, filesMade });
}
