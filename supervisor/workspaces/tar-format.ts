/**
 * The tar format, as much of it as the workspace archive routes need (docs/http-api.md,
 * "Archives"): a streaming reader of POSIX ustar with pax extended headers ('x', 'g') and GNU's
 * long names ('L', 'K'), and a writer of ustar entries with a pax header where a field does not
 * fit. The reader only decodes: what an entry may be is the extractor's decision (archive.ts).
 * Every field is bounded before it is buffered, and a short or malformed archive is a failure
 * naming the problem, never a partial entry.
 */
import { fail, ok, type Result } from '../../core/result.js';

const BLOCK = 512;

/** What a header's typeflag says the entry is. */
type TarEntryKind =
  'file' | 'directory' | 'symlink' | 'hardlink' | 'character_device' | 'block_device' | 'fifo' | 'unsupported';

export interface TarEntry {
  /** The name as the archive spells it (pax `path`, a GNU long name, or ustar prefix/name). */
  name: Buffer;
  kind: TarEntryKind;
  /** The raw typeflag, for messages about unsupported kinds. */
  typeflag: string;
  size: number;
  mode: number;
  /** Position of the entry in the archive, counting from 1 (metadata headers not counted). */
  index: number;
}

export interface TarReaderLimits {
  /** Longest name (pax path, GNU long name) accepted, in bytes. */
  maxNameBytes: number;
  /** Largest pax or GNU metadata entry accepted, in bytes. */
  maxMetaBytes: number;
  /** Bytes after the end-of-archive marker that are read and dropped (the record padding). */
  maxTrailingBytes: number;
}

/** Why an archive could not be read: always `invalid_archive`, with the problem in the detail. */
export type TarFailure = 'invalid_archive';

const KIND_BY_TYPEFLAG: Record<string, TarEntryKind> = {
  '0': 'file',
  '\0': 'file',
  '7': 'file',
  '5': 'directory',
  '2': 'symlink',
  '1': 'hardlink',
  '3': 'character_device',
  '4': 'block_device',
  '6': 'fifo',
};

/** Bytes arriving in chunks, read in exact lengths. */
class ByteQueue {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private ended = false;
  private readonly iterator: AsyncIterator<Buffer>;

  constructor(source: AsyncIterable<Buffer>) {
    this.iterator = source[Symbol.asyncIterator]();
  }

  /** Exactly `n` bytes, or fewer when the source ends first (then the archive is short). */
  async take(n: number): Promise<Buffer> {
    while (this.buffered < n && !this.ended) {
      const next = await this.iterator.next().catch(() => ({ done: true as const, value: undefined }));
      // A source that fails (a request aborted mid-body) ends here: what came is all there is.
      if (next.done === true) this.ended = true;
      else if (next.value.length > 0) {
        this.chunks.push(next.value);
        this.buffered += next.value.length;
      }
    }
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.buffered);
    const taken = all.subarray(0, Math.min(n, this.buffered));
    const rest = all.subarray(taken.length);
    this.chunks = rest.length > 0 ? [rest] : [];
    this.buffered = rest.length;
    return taken;
  }

  /** Drops up to `max` more bytes; false when the source had more than that. */
  async drain(max: number): Promise<{ allZero: boolean; withinBound: boolean }> {
    let seen = 0;
    let allZero = true;
    for (;;) {
      const chunk = await this.take(Math.min(64 * 1024, max + 1 - seen));
      if (chunk.length === 0) return { allZero, withinBound: true };
      seen += chunk.length;
      if (allZero && chunk.some((byte) => byte !== 0)) allZero = false;
      if (seen > max) return { allZero, withinBound: false };
    }
  }
}

function cString(field: Buffer): Buffer {
  const nul = field.indexOf(0);
  return nul < 0 ? field : field.subarray(0, nul);
}

