/**
 * Workspace uid leases (identity-helper/src/workspace-lease.c, op lease): a uid of the range
 * given to one workspace for its whole life. Ending a lease is a release
 * (helper-workspace-tree.ts), which removes the workspace first.
 */
import { fail, ok, type Result } from '../../core/result.js';
import {
  decimalField,
  parseReceipt,
  runHelperOperation,
  type HelperFailureReason,
  type HelperLocation,
} from './helper-process.js';

export interface WorkspaceLeaseRequest {
  /** The workspace's id, which names its lease. */
  lease: string;
  /** `<workspace_root>/<lease>`: a workspace root of the helper config, then the id. */
  workspace: string;
}

/**
 * Leases a uid of the range to a workspace for its whole life (searching from `uid`), held for
 * `helper.owner`, and creates its directory owned by that uid, group the caller's, mode 2770.
 * Asking again for a lease that exists answers its uid (`existing`): a supervisor that crashed
 * between the helper and its own record gets the same workspace back. Another owner's lease is
 * refused (lease_owner_mismatch). With `adopt`, a lease recorded without an owner by an older
 * release becomes `helper.owner`'s, when `uid` is exactly its uid (no search).
 */
export async function runHelperLease(
  helper: HelperLocation,
  request: WorkspaceLeaseRequest & { uid: number; adopt?: boolean },
): Promise<Result<{ uid: number; existing: boolean }, HelperFailureReason>> {
  const { adopt, ...named } = request;
  const run = await runHelperOperation(helper, {
    op: 'lease',
    ...(adopt === true ? { adopt: true } : { uidSearch: true }),
    owner: helper.owner,
    ...named,
  });
  if (!run.ok) return run;
  const receipt = parseReceipt(run.stdout);
  const uid = decimalField(receipt, 'leased');
  const lease = receipt.lease;
  if (uid === null || (lease !== 'new' && lease !== 'existing'))
    return fail('helper_output_invalid', 'lease answer lacks leased or lease new|existing');
  return ok({ uid, existing: lease === 'existing' });
}
