/**
 * Session routes: `GET /api/sessions` lists them, a page at a time (supervisor/turns/sessions.ts);
 * `DELETE /api/sessions/:id` deletes the session's events and turn records
 * (supervisor/turns/sessions.ts), after the workspaces bound to it. 200 with the counts; 404
 * unknown session; 409 `session_busy` while a turn of it or on one of its workspaces runs (nothing
 * is deleted); 503 `store_unavailable` or `workspaces_unavailable`.
 */
import type { RequestHandler, Router } from 'express';
import { isValidSessionId } from '../../api/schema/ids.js';
import { decodeSessionCursor, MAX_SESSION_PAGE, type SessionPageQuery } from '../turns/sessions.js';
import type { TurnManager } from '../turns/types.js';
import { sendError } from './errors.js';
import { QueryCheck, requestQuery, sendQueryRefusal, type QueryFailure } from './query-params.js';
import { refuseBody, route } from './routing.js';

const FAILURE_STATUS = {
  not_found: 404,
  session_busy: 409,
  store_unavailable: 503,
  workspaces_unavailable: 503,
} as const;

/** `after` (a previous page's `nextAfter`) and `limit`, refused as every route's query is. */
function parseSessionQuery(params: URLSearchParams): { ok: true; query: SessionPageQuery } | QueryFailure {
  const check = new QueryCheck(params, ['after', 'limit']);
  const query: SessionPageQuery = {};
  const after = check.get('after');
  if (after !== null) {
    if (decodeSessionCursor(after) === null) check.refuse('after', "expected the previous page's nextAfter");
    else query.after = after;
  }
  const limit = check.get('limit');
  if (limit !== null) {
    const n = /^[0-9]{1,4}$/.test(limit) ? Number(limit) : NaN;
    if (!(n >= 1 && n <= MAX_SESSION_PAGE)) check.refuse('limit', `expected an integer from 1 to ${MAX_SESSION_PAGE}`);
    else query.limit = n;
  }
  return check.failure() ?? { ok: true, query };
}

/** GET /api/sessions */
function listSessions(turns: Pick<TurnManager, 'listSessions'>): RequestHandler {
  return (req, res) => {
    const parsed = parseSessionQuery(requestQuery(req));
    if (!parsed.ok) return sendQueryRefusal(res, parsed);
    const page = turns.listSessions(parsed.query);
    if (!page.ok) return sendError(res, 503, page.reason, page.detail);
    res.json({ sessions: page.sessions, nextAfter: page.nextAfter });
  };
}

/** DELETE /api/sessions/:id */
function deleteSession(turns: Pick<TurnManager, 'deleteSession'>): RequestHandler {
  return async (req, res) => {
    const id = String(req.params['id']);
    if (!isValidSessionId(id)) return sendError(res, 404, 'not_found', 'no session (malformed id)');
    const deleted = await turns.deleteSession(id);
    if (deleted.ok) return void res.json({ deleted: deleted.deleted });
    sendError(res, FAILURE_STATUS[deleted.reason], deleted.reason, deleted.detail);
  };
}

export function registerSessionRoutes(router: Router, turns: TurnManager): void {
  route(router, '/api/sessions', { get: listSessions(turns) });
  route(router, '/api/sessions/:id', { delete: [refuseBody, deleteSession(turns)] });
}
