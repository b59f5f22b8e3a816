/**
 * Query parameters of `GET /api/governance/events` and of its WebSocket stream. Unknown and
 * repeated parameters are refused, and every refusal names the parameter.
 */
import type { EventQuery } from '../events/types.js';

export type QueryFailure = { ok: false; reason: 'invalid_request'; detail: string; field: string };

const FILTERS = ['session', 'turn', 'kind'] as const;
export const MAX_EVENT_PAGE = 1000;

function refuse(field: string, detail: string): QueryFailure {
  return { ok: false, reason: 'invalid_request', detail: `${field}: ${detail}`, field };
}

/** `params` is a URLSearchParams so the HTTP route and the WebSocket upgrade parse alike. */
export function parseEventQuery(
  params: URLSearchParams,
  options: { allowLimit: boolean },
): { ok: true; query: EventQuery } | QueryFailure {
  const known = new Set<string>([...FILTERS, 'after', ...(options.allowLimit ? ['limit'] : [])]);
  const query: EventQuery = {};
  for (const name of new Set(params.keys())) {
    if (!known.has(name)) return refuse(name, 'unknown parameter');
    if (params.getAll(name).length > 1) return refuse(name, 'given more than once');
  }
  for (const name of FILTERS) {
    const value = params.get(name);
    if (value === null) continue;
    if (value.length === 0 || value.length > 256 || /[\x00-\x1f\x7f]/.test(value))
      return refuse(name, 'expected 1-256 printable characters');
    query[name] = value;
  }
  const after = params.get('after');
  if (after !== null) {
    if (!/^[0-9]{1,15}$/.test(after)) return refuse('after', 'expected a non-negative integer event id');
    query.after = Number(after);
  }
  const limit = params.get('limit');
  if (limit !== null) {
    const n = /^[0-9]{1,4}$/.test(limit) ? Number(limit) : NaN;
    if (!(n >= 1 && n <= MAX_EVENT_PAGE)) return refuse('limit', `expected an integer from 1 to ${MAX_EVENT_PAGE}`);
    query.limit = n;
  }
  return { ok: true, query };
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
