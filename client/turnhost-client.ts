/**
 * The operations of the supervisor API, one method per route named by its operationId (and two
 * conveniences built on them: `allTurns`, the pager over listTurns, and `run`, a command's exit
 * and whole output in one call). Every refusal is a TurnhostApiError.
 */
import { createHash, randomUUID } from 'node:crypto';
import type {
  ActivityView,
  DrainAnswer,
  DrainRequest,
  EventsPage,
  GovernanceEvent,
  Health,
  HostWriteAnswer,
  Ready,
  SessionDeletion,
  SessionList,
  SystemStatus,
  TurnCreateRequest,
  TurnList,
  TurnRecord,
  TurnResult,
  WorkerHostCheckRequest,
  WorkerHostStatus,
  Workspace,
  WorkspaceArchiveExtracted,
  WorkspaceCreateRequest,
  WorkspaceDeletion,
  WorkspaceDirectoryMade,
  WorkspaceEntryRemoved,
  WorkspaceListing,
} from '../api/schema/index.js';
import { attachTurn, type Attachment } from './attach.js';
import { TurnhostApiError } from './errors.js';
import { streamEvents, type EventQuery, type EventStreamOptions } from './event-stream.js';
import { Transport, jsonBody, octetBody, query, type ClientOptions } from './transport.js';

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

/** A page of events: ascending pages with `after`, `order: 'desc'` pages with `before`. */
export type EventPageQuery = (EventQuery & { limit?: number; order?: 'asc' }) | EventDescQuery;

interface EventDescQuery extends Omit<EventQuery, 'after'> {
  order: 'desc';
  /** The previous page's `nextBefore`. */
  before?: number;
  limit?: number;
}

export interface SessionQuery {
  /** The previous page's `nextAfter`. */
  after?: string;
  limit?: number;
}

export interface WorkspaceFile {
  kind: 'file';
  data: Buffer;
  /** The server's digest of the bytes (X-Content-Sha256). */
  sha256: string;
}

/** Seconds (0 < S <= 300) to wait for the turn's end before the answer; its record's state says which came first. */
export interface WaitOption {
  wait?: number;
}

export interface OutputQuery {
  /** Default the turn's first stream: stdout (pipes) or pty (a terminal). */
  stream?: 'stdout' | 'stderr' | 'pty';
  /** The first byte wanted (default 0). */
  offset?: number;
}

/** `run`'s request: a turn request without argv, its session and mode defaulted. */
export type RunOptions = Omit<TurnCreateRequest, 'argv' | 'sessionId' | 'mode'> &
  Partial<Pick<TurnCreateRequest, 'sessionId' | 'mode'>>;

/** A finished turn's exit, its output kept by the server, and its record. */
export interface RunResult {
  exitCode: number | null;
  /** stdout, or the terminal's output for a tty turn. */
  stdout: Buffer;
  /** stderr; empty for a tty turn (one stream). */
  stderr: Buffer;
  /** Bytes past the server's retention cap, per stream: counted, not kept (0 when all was kept). */
  dropped: { stdout: number; stderr: number };
  result: TurnResult;
  turn: TurnRecord;
}

/** The longest wait one request may ask for (the API's bound). */
const MAX_WAIT_SECONDS = 300;

/** A stream's kept output from the offset asked for, and how far the stream got. */
export interface TurnOutputRead {
  data: Buffer;
  /** Every byte the stream wrote so far. */
  written: number;
  /** Bytes past the server's retention cap: counted, not kept. */
  dropped: number;
  /** The turn has ended: nothing more will be written. */
  complete: boolean;
}

export interface AttachOffsets {
  /** Where the replay of stdout (pty with a terminal) starts. */
  offset?: number;
  /** Where the replay of stderr starts. */
  stderrOffset?: number;
}

const wantWait = (options: WaitOption): string => query({ wait: options.wait });

function headerCount(headers: Record<string, string | string[] | undefined>, name: string): number {
  const value = Number(headers[name]);
  if (!Number.isSafeInteger(value) || value < 0)
    throw new TurnhostApiError(0, 'protocol_error', `${name}: expected a byte count`);
  return value;
}

