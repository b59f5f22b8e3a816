/**
 * Session routes: `DELETE /api/sessions/:id` deletes the session's events and turn records
 * (supervisor/turns/sessions.ts), after the workspaces bound to it. 200 with the counts; 404
 * unknown session; 409 `session_busy` while a turn of it or on one of its workspaces runs (nothing
 * is deleted); 503 `store_unavailable` or `workspaces_unavailable`.
 */
import type { RequestHandler, Router } from 'express';
import { isValidSessionId } from '../../api/schema/ids.js';
import type { TurnManager } from '../turns/types.js';
import { sendError } from './errors.js';
import { refuseBody, route } from './routing.js';

const FAILURE_STATUS = {
  not_found: 404,
  session_busy: 409,
  store_unavailable: 503,
  workspaces_unavailable: 503,
} as const;

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
  route(router, '/api/sessions/:id', { delete: [refuseBody, deleteSession(turns)] });
}
