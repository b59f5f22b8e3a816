/**
 * The governance event store: validated appends into SQLite, paged queries in id order, session
 * deletion, retention of unbound events, live subscribers, and a fallback log that keeps events
 * whenever the database cannot take them.
 */
import type Database from 'better-sqlite3';
import { CodedError, fail, ok, type Result } from '../../core/result.js';
import type { Logger } from '../../core/log.js';
import { describeError, openDatabase } from '../db/open.js';
import {
  appendFallbackRecords,
  preserveUnreadableLines,
  readFallbackLog,
  truncateFallbackLog,
  type FallbackRecord,
} from './fallback-log.js';
import { EVENT_KINDS, type EventKindRegistry } from './kinds.js';
import type { EventPage, EventQuery, EventStore, EventStoreStatus, GovernanceEvent } from './types.js';
import type { WorkerProfile } from '../../core/modes.js';
import type { AppendResult, EventActor, EventInput } from '../../core/events.js';

export interface EventStoreOptions {
  databasePath: string;
  fallbackLogPath: string;
  unboundRetentionDays: number;
  logger: Logger;
  /** How long a write waits for another writer's lock before the event goes to the fallback log. */
  busyTimeoutMs?: number;
  /** Tests substitute a registry to simulate version bumps. */
  kinds?: EventKindRegistry;
}

const DEFAULT_QUERY_LIMIT = 100;
const MAX_QUERY_LIMIT = 1000;
const MAX_BATCH_EVENTS = 10_000;
const MAX_ID_LENGTH = 256;
const MAX_PAYLOAD_BYTES = 64 * 1024;
const ACTORS: readonly EventActor[] = ['server', 'worker', 'user', 'operator'];
const PROFILES: readonly WorkerProfile[] = ['governed', 'strict'];
const REPLAYED_DIGEST_KEY = 'fallback_replayed_sha256';

/** A validated event ready to insert; `payloadJson` is exactly what is stored. */
interface PendingEvent extends FallbackRecord {
  payloadJson: string;
}

interface EventRow {
  id: number;
  session_id: string | null;
  turn_id: string | null;
  at: string;
  kind: string;
  schema_version: number;
  actor: string;
  model: string | null;
  profile: string | null;
  payload: string;
}

export function openEventStore(options: EventStoreOptions): EventStore {
  if (!Number.isFinite(options.unboundRetentionDays) || options.unboundRetentionDays < 0) {
    throw new CodedError('invalid_option', 'unboundRetentionDays must be a non-negative number');
  }
  return new SqliteEventStore(options);
}

class SqliteEventStore implements EventStore {
  private readonly kinds: EventKindRegistry;
  private readonly logger: Logger;
  private readonly db: Database.Database | null;
  private readonly insertAll: ((events: readonly PendingEvent[]) => number[]) | null;
  private readonly queryStatements = new Map<string, Database.Statement<unknown[], EventRow>>();
  private readonly listeners = new Set<(event: GovernanceEvent) => void>();
  private readonly fallback = {
    pending: 0,
    lastAt: null as string | null,
    lastReason: null as string | null,
    replayedAtStart: 0,
  };

