/**
 * The lease owner of this supervisor instance: a random id made once, at the first start, in
 * the data directory (`lease-owner`, 0600), and named in every workspace lease, release, usage
 * and leased launch (docs/identity-helper-protocol.md, "Lease owners"). Two supervisors that
 * share one helper config share its lease namespace; the owner is what keeps one from taking,
 * reading or removing the other's workspaces.
 *
 * The id is random rather than derived from the data directory's device and inode so that it
 * survives a move or a restore of the data directory with the records that name its workspaces.
 * It is not a secret against a process that can already call the helper (every member of the
 * helper's caller group may name any owner): it separates supervisor instances and the API
 * clients they serve, not mutually hostile supervisors.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { isValidId } from '../../api/schema/ids.js';
import { fail, ok, type Result } from '../../core/result.js';

const OWNER_FILE = 'lease-owner';
const MAX_OWNER_FILE_BYTES = 128;

const known = new Map<string, string>();

function readOwnerFile(file: string): Result<{ owner: string }> {
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (error) {
    return fail('owner_unreadable', `${file}: ${(error as Error).message}`);
  }
  try {
    const st = fs.fstatSync(fd);
    const euid = process.geteuid?.() ?? 0;
    if (!st.isFile() || st.uid !== euid || (st.mode & 0o022) !== 0)
      return fail('owner_unsafe', `${file}: must be a regular file of the supervisor's uid, not group/other-writable`);
    const buffer = Buffer.alloc(MAX_OWNER_FILE_BYTES + 1);
    const length = fs.readSync(fd, buffer, 0, buffer.length, 0);
    const owner = buffer.subarray(0, length).toString('utf8').replace(/\n$/, '');
    if (!isValidId(owner)) return fail('owner_malformed', `${file}: must hold one id of 1-64 [A-Za-z0-9_-]`);
    return ok({ owner });
  } finally {
    fs.closeSync(fd);
  }
}

function createOwnerFile(file: string): Result<{ created: boolean }> {
  const owner = `own_${randomBytes(16).toString('hex')}`;
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL, 0o600);
  } catch (error) {
    // Another start made it first: the caller reads that one.
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return ok({ created: false });
    return fail('owner_unwritable', `${file}: ${(error as Error).message}`);
  }
  try {
    fs.writeSync(fd, `${owner}\n`);
    fs.fsyncSync(fd);
    return ok({ created: true });
  } catch (error) {
    return fail('owner_unwritable', `${file}: ${(error as Error).message}`);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * This instance's lease owner, made at the first call for a data directory and the same for
 * its whole life. Fails, naming the file, when it cannot be read or made: a supervisor without
 * an owner must not lease (the helper refuses a lease op without one).
 */
export function leaseOwner(dataDir: string): Result<{ owner: string }> {
  const cached = known.get(dataDir);
  if (cached !== undefined) return ok({ owner: cached });
  const file = path.join(dataDir, OWNER_FILE);
  if (!fs.existsSync(file)) {
    const created = createOwnerFile(file);
    if (!created.ok) return created;
  }
  const read = readOwnerFile(file);
  if (read.ok) known.set(dataDir, read.owner);
  return read;
}
