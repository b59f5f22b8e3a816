/** The helper's kill operation (identity-helper/src/operations.c, op kill). */
import { fail, ok, type Result } from '../../core/result.js';
import {
  decimalField,
  parseReceipt,
  runHelperOperation,
  type HelperFailureReason,
  type HelperLocation,
} from './helper-process.js';

/** SIGKILLs every live process whose real uid is `uid` (best effort; a cgroup kill is exact). */
export async function runHelperKill(
  helper: HelperLocation,
  uid: number,
): Promise<Result<{ workerUid: number; signalled: number }, HelperFailureReason>> {
  const run = await runHelperOperation(helper, { op: 'kill', uid });
  if (!run.ok) return run;
  const receipt = parseReceipt(run.stdout);
  const workerUid = decimalField(receipt, 'worker_uid');
  const signalled = decimalField(receipt, 'killed');
  if (workerUid === null || signalled === null)
    return fail('helper_output_invalid', 'kill answer lacks worker_uid or killed');
  return ok({ workerUid, signalled });
}
