/**
 * The worker's end of the protocol fd: framed reads with LineDecoder, framed writes.
 */
import net from 'node:net';
import { fail, ok, type Result } from '../core/result.js';
import {
  encodeMessage,
  LineDecoder,
  parseSupervisorMessage,
  type SupervisorMessage,
  type WorkerMessage,
} from './protocol.js';

export type ChannelEvent =
  | { kind: 'message'; message: SupervisorMessage }
  | { kind: 'invalid'; detail: string }
  | { kind: 'closed'; detail: string };

export interface Channel {
  /** The next event; events arriving while nobody waits are queued. */
  next(): Promise<ChannelEvent>;
  /** Hands every later event (queued ones first) to `handler`. */
  listen(handler: (event: ChannelEvent) => void): void;
  send(message: WorkerMessage): Promise<void>;
  close(): Promise<void>;
}

export function openChannel(fd: number): Channel {
  // allowHalfOpen: after the supervisor ends its side, the worker can still say why it stops.
  const socket = new net.Socket({ fd, readable: true, writable: true, allowHalfOpen: true });
  const decoder = new LineDecoder();
  const queue: ChannelEvent[] = [];
  let handler: ((event: ChannelEvent) => void) | undefined;
  let closed = false;
  const emit = (event: ChannelEvent): void => {
    if (closed) return;
    if (event.kind === 'closed') closed = true;
    if (handler) handler(event);
    else queue.push(event);
  };
  const waitNext = (): Promise<ChannelEvent> =>
    new Promise((resolve) => {
      const queued = queue.shift();
      if (queued) return resolve(queued);
      handler = (event) => {
        handler = undefined;
        resolve(event);
      };
    });
  socket.on('data', (chunk: Buffer) => {
    const framed = decoder.push(chunk);
    if (!framed.ok) {
      emit({ kind: 'closed', detail: framed.detail });
      socket.destroy();
      return;
    }
    for (const line of framed.lines) {
      const parsed = parseSupervisorMessage(line);
      emit(
        parsed.ok
          ? { kind: 'message', message: parsed.message }
          : { kind: 'invalid', detail: `${parsed.reason}: ${parsed.detail}` },
      );
    }
  });
  socket.on('end', () =>
    emit({ kind: 'closed', detail: decoder.hasPartialLine() ? 'closed mid-line' : 'closed by the supervisor' }),
  );
  socket.on('error', (err) => emit({ kind: 'closed', detail: err.message }));
  return {
    next: waitNext,
    listen(next) {
      handler = next;
      for (const event of queue.splice(0)) next(event);
    },
    send(message) {
      const encoded = encodeMessage(message);
      const line = encoded.ok
        ? encoded.line
        : JSON.stringify({ type: 'error', code: 'protocol_invalid', detail: encoded.detail }) + '\n';
      return new Promise((resolve) => {
        if (socket.destroyed || !socket.writable) return resolve();
        socket.write(line, () => resolve());
      });
    },
    close() {
      return new Promise((resolve) => {
        if (socket.destroyed) return resolve();
        socket.end(() => resolve());
      });
    },
  };
}

/** The first message must be the launch message. */
export function expectLaunch(
  event: ChannelEvent,
): Result<{ launch: Extract<SupervisorMessage, { type: 'launch' }> }, 'protocol_invalid' | 'protocol_closed'> {
  if (event.kind === 'closed')
    return fail('protocol_closed', `protocol fd closed before the launch message: ${event.detail}`);
  if (event.kind === 'invalid') return fail('protocol_invalid', event.detail);
  if (event.message.type !== 'launch')
    return fail('protocol_invalid', `first message must be launch, got ${event.message.type}`);
  return ok({ launch: event.message });
}
