/**
 * A tar stream extracted into a workspace directory (PUT /api/workspaces/:id/archive). Entries
 * are applied one by one as they arrive, each through the same operations as the file API (the
 * caller's `ArchiveTarget`: held no-follow dirfds, directories owned by the workspace's uid,
 * files written like a PUT). Only regular files and directories are extracted; any other kind,
 * a name that is absolute, has a `..` component or does not fit the path rules, a metadata
 * header over its bound, or a truncated archive stops the extraction at that entry. Entries
 * before it stay extracted (they were complete files), and the refusal says how many.
 */
import { fail, ok, type Ok, type Result } from '../../core/result.js';
import type { WriteReceipt } from '../fs/guard.js';
import { validateRelativePath } from '../fs/guard.js';
import { TarReader, type TarEntry } from './tar-format.js';
import type { WorkspaceFileFailure } from './types.js';

/** Entries (files and directories, metadata headers not counted) one archive may hold. */
const MAX_ARCHIVE_ENTRIES = 100_000;
/** Longest entry name accepted, in bytes (the fs guard's path bound). */
const MAX_ARCHIVE_NAME_BYTES = 4096;
/** Largest pax extended header accepted. */
const MAX_PAX_BYTES = 64 * 1024;
/** Zero padding accepted after the end-of-archive marker (tar pads to 10240-byte records). */
const MAX_TRAILING_BYTES = 1024 * 1024;

export interface ArchiveExtractReceipt {
  files: number;
  directories: number;
  /** Content bytes written. */
  bytes: number;
}

/** Why an extraction stopped: the failure, which entry, and what was extracted before it. */
export type ArchiveExtractFailure = WorkspaceFileFailure | 'invalid_archive';

export interface ArchiveRefusal {
  ok: false;
  reason: ArchiveExtractFailure;
  detail: string;
  /** The refused entry's name as the archive spells it (absent: the archive as a whole). */
  entry?: string;
  extracted: ArchiveExtractReceipt;
}

/** Where the entries go: the workspace's own operations, with paths relative to the workspace. */
/** An extraction's outcome: what it extracted, or where it stopped. */
export type ArchiveExtractOutcome = Ok<ArchiveExtractReceipt> | ArchiveRefusal;

export interface ArchiveTarget {
  /** Makes a directory and its missing parents, owned as the workspace's turns need. */
  makeDirectory(rel: string): Promise<Result<{ made: number }, WorkspaceFileFailure>>;
  /** Writes (or replaces) a regular file whose parents exist. */
  writeFile(rel: string, data: Buffer, executable: boolean): Result<WriteReceipt, WorkspaceFileFailure>;
}

export interface ArchiveExtractLimits {
  /** Content bytes the workspace may still take (`workspaces.maxBytes` less its usage). */
  budgetBytes: number;
  /** Largest single file (`fs.hostWriteMaxBytes`). */
  maxFileBytes: number;
}

/**
 * The workspace path an entry name lands on beneath `dir`: `./` prefixes and `.` components and
 * a trailing `/` are dropped (GNU tar writes them); null for the directory itself.
 */
export function entryPath(dir: string, name: Buffer): Result<{ rel: string | null }, 'invalid_archive'> {
  const text = name.toString('utf8');
  if (!Buffer.from(text, 'utf8').equals(name)) return fail('invalid_archive', 'the name is not UTF-8');
  if (text.startsWith('/')) return fail('invalid_archive', 'an absolute name is not extracted');
  const components = text.split('/').filter((component, i, all) => {
    // A trailing slash (a directory) and `.` name nothing more.
    return component !== '.' && !(component === '' && i === all.length - 1);
  });
  if (components.includes('..')) return fail('invalid_archive', 'a name with a .. component is not extracted');
  if (components.length === 0) return ok({ rel: null });
  const rel = dir === '' || dir === '.' ? components.join('/') : `${dir}/${components.join('/')}`;
  const valid = validateRelativePath(rel);
  if (!valid.ok) return fail('invalid_archive', valid.detail);
  return ok({ rel });
}

function describeKind(entry: TarEntry): string {
  switch (entry.kind) {
    case 'symlink':
      return 'a symlink';
    case 'hardlink':
      return 'a hard link';
    case 'character_device':
    case 'block_device':
      return 'a device';
    case 'fifo':
      return 'a FIFO';
    default:
      return `an entry of unsupported type '${entry.typeflag.replace(/[^\x20-\x7e]/g, '?')}'`;
  }
}