/** A numeric header field: octal digits (space or NUL ended), or GNU's base-256 when the top bit is set. */
function parseNumber(field: Buffer): number | null {
  if (field[0]! & 0x80) {
    if (field[0] !== 0x80) return null; // negative or too wide for us
    let value = 0;
    for (const byte of field.subarray(1)) value = value * 256 + byte;
    return Number.isSafeInteger(value) ? value : null;
  }
  const text = field
    .toString('latin1')
    .replace(/[\0 ]+$/, '')
    .replace(/^ +/, '');
  if (text === '') return 0;
  if (!/^[0-7]+$/.test(text)) return null;
  const value = parseInt(text, 8);
  return Number.isSafeInteger(value) ? value : null;
}

/** The header's checksum is right (computed unsigned, or signed as some old writers did). */
function checksumMatches(block: Buffer): boolean {
  const recorded = parseNumber(block.subarray(148, 156));
  if (recorded === null) return false;
  let unsigned = 0;
  let signed = 0;
  for (let i = 0; i < BLOCK; i++) {
    const byte = i >= 148 && i < 156 ? 0x20 : block[i]!;
    unsigned += byte;
    signed += byte > 127 ? byte - 256 : byte;
  }
  return recorded === unsigned || recorded === signed;
}

interface PaxFields {
  path?: Buffer;
  size?: number;
}

/** pax records: `LEN key=value\n`, LEN counting the whole record. */
function parsePax(data: Buffer, where: string): Result<{ fields: PaxFields }, TarFailure> {
  const fields: PaxFields = {};
  let at = 0;
  while (at < data.length) {
    const space = data.indexOf(0x20, at);
    const lengthText = space < 0 ? '' : data.toString('latin1', at, space);
    const length = /^[1-9][0-9]{0,8}$/.test(lengthText) ? Number(lengthText) : NaN;
    if (!Number.isSafeInteger(length) || at + length > data.length || data[at + length - 1] !== 0x0a)
      return fail('invalid_archive', `${where}: a malformed pax record at byte ${at}`);
    const record = data.subarray(space + 1, at + length - 1);
    const equals = record.indexOf(0x3d);
    if (equals <= 0) return fail('invalid_archive', `${where}: a pax record without key=value at byte ${at}`);
    const key = record.toString('utf8', 0, equals);
    const value = record.subarray(equals + 1);
    if (key === 'path') fields.path = value;
    if (key === 'size') {
      const size = /^[0-9]{1,16}$/.test(value.toString('latin1')) ? Number(value.toString('latin1')) : NaN;
      if (!Number.isSafeInteger(size)) return fail('invalid_archive', `${where}: pax size is not a number`);
      fields.size = size;
    }
    at += length;
  }
  return ok({ fields });
}

function padding(size: number): number {
  return (BLOCK - (size % BLOCK)) % BLOCK;
}

/**
 * Reads an archive entry by entry: `next()` answers the next entry's header (null at the end),
 * `body()` its content. A body not read is skipped by the following `next()`.
 */
export class TarReader {
  private readonly bytes: ByteQueue;
  private unread = 0;
  private entries = 0;
  /** Bytes of the archive read so far, for messages. */
  private offset = 0;

  constructor(
    source: AsyncIterable<Buffer>,
    private readonly limits: TarReaderLimits,
  ) {
    this.bytes = new ByteQueue(source);
  }

