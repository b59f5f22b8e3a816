/**
 * The fs guard: reads and writes beneath a root that a worker may be changing at the same
 * moment, without ever resolving a worker-controlled path. Every operation walks a chain of
 * directory fds, one component at a time, refusing symlinks, special files and hard links,
 * and re-checks each held directory's (dev, ino) before publishing. See docs/fs-guard.md.
 */
import { createHash, randomBytes } from 'node:crypto';
import { fail, ok, type Fail, type Result } from '../../core/result.js';
import { closeQuietly, openDirBeneath } from './dirs.js';
import {
  AT_FDCWD,
  O_CLOEXEC,
  O_CREAT,
  O_DIRECTORY,
  O_EXCL,
  O_NOFOLLOW,
  O_NONBLOCK,
  O_RDONLY,
  O_WRONLY,
  RENAME_NOREPLACE,
  RESOLVE_BENEATH,
  RESOLVE_NO_SYMLINKS,
} from '../../core/linux-abi.js';
import {
  cName,
  fchmod,
  fileType,
  fstat,
  fsync,
  lstatat,
  mkdirat,
  openat,
  openat2,
  pread,
  pwrite,
  renameat2,
  sameIdentity,
  unlinkat,
  type FileStat,
  type SysFail,
} from './sys.js';

export type FsRefusal =
  | 'invalid_path'
  | 'invalid_option'
  | 'alias_denied'
  | 'topology_changed'
  | 'stale_base'
  | 'exists'
  | 'not_found'
  | 'not_a_directory'
  | 'too_large'
  | 'io_error';

const MAX_PATH_BYTES = 4096;
const MAX_COMPONENT_BYTES = 255;
const MAX_PATH_DEPTH = 64;
const DEFAULT_FILE_MODE = 0o644;
const DEFAULT_DIR_MODE = 0o755;
const HASH_CHUNK_BYTES = 64 * 1024;
const TEMP_PREFIX = '.turnhost-tmp-';
const SHA256_HEX = /^[0-9a-f]{64}$/;

export interface Identity {
  dev: bigint;
  ino: bigint;
}

/** A held root directory. `path` is the host path it was opened from, for logs only. */
export interface RootHandle extends Identity {
  readonly fd: number;
  readonly path: string;
}

export interface WriteOptions {
  mode: 'create' | 'replace';
  /** replace: the sha256 (hex) of the content the caller believes is there; absent = any single-link file, or none. */
  expectedSha256?: string;
  maxBytes: number;
  /** Permission bits of the published file (default 0644, umask not applied). */
  fileMode?: number;
  /** Mode of the parent directories the write makes (default 0755, umask not applied). */
  dirMode?: number;
  /** `existing`: a missing parent directory is refused (`not_found`) rather than made. */
  parents?: 'create' | 'existing';
}

export interface WriteReceipt {
  bytes: number;
  sha256: string;
  replaced: boolean;
}

export interface ReadReceipt {
  data: Buffer;
  sha256: string;
}

type Refused = Fail<FsRefusal>;

export interface HeldDir extends Identity {
  fd: number;
  /** The name this directory was opened by in its parent (the previous chain entry); null for the root. */
  name: Buffer | null;
}

const DIR_FLAGS = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
const LEAF_READ_FLAGS = O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
const TEMP_FLAGS = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;

export function openRoot(path: string): Result<RootHandle, FsRefusal> {
  if (!path.startsWith('/') || path.includes('\0')) {
    return fail('invalid_path', `root ${JSON.stringify(path)} must be an absolute path without NUL`);
  }
  const opened = openat(AT_FDCWD, cName(path), DIR_FLAGS);
  if (!opened.ok) return refuseRootOpen(path, opened);
  const st = fstat(opened.fd);
  if (!st.ok) {
    closeQuietly(opened.fd);
    return fail('io_error', `root ${path}: ${st.detail}`);
  }
  return ok({ fd: opened.fd, path, dev: st.stat.dev, ino: st.stat.ino });
}

