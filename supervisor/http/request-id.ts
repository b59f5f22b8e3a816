/**
 * Request ids: a caller's `X-Request-Id` is taken when well formed (so its own logs and ours
 * join on it), otherwise one is generated. Either way it is echoed on the response and carried
 * by the request's logger, so the access log and every error line of that request name it.
 */
import { randomUUID } from 'node:crypto';
import type { RequestHandler, Response } from 'express';
import { withLogFields, type Logger } from '../../core/log.js';
import { sendError } from './errors.js';

export const REQUEST_ID_HEADER = 'X-Request-Id';
const REQUEST_ID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * The logger of the request `res` answers, falling back to `logger` outside a request. Code
 * that runs inside the request logs under its id with any logger (withLogFields); this one is
 * for what runs outside it, as a 'finish' listener does.
 */
export function requestLogger(res: Response, logger: Logger): Logger {
  return (res.locals['logger'] as Logger | undefined) ?? logger;
}

export type RequestIdResult =
  { ok: true; id: string } | { ok: false; id: string; field: 'x-request-id'; detail: string };

/**
 * The id of a request: the presented one when well formed, else a fresh one. A refusal still
 * carries a fresh id, so the refusal itself is answered and logged under an id.
 */
export function resolveRequestId(presented: string | string[] | undefined): RequestIdResult {
  if (presented === undefined) return { ok: true, id: randomUUID() };
  if (typeof presented === 'string' && REQUEST_ID_PATTERN.test(presented)) return { ok: true, id: presented };
  // The refused value is never echoed or logged: it is caller-controlled text.
  return {
    ok: false,
    id: randomUUID(),
    field: 'x-request-id',
    detail: 'x-request-id: expected 1-128 characters of [A-Za-z0-9._:-]',
  };
}

export function requestIds(logger: Logger): RequestHandler {
  return (req, res, next) => {
    const resolved = resolveRequestId(req.headers['x-request-id']);
    res.locals['requestId'] = resolved.id;
    res.locals['logger'] = logger.child({ requestId: resolved.id });
    res.setHeader(REQUEST_ID_HEADER, resolved.id);
    if (!resolved.ok) return sendError(res, 400, 'invalid_request', resolved.detail, { field: resolved.field });
    withLogFields({ requestId: resolved.id }, next);
  };
}
