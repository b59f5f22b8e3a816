import type { EventInput, WorkerProfile } from './types.js';

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