  constructor(private readonly options: EventStoreOptions) {
    this.kinds = options.kinds ?? EVENT_KINDS;
    this.logger = options.logger.child({ component: 'events' });
    const opened = openDatabase(options.databasePath, { busyTimeoutMs: options.busyTimeoutMs });
    if (opened.ok) {
      this.db = opened.db;
      const insert = opened.db.prepare(
        `INSERT INTO events (session_id, turn_id, at, kind, schema_version, actor, model, profile, payload)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
      );
      const insertTransaction = opened.db.transaction((events: readonly PendingEvent[]) =>
        events.map(
          (e) =>
            insert.run(e.sessionId, e.turnId, e.at, e.kind, e.schemaVersion, e.actor, e.model, e.profile, e.payloadJson)
              .lastInsertRowid as number,
        ),
      );
      // IMMEDIATE takes the write lock up front, so a busy database fails at BEGIN, before any work.
      this.insertAll = (events) => insertTransaction.immediate(events);
    } else {
      this.db = null;
      this.insertAll = null;
      this.logger.error('event database unavailable; events go to the fallback log', { detail: opened.detail });
      this.noteFallback(opened.detail);
    }
    this.replayFallbackLog();
  }

  append(input: EventInput): AppendResult {
    return this.appendBatch([input]);
  }

  appendBatch(inputs: EventInput[]): AppendResult {
    if (!Array.isArray(inputs) || inputs.length === 0 || inputs.length > MAX_BATCH_EVENTS) {
      return fail('invalid_event', `a batch holds 1 to ${MAX_BATCH_EVENTS} events`);
    }
    const pending: PendingEvent[] = [];
    for (const [index, input] of inputs.entries()) {
      const checked = this.validate(input);
      if (!checked.ok)
        return fail('invalid_event', inputs.length > 1 ? `event ${index}: ${checked.detail}` : checked.detail);
      pending.push(checked.event);
    }
    let ids: number[];
    try {
      if (!this.insertAll) throw new Error('database unavailable since start');
      ids = this.insertAll(pending);
    } catch (error) {
      return this.writeFallback(pending, describeError(error));
    }
    this.notify(pending, ids);
    return { ok: true, stored: 'database', ids };
  }

  query(query: EventQuery): Result<EventPage, 'invalid_query' | 'store_unavailable'> {
    const checked = validateQuery(query);
    if (!checked.ok) return checked;
    if (!this.db) return fail('store_unavailable', 'the event database could not be opened');
    const { session, turn, kind, bound, descending, limit } = checked;
    try {
      const params: unknown[] = [session, turn, kind].filter((v) => v !== undefined);
      const rows = this.queryStatement(session !== undefined, turn !== undefined, kind !== undefined, descending).all(
        ...params,
        bound,
        limit,
      );
      const events = rows.map(rowToEvent);
      const last = events.at(-1);
      const next = events.length === limit && last ? last.id : null;
      return ok({ events, nextAfter: descending ? null : next, nextBefore: descending ? next : null });
    } catch (error) {
      this.logger.error('event query failed', { detail: describeError(error) });
      return fail('store_unavailable', 'the event database could not be read');
    }
  }

  deleteSession(sessionId: string): number {
    return this.runDelete('DELETE FROM events WHERE session_id = ?', [sessionId]);
  }

  pruneUnbound(now: Date = new Date()): number {
    const cutoff = new Date(now.getTime() - this.options.unboundRetentionDays * 86_400_000).toISOString();
    // Without INDEXED BY the planner walks every unbound entry of events_session_id instead of the `at` range.
    return this.runDelete('DELETE FROM events INDEXED BY events_unbound_at WHERE session_id IS NULL AND at < ?', [
      cutoff,
    ]);
  }

  status(): EventStoreStatus {
    return {
      databasePath: this.options.databasePath,
      fallbackLogPath: this.options.fallbackLogPath,
      fallbackActive: this.fallback.pending > 0,
      fallbackPendingEvents: this.fallback.pending,
      lastFallbackAt: this.fallback.lastAt,
      lastFallbackReason: this.fallback.lastReason,
      replayedAtStart: this.fallback.replayedAtStart,
    };
  }

  subscribe(listener: (event: GovernanceEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  close(): void {
    this.listeners.clear();
    this.db?.close();
  }

  private validate(input: EventInput): { ok: true; event: PendingEvent } | { ok: false; detail: string } {
    const bad = (detail: string) => ({ ok: false as const, detail });
    // Events replayed from the fallback log are parsed JSON: their type is not proven yet.
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition
    if (typeof input !== 'object' || input === null) return bad('event must be an object');
    const rawKind: unknown = input.kind;
    const kindName = typeof rawKind === 'string' ? rawKind : '';
    const kind = this.kinds.get(kindName);
    if (!kind) return bad(`kind '${String(rawKind)}' is not a registered event kind`);
    const where = `${kindName}: `;
    const envelopeError =
      checkId('sessionId', input.sessionId) ??
      checkId('turnId', input.turnId) ??
      checkId('model', input.model) ??
      (ACTORS.includes(input.actor) ? null : `actor must be one of ${ACTORS.join(', ')}`) ??
      (input.profile === null || PROFILES.includes(input.profile)
        ? null
        : `profile must be one of ${PROFILES.join(', ')} or null`);
    if (envelopeError) return bad(where + envelopeError);
    const at = normaliseTimestamp(input.at);
    if (at === null) return bad(`${where}at must be an ISO 8601 timestamp`);
    const payload: unknown = input.payload;
    if (typeof payload !== 'object' || payload === null || Array.isArray(payload)) {
      return bad(`${where}payload must be an object`);
    }
    const valid = kind.validate(payload as Record<string, unknown>);
    if (!valid.ok) return bad(where + valid.detail);
    let payloadJson: string;
    try {
      payloadJson = JSON.stringify(payload);
    } catch (error) {
      return bad(`${where}payload is not serialisable: ${describeError(error)}`);
    }
    if (Buffer.byteLength(payloadJson) > MAX_PAYLOAD_BYTES)
      return bad(`${where}payload exceeds ${MAX_PAYLOAD_BYTES} bytes`);
    return {
      ok: true,
      event: {
        sessionId: input.sessionId,
        turnId: input.turnId,
        at,
        kind: kindName,
        schemaVersion: kind.schemaVersion,
        actor: input.actor,
        model: input.model,
        profile: input.profile,
        payload: payload as Record<string, unknown>,
        payloadJson,
      },
    };
  }

  private writeFallback(events: readonly PendingEvent[], reason: string): AppendResult {
    const records = events.map(({ payloadJson: _stored, ...record }) => record);
    const written = appendFallbackRecords(this.options.fallbackLogPath, records);
    const kinds = [...new Set(events.map((e) => e.kind))];
    if (!written.ok) {
      // Only the kinds: payloads may carry paths and hosts that do not belong in a system log.
      this.logger.error('governance events lost: database and fallback log both failed', {
        kinds,
        count: events.length,
        databaseError: reason,
        fallbackError: written.detail,
      });
      return fail('event_lost', `database write failed (${reason}) and ${written.detail}`);
    }
    this.fallback.pending += events.length;
    this.noteFallback(reason);
    this.logger.warn('event database write failed; events kept in the fallback log', {
      kinds,
      count: events.length,
      detail: reason,
    });
    return {
      ok: true,
      stored: 'fallback',
      detail: `database write failed (${reason}); kept in ${this.options.fallbackLogPath}`,
    };
  }

  private noteFallback(reason: string): void {
    this.fallback.lastAt = new Date().toISOString();
    this.fallback.lastReason = reason;
  }

  private notify(events: readonly PendingEvent[], ids: readonly number[]): void {
    if (this.listeners.size === 0) return;
    events.forEach((event, index) => {
      const stored: GovernanceEvent = {
        id: ids[index]!,
        sessionId: event.sessionId,
        turnId: event.turnId,
        at: event.at,
        kind: event.kind,
        schemaVersion: event.schemaVersion,
        actor: event.actor as EventActor,
        model: event.model,
        profile: event.profile as WorkerProfile | null,
        payload: JSON.parse(event.payloadJson) as Record<string, unknown>,
      };
      for (const listener of [...this.listeners]) {
        try {
          listener(stored);
        } catch (error) {
          this.logger.warn('event listener threw', { detail: describeError(error) });
        }
      }
    });
  }

  /**
   * Moves the fallback log into the database. The digest of the replayed log is committed with
   * the events, so a crash before the truncation cannot replay the same log twice.
   */
  private replayFallbackLog(): void {
    const logPath = this.options.fallbackLogPath;
    const contents = readFallbackLog(logPath);
    if (!contents.ok) {
      this.logger.error('fallback log unreadable; left in place', { detail: contents.detail });
      return;
    }
    const { records, unreadableLines, digest } = contents;
    if (records.length === 0 && unreadableLines.length === 0) return;
    if (!this.db || !this.insertAll) {
      this.fallback.pending += records.length;
      return;
    }
    try {
      const db = this.db;
      const insertAll = this.insertAll;
      const replayed = db.prepare('SELECT value FROM store_meta WHERE key = ?').pluck().get(REPLAYED_DIGEST_KEY);
      if (replayed !== digest) {
        if (unreadableLines.length > 0) {
          const kept = preserveUnreadableLines(logPath, unreadableLines);
          this.logger.error('fallback log lines unreadable; kept aside', { count: unreadableLines.length, file: kept });
        }
        const rememberDigest = db.prepare(
          'INSERT INTO store_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value',
        );
        db.transaction(() => {
          insertAll(records.map((r) => ({ ...r, payloadJson: JSON.stringify(r.payload) })));
          rememberDigest.run(REPLAYED_DIGEST_KEY, digest);
        }).immediate();
        this.fallback.replayedAtStart = records.length;
        this.logger.info('fallback log replayed into the event database', { count: records.length });
      }
      truncateFallbackLog(logPath);
    } catch (error) {
      this.fallback.pending += records.length;
      this.noteFallback(`replay failed: ${describeError(error)}`);
      this.logger.error('fallback log replay failed; log kept for the next start', { detail: describeError(error) });
    }
  }

  private runDelete(sql: string, params: unknown[]): number {
    if (!this.db) throw new CodedError('store_unavailable', 'the event database could not be opened');
    try {
      return this.db.prepare(sql).run(...params).changes;
    } catch (error) {
      throw new CodedError('store_unavailable', `event delete failed: ${describeError(error)}`);
    }
  }

  private queryStatement(
    bySession: boolean,
    byTurn: boolean,
    byKind: boolean,
    descending: boolean,
  ): Database.Statement<unknown[], EventRow> {
    const key = `${+bySession}${+byTurn}${+byKind}${+descending}`;
    let statement = this.queryStatements.get(key);
    if (!statement) {
      statement = this.db!.prepare<unknown[], EventRow>(eventQuerySql(bySession, byTurn, byKind, descending));
      this.queryStatements.set(key, statement);
    }
    return statement;
  }
}

/**
 * The page query for a filter combination; parameters in the order session, turn, kind, the
 * bound (after, or before when descending), limit (present filters only). Without statistics SQLite may drive a combined filter through
 * the least selective index (kind), so the unary `+` keeps a term out of index selection:
 * turn narrows most, then session, and kind drives only when it filters alone.
 */
export function eventQuerySql(bySession: boolean, byTurn: boolean, byKind: boolean, descending = false): string {
  const where = [
    bySession ? (byTurn ? '+session_id = ?' : 'session_id = ?') : null,
    byTurn ? 'turn_id = ?' : null,
    byKind ? (bySession || byTurn ? '+kind = ?' : 'kind = ?') : null,
    descending ? 'id < ?' : 'id > ?',
  ].filter((c) => c !== null);
  return `SELECT id, session_id, turn_id, at, kind, schema_version, actor, model, profile, payload
         FROM events WHERE ${where.join(' AND ')} ORDER BY id ${descending ? 'DESC' : ''} LIMIT ?`;
}

function checkId(field: string, value: unknown): string | null {
  if (value === null) return null;
  if (typeof value === 'string' && value.length > 0 && value.length <= MAX_ID_LENGTH) return null;
  return `${field} must be a string of 1 to ${MAX_ID_LENGTH} characters, or null`;
}

const ISO_8601 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2})$/;

/** Stored timestamps are always `toISOString()` form, so retention can compare them as text. */
function normaliseTimestamp(at: unknown): string | null {
  if (at === undefined) return new Date().toISOString();
  if (typeof at !== 'string' || !ISO_8601.test(at)) return null;
  const time = Date.parse(at);
  return Number.isNaN(time) ? null : new Date(time).toISOString();
}

type CheckedQuery = {
  ok: true;
  session?: string;
  turn?: string;
  kind?: string;
  descending: boolean;
  /** The id bound: after (ascending) or before (descending). */
  bound: number;
  limit: number;
};

function validateQuery(query: EventQuery): CheckedQuery | { ok: false; reason: 'invalid_query'; detail: string } {
  // Queries come from HTTP parameters and other JavaScript callers: checked whatever the type says.
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition
  if (typeof query !== 'object' || query === null) return fail('invalid_query', 'query must be an object');
  for (const parameter of ['session', 'turn', 'kind'] as const) {
    const value = query[parameter];
    if (value !== undefined && (typeof value !== 'string' || value.length === 0 || value.length > MAX_ID_LENGTH)) {
      return fail('invalid_query', `${parameter} must be a string of 1 to ${MAX_ID_LENGTH} characters`);
    }
  }
  const order: unknown = query.order ?? 'asc';
  if (order !== 'asc' && order !== 'desc') return fail('invalid_query', "order must be 'asc' or 'desc'");
  const descending = order === 'desc';
  if (descending ? query.after !== undefined : query.before !== undefined) {
    return fail('invalid_query', descending ? 'after pages ascending order; use before' : 'before needs order desc');
  }
  const bound = (descending ? query.before : query.after) ?? (descending ? Number.MAX_SAFE_INTEGER : 0);
  if (!Number.isSafeInteger(bound) || bound < 0) {
    return fail('invalid_query', `${descending ? 'before' : 'after'} must be a non-negative integer event id`);
  }
  const limit = query.limit ?? DEFAULT_QUERY_LIMIT;
  if (!Number.isSafeInteger(limit) || limit < 1 || limit > MAX_QUERY_LIMIT) {
    return fail('invalid_query', `limit must be an integer from 1 to ${MAX_QUERY_LIMIT}`);
  }
  return { ok: true, session: query.session, turn: query.turn, kind: query.kind, descending, bound, limit };
}

function rowToEvent(row: EventRow): GovernanceEvent {
  return {
    id: row.id,
    sessionId: row.session_id,
    turnId: row.turn_id,
    at: row.at,
    kind: row.kind,
    schemaVersion: row.schema_version,
    actor: row.actor as EventActor,
    model: row.model,
    profile: row.profile as WorkerProfile | null,
    payload: JSON.parse(row.payload) as Record<string, unknown>,
  };
}
