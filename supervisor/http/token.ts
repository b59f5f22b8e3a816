/**
 * The API token: configured (`apiToken`), or kept in `<dataDir>/api-token`, created at first
 * start with O_CREAT|O_EXCL|O_NOFOLLOW and mode 0600 so it is never readable by anyone else,
 * not even for an instant, and never written through a planted link.
 */
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import { fail, ok, type Result } from '../../core/result.js';
import { tokenFilePath } from '../config/token-path.js';

const MAX_TOKEN_FILE_BYTES = 4096;

/** Reads the token file, refusing anything but a private regular file owned by this uid. */
export function readTokenFile(dataDir: string): Result<{ token: string }, 'token_missing' | 'token_unusable'> {
  const file = tokenFilePath(dataDir);
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return fail('token_missing', `${file} does not exist`);
    return fail('token_unusable', `${file}: cannot open (${code ?? 'error'})`);
  }
  try {
    const stat = fs.fstatSync(fd);
    if (!stat.isFile()) return fail('token_unusable', `${file}: not a regular file`);
    if ((stat.mode & 0o077) !== 0) return fail('token_unusable', `${file}: readable by group or others; chmod 600 it`);
    if (stat.size > MAX_TOKEN_FILE_BYTES)
      return fail('token_unusable', `${file}: larger than ${MAX_TOKEN_FILE_BYTES} bytes`);
    const token = fs.readFileSync(fd, 'utf8').trim();
    if (!/^[\x21-\x7e]{16,512}$/.test(token))
      return fail('token_unusable', `${file}: not a token (16-512 printable characters)`);
    return ok({ token });
  } finally {
    fs.closeSync(fd);
  }
}

function createTokenFile(dataDir: string): Result<{ token: string }, 'token_unusable' | 'token_exists'> {
  const file = tokenFilePath(dataDir);
  const token = randomBytes(32).toString('base64url');
  let fd: number;
  try {
    fd = fs.openSync(
      file,
      fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_NOFOLLOW,
      0o600,
    );
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') return fail('token_exists', `${file} exists`);
    return fail('token_unusable', `${file}: cannot create (${code ?? 'error'})`);
  }
  try {
    fs.fchmodSync(fd, 0o600);
    fs.writeSync(fd, token + '\n');
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
  return ok({ token });
}

/** The configured token, else the token file, creating it at first start. */
export function ensureApiToken(config: {
  apiToken: string | null;
  dataDir: string;
}): Result<{ token: string; source: 'config' | 'file' | 'generated' }, 'token_unusable'> {
  if (config.apiToken !== null) return ok({ token: config.apiToken, source: 'config' });
  const existing = readTokenFile(config.dataDir);
  if (existing.ok) return ok({ token: existing.token, source: 'file' });
  if (existing.reason === 'token_unusable') return fail('token_unusable', existing.detail);
  const created = createTokenFile(config.dataDir);
  if (created.ok) return ok({ token: created.token, source: 'generated' });
  if (created.reason === 'token_unusable') return fail('token_unusable', created.detail);
  // Another process created it between our read and our O_EXCL create: use theirs.
  const raced = readTokenFile(config.dataDir);
  return raced.ok ? ok({ token: raced.token, source: 'file' }) : fail('token_unusable', raced.detail);
}