function refuseRootOpen(path: string, err: SysFail): Refused {
  if (err.reason === 'ENOENT') return fail('not_found', `root ${path} does not exist`);
  if (err.reason === 'ELOOP' || err.reason === 'ENOTDIR') return refuseComponent(AT_FDCWD, cName(path), `root ${path}`);
  return fail('io_error', `root ${path}: ${err.detail}`);
}

export function closeRoot(root: RootHandle): void {
  closeQuietly(root.fd);
}

/**
 * A path relative to a root: non-empty, not absolute, no empty, `.` or `..` components, no
 * NUL or control characters, at most MAX_PATH_BYTES in total, MAX_COMPONENT_BYTES per
 * component and MAX_PATH_DEPTH components.
 */
export function validateRelativePath(path: string): Result<{ components: string[] }, 'invalid_path'> {
  if (typeof path !== 'string' || path.length === 0) return fail('invalid_path', 'path must be a non-empty string');
  if (Buffer.byteLength(path, 'utf8') > MAX_PATH_BYTES)
    return fail('invalid_path', `path exceeds ${MAX_PATH_BYTES} bytes`);
  if (path.startsWith('/')) return fail('invalid_path', 'path must be relative, not absolute');
  if (/[\u0000-\u001f\u007f-\u009f]/.test(path))
    return fail('invalid_path', 'path must not contain NUL or control characters');
  if (/\p{Cs}/u.test(path)) return fail('invalid_path', 'path must be valid Unicode (no lone surrogates)');
  const components = path.split('/');
  if (components.length > MAX_PATH_DEPTH) return fail('invalid_path', `path exceeds ${MAX_PATH_DEPTH} components`);
  for (const component of components) {
    if (component === '') return fail('invalid_path', 'path must not contain empty components (// or a trailing /)');
    if (component === '.' || component === '..')
      return fail('invalid_path', 'path must not contain . or .. components');
    if (Buffer.byteLength(component, 'utf8') > MAX_COMPONENT_BYTES) {
      return fail('invalid_path', `path component exceeds ${MAX_COMPONENT_BYTES} bytes`);
    }
  }
  return ok({ components });
}

function describeAlias(type: ReturnType<typeof fileType>): string {
  return type === 'file' ? 'a hard-linked file' : `a ${type}`;
}

/** Why an existing entry cannot be used as a directory component. */
function refuseComponent(parentFd: number, name: Buffer, label: string): Refused {
  const st = lstatat(parentFd, name);
  if (!st.ok) {
    return st.reason === 'ENOENT'
      ? fail('topology_changed', `${label} vanished while being opened`)
      : fail('io_error', `${label}: ${st.detail}`);
  }
  const type = fileType(st.stat.mode);
  if (type === 'directory') return fail('topology_changed', `${label} changed while being opened`);
  if (type === 'file') return fail('not_a_directory', `${label} is a file, not a directory`);
  return fail('alias_denied', `${label} is ${describeAlias(type)}`);
}

/**
 * A syscall failure that is not a refusal by itself. ENOENT beneath a held directory means the
 * directory was removed under us (a held fd of a deleted directory refuses new entries).
 */
function unexpected(err: SysFail, label: string): Refused {
  if (err.reason === 'ENOENT')
    return fail('topology_changed', `${label}: its directory was removed during the operation`);
  return fail('io_error', `${label}: ${err.detail}`);
}

export function closeChain(chain: HeldDir[]): void {
  for (const held of chain.slice(1)) closeQuietly(held.fd);
}

/**
 * Opens every directory component of `dirs` beneath the root, one held fd per level.
 * With `create`, missing directories are made with mkdirat on the held parent, mode `dirMode`
 * (set with fchmod on the opened directory: no umask, and setgid kept). `made` counts them.
 */
