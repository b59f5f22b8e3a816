/**
 * WebSocket endpoints, authenticated on the upgrade request with the same bearer token:
 * - `/api/governance/events/stream?session=&turn=&kind=&after=`: `{type:"event", event}` text
 *   messages. With `after`, stored events after that id are replayed first, then live ones;
 *   ids only increase, so a client never sees a gap or a duplicate.
 * - `/api/turns/:id/attach?offset=&stderrOffset=`: output as `{type:"output", stream,
 *   data(base64)}`, kept output first (from the start, or from `offset` of stdout or pty and
 *   `stderrOffset` of stderr) then live, `{type:"dropped", stream, bytes}` for bytes past the
 *   retention cap, then `{type:"exit", result}` and a normal close. The client sends `{type:"input", data(base64)}`,
 *   `{type:"eof"}` (ends the command's input), `{type:"resize", cols, rows}` and `{type:"signal", signal}`.
 * A client that falls more than MAX_BUFFERED_BYTES behind is closed with 1013 (try again).
 */
import type { IncomingMessage } from 'node:http';
import type { Duplex } from 'node:stream';
import { WebSocketServer, type WebSocket } from 'ws';
import { withLogFields, type Logger } from '../../core/log.js';
import type { EventQuery, EventStore, GovernanceEvent } from '../events/types.js';
import type { InputOutcome, TurnAttachment, TurnManager, TurnStreamEvent } from '../turns/types.js';
import { isAuthorized, sessionAuthorizes, UNAUTHENTICATED_MESSAGE } from './auth.js';
import { sameOrigin, type UiSessions } from './ui-session.js';
import { MAX_BODY_BYTES, type ErrorCode } from './errors.js';
import { eventMatches, MAX_EVENT_PAGE, parseEventQuery } from './event-query.js';
import { QueryCheck, queryRefusalBody } from './query-params.js';
import { parseOffset } from './turn-output-route.js';
import { REQUEST_ID_HEADER, resolveRequestId } from './request-id.js';
import { isValidId } from '../../api/schema/ids.js';
import { ATTACH_CLIENT_MESSAGES, type AttachClientMessage } from '../../api/schema/messages.js';
import { compileValidator, createAjv, fieldRefusal, type SchemaValidator } from '../../api/schema/validate.js';
import type { FieldError } from '../../api/schema/errors.js';

const MAX_BUFFERED_BYTES = 16 * 1024 * 1024;
/** An attached client's unsent output above which the turn's output is paused. */
const ATTACH_HIGH_WATER_BYTES = 1024 * 1024;
/** Live events that may queue while a replay is still being written. */
const MAX_PENDING_EVENTS = 100_000;
const EVENTS_STREAM_PATH = '/api/governance/events/stream';
const ATTACH_PATH = /^\/api\/turns\/([^/]+)\/attach$/;

export interface UpgradeDeps {
  logger: Logger;
  store: EventStore;
  turns?: TurnManager;
  token: string;
  /** The status page's sessions may open the event stream, from a page of this origin only. */
  statusPage?: { sessions: UiSessions };
}

export interface UpgradeHandler {
  handle(req: IncomingMessage, socket: Duplex, head: Buffer): void;
  /** Closes every open WebSocket (1001 going away). */
  close(): void;
}

const STATUS_TEXT: Record<number, string> = {
  400: 'Bad Request',
  401: 'Unauthorized',
  404: 'Not Found',
  405: 'Method Not Allowed',
  500: 'Internal Server Error',
};

/** One upgrade request: its id (echoed on every answer) and the logger that carries it. */
interface UpgradeRequest {
  id: string;
  logger: Logger;
  /** The request target's path; null until it parsed. */
  path: string | null;
}