  /** The next entry, or null after the end-of-archive marker. */
  async next(): Promise<Result<{ entry: TarEntry | null }, TarFailure>> {
    const skipped = await this.skipBody();
    if (!skipped.ok) return skipped;
    let pax: PaxFields = {};
    let longName: Buffer | undefined;
    for (;;) {
      const where = `entry ${this.entries + 1} (archive byte ${this.offset})`;
      const block = await this.exact(BLOCK, `${where}: the header`);
      if (!block.ok) return block;
      if (block.data.every((byte) => byte === 0)) return this.end();
      if (!checksumMatches(block.data)) return fail('invalid_archive', `${where}: header checksum mismatch`);
      const magic = block.data.toString('latin1', 257, 263);
      const posix = magic === 'ustar\0';
      if (!posix && magic !== 'ustar ')
        return fail('invalid_archive', `${where}: not a ustar header (unknown magic); write ustar, pax or GNU tar`);
      const typeflag = String.fromCharCode(block.data[156]!);
      const size = pax.size ?? parseNumber(block.data.subarray(124, 136));
      if (size === null) return fail('invalid_archive', `${where}: the size field is not a number`);
      if (typeflag === 'x' || typeflag === 'g' || typeflag === 'L' || typeflag === 'K') {
        const meta = await this.meta(size, typeflag, where);
        if (!meta.ok) return meta;
        if (typeflag === 'x') {
          const parsed = parsePax(meta.data, where);
          if (!parsed.ok) return parsed;
          pax = { ...pax, ...parsed.fields };
        } else if (typeflag === 'L') longName = cString(meta.data);
        // 'g' (archive-wide defaults) and 'K' (a long link target) change nothing we extract.
        continue;
      }
      const name = pax.path ?? longName ?? this.ustarName(block.data, posix);
      if (name.length > this.limits.maxNameBytes)
        return fail('invalid_archive', `${where}: the name is longer than ${this.limits.maxNameBytes} bytes`);
      const mode = parseNumber(block.data.subarray(100, 108));
      this.entries += 1;
      this.unread = size;
      const kind = KIND_BY_TYPEFLAG[typeflag] ?? 'unsupported';
      // Only regular files carry content; a size on anything else is skipped as written.
      return ok({ entry: { name, kind, typeflag, size, mode: (mode ?? 0) & 0o7777, index: this.entries } });
    }
  }

  /** The current entry's content (the caller bounded its size before asking). */
  async body(): Promise<Result<{ data: Buffer }, TarFailure>> {
    const size = this.unread;
    const read = await this.exact(size, `entry ${this.entries}: the content`);
    if (!read.ok) return read;
    const padded = await this.exact(padding(size), `entry ${this.entries}: the padding`);
    if (!padded.ok) return padded;
    this.unread = 0;
    return ok({ data: read.data });
  }

  private async skipBody(): Promise<Result<{}, TarFailure>> {
    let left = this.unread + (this.unread > 0 ? padding(this.unread) : 0);
    this.unread = 0;
    while (left > 0) {
      const step = Math.min(left, 1024 * 1024);
      const read = await this.exact(step, `entry ${this.entries}: the content`);
      if (!read.ok) return read;
      left -= step;
    }
    return ok({});
  }

  private ustarName(block: Buffer, posix: boolean): Buffer {
    const name = cString(block.subarray(0, 100));
    // GNU's own format keeps other fields where POSIX has the prefix.
    const prefix = posix ? cString(block.subarray(345, 500)) : Buffer.alloc(0);
    return prefix.length > 0 ? Buffer.concat([prefix, Buffer.from('/'), name]) : name;
  }

  private async meta(size: number, typeflag: string, where: string): Promise<Result<{ data: Buffer }, TarFailure>> {
    const bound = typeflag === 'L' || typeflag === 'K' ? this.limits.maxNameBytes + 1 : this.limits.maxMetaBytes;
    if (size > bound)
      return fail('invalid_archive', `${where}: a '${typeflag}' metadata entry of ${size} bytes (at most ${bound})`);
    const data = await this.exact(size, `${where}: the '${typeflag}' metadata`);
    if (!data.ok) return data;
    const padded = await this.exact(padding(size), `${where}: the padding`);
    return padded.ok ? data : padded;
  }

  /** After a zero block: a second one (or the end of the stream), then only padding. */
  private async end(): Promise<Result<{ entry: null }, TarFailure>> {
    const second = await this.bytes.take(BLOCK);
    if (second.length > 0 && (second.length < BLOCK || second.some((byte) => byte !== 0)))
      return fail('invalid_archive', `archive byte ${this.offset}: a zero block followed by data`);
    const rest = await this.bytes.drain(this.limits.maxTrailingBytes);
    if (!rest.withinBound || !rest.allZero)
      return fail(
        'invalid_archive',
        `data after the end-of-archive marker (at most ${this.limits.maxTrailingBytes} zero bytes of padding)`,
      );
    return ok({ entry: null });
  }

  private async exact(n: number, what: string): Promise<Result<{ data: Buffer }, TarFailure>> {
    const data = await this.bytes.take(n);
    this.offset += data.length;
    if (data.length < n) return fail('invalid_archive', `truncated: ${what} ends after ${data.length} of ${n} bytes`);
    return ok({ data });
  }
}

