/**
 * Query parameters of `GET /api/governance/events` and of its WebSocket stream, refused as
 * every route's are (query-params.ts).
 */
import { isValidSessionId, SESSION_ID_DETAIL } from '../../api/schema/ids.js';
import type { EventQuery } from '../events/types.js';
import { QueryCheck, type QueryFailure } from './query-params.js';

const FILTERS = ['session', 'turn', 'kind'] as const;

const isPrintable256 = (value: string): boolean =>
  value.length >= 1 && value.length <= 256 && !/[\x00-\x1f\x7f]/.test(value);

/** A session filter follows the session-id rule, as the turn and workspace listings' do. */
const FILTER_RULES: Record<(typeof FILTERS)[number], { valid(value: string): boolean; detail: string }> = {
  session: { valid: isValidSessionId, detail: SESSION_ID_DETAIL },
  turn: { valid: isPrintable256, detail: 'expected 1-256 printable characters' },
  kind: { valid: isPrintable256, detail: 'expected 1-256 printable characters' },
};
export const MAX_EVENT_PAGE = 1000;

/** `params` is a URLSearchParams so the HTTP route and the WebSocket upgrade parse alike. */
export function parseEventQuery(
  params: URLSearchParams,
  options: { allowLimit: boolean },
): { ok: true; query: EventQuery } | QueryFailure {
  // Paging newest first belongs to the page route; the stream always runs in id order.
  const paging = options.allowLimit ? ['limit', 'order', 'before'] : [];
  const check = new QueryCheck(params, [...FILTERS, 'after', ...paging]);
  const query: EventQuery = {};
  for (const name of FILTERS) {
    const value = check.get(name);
    if (value === null) continue;
    if (!FILTER_RULES[name].valid(value)) check.refuse(name, FILTER_RULES[name].detail);
    else query[name] = value;
  }
  const after = check.get('after');
  if (after !== null) {
    if (!/^[0-9]{1,15}$/.test(after)) check.refuse('after', 'expected a non-negative integer event id');
    else query.after = Number(after);
  }
  const limit = check.get('limit');
  if (limit !== null) {
    const n = /^[0-9]{1,4}$/.test(limit) ? Number(limit) : NaN;
    if (!(n >= 1 && n <= MAX_EVENT_PAGE)) check.refuse('limit', `expected an integer from 1 to ${MAX_EVENT_PAGE}`);
    else query.limit = n;
  }
  parseOrder(check, query);
  return check.failure() ?? { ok: true, query };
}

/**
 * `order=desc` pages newest first with `before` (the previous page's `nextBefore`); `after`
 * belongs to ascending order and `before` to descending: each given with the other order is
 * refused, naming it.
 */
function parseOrder(check: QueryCheck, query: EventQuery): void {
  const order = check.get('order');
  if (order !== null) {
    if (order !== 'asc' && order !== 'desc') check.refuse('order', "expected 'asc' or 'desc'");
    else query.order = order;
  }
  const before = check.get('before');
  if (before !== null) {
    if (!/^[0-9]{1,15}$/.test(before)) check.refuse('before', 'expected a non-negative integer event id');
    else if (query.order !== 'desc') check.refuse('before', 'only with order=desc (ascending pages use after)');
    else query.before = Number(before);
  }
  if (query.order === 'desc' && query.after !== undefined)
    check.refuse('after', 'not with order=desc: a newest-first page continues with before=<nextBefore>');
}

/** The same filters applied to one event pushed live by the store. */
export function eventMatches(
  query: EventQuery,
  event: { sessionId: string | null; turnId: string | null; kind: string },
): boolean {
  return (
    (query.session === undefined || event.sessionId === query.session) &&
    (query.turn === undefined || event.turnId === query.turn) &&
    (query.kind === undefined || event.kind === query.kind)
  );
}