function rejectUpgrade(
  socket: Duplex,
  request: UpgradeRequest,
  status: number,
  code: ErrorCode,
  error: string,
  members: Record<string, unknown> = {},
): void {
  const body = JSON.stringify({ error, code, ...members });
  const extra = status === 401 ? 'WWW-Authenticate: Bearer\r\n' : status === 405 ? 'Allow: GET, HEAD\r\n' : '';
  request.logger.info('websocket upgrade', { path: request.path, status, code });
  socket.end(
    `HTTP/1.1 ${status} ${STATUS_TEXT[status] ?? 'Error'}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${REQUEST_ID_HEADER}: ${request.id}\r\n${extra}Connection: close\r\n\r\n${body}`,
  );
}

function tooSlow(ws: WebSocket): boolean {
  if (ws.bufferedAmount <= MAX_BUFFERED_BYTES) return false;
  ws.close(1013, 'client too slow');
  return true;
}

function sendAndFlush(ws: WebSocket, message: string): Promise<void> {
  return new Promise((resolve) => ws.send(message, () => resolve()));
}

function streamEvents(ws: WebSocket, store: EventStore, query: EventQuery, logger: Logger): void {
  let lastSentId = query.after ?? 0;
  let replaying = query.after !== undefined;
  const pending: GovernanceEvent[] = [];

  const send = (event: GovernanceEvent): void => {
    if (event.id <= lastSentId || ws.readyState !== ws.OPEN || tooSlow(ws)) return;
    lastSentId = event.id;
    ws.send(JSON.stringify({ type: 'event', event }));
  };
  // Subscribe before replaying: what commits during the replay waits in `pending`, and the id
  // check drops what the replay already sent.
  const unsubscribe = store.subscribe((event) => {
    if (!eventMatches(query, event)) return;
    if (!replaying) return send(event);
    if (pending.length >= MAX_PENDING_EVENTS) {
      ws.close(1013, 'client too slow');
      return;
    }
    pending.push(event);
  });
  ws.on('close', unsubscribe);

  if (!replaying) return;
  const replay = async (): Promise<void> => {
    let after = lastSentId;
    for (;;) {
      const page = store.query({ ...query, after, limit: MAX_EVENT_PAGE });
      if (!page.ok) {
        logger.error('event stream replay failed', { detail: page.detail });
        ws.close(1011, 'replay failed');
        return;
      }
      for (const event of page.events) send(event);
      if (page.nextAfter === null || ws.readyState !== ws.OPEN) break;
      after = page.nextAfter;
      await sendAndFlush(ws, JSON.stringify({ type: 'replay_progress', lastId: lastSentId }));
    }
    replaying = false;
    for (const event of pending.splice(0)) send(event);
    if (ws.readyState === ws.OPEN) ws.send(JSON.stringify({ type: 'replay_done', lastId: lastSentId }));
  };
  void replay();
}

function encodeStreamEvent(event: TurnStreamEvent): string {
  switch (event.type) {
    case 'output':
      return JSON.stringify({ type: 'output', stream: event.stream, data: event.data.toString('base64') });
    case 'dropped':
      return JSON.stringify({ type: 'dropped', stream: event.stream, bytes: event.bytes });
    case 'exit':
      return JSON.stringify({ type: 'exit', result: event.result });
  }
}

type ClientMessageError = {
  code: 'invalid_request' | 'input_closed';
  error: string;
  field?: string;
  errors?: FieldError[];
};

const clientMessageAjv = createAjv();
/** Each client message type's validator: picked by `type`, so a refusal names the fields at fault. */
const CLIENT_MESSAGES = new Map<string, SchemaValidator<unknown>>(
  ATTACH_CLIENT_MESSAGES.map((schema) => [schema.properties.type.const, compileValidator(clientMessageAjv, schema)]),
);
const CLIENT_MESSAGE_TYPES = [...CLIENT_MESSAGES.keys()].map((type) => `'${type}'`).join(', ');

function invalidMessage(errors: FieldError[]): ClientMessageError {
  return { code: 'invalid_request', ...fieldRefusal(errors) };
}

