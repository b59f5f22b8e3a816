/**
 * The governance event stream: a WebSocket that replays stored events after a cursor and then
 * follows new ones, reopened with backoff from the last id seen when it drops.
 */
import WebSocket from 'ws';
import type { EventStreamMessage, GovernanceEvent } from '../api/schema/index.js';
import { TurnhostApiError } from './errors.js';
import { HIGH_WATER_MESSAGES, MessageQueue, frameText, parseFrame } from './socket-messages.js';
import { query, type Transport } from './transport.js';
import { openSocket } from './websocket.js';

export interface EventQuery {
  session?: string;
  turn?: string;
  kind?: string;
  after?: number;
}

export interface EventStreamOptions extends EventQuery {
  signal?: AbortSignal;
  /**
   * Consecutive failed reconnects (no server, or a 5xx answer) after which the stream throws
   * the last failure; unlimited by default. The first connection is not retried: a wrong
   * address or token is reported at once.
   */
  maxReconnects?: number;
}

/** Where the stream stands across its connections. */
interface StreamProgress {
  /** The id after which the next connection resumes. */
  after: number | undefined;
  /** Reconnects made since a message last arrived. */
  reconnects: number;
  /** Why the latest reconnect was needed; null until the first connection opened. */
  lastFailure: TurnhostApiError | null;
}

/** Whether a failed (re)connect may succeed later: no server yet, or one answering 5xx. */
const transient = (error: unknown): boolean =>
  error instanceof TurnhostApiError && (error.status === 0 ? error.code === 'unreachable' : error.status >= 500);

/**
 * Matching events as they are committed. With `after`, stored ones after that id come first;
 * a dropped connection is reopened from the last id seen, so no event is missed or repeated.
 */
export async function* streamEvents(
  transport: Transport,
  options: EventStreamOptions = {},
): AsyncGenerator<GovernanceEvent> {
  const { signal } = options;
  const maxReconnects = options.maxReconnects ?? Infinity;
  const progress: StreamProgress = { after: options.after, reconnects: 0, lastFailure: null };
  for (;;) {
    if (signal?.aborted) return;
    if (progress.reconnects > 0) {
      if (progress.reconnects > maxReconnects) throw progress.lastFailure!;
      await backoff(progress.reconnects, signal);
      if (signal?.aborted) return;
    }
    const next = yield* readConnection(transport, options, progress);
    if (next === 'stop') return;
  }
}

/** Reconnects back off (100 ms doubling to 5 s) so a server closing at once is not spun on. */
function backoff(reconnects: number, signal: AbortSignal | undefined): Promise<void> {
  const delay = Math.min(5000, 100 * 2 ** (reconnects - 1));
  return new Promise<void>((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, delay);
    signal?.addEventListener('abort', done, { once: true });
  });
}

/** One connection of the stream, from its handshake until it closes. */
class EventSocket {
  readonly messages: MessageQueue<EventStreamMessage>;
  closed = { code: 0, reason: '' };
  /** The start of a message that was not JSON, for which the connection was closed. */
  malformed: string | null = null;

  constructor(ws: WebSocket) {
    this.messages = new MessageQueue<EventStreamMessage>(() => ws.resume());
    ws.on('message', (data) => {
      const parsed = parseFrame(data) as EventStreamMessage | null;
      if (parsed === null) {
        this.malformed = frameText(data).slice(0, 200);
        ws.close(1002);
        return;
      }
      this.messages.push(parsed);
      if (this.messages.size() > HIGH_WATER_MESSAGES) ws.pause();
    });
    ws.on('close', (code, reason) => {
      this.closed = { code, reason: reason.toString('utf8') };
      this.messages.end();
    });
    ws.on('error', () => undefined);
  }
}

/** The events of one connection; answers whether the stream ends or reconnects after it. */
async function* readConnection(
  transport: Transport,
  options: EventStreamOptions,
  progress: StreamProgress,
): AsyncGenerator<GovernanceEvent, 'stop' | 'reconnect'> {
  const { signal } = options;
  const { ws, opened } = openSocket(
    transport,
    `/api/governance/events/stream${query({ session: options.session, turn: options.turn, kind: options.kind, after: progress.after })}`,
  );
  const connection = new EventSocket(ws);
  // Listening from the start: an abort during the handshake ends the connecting socket too.
  const abort = (): void => ws.close(1000);
  signal?.addEventListener('abort', abort, { once: true });
  try {
    try {
      await opened;
    } catch (error) {
      if (signal?.aborted) return 'stop';
      // A reconnect waits out a restarting server; a refusal, or a first connection that
      // fails, is the caller's to see at once.
      if (progress.lastFailure === null || !transient(error)) throw error;
      progress.lastFailure = error as TurnhostApiError;
      progress.reconnects++;
      return 'reconnect';
    }
    for await (const message of connection.messages.iterable) {
      progress.reconnects = 0;
      // The replay's progress is a cursor too: a drop during a replay resumes after it.
      if (message.type !== 'event') {
        progress.after = Math.max(progress.after ?? 0, message.lastId);
        continue;
      }
      progress.after = message.event.id;
      yield message.event;
      if (signal?.aborted) return 'stop';
    }
  } finally {
    signal?.removeEventListener('abort', abort);
    if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(1000);
  }
  if (connection.malformed !== null)
    throw new TurnhostApiError(0, 'protocol_error', `event stream: not a JSON message: ${connection.malformed}`);
  // A normal close (ours, or the server shutting down) ends the stream; any other is resumed,
  // from the last id seen. A live-only stream that saw nothing yet resumes live-only: the
  // server has no cursor for "now", and replaying from 0 would resend all history.
  const { code, reason } = connection.closed;
  if (signal?.aborted || code === 1000 || code === 1001) return 'stop';
  progress.lastFailure = new TurnhostApiError(
    0,
    'unreachable',
    `event stream closed (${code}${reason === '' ? '' : ` ${reason}`})`,
  );
  progress.reconnects++;
  return 'reconnect';
}
