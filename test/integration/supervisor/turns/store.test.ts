/**
 * `GET /api/turns` pages on a real served supervisor: newest first, `nextAfter` until null,
 * every turn exactly once across the pages, narrowed by session and state; bad parameters are
 * refused naming the parameter.
 */
import t from 'tap';
import { stopTapInjectingIntoChildren } from '../../../support/no-tap-inject.js';
import { servedApi } from '../../../support/served-api.js';
import { serveForTest } from '../../../support/served-supervisor.js';
import type { TurnPage } from '../../../../supervisor/turns/types.js';

stopTapInjectingIntoChildren();

const served = await serveForTest(t, { name: 'listing' });
const api = servedApi(served);

async function finishedTurn(sessionId: string): Promise<string> {
  const created = await api.createTurn(sessionId, ['/bin/true']);
  const id = (created.body as { turn: { id: string } }).turn.id;
  const attached = await api.attach(id);
  await attached.waitFor((m) => m.type === 'exit');
  attached.close();
  return id;
}

t.test('paging through more turns than a page: no duplicates, no gaps, newest first', async (t) => {
  const created: string[] = [];
  for (let i = 0; i < 7; i++) created.push(await finishedTurn('listing-a'));
  await finishedTurn('listing-b');

  const seen: string[] = [];
  let after: string | null = null;
  let pages = 0;
  do {
    const query: string = `/api/turns?session=listing-a&limit=3${after === null ? '' : `&after=${after}`}`;
    const answer = await api.request('GET', query);
    t.equal(answer.status, 200, JSON.stringify(answer.body));
    const page = answer.body as TurnPage;
    t.ok(page.turns.length <= 3);
    seen.push(...page.turns.map((turn) => turn.id));
    after = page.nextAfter;
    pages += 1;
  } while (after !== null && pages < 10);
  t.equal(pages, 3, '7 turns in pages of 3');
  t.same(seen, [...created].reverse(), 'every turn once, newest first');

  const exact = (await api.request('GET', '/api/turns?session=listing-a&limit=7')).body as TurnPage;
  t.equal(exact.turns.length, 7);
  t.equal(exact.nextAfter, null, 'a page that holds the rest is the last');

  const all = (await api.request('GET', '/api/turns?limit=1000')).body as TurnPage;
  t.equal(all.turns.length, 8, 'without a filter: every session');
});

t.test('state narrows the page', async (t) => {
  const running = await api.createTurn('listing-c', ['/bin/sleep', '60']);
  const id = (running.body as { turn: { id: string } }).turn.id;
  const live = (await api.request('GET', '/api/turns?state=running')).body as TurnPage;
  t.same(
    live.turns.map((turn) => turn.id),
    [id],
  );
  const finished = (await api.request('GET', '/api/turns?session=listing-c&state=finished')).body as TurnPage;
  t.same(finished.turns, []);
  t.equal((await api.request('POST', `/api/turns/${id}/cancel`)).status, 200);
});

t.test('bad parameters are refused naming them', async (t) => {
  const cases: Array<[string, RegExp]> = [
    ['limit=0', /^limit: expected an integer from 1 to 1000/],
    ['limit=1001', /^limit: /],
    ['limit=x', /^limit: /],
    ['state=done', /^state: expected one of starting, running, finished/],
    ['after=abc', /^after: /],
    ['after=-1', /^after: /],
    ['session=', /^session: /],
    ['workspace=a%2Fb', /^workspace: expected 1-64 of/],
    ['colour=red', /^colour: unknown parameter/],
    ['limit=1&limit=2', /^limit: given more than once/],
  ];
  for (const [query, error] of cases) {
    const answer = await api.request('GET', `/api/turns?${query}`);
    t.equal(answer.status, 400, query);
    t.match(answer.body, { code: 'invalid_request', error, field: /^[a-z]+$/ }, query);
  }
  const several = await api.request('GET', '/api/turns?colour=red&state=done&limit=0');
  t.same(
    (several.body as { errors: unknown }).errors,
    [
      { field: 'colour', detail: 'unknown parameter' },
      { field: 'state', detail: 'expected one of starting, running, finished' },
      { field: 'limit', detail: 'expected an integer from 1 to 1000' },
    ],
    'every refused parameter at once',
  );
});
