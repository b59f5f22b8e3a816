/**
 * Egress events reach the store in group commits. The store commits with synchronous = FULL,
 * so one append per connection costs the supervisor's event loop an fsync per connection;
 * a batch costs one fsync. An event waits at most FLUSH_AFTER_MS (or until MAX_PENDING are
 * queued); `close()` commits what is queued, and every later event is appended at once, so
 * the turn's events are all in the store when its proxy has closed.
 */
import type { AppendResult, EventInput, EventSink } from '../core/events.js';

export const FLUSH_AFTER_MS = 50;
const MAX_PENDING = 256;

/** The store's batch append, when the sink has one (the supervisor's event store does). */
export type EgressEventSink = EventSink & { appendBatch?(inputs: EventInput[]): AppendResult };

export type RefusedEvent = (event: EventInput, result: Extract<AppendResult, { ok: false }>) => void;

export class EventQueue {
  private pending: EventInput[] = [];
  private timer: NodeJS.Timeout | null = null;
  private batching = true;

  constructor(
    private readonly sink: EgressEventSink,
    private readonly onRefused: RefusedEvent,
  ) {}

  /** Stamps the event now, so a queued event keeps the time it happened. */
  push(event: EventInput): void {
    const stamped = { ...event, at: new Date().toISOString() };
    if (!this.batching) {
      this.appendEach([stamped]);
      return;
    }
    this.pending.push(stamped);
    if (this.pending.length >= MAX_PENDING) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), FLUSH_AFTER_MS);
  }

  flush(): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    const batch = this.pending;
    if (batch.length === 0) return;
    this.pending = [];
    const result = this.sink.appendBatch && batch.length > 1 ? this.sink.appendBatch(batch) : null;
    if (result === null) this.appendEach(batch);
    // A refused batch stores nothing; one by one, only the offending event is refused.
    else if (!result.ok && result.reason === 'invalid_event') this.appendEach(batch);
    else if (!result.ok) for (const event of batch) this.onRefused(event, result);
  }

  /** Commits what is queued; later events are appended as they come. */
  close(): void {
    this.batching = false;
    this.flush();
  }

  private appendEach(events: EventInput[]): void {
    for (const event of events) {
      const result = this.sink.append(event);
      if (!result.ok) this.onRefused(event, result);
    }
  }
}
