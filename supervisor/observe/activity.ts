/**
 * What the supervisor is doing now, derived from the governance event stream alone (the
 * store's `subscribe`, called after each commit), so neither the metrics nor the status page
 * reach into the turn lifecycle: the turns running (a `worker_launch` recorded, its
 * `worker_exit` not yet), the latest denials and the latest events. It starts empty at boot,
 * when no turn runs (a previous run's turns are marked interrupted by recovery).
 */
import type { EventStore, GovernanceEvent } from '../events/types.js';

interface RunningTurnView {
  turnId: string;
  sessionId: string | null;
  mode: string;
  identity: string;
  workerUid: number | null;
  command: string;
  /** When the worker_launch was recorded. */
  startedAt: string;
  limits: Record<string, unknown>;
}

export interface Activity {
  runningTurns(): RunningTurnView[];
  /** The newest `egress_denial` events since boot, oldest first. */
  recentDenials(): GovernanceEvent[];
  /** The newest events of every kind since boot, oldest first. */
  recentEvents(): GovernanceEvent[];
  /** Called for each committed event after the activity has taken it in. */
  onEvent(listener: (event: GovernanceEvent) => void): () => void;
  close(): void;
}

const RECENT_DENIALS_KEPT = 50;
const RECENT_EVENTS_KEPT = 100;

/** A bounded list that drops its oldest entries. */
function keepLast<T>(list: T[], item: T, max: number): void {
  list.push(item);
  if (list.length > max) list.splice(0, list.length - max);
}

/** A turn's key: turn ids are unique per supervisor, the session makes it unique across clients too. */
const turnKey = (event: GovernanceEvent): string | null =>
  event.turnId === null ? null : `${event.sessionId ?? ''}\u0000${event.turnId}`;

export function createActivity(store: EventStore): Activity {
  const running = new Map<string, RunningTurnView>();
  const denials: GovernanceEvent[] = [];
  const recent: GovernanceEvent[] = [];
  const listeners = new Set<(event: GovernanceEvent) => void>();

  const take = (event: GovernanceEvent): void => {
    const key = turnKey(event);
    const p = event.payload;
    if (event.kind === 'worker_launch' && key !== null) {
      running.set(key, {
        turnId: event.turnId ?? '',
        sessionId: event.sessionId,
        mode: typeof p['mode'] === 'string' ? p['mode'] : 'unknown',
        identity: typeof p['identity'] === 'string' ? p['identity'] : 'unknown',
        workerUid: typeof p['workerUid'] === 'number' ? p['workerUid'] : null,
        command: typeof p['command'] === 'string' ? p['command'] : '',
        startedAt: event.at,
        limits: typeof p['limits'] === 'object' && p['limits'] !== null ? (p['limits'] as Record<string, unknown>) : {},
      });
    } else if (event.kind === 'worker_exit' && key !== null) {
      running.delete(key);
    } else if (event.kind === 'egress_denial') {
      keepLast(denials, event, RECENT_DENIALS_KEPT);
    }
    keepLast(recent, event, RECENT_EVENTS_KEPT);
    for (const listener of listeners) listener(event);
  };
  const unsubscribe = store.subscribe(take);

  return {
    runningTurns: () => [...running.values()],
    recentDenials: () => [...denials],
    recentEvents: () => [...recent],
    onEvent(listener) {
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    close() {
      unsubscribe();
      listeners.clear();
    },
  };
}
