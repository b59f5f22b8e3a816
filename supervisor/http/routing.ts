/** Route registration with 405 for known paths, and the no-body guard. */
import type { Request, RequestHandler, Router } from 'express';
import { sendError } from './errors.js';

type Method = 'get' | 'post' | 'put' | 'delete';
type Handler = RequestHandler | RequestHandler[];

/** Registers `path` with its methods; any other method answers 405 with an Allow header. */
export function route(router: Router, path: string, handlers: Partial<Record<Method, Handler>>): void {
  const entry = router.route(path);
  const allowed: string[] = [];
  for (const [method, handler] of Object.entries(handlers) as [Method, Handler][]) {
    entry[method](handler);
    allowed.push(method.toUpperCase());
  }
  if (allowed.includes('GET')) allowed.push('HEAD');
  entry.all((req, res) => {
    res.setHeader('Allow', allowed.join(', '));
    sendError(
      res,
      405,
      'method_not_allowed',
      `${req.method} is not allowed on ${path}; allowed: ${allowed.join(', ')}`,
    );
  });
}

/** True when the request carries a body (a length above zero, or chunked). */
function hasBody(req: Request): boolean {
  const length = req.headers['content-length'];
  return (length !== undefined && length !== '0') || req.headers['transfer-encoding'] !== undefined;
}

export const refuseBody: RequestHandler = (req, res, next) => {
  if (hasBody(req)) return sendError(res, 400, 'invalid_request', 'body: this request takes no body');
  next();
};
