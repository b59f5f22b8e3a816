/**
 * An attach to a turn over its WebSocket: the output (what the server kept first) with backpressure, the
 * exit result, and the controls of the turn's terminal.
 */
import WebSocket from 'ws';
import type { AttachServerMessage, FieldError, TurnResult, TurnSignal } from '../api/schema/index.js';
import { HIGH_WATER_MESSAGES, MessageQueue, frameText, parseFrame } from './socket-messages.js';
import type { Transport } from './transport.js';
import { openSocket } from './websocket.js';

export interface OutputChunk {
  stream: 'stdout' | 'stderr' | 'pty';
  data: Buffer;
}

/** The server's refusal of a message sent on an attach, or a message from it that was not JSON. */
export interface AttachError {
  code: string;
  error: string;
  field?: string;
  errors?: FieldError[];
}

/** Bytes of a stream the server did not keep (past its retention cap). */
export interface DroppedOutput {
  stream: 'stdout' | 'stderr' | 'pty';
  bytes: number;
}

/** An attached turn: its output until it exits, and the controls of its terminal. */
export interface Attachment {
  /** The output, what the server kept first; ends when the turn exited or the connection closed. */
  output: AsyncIterable<OutputChunk>;
  /** The exit result, or null when the connection closed before the exit arrived. */
  result: Promise<TurnResult | null>;
  write(data: Buffer | string): void;
  /** Ends the command's input (EOF on its stdin pipe; the terminal's EOF character on a pty). */
  eof(): void;
  resize(cols: number, rows: number): void;
  signal(signal: TurnSignal): void;
  /**
   * Bytes of a stream written before the attach past the server's retention cap
   * (turns.outputRetainBytes): not kept, so not sent. Output written while attached comes whole.
   */
  onDropped(listener: (dropped: DroppedOutput) => void): void;
  /** Refusals of a sent message, e.g. a resize out of range (`errors` lists every refused field). */
  onError(listener: (error: AttachError) => void): void;
  /** Stops reading: the server then pauses the turn's output (backpressure). */
  pause(): void;
  resume(): void;
  close(): void;
}

/** Attaches to the turn at `path` (its /attach route); resolves once the socket is open. */
export async function attachTurn(transport: Transport, path: string): Promise<Attachment> {
  const { ws, opened } = openSocket(transport, path);
  // Listening before the opening resolves: the first messages may arrive with the handshake.
  const attachment = new SocketAttachment(ws);
  await opened;
  return attachment;
}

class SocketAttachment implements Attachment {
  readonly output: AsyncIterable<OutputChunk>;
  readonly result: Promise<TurnResult | null>;
  readonly #ws: WebSocket;
  readonly #queue: MessageQueue<OutputChunk>;
  readonly #errorListeners: Array<(e: AttachError) => void> = [];
  readonly #droppedListeners: Array<(d: DroppedOutput) => void> = [];
  // The socket is read while neither the caller paused nor unread output is above the mark.
  #callerPaused = false;
  #settle: (result: TurnResult | null) => void = () => undefined;

  constructor(ws: WebSocket) {
    this.#ws = ws;
    this.#queue = new MessageQueue<OutputChunk>(() => {
      if (!this.#callerPaused) ws.resume();
    });
    this.output = this.#queue.iterable;
    this.result = new Promise<TurnResult | null>((resolve) => (this.#settle = resolve));
    ws.on('message', (data) => this.#receive(data));
    ws.on('close', () => {
      this.#queue.end();
      this.#settle(null);
    });
    ws.on('error', () => undefined);
  }

  #receive(data: WebSocket.RawData): void {
    const message = parseFrame(data) as AttachServerMessage | null;
    if (message === null) {
      for (const listener of this.#errorListeners)
        listener({ code: 'protocol_error', error: `not a JSON message: ${frameText(data).slice(0, 200)}` });
      this.#ws.close(1002);
      return;
    }
    if (message.type === 'output') {
      this.#queue.push({ stream: message.stream, data: Buffer.from(message.data, 'base64') });
      if (this.#queue.size() > HIGH_WATER_MESSAGES) this.#ws.pause();
    } else if (message.type === 'exit') this.#settle(message.result);
    else if (message.type === 'dropped') {
      for (const listener of this.#droppedListeners) listener({ stream: message.stream, bytes: message.bytes });
    } else {
      const { type: _type, ...refusal } = message;
      for (const listener of this.#errorListeners) listener(refusal);
    }
  }

  #send(message: object): void {
    if (this.#ws.readyState === WebSocket.OPEN) this.#ws.send(JSON.stringify(message));
  }

  write(data: Buffer | string): void {
    this.#send({ type: 'input', data: Buffer.from(data).toString('base64') });
  }

  eof(): void {
    this.#send({ type: 'eof' });
  }

  resize(cols: number, rows: number): void {
    this.#send({ type: 'resize', cols, rows });
  }

  signal(signal: TurnSignal): void {
    this.#send({ type: 'signal', signal });
  }

  onError(listener: (error: AttachError) => void): void {
    this.#errorListeners.push(listener);
  }

  onDropped(listener: (dropped: DroppedOutput) => void): void {
    this.#droppedListeners.push(listener);
  }

  pause(): void {
    this.#callerPaused = true;
    this.#ws.pause();
  }

  resume(): void {
    this.#callerPaused = false;
    if (this.#queue.size() <= HIGH_WATER_MESSAGES) this.#ws.resume();
  }

  close(): void {
    this.#ws.close(1000);
  }
}