const turnPath = (id: string, rest = ''): string => `/api/turns/${encodeURIComponent(id)}${rest}`;
const workspacePath = (id: string, rest = ''): string => `/api/workspaces/${encodeURIComponent(id)}${rest}`;

export class TurnhostClient {
  readonly #transport: Transport;

  constructor(options: ClientOptions) {
    this.#transport = new Transport(options);
  }

  health(): Promise<Health> {
    return this.#transport.request<Health>('GET', '/api/health');
  }

  /** Ready for a new turn, with the room left; a host that is not (probe, drain, full) answers a 503 TurnhostApiError. */
  ready(): Promise<Ready> {
    return this.#transport.request<Ready>('GET', '/api/ready');
  }

  /** Drain mode on or off: while on, the host refuses new turns (503 draining); running ones end as they would. */
  drain(request: DrainRequest): Promise<DrainAnswer> {
    return this.#transport.request<DrainAnswer>('POST', '/api/drain', jsonBody(request));
  }

  status(): Promise<SystemStatus> {
    return this.#transport.request<SystemStatus>('GET', '/api/status');
  }

  /** Re-runs the probes; with `{ attack: true }` also the attack battery (the answer's `attested`). */
  checkWorkerHost(request: WorkerHostCheckRequest = {}): Promise<WorkerHostStatus> {
    if (request.attack === undefined)
      return this.#transport.request<WorkerHostStatus>('POST', '/api/status/worker-host');
    return this.#transport.request<WorkerHostStatus>('POST', '/api/status/worker-host', jsonBody(request));
  }

  openapi(): Promise<Record<string, unknown>> {
    return this.#transport.request<Record<string, unknown>>('GET', '/api/openapi.json');
  }

  /**
   * A page of events: oldest first, continued with `after: page.nextAfter`; or with
   * `order: 'desc'` newest first, continued with `before: page.nextBefore`.
   */
  events(q: EventPageQuery = {}): Promise<EventsPage> {
    return this.#transport.request<EventsPage>('GET', `/api/governance/events${query({ ...q })}`);
  }

