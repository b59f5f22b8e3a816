/**
 * A turn's output fan-out: attached clients get the backlog first, then live events. The backlog
 * is bounded so a chatty command cannot grow supervisor memory without limit; what falls off the
 * front is counted, never silently merged.
 */
import type { TurnStreamEvent } from './types.js';

const BACKLOG_MAX_BYTES = 1024 * 1024;

export interface OutputChannel {
  push(event: TurnStreamEvent): void;
  subscribe(listener: (event: TurnStreamEvent) => void): () => void;
  droppedBytes(): number;
  closed(): boolean;
}

export function createOutputChannel(): OutputChannel {
  const backlog: TurnStreamEvent[] = [];
  const listeners = new Set<(event: TurnStreamEvent) => void>();
  let backlogBytes = 0;
  let dropped = 0;
  let ended = false;

  const sizeOf = (event: TurnStreamEvent): number => (event.type === 'output' ? event.data.length : 0);

  return {
    push(event) {
      if (ended) return;
      if (event.type === 'exit') ended = true;
      backlog.push(event);
      backlogBytes += sizeOf(event);
      while (backlogBytes > BACKLOG_MAX_BYTES && backlog.length > 1) {
        const head = backlog.shift()!;
        backlogBytes -= sizeOf(head);
        dropped += sizeOf(head);
      }
      for (const listener of listeners) listener(event);
    },
    subscribe(listener) {
      for (const event of backlog) listener(event);
      listeners.add(listener);
      return () => listeners.delete(listener);
    },
    droppedBytes: () => dropped,
    closed: () => ended,
  };
}
