/**
 * Query parameters of `GET /api/turns`: `session`, `workspace`, `state`, `after` (a previous page's
 * `nextAfter`), `limit`, refused as every route's are (query-params.ts).
 */
import { isValidId, isValidSessionId, SESSION_ID_DETAIL } from '../../api/schema/ids.js';
import { MAX_TURN_PAGE, TURN_CURSOR_PATTERN, TURN_STATES } from '../turns/store.js';
import type { TurnPageQuery, TurnRecord } from '../turns/types.js';
import { QueryCheck, type QueryFailure } from './query-params.js';

export function parseTurnQuery(params: URLSearchParams): { ok: true; query: TurnPageQuery } | QueryFailure {
  const check = new QueryCheck(params, ['session', 'workspace', 'state', 'after', 'limit']);
  const query: TurnPageQuery = {};
  const session = check.get('session');
  if (session !== null) {
    if (!isValidSessionId(session)) check.refuse('session', SESSION_ID_DETAIL);
    else query.sessionId = session;
  }
  const workspace = check.get('workspace');
  if (workspace !== null) {
    if (!isValidId(workspace)) check.refuse('workspace', 'expected 1-64 of A-Z a-z 0-9 _ -');
    else query.workspaceId = workspace;
  }
  const state = check.get('state');
  if (state !== null) {
    if (!(TURN_STATES as readonly string[]).includes(state))
      check.refuse('state', `expected one of ${TURN_STATES.join(', ')}`);
    else query.state = state as TurnRecord['state'];
  }
  const after = check.get('after');
  if (after !== null) {
    if (!TURN_CURSOR_PATTERN.test(after)) check.refuse('after', "expected the previous page's nextAfter");
    else query.after = after;
  }
  const limit = check.get('limit');
  if (limit !== null) {
    const n = /^[0-9]{1,4}$/.test(limit) ? Number(limit) : NaN;
    if (!(n >= 1 && n <= MAX_TURN_PAGE)) check.refuse('limit', `expected an integer from 1 to ${MAX_TURN_PAGE}`);
    else query.limit = n;
  }
  return check.failure() ?? { ok: true, query };
}