  /**
   * Matching events as they are committed. With `after`, stored ones after that id come first;
   * a dropped connection is reopened from the last id seen, so no event is missed or repeated.
   */
  streamEvents(q: EventStreamOptions = {}): AsyncIterable<GovernanceEvent> {
    return streamEvents(this.#transport, q);
  }

  /** Running turns, recent denials and recent events (served when the daemon keeps activity). */
  activity(): Promise<ActivityView> {
    return this.#transport.request<ActivityView>('GET', '/api/activity');
  }

  /** The Prometheus text exposition. */
  async metrics(): Promise<string> {
    return (await this.#transport.exchange('GET', '/metrics', undefined, [200], true)).data.toString('utf8');
  }

  /** With `wait`, answers once the turn ended or the wait passed (its `state` says which). */
  async createTurn(request: TurnCreateRequest, options: WaitOption = {}): Promise<TurnRecord> {
    const path = `/api/turns${wantWait(options)}`;
    return (await this.#transport.request<{ turn: TurnRecord }>('POST', path, jsonBody(request), [201])).turn;
  }

  /** With `wait`, answers once the turn ended or the wait passed (its `state` says which). */
  async getTurn(id: string, options: WaitOption = {}): Promise<TurnRecord> {
    return (await this.#transport.request<{ turn: TurnRecord }>('GET', turnPath(id, wantWait(options)))).turn;
  }

  /** A stream's kept output from `offset` to what the server has now (while the turn runs too). */
  async output(id: string, q: OutputQuery = {}): Promise<TurnOutputRead> {
    const path = turnPath(id, `/output${query({ stream: q.stream, offset: q.offset })}`);
    const answer = await this.#transport.exchange('GET', path, undefined, [200], true);
    return {
      data: answer.data,
      written: headerCount(answer.headers, 'x-turnhost-output-written'),
      dropped: headerCount(answer.headers, 'x-turnhost-output-dropped'),
      complete: answer.headers['x-turnhost-output-complete'] === 'true',
    };
  }

  /**
   * Runs `argv` as a turn and answers once it has ended: its exit code, every kept byte of its
   * output and its result. Without `sessionId` the turn gets a session of its own; `mode` is
   * ordinary unless given.
   */
  async run(argv: string[], options: RunOptions = {}): Promise<RunResult> {
    const { sessionId, mode, ...rest } = options;
    const request: TurnCreateRequest = {
      ...rest,
      sessionId: sessionId ?? `run_${randomUUID()}`,
      mode: mode ?? 'ordinary',
      argv,
    };
    let turn = await this.createTurn(request, { wait: MAX_WAIT_SECONDS });
    while (turn.state !== 'finished') turn = await this.getTurn(turn.id, { wait: MAX_WAIT_SECONDS });
    const stdout = await this.#wholeOutput(turn.id, turn.tty ? 'pty' : 'stdout');
    const stderr = turn.tty ? { data: Buffer.alloc(0), dropped: 0 } : await this.#wholeOutput(turn.id, 'stderr');
    const result = turn.result!;
    return {
      exitCode: result.exitCode,
      stdout: stdout.data,
      stderr: stderr.data,
      dropped: { stdout: stdout.dropped, stderr: stderr.dropped },
      result,
      turn,
    };
  }

  /** A finished turn's kept output of one stream, read until nothing more comes. */
  async #wholeOutput(id: string, stream: 'stdout' | 'stderr' | 'pty'): Promise<{ data: Buffer; dropped: number }> {
    const chunks: Buffer[] = [];
    let offset = 0;
    let dropped = 0;
    for (;;) {
      const read = await this.output(id, { stream, offset });
      dropped = read.dropped;
      if (read.data.length === 0) break;
      chunks.push(read.data);
      offset += read.data.length;
    }
    return { data: Buffer.concat(chunks), dropped };
  }

  /** One page of turns, newest first; pass `nextAfter` back as `after` for the next. */
  listTurns(q: TurnQuery = {}): Promise<TurnList> {
    return this.#transport.request<TurnList>('GET', `/api/turns${query({ ...q })}`);
  }

  /** Every turn matching the query, following `nextAfter` through every page. */
  async *allTurns(q: Omit<TurnQuery, 'after'> = {}): AsyncIterable<TurnRecord> {
    let after: string | undefined;
    for (;;) {
      const page = await this.#transport.request<TurnList>('GET', `/api/turns${query({ ...q, after })}`);
      yield* page.turns;
      if (page.nextAfter === null) return;
      after = page.nextAfter;
    }
  }

  /** With `wait`, answers once the turn has ended (or the wait passed). */
  async cancelTurn(id: string, options: WaitOption = {}): Promise<TurnRecord> {
    return (await this.#transport.request<{ turn: TurnRecord }>('POST', turnPath(id, `/cancel${wantWait(options)}`)))
      .turn;
  }

  /** The output kept so far (from the offsets), then live output, then the exit. */
  async attachTurn(id: string, offsets: AttachOffsets = {}): Promise<Attachment> {
    const params = query({ offset: offsets.offset, stderrOffset: offsets.stderrOffset });
    return attachTurn(this.#transport, turnPath(id, `/attach${params}`));
  }

  writeHostFile(id: string, write: HostWrite, data: Buffer | string): Promise<HostWriteAnswer> {
    const params = query({ path: write.path, mode: write.mode, root: write.root, sha256: write.sha256 });
    return this.#transport.request<HostWriteAnswer>(
      'PUT',
      turnPath(id, `/files${params}`),
      octetBody(data),
      [200, 201],
    );
  }

  /** A page of sessions, the most recently begun first; continue with `after: page.nextAfter`. */
  listSessions(q: SessionQuery = {}): Promise<SessionList> {
    return this.#transport.request<SessionList>('GET', `/api/sessions${query({ ...q })}`);
  }

  async deleteSession(id: string): Promise<SessionDeletion['deleted']> {
    return (await this.#transport.request<SessionDeletion>('DELETE', `/api/sessions/${encodeURIComponent(id)}`))
      .deleted;
  }

  async createWorkspace(request: WorkspaceCreateRequest = {}): Promise<Workspace> {
    return (
      await this.#transport.request<{ workspace: Workspace }>('POST', '/api/workspaces', jsonBody(request), [201])
    ).workspace;
  }

  async listWorkspaces(q: { session?: string } = {}): Promise<Workspace[]> {
    const path = `/api/workspaces${query({ session: q.session })}`;
    return (await this.#transport.request<{ workspaces: Workspace[] }>('GET', path)).workspaces;
  }

  async getWorkspace(id: string): Promise<Workspace> {
    return (await this.#transport.request<{ workspace: Workspace }>('GET', workspacePath(id))).workspace;
  }

  deleteWorkspace(id: string, options: { cancel?: boolean } = {}): Promise<WorkspaceDeletion> {
    const path = workspacePath(id, query({ cancel: options.cancel ? '1' : undefined }));
    return this.#transport.request<WorkspaceDeletion>('DELETE', path);
  }

  writeWorkspaceFile(
    id: string,
    write: { path: string; mode?: 'create' | 'replace' },
    data: Buffer | string,
  ): Promise<HostWriteAnswer> {
    const path = workspacePath(id, `/files${query({ path: write.path, mode: write.mode })}`);
    return this.#transport.request<HostWriteAnswer>('PUT', path, octetBody(data), [200, 201]);
  }

  /** A file's bytes, or a directory's entries (`path` empty or `.`: the workspace itself). */
  async readWorkspaceFile(
    id: string,
    path: string,
  ): Promise<WorkspaceFile | ({ kind: 'directory' } & WorkspaceListing)> {
    const filePath = workspacePath(id, `/files${query({ path })}`);
    const answer = await this.#transport.exchange('GET', filePath, undefined, [200], true);
    if (/^application\/json\b/.test(answer.headers['content-type'] ?? ''))
      return { kind: 'directory', ...(JSON.parse(answer.data.toString('utf8')) as WorkspaceListing) };
    const digest = answer.headers['x-content-sha256'];
    const actual = createHash('sha256').update(answer.data).digest('hex');
    // The server's digest of what it read: a mismatch is bytes lost or changed on the way.
    if (digest !== actual)
      throw new TurnhostApiError(0, 'protocol_error', `${path}: the bytes do not match X-Content-Sha256`);
    return { kind: 'file', data: answer.data, sha256: actual };
  }

  /** Makes a directory with its parents, owned by the workspace's uid; `made: 0` when it existed. */
  makeWorkspaceDirectory(id: string, path: string): Promise<WorkspaceDirectoryMade> {
    const target = workspacePath(id, `/files${query({ path, type: 'directory' })}`);
    return this.#transport.request<WorkspaceDirectoryMade>('POST', target, undefined, [200, 201]);
  }

  /** Removes a file, link or empty directory; with `recursive` a tree. */
  deleteWorkspaceFile(id: string, path: string, options: { recursive?: boolean } = {}): Promise<WorkspaceEntryRemoved> {
    const target = workspacePath(id, `/files${query({ path, recursive: options.recursive ? '1' : undefined })}`);
    return this.#transport.request<WorkspaceEntryRemoved>('DELETE', target);
  }

  /**
   * Extracts a tar archive into `path` (`.`: the workspace itself), made with its parents. Only
   * files and directories are extracted; a refused entry ends it (the entries before it stay).
   */
  putArchive(id: string, path: string, tar: Buffer): Promise<WorkspaceArchiveExtracted> {
    const target = workspacePath(id, `/archive${query({ path })}`);
    return this.#transport.request<WorkspaceArchiveExtracted>('PUT', target, { type: 'application/x-tar', data: tar });
  }

  /** The directory `path` (absent or `.`: the workspace itself) as a tar archive. */
  async getArchive(id: string, path?: string): Promise<Buffer> {
    const target = workspacePath(id, `/archive${query({ path })}`);
    return (await this.#transport.exchange('GET', target, undefined, [200], true)).data;
  }
}
