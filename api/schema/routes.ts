/**
 * The route table: every HTTP route and WebSocket endpoint of the API with its parameters,
 * bodies and the error codes it answers. The OpenAPI document (api/openapi.ts), the contract
 * test and the typed client read it; a route added to the app is one entry here.
 */
import { Type, type TSchema } from '@sinclair/typebox';
import type { ErrorCode } from './errors.js';
import { EventsPage } from './events.js';
import { ID_PATTERN, SESSION_ID_PATTERN } from './ids.js';
import { AttachClientMessage, AttachServerMessage, EventStreamMessage } from './messages.js';
import { DrainAnswer, DrainRequest } from './placement.js';
import { ActivityView, Health, Ready, SystemStatus } from './status.js';
import { HostWriteAnswer, SessionDeletion, SessionList, TurnAnswer, TurnCreateRequest, TurnList } from './turns.js';
import {
  WorkspaceAnswer,
  WorkspaceCreateRequest,
  WorkspaceDeletion,
  WorkspaceDirectoryMade,
  WorkspaceEntryRemoved,
  WorkspaceList,
  WorkspaceListing,
  WorkspaceArchiveExtracted,
} from './workspaces.js';
import { WorkerHostCheckRequest, WorkerHostStatus } from './worker-host.js';

type HttpMethod = 'get' | 'post' | 'put' | 'delete' | 'patch';

interface QueryParameter {
  schema: TSchema;
  description: string;
  required?: boolean;
}

interface SuccessResponse {
  description: string;
  /** JSON body; absent with `contentType` for non-JSON answers (both: the answer is either). */
  schema?: TSchema;
  contentType?: string;
  /** Response headers this answer always carries (Location on 201). */
  headers?: string[];
  /** Response headers this answer carries in one of its forms only. */
  optionalHeaders?: string[];
}

export interface ApiRoute {
  method: HttpMethod;
  /** Express syntax: `:id` is a path parameter. */
  path: string;
  /** The pattern of the `:id` path parameter: a turn or workspace id unless said otherwise. */
  idPattern?: string;
  operationId: string;
  summary: string;
  /** public: no token; token: the bearer token (or a status-page session for GET). */
  auth: 'public' | 'token';
  query?: Record<string, QueryParameter>;
  /** `optional`: the route also takes no body at all. */
  body?: { contentType: string; schema: TSchema; optional?: boolean };
  responses: Record<number, SuccessResponse>;
  /** The codes this route answers beyond those every route may answer (COMMON_ERRORS). */
  errors: ErrorCode[];
  /** A WebSocket endpoint: the upgrade is a GET; plain HTTP gets 426. */
  websocket?: { server: TSchema; client?: TSchema };
  /** Served only when the daemon has the part (a turn manager, metrics, activity). */
  optional?: string;
}

/** Codes any route may answer: request id and auth refusals, wrong method, internal failures. */
export const COMMON_ERRORS: ErrorCode[] = ['invalid_request', 'method_not_allowed', 'internal_error'];
// Every authenticated request passes the 1 MiB body cap (or a route's own byte cap) and the
// refusal of encoded bodies before it is routed, so a GET with an oversized or encoded body is
// refused with 413 or 415 like any other.
export const AUTHENTICATED_ERRORS: ErrorCode[] = ['unauthenticated', 'body_too_large', 'unsupported_media_type'];

const SessionId = Type.String({ pattern: SESSION_ID_PATTERN });
const eventFilters = {
  session: { schema: SessionId, description: 'Only events of this session.' },
  turn: { schema: Type.String({ minLength: 1, maxLength: 256 }), description: 'Only events of this turn.' },
  kind: { schema: Type.String({ minLength: 1, maxLength: 256 }), description: 'Only events of this kind.' },
  after: {
    schema: Type.Integer({ minimum: 0 }),
    description: 'Only events with a larger id (resume from the last id seen).',
  },
} satisfies Record<string, QueryParameter>;

