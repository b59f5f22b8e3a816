/**
 * The typed client of the turnhost supervisor API: loopback TCP or a unix socket, and the
 * bearer token. One method per route; every refusal is a TurnhostApiError with the status, the
 * stable code and the field at fault. It imports only the API schema's types, node builtins
 * and ws, so loading it loads no daemon module and no native addon.
 *
 * The parts: turnhost-client.ts (the operations), transport.ts (HTTP to the server),
 * websocket.ts (a WebSocket to it), errors.ts, event-stream.ts (the reconnecting event
 * stream), attach.ts, and socket-messages.ts (what those two share on their socket). The
 * declarations this module reaches name no `ws` type: an integrator needs no @types/ws.
 */
import { resolveClientOptions, type ConnectOptions } from './server-url.js';
import { TurnhostClient } from './turnhost-client.js';

export type {
  ActivityView,
  DrainAnswer,
  DrainRequest,
  ErrorCode,
  EventsPage,
  FieldError,
  GovernanceEvent,
  Health,
  HostCapacity,
  HostWriteAnswer,
  Ready,
  SessionDeletion,
  SessionList,
  SessionSummary,
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

export type { AttachError, Attachment, DroppedOutput, OutputChunk } from './attach.js';
export { TurnhostApiError } from './errors.js';
export { HostPool, NoHostReadyError, type HostReadiness, type PoolClient } from './host-pool.js';
export type { EventQuery, EventStreamOptions } from './event-stream.js';
export type { ClientOptions, ServerTarget } from './transport.js';
export {
  TurnhostClient,
  type AttachOffsets,
  type EventPageQuery,
  type HostWrite,
  type OutputQuery,
  type SessionQuery,
  type TurnOutputRead,
  type TurnQuery,
  type RunOptions,
  type RunResult,
  type WaitOption,
  type WorkspaceFile,
} from './turnhost-client.js';

export { DEFAULT_SERVER_URL, parseServerUrl, serverUrl, type ConnectOptions } from './server-url.js';

/**
 * A client of the server `options` name: `createClient({ server: 'unix:/run/turnhost/api.sock', token })`,
 * `createClient('http://127.0.0.1:7707')` (token from TURNHOST_TOKEN), or `createClient()` (both
 * from TURNHOST_URL and TURNHOST_TOKEN). Throws a TypeError for a malformed URL or no token.
 */
export function createClient(options: ConnectOptions | string = {}): TurnhostClient {
  return new TurnhostClient(resolveClientOptions(typeof options === 'string' ? { server: options } : options));
}
