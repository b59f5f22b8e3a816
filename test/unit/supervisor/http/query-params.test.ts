/**
 * Query refusals of every route list each unknown, repeated and malformed parameter at once (the
 * unknown and repeated names first, as for bodies), the first also as `field` and in the message.
 */
import t from 'tap';
import { parseEventQuery } from '../../../../supervisor/http/event-query.js';
import { QueryCheck } from '../../../../supervisor/http/query-params.js';
import { parseTurnQuery } from '../../../../supervisor/http/turn-query.js';

t.test('unknown and repeated parameters are each refused once, in the order given', async (t) => {
  const check = new QueryCheck(new URLSearchParams('colour=red&limit=1&limit=2&size=9&limit=3'), ['limit']);
  t.equal(check.get('limit'), null, 'a repeated parameter yields no value');
  check.refuse('limit', 'expected an integer');
  t.same(check.failure(), {
    ok: false,
    reason: 'invalid_request',
    detail: 'colour: unknown parameter',
    field: 'colour',
    errors: [
      { field: 'colour', detail: 'unknown parameter' },
      { field: 'limit', detail: 'given more than once' },
      { field: 'size', detail: 'unknown parameter' },
    ],
  });
});

t.test('a query without problems is accepted', async (t) => {
  const check = new QueryCheck(new URLSearchParams('limit=5'), ['limit', 'after']);
  t.equal(check.get('limit'), '5');
  t.equal(check.get('after'), null);
  t.equal(check.failure(), null);
});

t.test('the event query reports every problem', async (t) => {
  const parsed = parseEventQuery(new URLSearchParams('after=x&limit=0&kind=&colour=1'), { allowLimit: true });
  t.match(parsed, {
    ok: false,
    field: 'colour',
    errors: [
      { field: 'colour', detail: 'unknown parameter' },
      { field: 'kind', detail: 'expected 1-256 printable characters' },
      { field: 'after', detail: 'expected a non-negative integer event id' },
      { field: 'limit', detail: 'expected an integer from 1 to 1000' },
    ],
  });
  const stream = parseEventQuery(new URLSearchParams('limit=5'), { allowLimit: false });
  t.match(stream, { ok: false, field: 'limit', errors: [{ field: 'limit', detail: 'unknown parameter' }] });
  t.same(parseEventQuery(new URLSearchParams('turn=a&after=7&limit=20'), { allowLimit: true }), {
    ok: true,
    query: { turn: 'a', after: 7, limit: 20 },
  });
});

t.test('the turn query reports every problem', async (t) => {
  const parsed = parseTurnQuery(new URLSearchParams('state=done&workspace=a%2Fb&limit=x&limit=y'));
  t.match(parsed, {
    ok: false,
    field: 'limit',
    detail: 'limit: given more than once',
    errors: [
      { field: 'limit', detail: 'given more than once' },
      { field: 'workspace', detail: 'expected 1-64 of A-Z a-z 0-9 _ -' },
      { field: 'state', detail: /^expected one of / },
    ],
  });
  if (!parsed.ok) t.equal(parsed.errors.length, 3, 'limit is refused once, for its repetition');
  t.same(parseTurnQuery(new URLSearchParams('session=s&state=running')), {
    ok: true,
    query: { sessionId: 's', state: 'running' },
  });
});

t.test('every session filter follows the session-id rule and refuses with its words', async (t) => {
  const detail = 'expected 1-128 characters of [A-Za-z0-9_.:-]';
  for (const bad of ['a b', 'x'.repeat(129), 'a/b', '']) {
    const query = new URLSearchParams({ session: bad });
    t.match(parseEventQuery(query, { allowLimit: true }), { ok: false, errors: [{ field: 'session', detail }] }, bad);
    t.match(parseTurnQuery(query), { ok: false, errors: [{ field: 'session', detail }] }, bad);
  }
  const good = new URLSearchParams({ session: `host.app:${'s'.repeat(119)}` });
  t.match(parseEventQuery(good, { allowLimit: true }), { ok: true, query: { session: good.get('session') } });
  t.match(parseTurnQuery(good), { ok: true, query: { sessionId: good.get('session') } });
});