/** One client message; answers an error or null when applied. */
function applyClientMessage(attachment: TurnAttachment, raw: string): ClientMessageError | null {
  let message: unknown;
  try {
    message = JSON.parse(raw);
  } catch {
    return invalidMessage([{ field: 'message', detail: 'not valid JSON' }]);
  }
  if (typeof message !== 'object' || message === null || Array.isArray(message))
    return invalidMessage([{ field: 'message', detail: 'expected an object' }]);
  const type = (message as Record<string, unknown>)['type'];
  const validate = typeof type === 'string' ? CLIENT_MESSAGES.get(type) : undefined;
  if (validate === undefined)
    return invalidMessage([{ field: 'type', detail: `expected one of ${CLIENT_MESSAGE_TYPES}` }]);
  const checked = validate(message);
  if (!checked.ok) return invalidMessage(checked.errors);
  const closed = (outcome: InputOutcome): ClientMessageError | null =>
    outcome.ok ? null : { code: 'input_closed', error: `input: ${outcome.detail}` };
  const m = checked.value as AttachClientMessage;
  switch (m.type) {
    case 'input':
      return closed(attachment.write(Buffer.from(m.data, 'base64')));
    case 'eof':
      return closed(attachment.endInput());
    case 'resize':
      attachment.resize(m.cols, m.rows);
      return null;
    case 'signal':
      attachment.signal(m.signal);
      return null;
  }
}

function attachTurn(ws: WebSocket, attachment: TurnAttachment): void {
  let finished = false;
  let paused = false;
  // Past the high-water mark the turn's output is paused until the client has read it, so a
  // slow client slows the command; tooSlow stays the hard cap for output that ends the turn.
  const flow = (): void => {
    const above = ws.bufferedAmount > ATTACH_HIGH_WATER_BYTES;
    if (above === paused) return;
    paused = above;
    if (above) attachment.pauseOutput();
    else attachment.resumeOutput();
  };
  // The replay of kept output waits for the client to read below the mark between its reads.
  let flushed: Promise<void> = Promise.resolve();
  const drained = (): Promise<void> =>
    ws.readyState !== ws.OPEN || ws.bufferedAmount <= ATTACH_HIGH_WATER_BYTES ? Promise.resolve() : flushed;
  attachment.onEvent(
    (event) => {
      if (finished || ws.readyState !== ws.OPEN) return;
      if (event.type === 'output' && tooSlow(ws)) return;
      flushed = new Promise((resolve) =>
        ws.send(encodeStreamEvent(event), () => {
          flow();
          resolve();
        }),
      );
      flow();
      if (event.type === 'exit') {
        finished = true;
        ws.close(1000, 'exit');
      }
    },
    { drained },
  );
  ws.on('message', (data, isBinary) => {
    const refused = isBinary
      ? invalidMessage([{ field: 'message', detail: 'expected JSON text' }])
      : applyClientMessage(attachment, rawText(data));
    if (refused !== null) ws.send(JSON.stringify({ type: 'error', ...refused }));
  });
  ws.on('close', () => attachment.detach());
}

/** Why an upgrade is refused: the answer's status, code and message, and extra body members. */
interface UpgradeRefusal {
  status: number;
  code: ErrorCode;
  error: string;
  members?: Record<string, unknown>;
}

/** What an endpoint makes of an upgrade request: a refusal, or what to do with the opened WebSocket. */
type RouteOutcome = { refusal: UpgradeRefusal } | { opened: (ws: WebSocket) => void };

function refuseUpgrade(socket: Duplex, request: UpgradeRequest, refusal: UpgradeRefusal): void {
  rejectUpgrade(socket, request, refusal.status, refusal.code, refusal.error, refusal.members);
}

/**
 * The checks every upgrade passes before its endpoint: a WebSocket handshake, authenticated by
 * the token (or, for the event stream, by a status-page session from the page's origin), with GET.
 */
