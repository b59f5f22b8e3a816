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

/** The activity view over one event store: it follows the store from construction until `close`. */
export class Activity {
  private readonly running = new Map<string, RunningTurnView>();
  private readonly denials: GovernanceEvent[] = [];
  private readonly recent: GovernanceEvent[] = [];
  private readonly listeners = new Set<(event: GovernanceEvent) => void>();
  private readonly unsubscribe: () => void;

  constructor(store: EventStore) {
    this.unsubscribe = store.subscribe((event) => this.take(event));
  }

  runningTurns(): RunningTurnView[] {
    return [...this.running.values()];
  }

  /** The newest `egress_denial` events since boot, oldest first. */
  recentDenials(): GovernanceEvent[] {
    return [...this.denials];
  }

  /** The newest events of every kind since boot, oldest first. */
  recentEvents(): GovernanceEvent[] {
    return [...this.recent];
  }

  /** Called for each committed event after the activity has taken it in. */
  onEvent(listener: (event: GovernanceEvent) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  close(): void {
    this.unsubscribe();
    this.listeners.clear();
  }

  private take(event: GovernanceEvent): void {
    const key = turnKey(event);
    if (event.kind === 'worker_launch' && key !== null) {
      this.running.set(key, runningTurnView(event));
    } else if (event.kind === 'worker_exit' && key !== null) {
      this.running.delete(key);
    } else if (event.kind === 'egress_denial') {
      keepLast(this.denials, event, RECENT_DENIALS_KEPT);
    }
    keepLast(this.recent, event, RECENT_EVENTS_KEPT);
    for (const listener of this.listeners) listener(event);
  }
}

/** A running turn as its `worker_launch` event describes it. */
function runningTurnView(event: GovernanceEvent): RunningTurnView {
  const p = event.payload;
  return {
    turnId: event.turnId ?? '',
    sessionId: event.sessionId,
    mode: typeof p['mode'] === 'string' ? p['mode'] : 'unknown',
    identity: typeof p['identity'] === 'string' ? p['identity'] : 'unknown',
    workerUid: typeof p['workerUid'] === 'number' ? p['workerUid'] : null,
    command: typeof p['command'] === 'string' ? p['command'] : '',
    startedAt: event.at,
    limits: typeof p['limits'] === 'object' && p['limits'] !== null ? (p['limits'] as Record<string, unknown>) : {},
  };
}

export function createActivity(store: EventStore): Activity {
  return new Activity(store);
}
