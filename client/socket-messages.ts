/**
 * What the event stream and an attach share on their WebSocket: decoding a text frame into a
 * JSON message, and the queue between the socket and the one iterator that reads it.
 */
import type WebSocket from 'ws';

/** Messages a consumer has not read yet, above which the socket stops being read. */
export const HIGH_WATER_MESSAGES = 256;

/** A queue read by one async iterator; `end` finishes it after what is queued. */
export class MessageQueue<T> {
  readonly #items: T[] = [];
  readonly #onDrained: () => void;
  #ended = false;
  #wake: (() => void) | undefined;
  /** The reading side alone, so a consumer holds no way to push or end. */
  readonly iterable: AsyncIterable<T>;

  /** `onDrained` runs when the reader takes the last queued item (the socket may be read again). */
  constructor(onDrained: () => void) {
    this.#onDrained = onDrained;
    this.iterable = { [Symbol.asyncIterator]: () => this.#read() };
  }

  push(value: T): void {
    this.#items.push(value);
    this.#wake?.();
  }

  end(): void {
    this.#ended = true;
    this.#wake?.();
  }

  size(): number {
    return this.#items.length;
  }

  async *#read(): AsyncGenerator<T> {
    for (;;) {
      const next = this.#items.shift();
      if (next !== undefined) {
        if (this.#items.length === 0) this.#onDrained();
        yield next;
        continue;
      }
      if (this.#ended) return;
      await new Promise<void>((resolve) => (this.#wake = resolve));
      this.#wake = undefined;
    }
  }
}

/** A text frame's content: ws hands it over as one buffer, fragments, or an ArrayBuffer. */
export function frameText(data: WebSocket.RawData): string {
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8');
  return Buffer.isBuffer(data) ? data.toString('utf8') : Buffer.from(data).toString('utf8');
}

/** A JSON object message, or null for anything else (the caller ends the connection). */
export function parseFrame(data: WebSocket.RawData): { type: unknown } | null {
  try {
    const value: unknown = JSON.parse(frameText(data));
    return typeof value === 'object' && value !== null && 'type' in value ? value : null;
  } catch {
    return null;
  }
}
