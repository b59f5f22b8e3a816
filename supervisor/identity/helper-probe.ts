/**
 * The helper's probes (identity-helper/src/operations.c, op probe): they change nothing and are
 * the only source of an identity claim, `separate_uid` from the setuid helper and `shared_uid`
 * from the shared-mode launcher.
 */
import { fail, ok, type Result } from '../../core/result.js';
import { DESCRIPTOR_PROTOCOL_VERSION } from './helper-descriptor.js';
import {
  decimalField,
  parseReceipt,
  runHelperOperation,
  type HelperFailureReason,
  type HelperLocation,
} from './helper-process.js';

/**
 * The receipt checks, repeated here so a wrong helper cannot claim an identity: every id the
 * worker's, no capability in any set, no_new_privs, no supplementary groups (except in a user
 * namespace, where the kernel keeps the caller's).
 */
function probeMismatch(receipt: Record<string, string>, workerUid: number, workerGid: number): string | null {
  for (const key of ['worker_ruid', 'worker_euid', 'worker_suid']) {
    if (decimalField(receipt, key) !== workerUid) return `${key} is not ${workerUid}`;
  }
  for (const key of ['worker_rgid', 'worker_egid', 'worker_sgid']) {
    if (decimalField(receipt, key) !== workerGid) return `${key} is not ${workerGid}`;
  }
  const expected: Record<string, string> = {
    worker_no_new_privs: '1',
    worker_cap_bnd: '0000000000000000',
    worker_cap_eff: '0000000000000000',
    worker_cap_prm: '0000000000000000',
  };
  if (receipt.user_namespace !== 'yes') expected.worker_groups = '0';
  for (const [key, value] of Object.entries(expected)) {
    if (receipt[key] !== value) return `${key} is ${receipt[key] ?? 'missing'}, must be ${value}`;
  }
  const versions = (receipt.protocol_versions ?? '').split(' ');
  if (!versions.includes(String(DESCRIPTOR_PROTOCOL_VERSION)))
    return `helper does not speak protocol ${DESCRIPTOR_PROTOCOL_VERSION}`;
  return null;
}

export interface HelperProbeReceipt {
  workerUid: number;
  uidRange: { first: number; count: number };
  helperVersion: string;
  receipt: Record<string, string>;
}

/**
 * Proves the helper can switch to a worker identity of its range; the only source of a
 * `separate_uid` claim.
 */
export async function runHelperProbe(
  helper: HelperLocation,
  uid?: number,
): Promise<Result<HelperProbeReceipt, HelperFailureReason>> {
  const run = await runHelperOperation(helper, uid === undefined ? { op: 'probe' } : { op: 'probe', uid });
  if (!run.ok) return run;
  const receipt = parseReceipt(run.stdout);
  const workerUid = decimalField(receipt, 'worker_uid');
  const [first, count] = (receipt.uid_range ?? '').split(' ').map(Number);
  const helperVersion = receipt.helper_version;
  if (
    receipt.identity !== 'separate' ||
    workerUid === null ||
    workerUid === 0 ||
    first === undefined ||
    count === undefined ||
    helperVersion === undefined
  ) {
    return fail(
      'helper_output_invalid',
      'probe receipt lacks identity separate, worker_uid, uid_range or helper_version',
    );
  }
  const mismatch = probeMismatch(receipt, workerUid, workerUid);
  if (mismatch !== null) return fail('probe_mismatch', mismatch);
  return ok({ workerUid, uidRange: { first, count }, helperVersion, receipt });
}

export interface SharedProbeReceipt {
  workerUid: number;
  /** The worker lives in a user namespace of its own (any supervisor but root). */
  userNamespace: boolean;
  helperVersion: string;
  receipt: Record<string, string>;
}

/**
 * Proves the shared-mode launcher can give a worker the supervisor's own uid with no
 * capabilities (in a user namespace unless the supervisor is root): the only source of a
 * `shared_uid` claim.
 */
export async function runSharedProbe(
  launcher: HelperLocation,
): Promise<Result<SharedProbeReceipt, HelperFailureReason>> {
  const run = await runHelperOperation(launcher, { op: 'probe' });
  if (!run.ok) return run;
  const receipt = parseReceipt(run.stdout);
  const workerUid = decimalField(receipt, 'worker_uid');
  const helperVersion = receipt.helper_version;
  const uid = process.getuid?.() ?? -1;
  const gid = process.getgid?.() ?? -1;
  if (receipt.identity !== 'shared' || workerUid === null || helperVersion === undefined) {
    return fail('helper_output_invalid', 'probe receipt lacks identity shared, worker_uid or helper_version');
  }
  if (workerUid !== uid) return fail('probe_mismatch', `worker_uid is ${workerUid}, not the supervisor's uid ${uid}`);
  const mismatch = probeMismatch(receipt, uid, gid);
  if (mismatch !== null) return fail('probe_mismatch', mismatch);
  return ok({ workerUid, userNamespace: receipt.user_namespace === 'yes', helperVersion, receipt });
}
