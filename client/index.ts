/**
 * The typed client of the turnhost supervisor API: loopback TCP or a unix socket, and the
 * bearer token. One method per route; every refusal is a TurnhostApiError with the status, the
 * stable code and the field at fault. It imports only the API schema's types, node builtins
 * and ws, so loading it loads no daemon module and no native addon.
 */
import { createHash } from 'node:crypto';
import http from 'node:http';
import WebSocket from 'ws';
import type {
  ActivityView,
  AttachServerMessage,
  ErrorCode,
  EventsPage,
  EventStreamMessage,
  FieldError,
  GovernanceEvent,
  Health,
  HostWriteAnswer,
  Ready,
  SessionDeletion,
  SystemStatus,
  TurnCreateRequest,
  TurnList,
  TurnRecord,
  TurnResult,
  TurnSignal,
  WorkerHostStatus,
  Workspace,
  WorkspaceCreateRequest,
  WorkspaceDeletion,
} from '../api/schema/index.js';

export type {
  ActivityView,
  ErrorCode,
  EventsPage,
  FieldError,
  GovernanceEvent,
  Health,
  HostWriteAnswer,
  Ready,
  SessionDeletion,
  SystemStatus,
  TurnCreateRequest,
  TurnList,
  TurnRecord,
  TurnResult,
  TurnSignal,
  WorkerHostStatus,
  Workspace,
  WorkspaceCreateRequest,
  WorkspaceDeletion,
} from '../api/schema/index.js';
export type { GovernedStatus, ModeAvailability, WorkerLimitsStatus } from '../api/schema/index.js';

export type ServerTarget = { kind: 'tcp'; host: string; port: number } | { kind: 'unix'; path: string };

export interface ClientOptions {
  target: ServerTarget;
  token: string;
  /** Sent as X-Request-Id on every request when given. */
  requestId?: () => string;
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

/**
 * Every failure of a call. `status` 0 with code `unreachable` when no server answered (`cause`
 * holds the socket error, `errno` its code); otherwise the HTTP status and the server's code.
 */
export class TurnhostApiError extends Error {
  readonly status: number;
  readonly code: ErrorCode | 'unreachable' | 'protocol_error';
  readonly field?: string;
  readonly errors?: FieldError[];
  readonly requirement?: string;
  readonly errno?: string;

  constructor(
    status: number,
    code: TurnhostApiError['code'],
    message: string,
    extra: { field?: string; errors?: FieldError[]; requirement?: string; errno?: string; cause?: unknown } = {},
  ) {
    super(message, extra.cause === undefined ? undefined : { cause: extra.cause });
    this.name = 'TurnhostApiError';
    this.status = status;
    this.code = code;
    if (extra.field !== undefined) this.field = extra.field;
    if (extra.errors !== undefined) this.errors = extra.errors;
    if (extra.requirement !== undefined) this.requirement = extra.requirement;
    if (extra.errno !== undefined) this.errno = extra.errno;
  }
}

export interface EventQuery {
  session?: string;
  turn?: string;
  kind?: string;
  after?: number;
}

export interface HostWrite {
  path: string;
  mode: 'create' | 'replace';
  root?: 'workspace' | 'temp';
  /** With mode replace: the digest the file must still have. */
  sha256?: string;
}

export interface TurnQuery {
  session?: string;
  workspace?: string;
  state?: 'starting' | 'running' | 'finished';
  /** The previous page's `nextAfter`. */
  after?: string;
  limit?: number;
}

export interface WorkspaceFile {
  data: Buffer;
  /** The server's digest of the bytes (X-Content-Sha256). */
  sha256: string;
}

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

/** An attached turn: its output until it exits, and the controls of its terminal. */
export interface Attachment {
  /** The output, backlog first; ends when the turn exited or the connection closed. */
  output: AsyncIterable<OutputChunk>;
  /** The exit result, or null when the connection closed before the exit arrived. */
  result: Promise<TurnResult | null>;
  write(data: Buffer | string): void;
  /** Ends the command's input (EOF on its stdin pipe; the terminal's EOF character on a pty). */
  eof(): void;
  resize(cols: number, rows: number): void;
  signal(signal: TurnSignal): void;
  /** Refusals of a sent message, e.g. a resize out of range (`errors` lists every refused field). */
  onError(listener: (error: AttachError) => void): void;
  /** Stops reading: the server then pauses the turn's output (backpressure). */
  pause(): void;
  resume(): void;
  close(): void;
}

function errorFromBody(status: number, body: unknown, fallback: string): TurnhostApiError {
  const b = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const text = (v: unknown): string | undefined => (typeof v === 'string' ? v : undefined);
  const code = (text(b['code']) ?? 'protocol_error') as TurnhostApiError['code'];
  const extra: { field?: string; errors?: FieldError[]; requirement?: string } = {};
  const field = text(b['field']);
  if (field !== undefined) extra.field = field;
  if (Array.isArray(b['errors'])) extra.errors = b['errors'] as FieldError[];
  const requirement = text(b['requirement']);
  if (requirement !== undefined) extra.requirement = requirement;
  return new TurnhostApiError(status, code, text(b['error']) ?? fallback, extra);
}

function unreachable(target: ServerTarget, error: NodeJS.ErrnoException): TurnhostApiError {
  const where = target.kind === 'tcp' ? `${target.host}:${target.port}` : `unix:${target.path}`;
  return new TurnhostApiError(0, 'unreachable', `no server answers at ${where} (${error.code ?? error.message})`, {
    ...(error.code === undefined ? {} : { errno: error.code }),
    cause: error,
  });
}

function query(params: Record<string, string | number | undefined>): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) if (value !== undefined) search.set(name, String(value));
  const text = search.toString();
  return text === '' ? '' : `?${text}`;
}

