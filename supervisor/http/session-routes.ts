/**
 * Session routes: `DELETE /api/sessions/:id` deletes the session's events and turn records
 * (supervisor/turns/sessions.ts), after the workspaces bound to it. 200 with the counts; 404
 * unknown session; 409 `session_busy` while a turn of it or on one of its workspaces runs (nothing
 * is deleted); 503 `store_unavailable` or `workspaces_unavailable`.
 */
import type { Router } from 'express';
import type { TurnManager } from '../turns/types.js';
import { SESSION_ID_PATTERN } from '../turns/validate.js';
import { sendError } from './errors.js';
import { refuseBody, route } from './routing.js';

export function registerSessionRoutes(router: Router, turns: TurnManager): void {
  route(router, '/api/sessions/:id', {
    delete: [
      refuseBody,
      async (req, res) => {
        const id = String(req.params['id']);
        if (!SESSION_ID_PATTERN.test(id)) return sendError(res, 404, 'not_found', 'no session (malformed id)');
        const deleted = await turns.deleteSession(id);
        if (deleted.ok) return void res.json({ deleted: deleted.deleted });
        switch (deleted.reason) {
          case 'not_found':
            return sendError(res, 404, 'not_found', deleted.detail);
          case 'session_busy':
            return sendError(res, 409, 'session_busy', deleted.detail);
          case 'store_unavailable':
            return sendError(res, 503, 'store_unavailable', deleted.detail);
          case 'workspaces_unavailable':
            return sendError(res, 503, 'workspaces_unavailable', deleted.detail);
        }
      },
    ],
  });
}
