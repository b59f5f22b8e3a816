/**
 * The governance event envelope and the store's public surface. Implemented by
 * `supervisor/events/store.ts`; every mechanism that records an intervention depends only on
 * `EventSink`.
 */
import type { Result } from '../../core/result.js';
import type { WorkerProfile } from '../../core/modes.js';
import type { AppendResult, EventActor, EventInput, EventSink } from '../../core/events.js';

/** A stored event. `schemaVersion` is the kind's version when this event was written. */
export interface GovernanceEvent {
  id: number;
  sessionId: string | null;
  turnId: string | null;
  at: string;
  kind: string;
  schemaVersion: number;
  actor: EventActor;
  model: string | null;
  profile: WorkerProfile | null;
  payload: Record<string, unknown>;
}

export interface EventQuery {
  session?: string;
  turn?: string;
  kind?: string;
  /** Return events with id strictly greater than this (ascending order only). */
  after?: number;
  /** Return events with id strictly smaller than this (descending order only). */
  before?: number;
  /** `asc` (default): oldest first, paged with `after`; `desc`: newest first, paged with `before`. */
  order?: 'asc' | 'desc';
  /** Default 100, max 1000. */
  limit?: number;
}

/**
 * `nextAfter` (ascending) is the id to pass as `after` for the next page, `nextBefore`
 * (descending) the id to pass as `before`; null when this page is the last, and always null in
 * the other order.
 */
export interface EventPage {
  events: GovernanceEvent[];
  nextAfter: number | null;
  nextBefore: number | null;
}

export interface EventStoreStatus {
  databasePath: string;
  fallbackLogPath: string;
  /** True while events written since the last replay sit in the fallback log. */
  fallbackActive: boolean;
  fallbackPendingEvents: number;
  lastFallbackAt: string | null;
  lastFallbackReason: string | null;
  replayedAtStart: number;
}

export interface EventStore extends EventSink {
  appendBatch(inputs: EventInput[]): AppendResult;
  /** `store_unavailable`: the database could not be opened or read (appends still go to the fallback log). */
  query(query: EventQuery): Result<EventPage, 'invalid_query' | 'store_unavailable'>;
  /** Throws CodedError('store_unavailable') when the delete could not run: a failed delete is never reported as 0. */
  deleteSession(sessionId: string): number;
  /**
   * Deletes unbound (no session) events older than the configured retention. Returns the count.
   * Throws CodedError('store_unavailable') when the delete could not run.
   */
  pruneUnbound(now?: Date): number;
  status(): EventStoreStatus;
  /** Called after each event committed to the database, in id order. */
  subscribe(listener: (event: GovernanceEvent) => void): () => void;
  close(): void;
}