const waitParameter = {
  wait: {
    schema: Type.Number({ exclusiveMinimum: 0, maximum: 300 }),
    description:
      'Seconds (more than 0, at most 300) to wait for the turn to end before answering: the answer ' +
      "comes at its end or when they have passed, and the record's state says which.",
  },
} satisfies Record<string, QueryParameter>;

const byteOffset = (description: string): QueryParameter => ({
  schema: Type.Integer({ minimum: 0 }),
  description,
});

export const ROUTES: ApiRoute[] = [
  {
    method: 'get',
    path: '/api/health',
    operationId: 'health',
    summary: 'Liveness: the process answers.',
    auth: 'public',
    responses: { 200: { description: 'Alive.', schema: Health } },
    errors: [],
  },
  {
    method: 'get',
    path: '/api/ready',
    operationId: 'ready',
    summary:
      'Readiness for a new turn: mode ordinary is available per the latest probe, the host is not draining and a turn slot is free; with the capacity.',
    auth: 'public',
    responses: { 200: { description: 'Ready, with the room left.', schema: Ready } },
    errors: ['not_ready', 'draining', 'host_full'],
  },
  {
    method: 'post',
    path: '/api/drain',
    operationId: 'drain',
    summary:
      'Drain mode on or off: while on, new turns are refused (503 draining) and running ones end as they would. SIGUSR2 and turnhost drain turn it on too.',
    auth: 'token',
    body: { contentType: 'application/json', schema: DrainRequest },
    responses: { 200: { description: 'The mode now, and the capacity.', schema: DrainAnswer } },
    errors: ['body_too_large', 'unsupported_media_type'],
    optional: 'turns',
  },
  {
    method: 'get',
    path: '/api/openapi.json',
    operationId: 'openapi',
    summary: 'This document.',
    auth: 'token',
    responses: {
      200: {
        description: 'The OpenAPI 3.1 document.',
        schema: Type.Record(Type.String(), Type.Unknown(), { title: 'OpenApiDocument' }),
      },
    },
    errors: [],
  },
  {
    method: 'get',
    path: '/api/status',
    operationId: 'status',
    summary: 'Software, host facts and the runtime status (latest worker-host probe, event store).',
    auth: 'token',
    responses: { 200: { description: 'The status.', schema: SystemStatus } },
    errors: [],
  },
  {
    method: 'post',
    path: '/api/status/worker-host',
    operationId: 'checkWorkerHost',
    summary:
      'Re-runs the worker-host probes (trigger check) and answers them; with `{ "attack": true }` also runs the attack battery in each available mode.',
    auth: 'token',
    body: { contentType: 'application/json', schema: WorkerHostCheckRequest, optional: true },
    responses: { 200: { description: 'The new probe answer.', schema: WorkerHostStatus } },
    errors: ['body_too_large', 'unsupported_media_type', 'worker_host_unsupported'],
  },
  {
    method: 'get',
    path: '/api/governance/events',
    operationId: 'events',
    summary: 'A page of governance events in id order, or newest first with order=desc.',
    auth: 'token',
    query: {
      ...eventFilters,
      limit: { schema: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }), description: 'Page size.' },
      order: {
        schema: Type.Union([Type.Literal('asc'), Type.Literal('desc')]),
        description:
          'asc (default): oldest first, paged with after/nextAfter; desc: newest first, paged with before/nextBefore. after with desc, or before without it, is refused (400 naming it).',
      },
      before: {
        schema: Type.Integer({ minimum: 0 }),
        description: "With order=desc: only events with a smaller id (the previous page's nextBefore).",
      },
    },
    responses: { 200: { description: 'A page.', schema: EventsPage } },
    errors: ['store_unavailable'],
  },
  {
    method: 'get',
    path: '/api/governance/events/stream',
    operationId: 'streamEvents',
    summary: 'WebSocket: matching events; with `after`, stored ones are replayed first, then live ones.',
    auth: 'token',
    query: eventFilters,
    responses: { 101: { description: 'Switching to the WebSocket protocol.' } },
    errors: ['upgrade_required'],
    websocket: { server: EventStreamMessage },
  },
  {
    method: 'get',
    path: '/api/activity',
    operationId: 'activity',
    summary: 'Running turns, recent denials and recent events since the supervisor started.',
    auth: 'token',
    responses: { 200: { description: 'The activity.', schema: ActivityView } },
    errors: [],
    optional: 'activity',
  },
  {
    method: 'get',
    path: '/metrics',
    operationId: 'metrics',
    summary: 'Prometheus metrics.',
    auth: 'token',
    responses: { 200: { description: 'The Prometheus text format.', contentType: 'text/plain' } },
    errors: [],
    optional: 'metrics',
  },
  {
    method: 'post',
    path: '/api/turns',
    operationId: 'createTurn',
    summary: 'Starts a turn; answers once its worker runs (with wait, once it ended or the wait passed).',
    auth: 'token',
    query: waitParameter,
    body: { contentType: 'application/json', schema: TurnCreateRequest },
    responses: { 201: { description: 'Running.', schema: TurnAnswer, headers: ['Location'] } },
    errors: [
      'body_too_large',
      'unsupported_media_type',
      'conflict',
      'capacity_exhausted',
      'worker_host_unsupported',
      'draining',
    ],
    optional: 'turns',
  },
  {
    method: 'get',
    path: '/api/turns',
    operationId: 'listTurns',
    summary: 'A page of turns, newest first, optionally of one session, workspace or state.',
    auth: 'token',
    query: {
      session: { schema: SessionId, description: 'Only this session.' },
      workspace: {
        schema: Type.String({ pattern: ID_PATTERN }),
        description: 'Only turns in this workspace.',
      },
      state: {
        schema: Type.Union([Type.Literal('starting'), Type.Literal('running'), Type.Literal('finished')]),
        description: 'Only turns in this state.',
      },
      after: {
        schema: Type.String({ pattern: '^[0-9]{1,15}$' }),
        description: "The previous page's nextAfter (an opaque cursor).",
      },
      limit: { schema: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }), description: 'Page size.' },
    },
    responses: { 200: { description: 'A page of turns.', schema: TurnList } },
    errors: ['store_unavailable'],
    optional: 'turns',
  },
  {
    method: 'get',
    path: '/api/turns/:id',
    operationId: 'getTurn',
    summary: 'One turn (with wait, once it ended or the wait passed).',
    auth: 'token',
    query: waitParameter,
    responses: { 200: { description: 'The turn.', schema: TurnAnswer } },
    errors: ['not_found'],
    optional: 'turns',
  },
  {
    method: 'post',
    path: '/api/turns/:id/cancel',
    operationId: 'cancelTurn',
    summary: 'Stops a running turn (with wait, answers once it ended). Takes no body.',
    auth: 'token',
    query: waitParameter,
    responses: { 200: { description: 'The turn, being stopped (with wait: ended).', schema: TurnAnswer } },
    errors: ['not_found', 'not_running', 'body_too_large'],
    optional: 'turns',
  },
  {
    method: 'get',
    path: '/api/turns/:id/output',
    operationId: 'output',
    summary:
      "A stream's kept output from offset to what is there now, while the turn runs and after; each " +
      'stream keeps up to turns.outputRetainBytes, the rest is counted as dropped.',
    auth: 'token',
    query: {
      stream: {
        schema: Type.Union([Type.Literal('stdout'), Type.Literal('stderr'), Type.Literal('pty')]),
        description: 'stdout or stderr (a turn with pipes), pty (a turn with a terminal); default the first.',
      },
      offset: byteOffset('The first byte to answer (default 0); at most the bytes kept.'),
    },
    responses: {
      200: {
        description:
          'The raw bytes. X-Turnhost-Output-Written: every byte the stream wrote; X-Turnhost-Output-Dropped: ' +
          'those past the cap, not kept; X-Turnhost-Output-Complete: true once the turn has ended.',
        contentType: 'application/octet-stream',
        headers: ['X-Turnhost-Output-Written', 'X-Turnhost-Output-Dropped', 'X-Turnhost-Output-Complete'],
      },
    },
    errors: ['not_found', 'output_gone'],
    optional: 'turns',
  },
  {
    method: 'get',
    path: '/api/turns/:id/attach',
    operationId: 'attachTurn',
    summary:
      'WebSocket: the turn output (what was kept first, from the start or the offsets, then live; ' +
      'dropped bytes as dropped messages), then its exit; input, resize and signals.',
    auth: 'token',
    query: {
      offset: byteOffset('Where the replay of stdout (pty with a terminal) starts; at most the bytes kept.'),
      stderrOffset: byteOffset('Where the replay of stderr starts; at most the bytes kept.'),
    },
    responses: { 101: { description: 'Switching to the WebSocket protocol.' } },
    errors: ['not_found', 'upgrade_required'],
    websocket: { server: AttachServerMessage, client: AttachClientMessage },
    optional: 'turns',
  },
  {
    method: 'put',
    path: '/api/turns/:id/files',
    operationId: 'writeHostFile',
    summary: "Writes the raw body as a file into a running turn's workspace or temp root.",
    auth: 'token',
    query: {
      path: { schema: Type.String(), description: 'A path relative to the root.', required: true },
      mode: {
        schema: Type.Union([Type.Literal('create'), Type.Literal('replace')]),
        description: 'create refuses an existing file; replace overwrites one.',
        required: true,
      },
      root: {
        schema: Type.Union([Type.Literal('workspace'), Type.Literal('temp')]),
        description: 'Which root (default workspace).',
      },
      sha256: {
        schema: Type.String({ pattern: '^[0-9a-f]{64}$' }),
        description: 'With mode=replace: the digest the file must still have.',
      },
    },
    body: { contentType: 'application/octet-stream', schema: Type.String({ contentEncoding: 'binary' }) },
    responses: {
      200: { description: 'Replaced.', schema: HostWriteAnswer },
      201: { description: 'Created.', schema: HostWriteAnswer, headers: ['Location'] },
    },
    errors: [
      'invalid_path',
      'not_found',
      'turn_finished',
      'exists',
      'stale_base',
      'topology_changed',
      'alias_denied',
      'not_a_directory',
      'body_too_large',
      'unsupported_media_type',
    ],
    optional: 'turns',
  },
  {
    method: 'get',
    path: '/api/sessions',
    operationId: 'listSessions',
    summary: 'A page of sessions (what carries a session id: events and turn records), the most recently begun first.',
    auth: 'token',
    query: {
      after: {
        schema: Type.String({ pattern: '^[A-Za-z0-9_-]{1,700}$' }),
        description: "The previous page's nextAfter (an opaque cursor).",
      },
      limit: { schema: Type.Integer({ minimum: 1, maximum: 1000, default: 100 }), description: 'Page size.' },
    },
    responses: { 200: { description: 'A page of sessions.', schema: SessionList } },
    errors: ['store_unavailable'],
    optional: 'turns',
  },
  {
    method: 'delete',
    path: '/api/sessions/:id',
    idPattern: SESSION_ID_PATTERN,
    operationId: 'deleteSession',
    summary:
      "Deletes a session's workspaces, then its events and turn records; an unbound session_deleted receipt remains.",
    auth: 'token',
    responses: { 200: { description: 'What was deleted.', schema: SessionDeletion } },
    errors: ['not_found', 'session_busy', 'store_unavailable', 'workspaces_unavailable', 'body_too_large'],
    optional: 'turns',
  },
  {
    method: 'post',
    path: '/api/workspaces',
    operationId: 'createWorkspace',
    summary: 'Creates a workspace: a directory and, with the identity helper, a uid leased for its life.',
    auth: 'token',
    body: { contentType: 'application/json', schema: WorkspaceCreateRequest },
    responses: { 201: { description: 'Created.', schema: WorkspaceAnswer, headers: ['Location'] } },
    errors: [
      'body_too_large',
      'unsupported_media_type',
      'workspace_exists',
      'workspace_busy',
      'workspace_owned_elsewhere',
      'workspaces_unconfigured',
      'workspaces_unavailable',
    ],
    optional: 'workspaces',
  },
  {
    method: 'get',
    path: '/api/workspaces',
    operationId: 'listWorkspaces',
    summary: 'Every workspace, optionally those bound to one session.',
    auth: 'token',
    query: { session: { schema: SessionId, description: 'Only this session.' } },
    responses: { 200: { description: 'The workspaces.', schema: WorkspaceList } },
    errors: [],
    optional: 'workspaces',
  },
  {
    method: 'get',
    path: '/api/workspaces/:id',
    operationId: 'getWorkspace',
    summary: 'One workspace with its usage (bytes, files).',
    auth: 'token',
    responses: { 200: { description: 'The workspace.', schema: WorkspaceAnswer } },
    errors: ['workspace_not_found'],
    optional: 'workspaces',
  },
  {
    method: 'delete',
    path: '/api/workspaces/:id',
    operationId: 'deleteWorkspace',
    summary:
      'Deletes a workspace: its tree (links never followed) once no process of its uid lives, then its lease; a delete that failed half way is retried.',
    auth: 'token',
    query: {
      cancel: {
        schema: Type.Union([Type.Literal('1'), Type.Literal('0')]),
        description: "1: cancel the workspace's running turns and wait for them first.",
      },
    },
    responses: { 200: { description: 'What was removed.', schema: WorkspaceDeletion } },
    errors: ['workspace_not_found', 'workspace_busy', 'workspace_owned_elsewhere', 'workspaces_unavailable'],
    optional: 'workspaces',
  },
  {
    method: 'put',
    path: '/api/workspaces/:id/files',
    operationId: 'writeWorkspaceFile',
    summary: 'Writes the raw body as a file of the workspace, through the fs guard, within its byte cap.',
    auth: 'token',
    query: {
      path: {
        schema: Type.String(),
        description:
          'A path relative to the workspace. Missing parent directories are made owned by the workspace uid, 02770.',
        required: true,
      },
      mode: {
        schema: Type.Union([Type.Literal('create'), Type.Literal('replace')]),
        description: 'create refuses an existing file; replace (the default) overwrites one.',
      },
    },
    body: { contentType: 'application/octet-stream', schema: Type.String({ contentEncoding: 'binary' }) },
    responses: {
      200: { description: 'Replaced.', schema: HostWriteAnswer },
      201: { description: 'Created.', schema: HostWriteAnswer, headers: ['Location'] },
    },
    errors: [
      'invalid_path',
      'workspace_not_found',
      'not_found',
      'exists',
      'alias_denied',
      'not_a_directory',
      'topology_changed',
      'workspace_full',
      'workspace_busy',
      'workspace_owned_elsewhere',
      'body_too_large',
      'workspaces_unavailable',
    ],
    optional: 'workspaces',
  },
  {
    method: 'get',
    path: '/api/workspaces/:id/files',
    operationId: 'readWorkspaceFile',
    summary:
      'Reads a file of the workspace (raw bytes), or lists a directory (JSON), through the fs guard (a link is refused, never followed).',
    auth: 'token',
    query: {
      path: {
        schema: Type.String(),
        description: 'A path relative to the workspace; absent, empty or "." is the workspace itself.',
      },
    },
    responses: {
      200: {
        description:
          'A file: its bytes (application/octet-stream), X-Content-Sha256 their digest. A directory: its entries (application/json).',
        schema: WorkspaceListing,
        contentType: 'application/octet-stream',
        optionalHeaders: ['X-Content-Sha256'],
      },
    },
    errors: [
      'invalid_path',
      'workspace_not_found',
      'not_found',
      'topology_changed',
      'alias_denied',
      'not_a_directory',
      'body_too_large',
      'workspaces_unavailable',
    ],
    optional: 'workspaces',
  },
  {
    method: 'post',
    path: '/api/workspaces/:id/files',
    operationId: 'makeWorkspaceDirectory',
    summary:
      'Makes a directory of the workspace with its missing parents, each owned by the workspace uid (02770, group the supervisor).',
    auth: 'token',
    query: {
      path: { schema: Type.String(), description: 'A path relative to the workspace.', required: true },
      type: { schema: Type.Literal('directory'), description: 'What to make: a directory.', required: true },
    },
    responses: {
      200: { description: 'It existed already (made: 0).', schema: WorkspaceDirectoryMade },
      201: { description: 'Made.', schema: WorkspaceDirectoryMade, headers: ['Location'] },
    },
    errors: [
      'invalid_path',
      'workspace_not_found',
      'alias_denied',
      'not_a_directory',
      'topology_changed',
      'workspace_busy',
      'workspaces_unavailable',
    ],
    optional: 'workspaces',
  },
  {
    method: 'delete',
    path: '/api/workspaces/:id/files',
    operationId: 'deleteWorkspaceFile',
    summary:
      'Removes a file, a link (never its target) or an empty directory of the workspace; with recursive=1 a whole tree.',
    auth: 'token',
    query: {
      path: { schema: Type.String(), description: 'A path relative to the workspace.', required: true },
      recursive: {
        schema: Type.Union([Type.Literal('1'), Type.Literal('0')]),
        description: '1: a directory is removed with everything beneath it.',
      },
    },
    responses: { 200: { description: 'What was removed.', schema: WorkspaceEntryRemoved } },
    errors: [
      'invalid_path',
      'workspace_not_found',
      'not_found',
      'not_empty',
      'topology_changed',
      'not_a_directory',
      'alias_denied',
      'workspaces_unavailable',
    ],
    optional: 'workspaces',
  },
  {
    method: 'put',
    path: '/api/workspaces/:id/archive',
    operationId: 'putArchive',
    summary:
      'Extracts a tar stream (ustar, pax or GNU) into a directory of the workspace, entry by entry, through the fs guard and within its byte cap. Only regular files and directories are extracted; a link, device, FIFO, absolute or .. name stops the extraction at that entry (the entries before it stay).',
    auth: 'token',
    query: {
      path: {
        schema: Type.String(),
        description:
          'The directory to extract into, relative to the workspace ("." or empty: the workspace itself); made with its parents, owned by the workspace uid, 02770.',
        required: true,
      },
    },
    body: { contentType: 'application/x-tar', schema: Type.String({ contentEncoding: 'binary' }) },
    responses: { 200: { description: 'Extracted.', schema: WorkspaceArchiveExtracted } },
    errors: [
      'invalid_path',
      'invalid_archive',
      'workspace_not_found',
      'alias_denied',
      'not_a_directory',
      'topology_changed',
      'workspace_full',
      'workspace_busy',
      'body_too_large',
      'workspaces_unavailable',
    ],
    optional: 'workspaces',
  },
  {
    method: 'get',
    path: '/api/workspaces/:id/archive',
    operationId: 'getArchive',
    summary:
      'A directory of the workspace as a tar stream (ustar, pax headers where needed): files and directories, symlinks as symlinks (never followed); other kinds and hard-linked files skipped.',
    auth: 'token',
    query: {
      path: {
        schema: Type.String(),
        description: 'A directory relative to the workspace; absent, empty or "." is the workspace itself.',
      },
    },
    responses: { 200: { description: 'The tar stream.', contentType: 'application/x-tar' } },
    errors: [
      'invalid_path',
      'workspace_not_found',
      'not_found',
      'alias_denied',
      'not_a_directory',
      'topology_changed',
      'workspaces_unavailable',
    ],
    optional: 'workspaces',
  },
];

/** Express path `/api/turns/:id` → OpenAPI path `/api/turns/{id}`. */
export function openApiPath(path: string): string {
  return path.replace(/:([A-Za-z_]+)/g, '{$1}');
}
