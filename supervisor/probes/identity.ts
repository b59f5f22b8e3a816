/**
 * Worker identity: which uid workers will run as, established afresh by every probe, and
 * claimed only from a receipt of this probe run.
 *
 * A configured helper must qualify (see `qualifyIdentityHelper`) and answer its own probe with
 * a receipt naming the nonzero uid of its range a worker switched to; only then is the
 * identity `separate_uid`. No helper configured: the shared_uid launcher must answer its probe
 * with a worker of the supervisor's own uid holding no capability; only then is the identity
 * `shared_uid`. Anything less gives no identity at all (the field is omitted) and a requirement
 * that makes every mode unavailable: never a silent fallback from one mode to the other.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fail, ok, type Result } from '../../core/result.js';
import type { FacilityStatus } from './types.js';
import type { IdentityMode } from '../../core/modes.js';

export interface SupervisorIds {
  uid: number;
  euid: number;
}

interface HelperReceipt {
  workerUid: number;
  uidRange: { first: number; count: number };
  helperVersion: string;
}

export type HelperProbe = () => Promise<Result<HelperReceipt>>;

interface SharedReceipt {
  workerUid: number;
  userNamespace: boolean;
  helperVersion: string;
}

export type SharedProbe = () => Promise<Result<SharedReceipt>>;

export interface IdentityProbe {
  /** Present only with a verified receipt from this probe run. */
  identity?: IdentityMode;
  /** shared_uid: the worker lives in a user namespace of its own (any supervisor but root). */
  userNamespace?: boolean;
  /** Present only with a verified receipt from this probe run. */
  workerUid?: number;
  /** The helper's verified uid range, from the same receipt. */
  uidRange?: { first: number; count: number };
  helper: FacilityStatus & { path: string | null; qualified: boolean };
  /** Why the identity is not established; makes every mode unavailable. */
  requirement?: string;
}

/** Linux's own bound on symbolic links followed during one lookup. */
const MAX_SYMLINK_HOPS = 40;

function octal(mode: number): string {
  return '0' + (mode & 0o7777).toString(8);
}

function lstatOrNull(target: string): fs.Stats | null {
  try {
    return fs.lstatSync(target);
  } catch {
    return null;
  }
}

/** A directory the helper path is looked up in must not be replaceable by anyone but root. */
function directoryRequirement(dir: string, stat: fs.Stats): string | null {
  if (stat.uid !== 0) return `identity helper directory ${dir} must be owned by root (owner is uid ${stat.uid})`;
  if ((stat.mode & 0o022) !== 0) {
    return `identity helper directory ${dir} must not be writable by group or others (mode ${octal(stat.mode)})`;
  }
  return null;
}

/**
 * Walks the helper path one component at a time, following symbolic links by hand, so that
 * every directory a lookup happens in (including directories reached through links) is
 * checked. Answers the final object's real path and lstat.
 */
function resolveThroughCheckedDirectories(
  helperPath: string,
): Result<{ realPath: string; stat: fs.Stats }, 'helper_unqualified'> {
  const rootStat = lstatOrNull('/');
  const rootRequirement =
    rootStat === null ? 'identity helper directory / cannot be read' : directoryRequirement('/', rootStat);
  if (rootRequirement !== null) return fail('helper_unqualified', rootRequirement);
  const pending = helperPath.split('/').filter((c) => c !== '' && c !== '.');
  let dir = '/';
  let hops = 0;
  while (pending.length > 0) {
    const name = pending.shift() as string;
    if (name === '..') {
      dir = path.dirname(dir);
      continue;
    }
    const full = path.join(dir, name);
    const stat = lstatOrNull(full);
    if (stat === null)
      return fail('helper_unqualified', `identity helper ${helperPath} does not exist (${full} is missing)`);
    if (stat.isSymbolicLink()) {
      hops += 1;
      if (hops > MAX_SYMLINK_HOPS) {
        return fail(
          'helper_unqualified',
          `identity helper ${helperPath} resolves through more than ${MAX_SYMLINK_HOPS} symbolic links`,
        );
      }
      const target = fs.readlinkSync(full);
      if (target.startsWith('/')) dir = '/';
      pending.unshift(...target.split('/').filter((c) => c !== '' && c !== '.'));
      continue;
    }
    if (pending.length === 0) return ok({ realPath: full, stat });
    if (!stat.isDirectory())
      return fail('helper_unqualified', `identity helper ${helperPath}: ${full} is not a directory`);
    const requirement = directoryRequirement(full, stat);
    if (requirement !== null) return fail('helper_unqualified', requirement);
    dir = full;
  }
  return fail('helper_unqualified', `identity helper ${helperPath} must name a file, not a directory`);
}

