/**
 * The one error shape of the HTTP surface: `{ error, code }` with the right status. Messages
 * name the parameter or field at fault and never carry internals (stacks, paths of the
 * supervisor, header values).
 */
import type { Response } from 'express';

export type ErrorCode =
  | 'invalid_request'
  | 'unauthenticated'
  | 'forbidden'
  | 'not_found'
  | 'method_not_allowed'
  | 'body_too_large'
  | 'unsupported_media_type'
  | 'conflict'
  | 'not_running'
  | 'capacity_exhausted'
  | 'worker_host_unsupported'
  | 'store_unavailable'
  | 'not_ready'
  | 'upgrade_required'
  | 'internal_error'
  // Host writes (supervisor/http/host-write-route.ts): the fs guard's refusal names.
  | 'invalid_path'
  | 'turn_finished'
  | 'exists'
  | 'stale_base'
  | 'topology_changed'
  | 'alias_denied'
  | 'not_a_directory';

/** The request body cap of every route: 413 above 1 MiB. */
export const MAX_BODY_BYTES = 1024 * 1024;

export function sendError(
  res: Response,
  status: number,
  code: ErrorCode,
  error: string,
  extra: Record<string, unknown> = {},
): void {
  res.status(status).json({ error, code, ...extra });
}
