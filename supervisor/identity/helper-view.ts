/**
 * The helper's view operation (identity-helper/src/operations.c, op view; the view itself is
 * built by identity-helper/src/view.c): what a worker identity can reach, changing nothing.
 */
import { fail, ok, type Result } from '../../core/result.js';
import type { HelperProfile, HelperProtectRule } from './helper-descriptor.js';
import {
  decimalField,
  parseReceipt,
  runHelperOperation,
  type HelperFailureReason,
  type HelperLocation,
} from './helper-process.js';

export interface HelperViewEntry {
  path: string;
  read: boolean;
  write: boolean;
  exists: boolean;
  /** A regular file with no bytes or a directory with no entries; null when the worker cannot tell. */
  empty: boolean | null;
}

export interface HelperViewRequest {
  uid?: number;
  profile: HelperProfile;
  paths: string[];
  /** With a workspace the helper builds the launch view first (profile, protect, hide, tmpSize). */
  workspace?: string;
  protect?: HelperProtectRule[];
  hide?: string[];
  tmpSize?: number;
}

const VIEW_LINE = /^path (\/.*) read (yes|no) write (yes|no) exists (yes|no) empty (yes|no|unknown)$/;

/**
 * What the worker identity can read or write at each path (access(2) as that identity), and
 * whether it exists and is empty; inside the launch view when `workspace` is given.
 */
export async function runHelperView(
  helper: HelperLocation,
  request: HelperViewRequest,
): Promise<Result<{ workerUid: number; viewBuilt: boolean; entries: HelperViewEntry[] }, HelperFailureReason>> {
  const run = await runHelperOperation(helper, { op: 'view', ...request });
  if (!run.ok) return run;
  const receipt = parseReceipt(run.stdout);
  const workerUid = decimalField(receipt, 'worker_uid');
  const entries = run.stdout
    .split('\n')
    .map((line) => VIEW_LINE.exec(line))
    .filter((match): match is RegExpExecArray => match !== null)
    .map((match) => ({
      path: match[1] ?? '',
      read: match[2] === 'yes',
      write: match[3] === 'yes',
      exists: match[4] === 'yes',
      empty: match[5] === 'unknown' ? null : match[5] === 'yes',
    }));
  if (workerUid === null || entries.length !== request.paths.length) {
    return fail('helper_output_invalid', 'view answer does not list every path');
  }
  const viewBuilt = receipt.view === 'built';
  if (viewBuilt !== (request.workspace !== undefined))
    return fail('helper_output_invalid', `view answer says view ${receipt.view ?? 'missing'}`);
  return ok({ workerUid, viewBuilt, entries });
}