function fileRequirement(helperPath: string, stat: fs.Stats, ids: SupervisorIds): string | null {
  if (!stat.isFile()) return `identity helper ${helperPath} must be a regular file`;
  if (stat.uid !== 0) return `identity helper ${helperPath} must be owned by root (owner is uid ${stat.uid})`;
  if ((stat.mode & 0o022) !== 0) {
    return `identity helper ${helperPath} must not be writable by group or others (mode ${octal(stat.mode)})`;
  }
  if ((stat.mode & 0o111) === 0) return `identity helper ${helperPath} must be executable (mode ${octal(stat.mode)})`;
  if (ids.euid !== 0 && (stat.mode & 0o4000) === 0) {
    return `identity helper ${helperPath} must be setuid root (mode 4750, owner root) because the supervisor runs as uid ${ids.euid}`;
  }
  return null;
}

/** The helper qualification rules; the failure detail is the requirement operators see. */
export function qualifyIdentityHelper(
  helperPath: string,
  ids: SupervisorIds,
): Result<{ realPath: string }, 'helper_unqualified'> {
  if (!path.isAbsolute(helperPath)) {
    return fail('helper_unqualified', `identity helper path must be absolute: ${JSON.stringify(helperPath)}`);
  }
  const resolved = resolveThroughCheckedDirectories(helperPath);
  if (!resolved.ok) return resolved;
  const requirement = fileRequirement(helperPath, resolved.stat, ids);
  if (requirement !== null) return fail('helper_unqualified', requirement);
  return ok({ realPath: resolved.realPath });
}

/** A receipt proves a separate identity only if its uid is nonzero, in range and not ours. */
function receiptRequirement(receipt: HelperReceipt, ids: SupervisorIds): string | null {
  const { workerUid, uidRange } = receipt;
  if (!Number.isSafeInteger(workerUid) || workerUid <= 0) {
    return `identity helper receipt names uid ${workerUid}: the worker uid must be a nonzero integer`;
  }
  if (workerUid === ids.uid || workerUid === ids.euid) {
    return `identity helper receipt names uid ${workerUid}, the supervisor's own uid: workers need a separate uid`;
  }
  if (workerUid < uidRange.first || workerUid >= uidRange.first + uidRange.count) {
    return `identity helper receipt names uid ${workerUid}, outside its reserved range ${uidRange.first}-${uidRange.first + uidRange.count - 1}`;
  }
  return null;
}

async function probeSharedIdentity(ids: SupervisorIds, sharedProbe: SharedProbe | undefined): Promise<IdentityProbe> {
  const helper = {
    available: false,
    detail: 'no identity helper configured: workers run as the supervisor uid',
    path: null,
    qualified: false,
  };
  const unestablished = (why: string): IdentityProbe => ({
    requirement: `shared_uid workers cannot be started: ${why}`,
    helper,
  });
  if (sharedProbe === undefined) return unestablished('no shared_uid launcher is available');
  const receipt = await sharedProbe().catch((error: unknown) => fail('shared_probe_threw', String(error)));
  if (!receipt.ok) return unestablished(receipt.detail);
  if (receipt.workerUid !== ids.euid)
    return unestablished(`the launcher's worker ran as uid ${receipt.workerUid}, not ${ids.euid}`);
  return { identity: 'shared_uid', workerUid: receipt.workerUid, userNamespace: receipt.userNamespace, helper };
}

export async function probeIdentity(
  helperPath: string | null,
  ids: SupervisorIds,
  helperProbe: HelperProbe | undefined,
  sharedProbe?: SharedProbe,
): Promise<IdentityProbe> {
  if (helperPath === null) return probeSharedIdentity(ids, sharedProbe);
  const unestablished = (requirement: string, qualified: boolean): IdentityProbe => ({
    requirement,
    helper: { available: false, detail: requirement, path: helperPath, qualified },
  });
  const qualification = qualifyIdentityHelper(helperPath, ids);
  if (!qualification.ok) return unestablished(qualification.detail, false);
  if (helperProbe === undefined) {
    return unestablished(
      `identity helper ${helperPath} qualifies but no helper probe ran: its worker uid is unverified`,
      true,
    );
  }
  const receipt = await helperProbe().catch((error: unknown) => fail('helper_probe_threw', String(error)));
  if (!receipt.ok) return unestablished(`identity helper ${helperPath} probe failed: ${receipt.detail}`, true);
  const requirement = receiptRequirement(receipt, ids);
  if (requirement !== null) return unestablished(requirement, true);
  return {
    identity: 'separate_uid',
    workerUid: receipt.workerUid,
    uidRange: receipt.uidRange,
    helper: {
      available: true,
      detail: `identity helper ${receipt.helperVersion} verified worker uid ${receipt.workerUid} (range ${receipt.uidRange.first}+${receipt.uidRange.count})`,
      path: helperPath,
      qualified: true,
    },
  };
}