/** A guard refusal that is the entry's name at fault (a link or a file in its way): the archive's. */
const NAME_REFUSALS = new Set<string>(['invalid_path', 'alias_denied', 'not_a_directory', 'exists']);

export class ArchiveExtraction {
  readonly receipt: ArchiveExtractReceipt = { files: 0, directories: 0, bytes: 0 };
  /** Directories known to exist (made or confirmed by this extraction). */
  private readonly ready = new Set<string>();

  constructor(
    private readonly dir: string,
    private readonly target: ArchiveTarget,
    private readonly limits: ArchiveExtractLimits,
  ) {}

  /** Reads `source` to its end-of-archive marker, extracting every entry, or stops at the first refusal. */
  async run(source: AsyncIterable<Buffer>): Promise<ArchiveExtractOutcome> {
    const reader = new TarReader(source, {
      maxNameBytes: MAX_ARCHIVE_NAME_BYTES,
      maxMetaBytes: MAX_PAX_BYTES,
      maxTrailingBytes: MAX_TRAILING_BYTES,
    });
    const top = await this.directory(this.dir === '.' ? '' : this.dir);
    if (!top.ok) return this.refusal(top.reason, top.detail);
    for (let count = 0; ; count++) {
      const next = await reader.next();
      if (!next.ok) return this.refusal('invalid_archive', next.detail);
      const { entry } = next;
      if (entry === null) return ok({ ...this.receipt });
      if (count >= MAX_ARCHIVE_ENTRIES)
        return this.refusal('invalid_archive', `more than ${MAX_ARCHIVE_ENTRIES} entries`, entry);
      const applied = await this.apply(entry, reader);
      if (!applied.ok) return this.refusal(applied.reason, applied.detail, entry);
    }
  }

  private async apply(entry: TarEntry, reader: TarReader): Promise<Result<{}, ArchiveExtractFailure>> {
    if (entry.kind !== 'file' && entry.kind !== 'directory')
      return fail('invalid_archive', `${describeKind(entry)} is not extracted (only files and directories)`);
    const path = entryPath(this.dir === '.' ? '' : this.dir, entry.name);
    if (!path.ok) return path;
    const { rel } = path;
    if (entry.kind === 'directory') {
      if (rel === null) return ok({});
      return this.directory(rel);
    }
    if (rel === null) return fail('invalid_archive', 'a file entry names the target directory itself');
    if (entry.size > this.limits.maxFileBytes)
      return fail(
        'too_large',
        `${entry.size} bytes, above the ${this.limits.maxFileBytes}-byte cap (fs.hostWriteMaxBytes)`,
      );
    if (this.receipt.bytes + entry.size > this.limits.budgetBytes)
      return fail(
        'workspace_full',
        `${entry.size} more bytes exceed the workspace's cap (workspaces.maxBytes): ${this.limits.budgetBytes - this.receipt.bytes} bytes were left`,
      );
    const body = await reader.body();
    if (!body.ok) return body;
    const slash = rel.lastIndexOf('/');
    if (slash >= 0) {
      const parent = await this.directory(rel.slice(0, slash));
      if (!parent.ok) return parent;
    }
    const written = this.target.writeFile(rel, body.data, (entry.mode & 0o111) !== 0);
    if (!written.ok) return written;
    this.receipt.files += 1;
    this.receipt.bytes += written.bytes;
    return ok({});
  }

  /** Makes `rel` (with its parents) once per extraction; `''` is the workspace itself. */
  private async directory(rel: string): Promise<Result<{}, WorkspaceFileFailure>> {
    if (rel === '' || this.ready.has(rel)) return ok({});
    const made = await this.target.makeDirectory(rel);
    if (!made.ok) return made;
    this.receipt.directories += made.made;
    this.ready.add(rel);
    return ok({});
  }

  private refusal(reason: ArchiveExtractFailure, detail: string, entry?: TarEntry): ArchiveRefusal {
    const extracted = { ...this.receipt };
    if (!entry)
      return { ok: false, reason, detail: reason === 'invalid_archive' ? `body: ${detail}` : detail, extracted };
    const name = entry.name.toString('utf8').slice(0, 1024);
    // A link or file already in the workspace where the entry goes is the entry's refusal too.
    const asArchive = NAME_REFUSALS.has(reason) ? 'invalid_archive' : reason;
    return {
      ok: false,
      reason: asArchive,
      detail: `body: entry ${entry.index} ${JSON.stringify(name)}: ${detail}`,
      entry: name,
      extracted,
    };
  }
}