function handshakeRefusal(req: IncomingMessage, url: URL, deps: UpgradeDeps): UpgradeRefusal | null {
  // Node hands every request with an Upgrade header to this handler; only WebSocket is served.
  const handshake = handshakeProblem(req);
  if (handshake !== null)
    return { status: 400, code: 'invalid_request', error: handshake.detail, members: { field: handshake.field } };
  const bySession =
    url.pathname === EVENTS_STREAM_PATH &&
    sessionAuthorizes(req.method ?? '', req.headers, deps.statusPage?.sessions) &&
    sameOrigin(req.headers, { required: true });
  if (!isAuthorized(req.headers, deps.token) && !bySession)
    return { status: 401, code: 'unauthenticated', error: UNAUTHENTICATED_MESSAGE };
  if (req.method !== 'GET') return { status: 405, code: 'method_not_allowed', error: 'WebSocket upgrades use GET' };
  return null;
}

/** The event stream: its query is checked before the handshake completes. */
function eventStreamRoute(url: URL, store: EventStore, logger: Logger): RouteOutcome {
  const parsed = parseEventQuery(url.searchParams, { allowLimit: false });
  if (!parsed.ok)
    return {
      refusal: { status: 400, code: 'invalid_request', error: parsed.detail, members: queryRefusalBody(parsed) },
    };
  return { opened: (ws) => streamEvents(ws, store, parsed.query, logger) };
}

/** A turn's attach: the turn and the offsets are checked, and the turn attached, before the handshake completes. */
function attachRoute(url: URL, turns: TurnManager, id: string): RouteOutcome {
  const noSuchTurn: RouteOutcome = { refusal: { status: 404, code: 'not_found', error: 'no such turn' } };
  if (!isValidId(id) || turns.get(id) === undefined) return noSuchTurn;
  const check = new QueryCheck(url.searchParams, ['offset', 'stderrOffset']);
  const offset = parseOffset(check, 'offset');
  const stderrOffset = parseOffset(check, 'stderrOffset');
  const refused = check.failure();
  if (refused !== null)
    return {
      refusal: { status: 400, code: 'invalid_request', error: refused.detail, members: queryRefusalBody(refused) },
    };
  const record = turns.get(id);
  const offsets = {
    ...(offset === undefined ? {} : { [record?.tty ? 'pty' : 'stdout']: offset }),
    ...(stderrOffset === undefined ? {} : { stderr: stderrOffset }),
  };
  // Checked before the upgrade, so an offset past the kept bytes is a named 400.
  const attached = turns.attach(id, offsets);
  if (!attached.ok) {
    if (attached.reason === 'not_found') return noSuchTurn;
    const field = attached.field ?? 'offset';
    return {
      refusal: {
        status: 400,
        code: 'invalid_request',
        error: attached.detail,
        members: { field, errors: [{ field, detail: attached.detail.replace(/^[^:]*: /, '') }] },
      },
    };
  }
  return { opened: (ws) => attachTurn(ws, attached.attachment) };
}

/** The WebSocket server behind the upgrade requests: each request checked, routed to its endpoint and logged. */
class UpgradeRouter implements UpgradeHandler {
  private readonly wss = new WebSocketServer({ noServer: true, maxPayload: MAX_BODY_BYTES });
  private readonly upgrades = new WeakMap<IncomingMessage, UpgradeRequest>();

  constructor(private readonly deps: UpgradeDeps) {
    // The 101 answer echoes the request's id like every other answer.
    this.wss.on('headers', (headers, req) => {
      const request = this.upgrades.get(req);
      if (request !== undefined) headers.push(`${REQUEST_ID_HEADER}: ${request.id}`);
    });
    // The handshake refusals ws finds itself (a malformed protocol or extension header) are
    // answered like every other refusal: JSON, with the request's id, and logged.
    this.wss.on('wsClientError', (error, socket, req) => {
      const request = this.upgrades.get(req);
      if (request === undefined) return void socket.destroy();
      rejectUpgrade(socket, request, 400, 'invalid_request', `websocket handshake: ${error.message}`);
    });
  }

