/**
 * Bearer-token authentication. Tokens are compared as SHA-256 digests with timingSafeEqual, so
 * neither the comparison time nor a length mismatch reveals how much of a guess was right.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import type { RequestHandler } from 'express';
import { sendError } from './errors.js';
import { sessionFromCookie, type UiSessions } from './ui-session.js';

const digest = (value: string): Buffer => createHash('sha256').update(value, 'utf8').digest();

export function tokenMatches(presented: string, expected: string): boolean {
  return timingSafeEqual(digest(presented), digest(expected));
}

/** The token of an `Authorization: Bearer <token>` header, or null. */
function bearerToken(headers: IncomingHttpHeaders): string | null {
  const header = headers.authorization;
  if (typeof header !== 'string') return null;
  const match = /^Bearer ([\x21-\x7e]+)$/.exec(header);
  return match?.[1] ?? null;
}

export function isAuthorized(headers: IncomingHttpHeaders, expected: string): boolean {
  const presented = bearerToken(headers);
  return presented !== null && tokenMatches(presented, expected);
}

export const UNAUTHENTICATED_MESSAGE =
  'a valid bearer token is required (Authorization: Bearer <token from <dataDir>/api-token>)';

/** A status-page session (ui-session.ts) authorizes safe methods only; anything else needs the token. */
export function sessionAuthorizes(
  method: string,
  headers: IncomingHttpHeaders,
  sessions: UiSessions | undefined,
): boolean {
  return (
    sessions !== undefined && (method === 'GET' || method === 'HEAD') && sessions.valid(sessionFromCookie(headers))
  );
}

export function requireToken(expected: string, sessions?: UiSessions): RequestHandler {
  return (req, res, next) => {
    if (isAuthorized(req.headers, expected) || sessionAuthorizes(req.method, req.headers, sessions)) return next();
    res.setHeader('WWW-Authenticate', 'Bearer');
    sendError(res, 401, 'unauthenticated', UNAUTHENTICATED_MESSAGE);
  };
}