const turnPath = (id: string, rest = ''): string => `/api/turns/${encodeURIComponent(id)}${rest}`;
const workspacePath = (id: string, rest = ''): string => `/api/workspaces/${encodeURIComponent(id)}${rest}`;

/** A queue read by one async iterator; `end` finishes it after what is queued. */
function channel<T>(onDrained: () => void): {
  push(v: T): void;
  end(): void;
  size(): number;
  iterable: AsyncIterable<T>;
} {
  const items: T[] = [];
  let ended = false;
  let wake: (() => void) | undefined;
  return {
    push(value) {
      items.push(value);
      wake?.();
    },
    end() {
      ended = true;
      wake?.();
    },
    size: () => items.length,
    iterable: {
      async *[Symbol.asyncIterator]() {
        for (;;) {
          const next = items.shift();
          if (next !== undefined) {
            if (items.length === 0) onDrained();
            yield next;
            continue;
          }
          if (ended) return;
          await new Promise<void>((resolve) => (wake = resolve));
          wake = undefined;
        }
      },
    },
  };
}

/** A text frame's content: ws hands it over as one buffer, fragments, or an ArrayBuffer. */
function frameText(data: WebSocket.RawData): string {
  if (Array.isArray(data)) return Buffer.concat(data).toString('utf8');
  return Buffer.isBuffer(data) ? data.toString('utf8') : Buffer.from(data).toString('utf8');
}

/** A JSON object message, or null for anything else (the caller ends the connection). */
function parseFrame(data: WebSocket.RawData): { type: unknown } | null {
  try {
    const value: unknown = JSON.parse(frameText(data));
    return typeof value === 'object' && value !== null && 'type' in value ? value : null;
  } catch {
    return null;
  }
}

/** Messages a consumer has not read yet, above which the socket stops being read. */
const HIGH_WATER_MESSAGES = 256;

export interface TurnhostClient {
  health(): Promise<Health>;
  ready(): Promise<Ready>;
  status(): Promise<SystemStatus>;
  checkWorkerHost(): Promise<WorkerHostStatus>;
  openapi(): Promise<Record<string, unknown>>;
  events(query?: EventQuery & { limit?: number }): Promise<EventsPage>;
  /**
   * Matching events as they are committed. With `after`, stored ones after that id come first;
   * a dropped connection is reopened from the last id seen, so no event is missed or repeated.
   */
  streamEvents(query?: EventStreamOptions): AsyncIterable<GovernanceEvent>;
  /** Running turns, recent denials and recent events (served when the daemon keeps activity). */
  activity(): Promise<ActivityView>;
  /** The Prometheus text exposition. */
  metrics(): Promise<string>;
  createTurn(request: TurnCreateRequest): Promise<TurnRecord>;
  getTurn(id: string): Promise<TurnRecord>;
  /** One page of turns, newest first; pass `nextAfter` back as `after` for the next. */
  listTurns(query?: TurnQuery): Promise<TurnList>;
  /** Every turn matching the query, following `nextAfter` through every page. */
  allTurns(query?: Omit<TurnQuery, 'after'>): AsyncIterable<TurnRecord>;
  cancelTurn(id: string): Promise<TurnRecord>;
  attachTurn(id: string): Promise<Attachment>;
  writeHostFile(id: string, write: HostWrite, data: Buffer | string): Promise<HostWriteAnswer>;
  deleteSession(id: string): Promise<SessionDeletion['deleted']>;
  createWorkspace(request?: WorkspaceCreateRequest): Promise<Workspace>;
  listWorkspaces(query?: { session?: string }): Promise<Workspace[]>;
  getWorkspace(id: string): Promise<Workspace>;
  deleteWorkspace(id: string, options?: { cancel?: boolean }): Promise<WorkspaceDeletion>;
  writeWorkspaceFile(
    id: string,
    write: { path: string; mode?: 'create' | 'replace' },
    data: Buffer | string,
  ): Promise<HostWriteAnswer>;
  readWorkspaceFile(id: string, path: string): Promise<WorkspaceFile>;
}

