/**
 * The registry of governance event kinds. Each kind carries its current `schemaVersion` and a
 * validator for its payload. Validators check that every required field is present with the
 * right type; fields they do not know are allowed (additive changes keep the version).
 * A non-additive change (removing, renaming or retyping a field) bumps that kind's version.
 */
import { fail, ok, type Result } from '../../core/result.js';

export interface EventKind {
  schemaVersion: number;
  validate(payload: Record<string, unknown>): Result<{}, 'invalid_payload'>;
}

export type EventKindRegistry = ReadonlyMap<string, EventKind>;

/** A field check answers null when the value is acceptable, else what was expected. */
type FieldCheck = (value: unknown) => string | null;

const isPlainObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const string: FieldCheck = (v) => (typeof v === 'string' ? null : 'a string');
const boolean: FieldCheck = (v) => (typeof v === 'boolean' ? null : 'a boolean');
const object: FieldCheck = (v) => (isPlainObject(v) ? null : 'an object');
const count: FieldCheck = (v) =>
  typeof v === 'number' && Number.isFinite(v) && v >= 0 ? null : 'a non-negative number';
const integer: FieldCheck = (v) => (Number.isSafeInteger(v) ? null : 'an integer');
const port: FieldCheck = (v) =>
  Number.isSafeInteger(v) && (v as number) >= 0 && (v as number) <= 65535 ? null : 'a port number (0-65535)';
const uid: FieldCheck = (v) => (Number.isSafeInteger(v) && (v as number) >= 0 ? null : 'a uid (non-negative integer)');
const stringArray: FieldCheck = (v) =>
  Array.isArray(v) && v.every((item) => typeof item === 'string') ? null : 'an array of strings';

const oneOf =
  (...allowed: string[]): FieldCheck =>
  (v) =>
    typeof v === 'string' && allowed.includes(v) ? null : `one of ${allowed.map((a) => `'${a}'`).join(', ')}`;

const orNull =
  (check: FieldCheck): FieldCheck =>
  (v) => {
    if (v === null) return null;
    const expected = check(v);
    return expected === null ? null : `${expected} or null`;
  };

/**
 * The basename of argv[0] and nothing else: arguments can carry secrets, so a value with a
 * path separator or whitespace (a path or a command line) is refused.
 */
const commandName: FieldCheck = (v) =>
  typeof v === 'string' && v.length > 0 && v.length <= 255 && !/[/\s\0]/.test(v)
    ? null
    : 'the basename of argv[0] (no path, no arguments)';

function defineKind(schemaVersion: number, fields: Record<string, FieldCheck>): EventKind {
  const entries = Object.entries(fields);
  return {
    schemaVersion,
    validate(payload) {
      for (const [field, check] of entries) {
        if (!Object.hasOwn(payload, field)) return fail('invalid_payload', `payload.${field} is required`);
        const expected = check(payload[field]);
        if (expected !== null) return fail('invalid_payload', `payload.${field} must be ${expected}`);
      }
      return ok({});
    },
  };
}

const mode = oneOf('ordinary', 'restricted');

export const EVENT_KINDS: EventKindRegistry = new Map<string, EventKind>([
  [
    'worker_launch',
    defineKind(1, {
      mode,
      profile: string,
      identity: oneOf('separate_uid', 'shared_uid'),
      workerUid: orNull(uid),
      command: commandName,
      cgroup: orNull(string),
      limits: object,
    }),
  ],
  [
    'worker_exit',
    defineKind(1, {
      status: string,
      exitCode: orNull(integer),
      signal: orNull(string),
      durationMs: count,
      usage: object,
      limitHits: stringArray,
    }),
  ],
  ['worker_host_refusal', defineKind(1, { mode, requirement: string, trigger: oneOf('turn', 'boot', 'check') })],
  ['worker_recovered', defineKind(1, { cgroup: string, usage: object, killedProcesses: count })],
  [
    'egress_connection',
    defineKind(1, {
      host: string,
      port,
      method: orNull(string),
      path: orNull(string),
      bytesUp: count,
      bytesDown: count,
      durationMs: count,
      outcome: string,
      scope: oneOf('inference', 'tool'),
      inference: boolean,
    }),
  ],
  ['egress_denial', defineKind(1, { host: string, port: orNull(port), reason: string })],
  [
    'workspace_created',
    defineKind(1, { workspaceId: string, uid: orNull(uid), identity: oneOf('separate_uid', 'shared_uid') }),
  ],
  ['workspace_deleted', defineKind(1, { workspaceId: string, bytesRemoved: count, filesRemoved: count })],
  ['host_write', defineKind(1, { path: string, bytes: count, sha256: string, replaced: boolean })],
  ['host_write_refused', defineKind(1, { path: string, reason: string })],
  [
    'turn_temp_purge',
    // v2: the temp is a tmpfs of the turn's own, measured by the kernel's counts (v1 walked a host directory).
    // 'recovered' and 'unconfirmed' (boot recovery of a crashed supervisor's turn) were added within v2.
    defineKind(2, { bytes: count, inodes: count, outcome: oneOf('purged', 'unmeasured', 'recovered', 'unconfirmed') }),
  ],
  ['scratch_overage', defineKind(1, { bytes: count, pinnedFiles: count, pinnedBytes: count, overageBytes: count })],
  // Unbound: the session's own events are gone with it, this receipt stays (counts only).
  [
    'session_deleted',
    defineKind(1, {
      sessionId: string,
      events: count,
      turns: count,
      workspaces: count,
      trigger: oneOf('api', 'retention'),
    }),
  ],
]);
