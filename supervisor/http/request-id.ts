/**
 * Request ids: a caller's `X-Request-Id` is taken when well formed (so its own logs and ours
 * join on it), otherwise one is generated. Either way it is echoed on the response and carried
 * by the request's logger, so the access log and every error line of that request name it.
 */
import { randomUUID } from 'node:crypto';
import type { RequestHandler, Response } from 'express';
import type { Logger } from '../../core/log.js';
import { sendError } from './errors.js';

export const REQUEST_ID_HEADER = 'X-Request-Id';
export const REQUEST_ID_PATTERN = /^[A-Za-z0-9._:-]{1,128}$/;

/** The logger of the request `res` answers, falling back to `logger` outside a request. */
export function requestLogger(res: Response, logger: Logger): Logger {
  const own = res.locals['logger'] as Logger | undefined;
  return own ?? logger;
}

export function requestIds(logger: Logger): RequestHandler {
  return (req, res, next) => {
    const presented = req.headers['x-request-id'];
    const valid = typeof presented === 'string' && REQUEST_ID_PATTERN.test(presented);
    const id = valid ? presented : randomUUID();
    res.locals['requestId'] = id;
    res.locals['logger'] = logger.child({ requestId: id });
    res.setHeader(REQUEST_ID_HEADER, id);
    // The refused value is never echoed or logged: it is caller-controlled text.
    if (presented !== undefined && !valid)
      return sendError(res, 400, 'invalid_request', 'x-request-id: expected 1-128 characters of [A-Za-z0-9._:-]', {
        field: 'x-request-id',
      });
    next();
  };
}
