/**
 * The payload of each governance event kind, with its schema version (docs/events.md). Every
 * listed field is required; fields a kind does not list are allowed, so adding one is an
 * additive change that keeps the version. A non-additive change (removing, renaming or retyping
 * a field) bumps that kind's version. `x-detail` is what a refused field "must be".
 */
import { Type, type TObject, type TSchema } from '@sinclair/typebox';

/** A field's schema and what a refusal says it must be; `orNull` wraps both. */
interface Field {
  schema: TSchema;
  expected: string;
}

const field = (schema: TSchema, expected: string): Field => ({ schema, expected });
const string = field(Type.String(), 'a string');
const boolean = field(Type.Boolean(), 'a boolean');
const object = field(Type.Record(Type.String(), Type.Unknown()), 'an object');
const count = field(Type.Number({ minimum: 0 }), 'a non-negative number');
const integer = field(Type.Integer(), 'an integer');
const port = field(Type.Integer({ minimum: 0, maximum: 65535 }), 'a port number (0-65535)');
const uid = field(Type.Integer({ minimum: 0 }), 'a uid (non-negative integer)');
const stringArray = field(Type.Array(Type.String()), 'an array of strings');
const oneOf = (...allowed: string[]): Field =>
  field(Type.Union(allowed.map((a) => Type.Literal(a))), `one of ${allowed.map((a) => `'${a}'`).join(', ')}`);
const orNull = (inner: Field): Field => field(Type.Union([inner.schema, Type.Null()]), `${inner.expected} or null`);
/**
 * The basename of argv[0] and nothing else: arguments can carry secrets, so a value with a
 * path separator or whitespace (a path or a command line) is refused.
 */
const commandName = field(
  Type.String({ minLength: 1, maxLength: 255, pattern: '^[^/\\s\\u0000]+$' }),
  'the basename of argv[0] (no path, no arguments)',
);
const mode = oneOf('ordinary', 'restricted');
const identity = oneOf('separate_uid', 'shared_uid');

export interface EventPayloadDefinition {
  schemaVersion: number;
  payload: TObject;
}

function payload(schemaVersion: number, fields: Record<string, Field>): EventPayloadDefinition {
  const properties = Object.fromEntries(
    Object.entries(fields).map(([name, f]) => [name, Type.Unsafe({ ...f.schema, 'x-detail': f.expected })]),
  );
  return { schemaVersion, payload: Type.Object(properties, { additionalProperties: true }) };
}

export const EVENT_PAYLOADS: Readonly<Record<string, EventPayloadDefinition>> = {
  worker_launch: payload(1, {
    mode,
    profile: string,
    identity,
    workerUid: orNull(uid),
    command: commandName,
    cgroup: orNull(string),
    limits: object,
  }),
  worker_exit: payload(1, {
    status: string,
    exitCode: orNull(integer),
    signal: orNull(string),
    durationMs: count,
    usage: object,
    limitHits: stringArray,
  }),
  worker_host_refusal: payload(1, { mode, requirement: string, trigger: oneOf('turn', 'boot', 'check') }),
  // One attack run (turnhost check --attack): how many cases held, broke or were skipped, and
  // the broken ones by name (the per-case evidence is in runtime.workerHost.attested).
  boundary_attested: payload(1, {
    held: count,
    broken: count,
    skipped: count,
    brokenCases: stringArray,
    trigger: oneOf('boot', 'check', 'schedule'),
  }),
  worker_recovered: payload(1, { cgroup: string, usage: object, killedProcesses: count }),
  egress_connection: payload(1, {
    host: string,
    port,
    method: orNull(string),
    path: orNull(string),
    bytesUp: count,
    bytesDown: count,
    durationMs: count,
    outcome: string,
    scope: oneOf('inference', 'credential', 'tool'),
    inference: boolean,
    broker: orNull(string),
    status: orNull(integer),
  }),
  egress_denial: payload(1, { host: string, port: orNull(port), reason: string }),
  workspace_created: payload(1, { workspaceId: string, uid: orNull(uid), identity }),
  workspace_deleted: payload(1, { workspaceId: string, bytesRemoved: count, filesRemoved: count }),
  workspace_delete_failed: payload(1, { workspaceId: string, attempt: count, detail: string, retryInSeconds: count }),
  host_write: payload(1, { path: string, bytes: count, sha256: string, replaced: boolean }),
  host_write_refused: payload(1, { path: string, reason: string }),
  workspace_directory_made: payload(1, { workspaceId: string, path: string, made: count }),
  workspace_entry_removed: payload(1, {
    workspaceId: string,
    path: string,
    files: count,
    bytes: count,
    directories: count,
  }),
  workspace_file_refused: payload(1, { workspaceId: string, operation: string, path: string, reason: string }),
  workspace_archive_extracted: payload(1, {
    workspaceId: string,
    path: string,
    files: count,
    directories: count,
    bytes: count,
  }),
  // The entries before the refused one stay extracted: counted here.
  workspace_archive_refused: payload(1, {
    workspaceId: string,
    path: string,
    reason: string,
    entry: orNull(string),
    files: count,
    directories: count,
    bytes: count,
  }),
  workspace_archive_read: payload(1, {
    workspaceId: string,
    path: string,
    complete: boolean,
    files: count,
    directories: count,
    symlinks: count,
    bytes: count,
    skipped: count,
  }),
  // v2: the temp is a tmpfs of the turn's own, measured by the kernel's counts (v1 walked a host
  // directory). 'recovered' and 'unconfirmed' (boot recovery of a crashed supervisor's turn) were
  // added within v2.
  turn_temp_purge: payload(2, {
    bytes: count,
    inodes: count,
    outcome: oneOf('purged', 'unmeasured', 'recovered', 'unconfirmed'),
  }),
  scratch_overage: payload(1, { bytes: count, pinnedFiles: count, pinnedBytes: count, overageBytes: count }),
  // Unbound: the session's own events are gone with it, this receipt stays (counts only).
  session_deleted: payload(1, {
    sessionId: string,
    events: count,
    turns: count,
    workspaces: count,
    trigger: oneOf('api', 'retention'),
  }),
  // Unbound: the host as a whole stopped (or resumed) taking new turns.
  host_drain: payload(1, { draining: boolean, source: oneOf('api', 'signal'), turnsRunning: count }),
};