export function createClient(options: ClientOptions): TurnhostClient {
  const { target, token } = options;
  const where = target.kind === 'tcp' ? { host: target.host, port: target.port } : { socketPath: target.path };
  const headers = (): Record<string, string> => ({
    authorization: `Bearer ${token}`,
    ...(options.requestId ? { 'x-request-id': options.requestId() } : {}),
  });

  function request<T>(
    method: string,
    path: string,
    body?: { type: string; data: Buffer },
    expect: number[] = [200],
  ): Promise<T> {
    return exchange(method, path, body, expect).then(({ parsed }) => parsed as T);
  }

  /** One HTTP exchange: the raw answer of an expected status, else the server's refusal. */
  function exchange(
    method: string,
    path: string,
    body?: { type: string; data: Buffer },
    expect: number[] = [200],
    raw = false,
  ): Promise<{ parsed: unknown; data: Buffer; headers: http.IncomingHttpHeaders }> {
    return new Promise((resolve, reject) => {
      const req = http.request(
        {
          ...where,
          method,
          path,
          headers: {
            ...headers(),
            ...(body ? { 'content-type': body.type, 'content-length': String(body.data.length) } : {}),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('end', () => {
            const status = res.statusCode ?? 0;
            const data = Buffer.concat(chunks);
            if (raw && expect.includes(status)) return resolve({ parsed: undefined, data, headers: res.headers });
            let parsed: unknown;
            try {
              parsed = JSON.parse(data.toString('utf8'));
            } catch {
              parsed = undefined;
            }
            if (expect.includes(status) && parsed !== undefined) return resolve({ parsed, data, headers: res.headers });
            reject(errorFromBody(status, parsed, `HTTP ${status}`));
          });
          res.on('error', (error) => reject(unreachable(target, error)));
        },
      );
      req.on('error', (error: NodeJS.ErrnoException) => reject(unreachable(target, error)));
      req.end(body?.data);
    });
  }

  const json = (value: unknown): { type: string; data: Buffer } => ({
    type: 'application/json',
    data: Buffer.from(JSON.stringify(value)),
  });

  /**
   * The socket at once, and its opening. A server may send its first messages in the same read
   * as the upgrade answer (an attach to a finished turn sends everything and closes), and ws
   * emits them right after 'open', before an awaiting caller resumes: so the caller attaches
   * its listeners to `ws` first, then awaits `opened`.
   */
  function connectSocket(path: string): { ws: WebSocket; opened: Promise<void> } {
    const url =
      target.kind === 'tcp'
        ? `ws://${target.host.includes(':') ? `[${target.host}]` : target.host}:${target.port}${path}`
        : `ws+unix://${target.path}:${path}`;
    // A server that accepts the connection but never answers the handshake is a failure too.
    const ws = new WebSocket(url, { headers: headers(), maxPayload: 64 * 1024 * 1024, handshakeTimeout: 30_000 });
    const opened = new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('unexpected-response', (_req, res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          let body: unknown;
          try {
            body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
          } catch {
            body = undefined;
          }
          reject(
            errorFromBody(
              res.statusCode ?? 0,
              body,
              `WebSocket ${path.split('?')[0] ?? path}: HTTP ${res.statusCode ?? 0}`,
            ),
          );
        });
      });
      ws.once('error', (error: NodeJS.ErrnoException) => reject(unreachable(target, error)));
    });
    return { ws, opened };
  }

  /** Whether a failed (re)connect may succeed later: no server yet, or one answering 5xx. */
  const transient = (error: unknown): boolean =>
    error instanceof TurnhostApiError && (error.status === 0 ? error.code === 'unreachable' : error.status >= 500);

  async function* streamEvents(q: EventStreamOptions = {}): AsyncGenerator<GovernanceEvent> {
    let after = q.after;
    const { signal } = q;
    const maxReconnects = q.maxReconnects ?? Infinity;
    // Reconnects made since a message last arrived, and why the latest one was needed.
    let reconnects = 0;
    let lastFailure: TurnhostApiError | null = null;
    for (;;) {
      if (signal?.aborted) return;
      if (reconnects > 0) {
        if (reconnects > maxReconnects) throw lastFailure!;
        // Reconnects back off (100 ms doubling to 5 s) so a server closing at once is not spun on.
        const delay = Math.min(5000, 100 * 2 ** (reconnects - 1));
        await new Promise<void>((resolve) => {
          const done = (): void => {
            clearTimeout(timer);
            signal?.removeEventListener('abort', done);
            resolve();
          };
          const timer = setTimeout(done, delay);
          signal?.addEventListener('abort', done, { once: true });
        });
        if (signal?.aborted) return;
      }
      const { ws, opened } = connectSocket(
        `/api/governance/events/stream${query({ session: q.session, turn: q.turn, kind: q.kind, after })}`,
      );
      let closed = { code: 0, reason: '' };
      const stream: { malformed: string | null } = { malformed: null };
      const messages = channel<EventStreamMessage>(() => ws.resume());
      ws.on('message', (data) => {
        const parsed = parseFrame(data) as EventStreamMessage | null;
        if (parsed === null) {
          stream.malformed = frameText(data).slice(0, 200);
          ws.close(1002);
          return;
        }
        messages.push(parsed);
        if (messages.size() > HIGH_WATER_MESSAGES) ws.pause();
      });
      ws.on('close', (code, reason) => {
        closed = { code, reason: reason.toString('utf8') };
        messages.end();
      });
      ws.on('error', () => undefined);
      // Listening from the start: an abort during the handshake ends the connecting socket too.
      const abort = (): void => ws.close(1000);
      signal?.addEventListener('abort', abort, { once: true });
      try {
        try {
          await opened;
        } catch (error) {
          if (signal?.aborted) return;
          // A reconnect waits out a restarting server; a refusal, or a first connection that
          // fails, is the caller's to see at once.
          if (lastFailure === null || !transient(error)) throw error;
          lastFailure = error as TurnhostApiError;
          reconnects++;
          continue;
        }
        for await (const message of messages.iterable) {
          reconnects = 0;
          // The replay's progress is a cursor too: a drop during a replay resumes after it.
          if (message.type !== 'event') {
            after = Math.max(after ?? 0, message.lastId);
            continue;
          }
          after = message.event.id;
          yield message.event;
          if (signal?.aborted) return;
        }
      } finally {
        signal?.removeEventListener('abort', abort);
        if (ws.readyState === WebSocket.OPEN || ws.readyState === WebSocket.CONNECTING) ws.close(1000);
      }
      if (stream.malformed !== null)
        throw new TurnhostApiError(0, 'protocol_error', `event stream: not a JSON message: ${stream.malformed}`);
      // A normal close (ours, or the server shutting down) ends the stream; any other is resumed,
      // from the last id seen. A live-only stream that saw nothing yet resumes live-only: the
      // server has no cursor for "now", and replaying from 0 would resend all history.
      if (signal?.aborted || closed.code === 1000 || closed.code === 1001) return;
      lastFailure = new TurnhostApiError(
        0,
        'unreachable',
        `event stream closed (${closed.code}${closed.reason === '' ? '' : ` ${closed.reason}`})`,
      );
      reconnects++;
    }
  }

  async function* allTurns(q: Omit<TurnQuery, 'after'> = {}): AsyncGenerator<TurnRecord> {
    let after: string | undefined;
    for (;;) {
      const page = await request<TurnList>('GET', `/api/turns${query({ ...q, after })}`);
      yield* page.turns;
      if (page.nextAfter === null) return;
      after = page.nextAfter;
    }
  }

  async function attachTurn(id: string): Promise<Attachment> {
    const { ws, opened } = connectSocket(turnPath(id, '/attach'));
    // The socket is read while neither the caller paused nor unread output is above the mark.
    let callerPaused = false;
    const output = channel<OutputChunk>(() => {
      if (!callerPaused) ws.resume();
    });
    const errorListeners: Array<(e: AttachError) => void> = [];
    let settle: (result: TurnResult | null) => void = () => undefined;
    const result = new Promise<TurnResult | null>((resolve) => (settle = resolve));
    ws.on('message', (data) => {
      const message = parseFrame(data) as AttachServerMessage | null;
      if (message === null) {
        for (const listener of errorListeners)
          listener({ code: 'protocol_error', error: `not a JSON message: ${frameText(data).slice(0, 200)}` });
        ws.close(1002);
        return;
      }
      if (message.type === 'output') {
        output.push({ stream: message.stream, data: Buffer.from(message.data, 'base64') });
        if (output.size() > HIGH_WATER_MESSAGES) ws.pause();
      } else if (message.type === 'exit') settle(message.result);
      else {
        const { type: _type, ...refusal } = message;
        for (const listener of errorListeners) listener(refusal);
      }
    });
    ws.on('close', () => {
      output.end();
      settle(null);
    });
    ws.on('error', () => undefined);
    await opened;
    const send = (message: object): void => {
      if (ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify(message));
    };
    return {
      output: output.iterable,
      result,
      write: (data) => send({ type: 'input', data: Buffer.from(data).toString('base64') }),
      eof: () => send({ type: 'eof' }),
      resize: (cols, rows) => send({ type: 'resize', cols, rows }),
      signal: (signal) => send({ type: 'signal', signal }),
      onError: (listener) => void errorListeners.push(listener),
      pause: () => {
        callerPaused = true;
        ws.pause();
      },
      resume: () => {
        callerPaused = false;
        if (output.size() <= HIGH_WATER_MESSAGES) ws.resume();
      },
      close: () => ws.close(1000),
    };
  }

  return {
    health: () => request<Health>('GET', '/api/health'),
    ready: () => request<Ready>('GET', '/api/ready'),
    status: () => request<SystemStatus>('GET', '/api/status'),
    checkWorkerHost: () => request<WorkerHostStatus>('POST', '/api/status/worker-host'),
    openapi: () => request<Record<string, unknown>>('GET', '/api/openapi.json'),
    events: (q = {}) => request<EventsPage>('GET', `/api/governance/events${query({ ...q })}`),
    streamEvents,
    activity: () => request<ActivityView>('GET', '/api/activity'),
    metrics: async () => (await exchange('GET', '/metrics', undefined, [200], true)).data.toString('utf8'),
    createTurn: async (body) => (await request<{ turn: TurnRecord }>('POST', '/api/turns', json(body), [201])).turn,
    getTurn: async (id) => (await request<{ turn: TurnRecord }>('GET', turnPath(id))).turn,
    listTurns: (q = {}) => request<TurnList>('GET', `/api/turns${query({ ...q })}`),
    allTurns,
    cancelTurn: async (id) => (await request<{ turn: TurnRecord }>('POST', turnPath(id, '/cancel'))).turn,
    attachTurn,
    writeHostFile: (id, write, data) =>
      request<HostWriteAnswer>(
        'PUT',
        turnPath(id, `/files${query({ path: write.path, mode: write.mode, root: write.root, sha256: write.sha256 })}`),
        { type: 'application/octet-stream', data: Buffer.from(data) },
        [200, 201],
      ),
    deleteSession: async (id) =>
      (await request<SessionDeletion>('DELETE', `/api/sessions/${encodeURIComponent(id)}`)).deleted,
    createWorkspace: async (body = {}) =>
      (await request<{ workspace: Workspace }>('POST', '/api/workspaces', json(body), [201])).workspace,
    listWorkspaces: async (q = {}) =>
      (await request<{ workspaces: Workspace[] }>('GET', `/api/workspaces${query({ session: q.session })}`)).workspaces,
    getWorkspace: async (id) => (await request<{ workspace: Workspace }>('GET', workspacePath(id))).workspace,
    deleteWorkspace: (id, o = {}) =>
      request<WorkspaceDeletion>('DELETE', workspacePath(id, query({ cancel: o.cancel ? '1' : undefined }))),
    writeWorkspaceFile: (id, write, data) =>
      request<HostWriteAnswer>(
        'PUT',
        workspacePath(id, `/files${query({ path: write.path, mode: write.mode })}`),
        { type: 'application/octet-stream', data: Buffer.from(data) },
        [200, 201],
      ),
    readWorkspaceFile: async (id, path) => {
      const answer = await exchange('GET', workspacePath(id, `/files${query({ path })}`), undefined, [200], true);
      const digest = answer.headers['x-content-sha256'];
      const actual = createHash('sha256').update(answer.data).digest('hex');
      // The server's digest of what it read: a mismatch is bytes lost or changed on the way.
      if (digest !== actual)
        throw new TurnhostApiError(0, 'protocol_error', `${path}: the bytes do not match X-Content-Sha256`);
      return { data: answer.data, sha256: actual };
    },
  };
}
