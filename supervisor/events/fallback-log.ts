/**
 * The append-only fallback log: where events go when the database write fails, one JSON line
 * per event, O_APPEND and fsync before the append is acknowledged. Replayed into the database
 * by `openEventStore`, then truncated.
 */
import { createHash, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fail, ok, type Result } from '../../core/result.js';
import { describeError } from '../db/open.js';

/** One stored event without its id: the id is assigned when the line is replayed. */
export interface FallbackRecord {
  sessionId: string | null;
  turnId: string | null;
  at: string;
  kind: string;
  schemaVersion: number;
  actor: string;
  model: string | null;
  profile: string | null;
  payload: Record<string, unknown>;
}

export interface FallbackLogContents {
  records: FallbackRecord[];
  /** Lines that are not a whole, well-formed record (e.g. a write cut short by a full disk). */
  unreadableLines: string[];
  /** sha256 of the whole file: identifies this log's contents once replayed. */
  digest: string;
}

const WRITE_FLAGS = fs.constants.O_WRONLY | fs.constants.O_APPEND | fs.constants.O_CREAT | fs.constants.O_NOFOLLOW;

export function appendFallbackRecords(
  logPath: string,
  records: readonly FallbackRecord[],
): Result<{}, 'fallback_unavailable'> {
  // fallbackId makes every line unique, so two logs with the same events never share a digest.
  const text = records.map((record) => JSON.stringify({ fallbackId: randomUUID(), ...record }) + '\n').join('');
  try {
    writeAllSynced(logPath, WRITE_FLAGS, Buffer.from(text, 'utf8'));
    return ok({});
  } catch (error) {
    return fail('fallback_unavailable', `cannot append to fallback log ${logPath}: ${describeError(error)}`);
  }
}

function writeAllSynced(filePath: string, flags: number, data: Buffer): void {
  fs.mkdirSync(path.dirname(filePath), { recursive: true, mode: 0o700 });
  const fd = fs.openSync(filePath, flags, 0o600);
  try {
    let written = 0;
    while (written < data.length) written += fs.writeSync(fd, data, written, data.length - written);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}

/** An absent log reads as empty. */
export function readFallbackLog(logPath: string): Result<FallbackLogContents, 'fallback_unreadable'> {
  let text: string;
  try {
    text = fs.readFileSync(logPath, 'utf8');
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return ok({ records: [], unreadableLines: [], digest: '' });
    return fail('fallback_unreadable', `cannot read fallback log ${logPath}: ${describeError(error)}`);
  }
  const records: FallbackRecord[] = [];
  const unreadableLines: string[] = [];
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const record = parseRecord(line);
    if (record) records.push(record);
    else unreadableLines.push(line);
  }
  return ok({ records, unreadableLines, digest: createHash('sha256').update(text).digest('hex') });
}

function parseRecord(line: string): FallbackRecord | null {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch {
    return null;
  }
  if (typeof value !== 'object' || value === null) return null;
  const v = value as Record<string, unknown>;
  const stringOrNull = (x: unknown): x is string | null => x === null || typeof x === 'string';
  const wellFormed =
    stringOrNull(v.sessionId) &&
    stringOrNull(v.turnId) &&
    typeof v.at === 'string' &&
    typeof v.kind === 'string' &&
    v.kind !== '' &&
    Number.isSafeInteger(v.schemaVersion) &&
    typeof v.actor === 'string' &&
    stringOrNull(v.model) &&
    stringOrNull(v.profile) &&
    typeof v.payload === 'object' &&
    v.payload !== null &&
    !Array.isArray(v.payload);
  if (!wellFormed) return null;
  return {
    sessionId: v.sessionId as string | null,
    turnId: v.turnId as string | null,
    at: v.at as string,
    kind: v.kind as string,
    schemaVersion: v.schemaVersion as number,
    actor: v.actor as string,
    model: v.model as string | null,
    profile: v.profile as string | null,
    payload: v.payload as Record<string, unknown>,
  };
}

/** Keeps lines replay could not parse next to the log, so nothing is dropped silently. */
export function preserveUnreadableLines(logPath: string, lines: readonly string[]): string {
  const target = `${logPath}.unreadable`;
  writeAllSynced(target, WRITE_FLAGS, Buffer.from(lines.map((l) => l + '\n').join(''), 'utf8'));
  return target;
}

export function truncateFallbackLog(logPath: string): void {
  const fd = fs.openSync(logPath, fs.constants.O_WRONLY | fs.constants.O_NOFOLLOW);
  try {
    fs.ftruncateSync(fd, 0);
    fs.fsyncSync(fd);
  } finally {
    fs.closeSync(fd);
  }
}