export function walkDirectories(
  root: RootHandle,
  dirs: string[],
  create: boolean,
  dirMode = DEFAULT_DIR_MODE,
): Result<{ chain: HeldDir[]; made: number }, FsRefusal> {
  let made = 0;
  const chain: HeldDir[] = [{ fd: root.fd, name: null, dev: root.dev, ino: root.ino }];
  for (let i = 0; i < dirs.length; i++) {
    const parent = chain[chain.length - 1]!;
    const name = cName(dirs[i]!);
    const label = `component ${JSON.stringify(dirs.slice(0, i + 1).join('/'))}`;
    const held = openComponent(parent.fd, name, label, create ? dirMode : null);
    if (!held.ok) {
      closeChain(chain);
      return held;
    }
    chain.push(held.held);
    if (held.made) made += 1;
  }
  return ok({ chain, made });
}

function openComponent(
  parentFd: number,
  name: Buffer,
  label: string,
  createMode: number | null,
): Result<{ held: HeldDir; made: boolean }, FsRefusal> {
  let opened = openDirBeneath(parentFd, name);
  let madeHere = false;
  if (!opened.ok && opened.reason === 'ENOENT') {
    if (createMode === null) return fail('not_found', `${label} does not exist`);
    const made = mkdirat(parentFd, name, createMode & 0o777);
    if (!made.ok && made.reason !== 'EEXIST') return unexpected(made, label);
    if (made.ok) fsync(parentFd);
    madeHere = made.ok;
    opened = openDirBeneath(parentFd, name);
  }
  if (!opened.ok) {
    if (['ELOOP', 'ENOTDIR', 'EXDEV', 'ENOENT'].includes(opened.reason)) return refuseComponent(parentFd, name, label);
    return fail('io_error', `${label}: ${opened.detail}`);
  }
  const st = fstat(opened.fd);
  // The directory opened without following is what mkdirat made, or one a worker swapped in
  // meanwhile, which is its own: setting the mode of either gives nobody more than it had.
  const moded = madeHere && createMode !== null ? fchmod(opened.fd, createMode) : ok({});
  const failed = !st.ok ? st : !moded.ok ? moded : null;
  if (failed || !st.ok) {
    closeQuietly(opened.fd);
    return fail('io_error', `${label}: ${failed?.detail ?? 'fstat failed'}`);
  }
  return ok({ held: { fd: opened.fd, name, dev: st.stat.dev, ino: st.stat.ino }, made: madeHere });
}

/** Every held directory is still reachable from its held parent under the name it was opened by. */
function verifyChain(chain: HeldDir[]): Result<{}, FsRefusal> {
  for (let i = 1; i < chain.length; i++) {
    const parent = chain[i - 1]!;
    const held = chain[i]!;
    const st = lstatat(parent.fd, held.name!);
    if (!st.ok || !sameIdentity(st.stat, held)) {
      return fail(
        'topology_changed',
        `directory ${JSON.stringify(held.name!.toString('utf8'))} was moved or replaced during the operation`,
      );
    }
  }
  return ok({});
}

/**
 * Opens an existing leaf without following it and without blocking on a FIFO, and accepts
 * only a regular file with exactly one link.
 */
function openLeaf(parentFd: number, name: Buffer, label: string): Result<{ fd: number; stat: FileStat }, FsRefusal> {
  const opened = openat2(parentFd, name, { flags: LEAF_READ_FLAGS, resolve: RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS });
  if (!opened.ok) {
    if (opened.reason === 'ENOENT') return fail('not_found', `${label} does not exist`);
    if (opened.reason === 'ELOOP' || opened.reason === 'EXDEV') return fail('alias_denied', `${label} is a symlink`);
    // A socket cannot be opened at all (ENXIO): say what it is rather than how open failed.
    const st = lstatat(parentFd, name);
    return (st.ok && leafRefusal(st.stat, label)) || fail('io_error', `${label}: ${opened.detail}`);
  }
  const st = fstat(opened.fd);
  if (!st.ok) {
    closeQuietly(opened.fd);
    return fail('io_error', `${label}: ${st.detail}`);
  }
  const refusal = leafRefusal(st.stat, label);
  if (refusal) {
    closeQuietly(opened.fd);
    return refusal;
  }
  return ok({ fd: opened.fd, stat: st.stat });
}