/** What the writer stores: a regular file's header (its content follows), a directory or a symlink. */
export interface TarHeaderFields {
  name: Buffer;
  kind: 'file' | 'directory' | 'symlink';
  size: number;
  mode: number;
  uid: number;
  gid: number;
  mtimeSeconds: number;
  linkName?: Buffer;
}

const OCTAL_FIELD_MAX = { 8: 0o7777777, 12: 0o77777777777 } as const;

function writeOctal(block: Buffer, offset: number, width: 8 | 12, value: number): void {
  const fits = value >= 0 && value <= OCTAL_FIELD_MAX[width] ? value : 0;
  block.write(`${fits.toString(8).padStart(width - 1, '0')}\0`, offset, width, 'latin1');
}

function paxRecord(key: string, value: Buffer): Buffer {
  const body = Buffer.concat([Buffer.from(` ${key}=`), value, Buffer.from('\n')]);
  // The length counts its own digits: grow until it is stable.
  let length = body.length + 1;
  while (String(length).length + body.length !== length) length = String(length).length + body.length;
  return Buffer.concat([Buffer.from(String(length)), body]);
}

function ustarBlock(fields: TarHeaderFields, name: Buffer, typeflag: string, size: number, linkName: Buffer): Buffer {
  const block = Buffer.alloc(BLOCK);
  name.copy(block, 0, 0, Math.min(name.length, 100));
  writeOctal(block, 100, 8, fields.mode & 0o7777);
  writeOctal(block, 108, 8, fields.uid);
  writeOctal(block, 116, 8, fields.gid);
  writeOctal(block, 124, 12, size);
  writeOctal(block, 136, 12, fields.mtimeSeconds);
  block.write(typeflag, 156, 1, 'latin1');
  linkName.copy(block, 157, 0, Math.min(linkName.length, 100));
  block.write('ustar\0', 257, 6, 'latin1');
  block.write('00', 263, 2, 'latin1');
  block.fill(0x20, 148, 156);
  let sum = 0;
  for (const byte of block) sum += byte;
  block.write(`${sum.toString(8).padStart(6, '0')}\0 `, 148, 8, 'latin1');
  return block;
}

/** The header blocks of one entry: a pax header first when a name, link, size or id does not fit ustar. */
export function tarHeader(fields: TarHeaderFields): Buffer {
  const name = fields.kind === 'directory' ? Buffer.concat([fields.name, Buffer.from('/')]) : fields.name;
  const linkName = fields.linkName ?? Buffer.alloc(0);
  const records: Buffer[] = [];
  if (name.length > 100) records.push(paxRecord('path', name));
  if (linkName.length > 100) records.push(paxRecord('linkpath', linkName));
  if (fields.size > OCTAL_FIELD_MAX[12]) records.push(paxRecord('size', Buffer.from(String(fields.size))));
  if (fields.uid > OCTAL_FIELD_MAX[8]) records.push(paxRecord('uid', Buffer.from(String(fields.uid))));
  if (fields.gid > OCTAL_FIELD_MAX[8]) records.push(paxRecord('gid', Buffer.from(String(fields.gid))));
  const typeflag = fields.kind === 'file' ? '0' : fields.kind === 'directory' ? '5' : '2';
  const size = fields.kind === 'file' ? fields.size : 0;
  const entry = ustarBlock(fields, name, typeflag, size, linkName);
  if (records.length === 0) return entry;
  const pax = Buffer.concat(records);
  const paxName = Buffer.from('PaxHeader/entry');
  const paxBlock = ustarBlock({ ...fields, mode: 0o644 }, paxName, 'x', pax.length, Buffer.alloc(0));
  return Buffer.concat([paxBlock, pax, Buffer.alloc(padding(pax.length)), entry]);
}

/** Zero bytes that end a file's content on a block boundary. */
export function tarPadding(size: number): Buffer {
  return Buffer.alloc(padding(size));
}

/** The end-of-archive marker: two zero blocks. */
export function tarEnd(): Buffer {
  return Buffer.alloc(2 * BLOCK);
}
