/**
 * Turn routes. Status codes: 201 created; 400 invalid field (named); 404 unknown turn;
 * 409 turn id already used or turn not running; 429 concurrent-turn cap reached (retry later);
 * 503 worker_host_unsupported with the requirement.
 */
import express, { type Router } from 'express';
import { isValidId } from '../../api/schema/ids.js';
import type { TurnManager } from '../turns/types.js';
import { refuseBody, route } from './routing.js';
import { MAX_BODY_BYTES, sendError } from './errors.js';
import { parseTurnQuery } from './turn-query.js';
import { requestQuery, sendQueryRefusal } from './query-params.js';

export function registerTurnRoutes(router: Router, turns: TurnManager): void {
  const json = express.json({ limit: MAX_BODY_BYTES, strict: true });

  route(router, '/api/turns', {
    post: [
      json,
      async (req, res) => {
        if (!req.is('application/json'))
          return sendError(res, 400, 'invalid_request', 'body: expected an application/json object');
        const created = await turns.create(req.body);
        if (created.ok) {
          res.setHeader('Location', `/api/turns/${encodeURIComponent(created.turn.id)}`);
          return void res.status(201).json({ turn: created.turn });
        }
        switch (created.reason) {
          case 'invalid_request': {
            // Every refused field; the first also as `field`, as clients read it.
            const field = created.field ?? 'body';
            const errors = created.errors ?? [{ field, detail: created.detail.replace(/^[^:]*: /, '') }];
            return sendError(res, 400, 'invalid_request', created.detail, { field, errors });
          }
          case 'worker_host_unsupported':
            return sendError(res, 503, 'worker_host_unsupported', created.detail, { requirement: created.detail });
          case 'capacity_exhausted':
            res.setHeader('Retry-After', '1');
            return sendError(res, 429, 'capacity_exhausted', created.detail);
          case 'conflict':
            return sendError(res, 409, 'conflict', created.detail, created.field ? { field: created.field } : {});
        }
      },
    ],
    get: (req, res) => {
      const parsed = parseTurnQuery(requestQuery(req));
      if (!parsed.ok) return sendQueryRefusal(res, parsed);
      const page = turns.page(parsed.query);
      if (!page.ok) return sendError(res, 503, 'store_unavailable', page.detail);
      res.json({ turns: page.turns, nextAfter: page.nextAfter });
    },
  });

  route(router, '/api/turns/:id', {
    get: (req, res) => {
      const id = String(req.params['id']);
      const turn = isValidId(id) ? turns.get(id) : undefined;
      if (turn === undefined)
        return sendError(res, 404, 'not_found', `no turn ${isValidId(id) ? id : '(malformed id)'}`);
      res.json({ turn });
    },
  });

  route(router, '/api/turns/:id/cancel', {
    post: [
      refuseBody,
      (req, res) => {
        const id = String(req.params['id']);
        if (!isValidId(id)) return sendError(res, 404, 'not_found', 'no turn (malformed id)');
        const cancelled = turns.cancel(id);
        if (cancelled.ok) return void res.json({ turn: cancelled.turn });
        if (cancelled.reason === 'not_found') return sendError(res, 404, 'not_found', cancelled.detail);
        sendError(res, 409, 'not_running', cancelled.detail);
      },
    ],
  });
}
