/**
 * The error codes of the HTTP surface, each with the one status it is answered with, and the
 * error body every refusal carries.
 */
import { Type, type Static } from '@sinclair/typebox';

/** code → HTTP status. A code never changes status; a new code is an additive change. */
export const ERROR_STATUS = {
  invalid_request: 400,
  invalid_path: 400,
  invalid_archive: 400,
  unauthenticated: 401,
  forbidden: 403,
  not_found: 404,
  workspace_not_found: 404,
  output_gone: 410,
  method_not_allowed: 405,
  conflict: 409,
  not_running: 409,
  turn_finished: 409,
  exists: 409,
  stale_base: 409,
  topology_changed: 409,
  alias_denied: 409,
  not_a_directory: 409,
  not_empty: 409,
  session_busy: 409,
  workspace_exists: 409,
  workspace_busy: 409,
  workspace_full: 409,
  workspace_owned_elsewhere: 409,
  body_too_large: 413,
  unsupported_media_type: 415,
  upgrade_required: 426,
  capacity_exhausted: 429,
  internal_error: 500,
  worker_host_unsupported: 503,
  store_unavailable: 503,
  not_ready: 503,
  draining: 503,
  host_full: 503,
  workspaces_unconfigured: 503,
  workspaces_unavailable: 503,
} as const;

export type ErrorCode = keyof typeof ERROR_STATUS;
export const ERROR_CODES = Object.keys(ERROR_STATUS) as ErrorCode[];

export const FieldError = Type.Object(
  { field: Type.String(), detail: Type.String() },
  { title: 'FieldError', description: 'One refused field: its name and what was expected.' },
);
export type FieldError = Static<typeof FieldError>;

export const ErrorBody = Type.Object(
  {
    error: Type.String({
      description: 'What was refused; starts with the parameter or field name when one is at fault.',
    }),
    code: Type.Union(
      ERROR_CODES.map((code) => Type.Literal(code)),
      { description: 'A stable machine-readable code.' },
    ),
    field: Type.Optional(Type.String({ description: 'The parameter, header or field at fault (the first one).' })),
    errors: Type.Optional(Type.Array(FieldError, { description: 'Every refused field, the first one first.' })),
    requirement: Type.Optional(Type.String({ description: 'The requirement that is not met (503 answers).' })),
  },
  { title: 'ErrorBody' },
);
export type ErrorBody = Static<typeof ErrorBody>;
