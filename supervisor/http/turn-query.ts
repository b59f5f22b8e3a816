/**
 * Query parameters of `GET /api/turns`: `session`, `workspace`, `state`, `after` (a previous page's
 * `nextAfter`), `limit`. Unknown and repeated parameters are refused, and every refusal names
 * the parameter, as for the event pages (event-query.ts).
 */
import { MAX_TURN_PAGE, TURN_CURSOR_PATTERN, TURN_STATES } from '../turns/store.js';
import type { TurnPageQuery, TurnRecord } from '../turns/types.js';
import type { QueryFailure } from './event-query.js';
import { WORKSPACE_ID_PATTERN } from '../workspaces/service.js';

const KNOWN = new Set(['session', 'workspace', 'state', 'after', 'limit']);

function refuse(field: string, detail: string): QueryFailure {
  return { ok: false, reason: 'invalid_request', detail: `${field}: ${detail}`, field };
}

export function parseTurnQuery(params: URLSearchParams): { ok: true; query: TurnPageQuery } | QueryFailure {
  for (const name of new Set(params.keys())) {
    if (!KNOWN.has(name)) return refuse(name, 'unknown parameter');
    if (params.getAll(name).length > 1) return refuse(name, 'given more than once');
  }
  const query: TurnPageQuery = {};
  const session = params.get('session');
  if (session !== null) {
    if (session.length === 0 || session.length > 128 || /[\x00-\x1f\x7f]/.test(session))
      return refuse('session', 'expected 1-128 printable characters');
    query.sessionId = session;
  }
  const workspace = params.get('workspace');
  if (workspace !== null) {
    if (!WORKSPACE_ID_PATTERN.test(workspace)) return refuse('workspace', 'expected 1-64 of A-Z a-z 0-9 _ -');
    query.workspaceId = workspace;
  }
  const state = params.get('state');
  if (state !== null) {
    if (!(TURN_STATES as readonly string[]).includes(state))
      return refuse('state', `expected one of ${TURN_STATES.join(', ')}`);
    query.state = state as TurnRecord['state'];
  }
  const after = params.get('after');
  if (after !== null) {
    if (!TURN_CURSOR_PATTERN.test(after)) return refuse('after', "expected the previous page's nextAfter");
    query.after = after;
  }
  const limit = params.get('limit');
  if (limit !== null) {
    const n = /^[0-9]{1,4}$/.test(limit) ? Number(limit) : NaN;
    if (!(n >= 1 && n <= MAX_TURN_PAGE)) return refuse('limit', `expected an integer from 1 to ${MAX_TURN_PAGE}`);
    query.limit = n;
  }
  return { ok: true, query };
}
