/**
 * Turn routes. Status codes: 201 created; 400 invalid field (named); 404 unknown turn;
 * 409 turn id already used or turn not running; 429 concurrent-turn cap reached (retry later);
 * 503 worker_host_unsupported with the requirement.
 *
 * `wait=S` (0 < S <= 300) on create, read and cancel answers once the turn has ended or S
 * seconds have passed, whichever is first: the record's `state` says which. A client that goes
 * away ends its wait (nothing is left listening), and so does the server's shutdown, which
 * closes every connection.
 */
import express, { type Request, type Response, type Router } from 'express';
import { isValidId } from '../../api/schema/ids.js';
import type { TurnManager } from '../turns/types.js';
import { refuseBody, route } from './routing.js';
import { MAX_BODY_BYTES, sendError } from './errors.js';
import { parseTurnQuery } from './turn-query.js';
import { QueryCheck, requestQuery, sendQueryRefusal, type QueryFailure } from './query-params.js';
import { readTurnOutput } from './turn-output-route.js';

/** The longest a request may wait for a turn's end. */
const MAX_WAIT_SECONDS = 300;

/** The `wait` parameter (seconds, 0 < S <= 300; decimals allowed), the route's only one. */
function parseWait(req: Request): { ok: true; seconds: number | null } | QueryFailure {
  const check = new QueryCheck(requestQuery(req), ['wait']);
  const raw = check.get('wait');
  let seconds: number | null = null;
  if (raw !== null) {
    const n = /^[0-9]{1,3}(\.[0-9]{1,3})?$/.test(raw) ? Number(raw) : NaN;
    if (!(n > 0 && n <= MAX_WAIT_SECONDS))
      check.refuse('wait', `expected seconds, more than 0 and at most ${MAX_WAIT_SECONDS}`);
    else seconds = n;
  }
  return check.failure() ?? { ok: true, seconds };
}

/** Waits for the turn's end, at most `seconds`; a client that disconnects ends the wait at once. */
async function waitForTurn(turns: TurnManager, id: string, seconds: number | null, res: Response): Promise<void> {
  if (seconds === null) return;
  const gone = new AbortController();
  const onClose = (): void => gone.abort();
  res.once('close', onClose);
  try {
    await turns.waitForEnd(id, seconds, gone.signal);
  } finally {
    res.off('close', onClose);
  }
}

/** The turn as it is now, unless the client went away while waiting. */
function answerTurn(turns: TurnManager, id: string, res: Response, status = 200): void {
  if (res.destroyed || res.writableEnded) return;
  const turn = turns.get(id);
  if (turn === undefined) return sendError(res, 404, 'not_found', `no turn ${id}`);
  res.status(status).json({ turn });
}

export function registerTurnRoutes(router: Router, turns: TurnManager): void {
  const json = express.json({ limit: MAX_BODY_BYTES, strict: true });

  route(router, '/api/turns', {
    post: [
      json,
      async (req, res) => {
        const wait = parseWait(req);
        if (!wait.ok) return sendQueryRefusal(res, wait);
        if (!req.is('application/json'))
          return sendError(res, 400, 'invalid_request', 'body: expected an application/json object');
        const created = await turns.create(req.body);
        if (created.ok) {
          const id = created.turn.id;
          res.setHeader('Location', `/api/turns/${encodeURIComponent(id)}`);
          if (wait.seconds === null) return void res.status(201).json({ turn: created.turn });
          await waitForTurn(turns, id, wait.seconds, res);
          return answerTurn(turns, id, res, 201);
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
          case 'draining':
            return sendError(res, 503, 'draining', created.detail, { requirement: 'the host is not draining' });
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
    get: async (req, res) => {
      const id = String(req.params['id']);
      const turn = isValidId(id) ? turns.get(id) : undefined;
      if (turn === undefined)
        return sendError(res, 404, 'not_found', `no turn ${isValidId(id) ? id : '(malformed id)'}`);
      const wait = parseWait(req);
      if (!wait.ok) return sendQueryRefusal(res, wait);
      if (wait.seconds === null) return void res.json({ turn });
      await waitForTurn(turns, id, wait.seconds, res);
      answerTurn(turns, id, res);
    },
  });

  route(router, '/api/turns/:id/output', { get: readTurnOutput(turns) });

  route(router, '/api/turns/:id/cancel', {
    post: [
      refuseBody,
      async (req, res) => {
        const id = String(req.params['id']);
        if (!isValidId(id)) return sendError(res, 404, 'not_found', 'no turn (malformed id)');
        const wait = parseWait(req);
        if (!wait.ok) return sendQueryRefusal(res, wait);
        const cancelled = turns.cancel(id);
        if (cancelled.ok && wait.seconds === null) return void res.json({ turn: cancelled.turn });
        if (cancelled.ok) {
          await waitForTurn(turns, id, wait.seconds, res);
          return answerTurn(turns, id, res);
        }
        if (cancelled.reason === 'not_found') return sendError(res, 404, 'not_found', cancelled.detail);
        sendError(res, 409, 'not_running', cancelled.detail);
      },
    ],
  });
}
