/**
 * The governance event contract every mechanism records through: the envelope it hands to
 * the store, the sink it hands it to, and the attribution of events that belong to a turn.
 * The store itself is supervisor/events/store.ts.
 */
import type { WorkerProfile } from './modes.js';

export type EventActor = 'server' | 'worker' | 'user' | 'operator';

/** What a mechanism hands to the store. `at` defaults to now (ISO 8601, UTC). */
export interface EventInput {
  sessionId: string | null;
  turnId: string | null;
  kind: string;
  actor: EventActor;
  model: string | null;
  profile: WorkerProfile | null;
  payload: Record<string, unknown>;
  at?: string;
}

/**
 * `database`: stored with ids. `fallback`: the database write failed and the events were
 * appended to the fallback log, to be replayed at the next start (never lost).
 * `invalid_event`: unknown kind or a payload that fails the kind's validator (a caller bug).
 * `event_lost`: both the database and the fallback log failed; an error line naming the kind
 * (never the payload) was logged.
 */
export type AppendResult =
  | { ok: true; stored: 'database'; ids: number[] }
  | { ok: true; stored: 'fallback'; detail: string }
  | { ok: false; reason: 'invalid_event'; detail: string }
  | { ok: false; reason: 'event_lost'; detail: string };

export interface EventSink {
  append(input: EventInput): AppendResult;
}

/** Who an event of a turn is about: the attribution every turn-scoped event carries. */
export interface TurnAttribution {
  sessionId: string | null;
  turnId: string | null;
  profile: WorkerProfile | null;
  model: string | null;
}

/** The envelope of an intervention the supervisor made for a turn (actor `server`). */
export function serverTurnEvent(turn: TurnAttribution, kind: string, payload: Record<string, unknown>): EventInput {
  return {
    sessionId: turn.sessionId,
    turnId: turn.turnId,
    kind,
    actor: 'server',
    model: turn.model,
    profile: turn.profile,
    payload,
  };
}
