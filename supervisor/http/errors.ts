/**
 * The one error shape of the HTTP surface: `{ error, code }` with the right status. Messages
 * name the parameter or field at fault and never carry internals (stacks, paths of the
 * supervisor, header values).
 */
import type { Response } from 'express';

/** The codes and their statuses are defined once, in the API schema. */
export type { ErrorCode } from '../../api/schema/errors.js';
import type { ErrorCode } from '../../api/schema/errors.js';

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