function leafRefusal(stat: FileStat, label: string): Refused | undefined {
  const type = fileType(stat.mode);
  if (type === 'directory') return fail('exists', `${label} is a directory`);
  if (type !== 'file') return fail('alias_denied', `${label} is ${describeAlias(type)}`);
  if (stat.nlink !== 1) return fail('alias_denied', `${label} is a hard-linked file (${stat.nlink} links)`);
  return undefined;
}

/** Reads a held regular file to its end, refusing anything larger than `maxBytes`. */
function readHeld(fd: number, size: number, maxBytes: number, label: string): Result<{ data: Buffer }, FsRefusal> {
  if (size > maxBytes) return fail('too_large', `${label} is ${size} bytes, above the ${maxBytes}-byte cap`);
  // One byte more than the cap detects a file that grew since fstat.
  const buf = Buffer.alloc(Math.min(maxBytes + 1, size + HASH_CHUNK_BYTES));
  let filled = 0;
  while (filled < buf.length) {
    const read = pread(fd, buf.subarray(filled), filled);
    if (!read.ok) return fail('io_error', `${label}: ${read.detail}`);
    if (read.bytes === 0) break;
    filled += read.bytes;
  }
  if (filled > maxBytes) return fail('too_large', `${label} grew above the ${maxBytes}-byte cap`);
  return ok({ data: buf.subarray(0, filled) });
}

function hashHeld(fd: number, label: string): Result<{ sha256: string }, FsRefusal> {
  const hash = createHash('sha256');
  const buf = Buffer.alloc(HASH_CHUNK_BYTES);
  let offset = 0;
  for (;;) {
    const read = pread(fd, buf, offset);
    if (!read.ok) return fail('io_error', `${label}: ${read.detail}`);
    if (read.bytes === 0) return ok({ sha256: hash.digest('hex') });
    hash.update(buf.subarray(0, read.bytes));
    offset += read.bytes;
  }
}

