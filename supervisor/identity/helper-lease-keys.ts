/**
 * The descriptor's workspace lease keys (identity-helper/src/descriptor.c): `lease` (the
 * workspace's id), `owner` (the supervisor instance the lease is held for, helper-owner.ts),
 * `adopt` (an owner-less record of an older release takes the owner), `dir` (mkdir's
 * directory beneath the workspace) and image's `max_bytes`, `max_files`. Encoded for
 * helper-descriptor.ts, which hands in its own refusal so the field is named the same way.
 */
import { isValidId } from '../../api/schema/ids.js';
import { isCanonicalRelativePath } from './helper-paths.js';

interface LeaseKeys {
  op: string;
  uidSearch?: boolean;
  lease?: string;
  owner?: string;
  adopt?: boolean;
  dir?: string;
}

/** The lines of `lease`, `owner` and `adopt`; refuses what the helper would refuse. */
export function leaseKeyLines(d: LeaseKeys, refuse: (field: string, message: string) => never): string[] {
  const lines: string[] = [];
  for (const key of ['lease', 'owner'] as const) {
    const value = d[key];
    if (value === undefined) continue;
    if (typeof value !== 'string' || !isValidId(value)) refuse(key, '1-64 of [A-Za-z0-9_-]');
    lines.push(`${key} ${value}`);
  }
  if (d.op === 'launch' && d.lease !== undefined && d.uidSearch === true)
    refuse('uidSearch', 'a leased launch runs as its lease uid');
  // A leased launch runs in the lease's workspace: it must be this owner's too.
  if (d.op === 'launch' && (d.lease === undefined) !== (d.owner === undefined))
    refuse(d.lease === undefined ? 'lease' : 'owner', 'a launch names lease and owner together or neither');
  if (d.dir !== undefined) {
    if (typeof d.dir !== 'string' || !isCanonicalRelativePath(d.dir)) refuse('dir', 'must be a clean relative path');
    lines.push(`dir ${d.dir}`);
  }
  if (d.adopt === true) {
    if (d.uidSearch === true) refuse('adopt', "names the record's exact uid, not with uidSearch");
    lines.push('adopt yes');
  }
  return lines;
}

/** The helper's bounds of an image (identity-helper/src/descriptor.c, workspace-image.h). */
const IMAGE_LIMITS = { maxBytes: 2 ** 50, maxFiles: 2 ** 32 } as const;

/** image: `max_bytes` (a new image's size) and `max_files` (its inodes, only with a size). */
export function imageKeyLines(
  d: { maxBytes?: number; maxFiles?: number },
  refuse: (field: string, message: string) => never,
): string[] {
  const lines: string[] = [];
  for (const [field, key, max] of [
    ['maxBytes', 'max_bytes', IMAGE_LIMITS.maxBytes],
    ['maxFiles', 'max_files', IMAGE_LIMITS.maxFiles],
  ] as const) {
    const value = d[field];
    if (value === undefined) continue;
    if (!Number.isSafeInteger(value) || value < 1 || value > max) refuse(field, `an integer from 1 to ${max}`);
    lines.push(`${key} ${value}`);
  }
  if (d.maxFiles !== undefined && d.maxBytes === undefined) refuse('maxFiles', 'only with maxBytes (a new image)');
  return lines;
}