  handle(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    socket.on('error', () => socket.destroy());
    const resolved = resolveRequestId(req.headers['x-request-id']);
    const request: UpgradeRequest = {
      id: resolved.id,
      logger: this.deps.logger.child({ requestId: resolved.id }),
      path: null,
    };
    if (!resolved.ok)
      return rejectUpgrade(socket, request, 400, 'invalid_request', resolved.detail, { field: resolved.field });
    try {
      withLogFields({ requestId: request.id }, () => this.route(req, socket, head, request));
    } catch (error) {
      // An upgrade runs outside express: a throw here would end the daemon, not one request.
      request.logger.error('websocket upgrade failed', {
        error: error instanceof Error ? (error.stack ?? error.message) : String(error),
      });
      if (socket.writable) rejectUpgrade(socket, request, 500, 'internal_error', 'internal error');
      else socket.destroy();
    }
  }

  close(): void {
    for (const ws of this.wss.clients) ws.close(1001, 'server shutting down');
    this.wss.close();
  }

  private route(req: IncomingMessage, socket: Duplex, head: Buffer, request: UpgradeRequest): void {
    const url = URL.canParse(req.url ?? '/', 'http://localhost') ? new URL(req.url ?? '/', 'http://localhost') : null;
    if (url === null) return rejectUpgrade(socket, request, 400, 'invalid_request', 'url: not a valid request target');
    request.path = url.pathname;
    const refused = handshakeRefusal(req, url, this.deps);
    if (refused !== null) return refuseUpgrade(socket, request, refused);
    const outcome = this.endpoint(url, request);
    if (outcome === null) return rejectUpgrade(socket, request, 404, 'not_found', 'no WebSocket endpoint at this path');
    if ('refusal' in outcome) return refuseUpgrade(socket, request, outcome.refusal);
    this.accept(req, socket, head, request, outcome.opened);
  }

  /** The endpoint at the request's path, or null when there is none. */
  private endpoint(url: URL, request: UpgradeRequest): RouteOutcome | null {
    if (url.pathname === EVENTS_STREAM_PATH) return eventStreamRoute(url, this.deps.store, request.logger);
    const attach = ATTACH_PATH.exec(url.pathname);
    if (attach !== null && this.deps.turns !== undefined) return attachRoute(url, this.deps.turns, attach[1] ?? '');
    return null;
  }

  private accept(
    req: IncomingMessage,
    socket: Duplex,
    head: Buffer,
    request: UpgradeRequest,
    opened: (ws: WebSocket) => void,
  ): void {
    this.upgrades.set(req, request);
    this.wss.handleUpgrade(req, socket, head, (ws) => {
      request.logger.info('websocket upgrade', { path: request.path, status: 101 });
      ws.on('error', (error) => request.logger.debug('websocket error', { error: error.message }));
      opened(ws);
    });
  }
}

export function createUpgradeHandler(deps: UpgradeDeps): UpgradeHandler {
  return new UpgradeRouter(deps);
}

/** What makes a request no WebSocket handshake (RFC 6455 section 4.2.1), or null. */
function handshakeProblem(req: IncomingMessage): { field: string; detail: string } | null {
  if (req.headers.upgrade?.toLowerCase() !== 'websocket')
    return { field: 'upgrade', detail: 'upgrade: only websocket is served' };
  if (!/^[+/0-9A-Za-z]{22}==$/.test(req.headers['sec-websocket-key'] ?? ''))
    return { field: 'sec-websocket-key', detail: 'sec-websocket-key: expected 16 bytes in base64' };
  const version = req.headers['sec-websocket-version'];
  if (version !== '13' && version !== '8')
    return { field: 'sec-websocket-version', detail: 'sec-websocket-version: expected 13' };
  return null;
}

/** A text frame's content: ws hands it over as one buffer, fragments, or an ArrayBuffer. */
export function rawText(data: WebSocket.RawData): string {
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8');
  return Buffer.isBuffer(data) ? data.toString('utf8') : Buffer.from(data).toString('utf8');
}
