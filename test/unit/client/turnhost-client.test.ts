import t from 'tap';
import { ROUTES } from '../../../api/schema/index.js';
import { createClient } from '../../../client/index.js';

/**
 * Client methods that are not one route: a pager that follows listTurns through every page, and
 * run, a turn's exit and output in one call (createTurn, getTurn and output with wait).
 */
const CONVENIENCES = ['allTurns', 'run'];

t.test('the client has one method per route, named by its operationId', async (t) => {
  const client = createClient({ target: { kind: 'unix', path: '/nonexistent.sock' }, token: 'unused' });
  // The operations are the class's methods: its prototype's functions, and any of its own.
  const members = [...Object.getOwnPropertyNames(Object.getPrototypeOf(client)), ...Object.keys(client)];
  const methods = members.filter(
    (name) => name !== 'constructor' && typeof (client as unknown as Record<string, unknown>)[name] === 'function',
  );
  const operations = ROUTES.map((route) => route.operationId);
  for (const operation of operations) t.ok(methods.includes(operation), `client.${operation}()`);
  t.same(
    methods.filter((name) => !operations.includes(name)).sort(),
    [...CONVENIENCES].sort(),
    'no method outside the document but the conveniences',
  );
});