function sha256(data: Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

/** Reads a regular single-link file beneath the root through the no-follow walk. */
export function readFile(root: RootHandle, rel: string, maxBytes: number): Result<ReadReceipt, FsRefusal> {
  if (!Number.isSafeInteger(maxBytes) || maxBytes < 0)
    return fail('invalid_option', 'maxBytes must be a non-negative integer');
  const path = validateRelativePath(rel);
  if (!path.ok) return path;
  const leafName = path.components[path.components.length - 1]!;
  const walked = walkDirectories(root, path.components.slice(0, -1), false);
  if (!walked.ok) return walked;
  const parent = walked.chain[walked.chain.length - 1]!;
  try {
    const leaf = openLeaf(parent.fd, cName(leafName), `file ${JSON.stringify(rel)}`);
    if (!leaf.ok) return leaf;
    try {
      const read = readHeld(leaf.fd, leaf.stat.size, maxBytes, `file ${JSON.stringify(rel)}`);
      if (!read.ok) return read;
      return ok({ data: read.data, sha256: sha256(read.data) });
    } finally {
      closeQuietly(leaf.fd);
    }
  } finally {
    closeChain(walked.chain);
  }
}

function checkWriteOptions(data: Buffer, options: WriteOptions): Result<{}, FsRefusal> {
  // Options reach here from HTTP bodies: checked whatever the type says.
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition
  if (options.mode !== 'create' && options.mode !== 'replace')
    return fail('invalid_option', 'mode must be create or replace');
  if (!Number.isSafeInteger(options.maxBytes) || options.maxBytes < 0) {
    return fail('invalid_option', 'maxBytes must be a non-negative integer');
  }
  if (options.expectedSha256 !== undefined) {
    if (options.mode !== 'replace') return fail('invalid_option', 'expectedSha256 applies to mode replace only');
    if (!SHA256_HEX.test(options.expectedSha256))
      return fail('invalid_option', 'expectedSha256 must be 64 lowercase hex digits');
  }
  const dirMode = options.dirMode ?? DEFAULT_DIR_MODE;
  if (!Number.isInteger(dirMode) || dirMode < 0 || dirMode > 0o7777)
    return fail('invalid_option', 'dirMode must be mode bits (0 to 07777)');
  const fileMode = options.fileMode ?? DEFAULT_FILE_MODE;
  if (!Number.isInteger(fileMode) || fileMode < 0 || fileMode > 0o777) {
    return fail('invalid_option', 'fileMode must be permission bits (0 to 0777)');
  }
  if (data.length > options.maxBytes)
    return fail('too_large', `${data.length} bytes exceed the ${options.maxBytes}-byte cap`);
  return ok({});
}

/**
 * What is at the destination now. For create it must be absent; for replace it must be a
 * single-link regular file (whose content matches `expectedSha256` when given), or absent
 * when no hash was given.
 */
function checkDestination(
  parentFd: number,
  name: Buffer,
  options: WriteOptions,
  label: string,
): Result<{ existing: Identity | null }, FsRefusal> {
  if (options.mode === 'create') {
    const st = lstatat(parentFd, name);
    if (!st.ok) return st.reason === 'ENOENT' ? ok({ existing: null }) : fail('io_error', `${label}: ${st.detail}`);
    return leafRefusal(st.stat, label) ?? fail('exists', `${label} already exists`);
  }
  const leaf = openLeaf(parentFd, name, label);
  if (!leaf.ok) {
    if (leaf.reason !== 'not_found') return leaf;
    return options.expectedSha256 === undefined
      ? ok({ existing: null })
      : fail('stale_base', `${label} no longer exists`);
  }
  try {
    if (options.expectedSha256 !== undefined) {
      const hashed = hashHeld(leaf.fd, label);
      if (!hashed.ok) return hashed;
      if (hashed.sha256 !== options.expectedSha256)
        return fail('stale_base', `${label} content changed since it was read`);
    }
    return ok({ existing: { dev: leaf.stat.dev, ino: leaf.stat.ino } });
  } finally {
    closeQuietly(leaf.fd);
  }
}

/** The destination is still what checkDestination saw. */
function recheckDestination(
  parentFd: number,
  name: Buffer,
  existing: Identity | null,
  mode: WriteOptions['mode'],
  label: string,
): Result<{}, FsRefusal> {
  const st = lstatat(parentFd, name);
  if (existing === null) {
    if (st.ok) return fail(mode === 'create' ? 'exists' : 'stale_base', `${label} appeared during the write`);
    return st.reason === 'ENOENT' ? ok({}) : fail('io_error', `${label}: ${st.detail}`);
  }
  if (!st.ok || !sameIdentity(st.stat, existing)) return fail('stale_base', `${label} was replaced during the write`);
  return ok({});
}

interface TempFile extends Identity {
  name: Buffer;
}

/** Creates, fills and fsyncs an exclusive temporary file in the held parent. */
function writeTemp(parentFd: number, data: Buffer, fileMode: number): Result<{ temp: TempFile }, FsRefusal> {
  const name = cName(TEMP_PREFIX + randomBytes(12).toString('hex'));
  const opened = openat(parentFd, name, TEMP_FLAGS, 0o600);
  if (!opened.ok) return unexpected(opened, 'temporary file');
  const filled = fillTemp(opened.fd, data, fileMode);
  closeQuietly(opened.fd);
  if (!filled.ok) {
    unlinkat(parentFd, name, 0);
    return filled;
  }
  return ok({ temp: { name, dev: filled.stat.dev, ino: filled.stat.ino } });
}

function fillTemp(fd: number, data: Buffer, fileMode: number): Result<{ stat: FileStat }, FsRefusal> {
  let written = 0;
  while (written < data.length) {
    const wrote = pwrite(fd, data.subarray(written), written);
    if (!wrote.ok) return fail('io_error', `temporary file: ${wrote.detail}`);
    written += wrote.bytes;
  }
  const steps = [fchmod(fd, fileMode), fsync(fd)];
  for (const step of steps) if (!step.ok) return fail('io_error', `temporary file: ${step.detail}`);
  const st = fstat(fd);
  if (!st.ok) return fail('io_error', `temporary file: ${st.detail}`);
  return ok({ stat: st.stat });
}

/**
 * Publishes the temp under its final name after the identity re-checks; removes the temp
 * when it refuses before the rename.
 */
function publish(
  chain: HeldDir[],
  temp: TempFile,
  leafName: Buffer,
  existing: Identity | null,
  mode: WriteOptions['mode'],
  label: string,
): Result<{}, FsRefusal> {
  const parent = chain[chain.length - 1]!;
  const renamed = checkAndRename(chain, temp, leafName, existing, mode, label);
  if (!renamed.ok) {
    unlinkat(parent.fd, temp.name, 0);
    return renamed;
  }
  const synced = fsync(parent.fd);
  if (!synced.ok) return fail('io_error', `${label} published but the directory fsync failed: ${synced.detail}`);
  return ok({});
}

function checkAndRename(
  chain: HeldDir[],
  temp: TempFile,
  leafName: Buffer,
  existing: Identity | null,
  mode: WriteOptions['mode'],
  label: string,
): Result<{}, FsRefusal> {
  const parent = chain[chain.length - 1]!;
  const verified = verifyChain(chain);
  if (!verified.ok) return verified;
  const tempNow = lstatat(parent.fd, temp.name);
  if (!tempNow.ok || !sameIdentity(tempNow.stat, temp))
    return fail('topology_changed', 'temporary file was moved or replaced');
  const destination = recheckDestination(parent.fd, leafName, existing, mode, label);
  if (!destination.ok) return destination;
  const renamed = renameat2(parent.fd, temp.name, parent.fd, leafName, existing === null ? RENAME_NOREPLACE : 0);
  if (renamed.ok) return ok({});
  if (renamed.reason === 'EEXIST')
    return fail(mode === 'create' ? 'exists' : 'stale_base', `${label} appeared during the write`);
  if (renamed.reason === 'ENOENT') return fail('topology_changed', 'temporary file vanished before publication');
  return fail('io_error', `${label}: ${renamed.detail}`);
}

/**
 * Writes `data` to `rel` beneath the root: create (destination must be absent) or replace
 * (destination a single-link regular file, optionally with the expected content hash).
 */
export function writeFile(
  root: RootHandle,
  rel: string,
  data: Buffer,
  options: WriteOptions,
): Result<WriteReceipt, FsRefusal> {
  const checked = checkWriteOptions(data, options);
  if (!checked.ok) return checked;
  const path = validateRelativePath(rel);
  if (!path.ok) return path;
  const label = `destination ${JSON.stringify(rel)}`;
  const leafName = cName(path.components[path.components.length - 1]!);
  const walked = walkDirectories(
    root,
    path.components.slice(0, -1),
    options.parents !== 'existing',
    options.dirMode ?? DEFAULT_DIR_MODE,
  );
  if (!walked.ok) return walked;
  try {
    const parent = walked.chain[walked.chain.length - 1]!;
    const destination = checkDestination(parent.fd, leafName, options, label);
    if (!destination.ok) return destination;
    const written = writeTemp(parent.fd, data, options.fileMode ?? DEFAULT_FILE_MODE);
    if (!written.ok) return written;
    const published = publish(walked.chain, written.temp, leafName, destination.existing, options.mode, label);
    if (!published.ok) return published;
    return ok({ bytes: data.length, sha256: sha256(data), replaced: destination.existing !== null });
  } finally {
    closeChain(walked.chain);
  }
}
