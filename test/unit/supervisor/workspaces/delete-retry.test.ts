/**
 * Half-done deletes are retried with a doubling, capped delay until one succeeds; each failure
 * is reported with the delay before the next attempt, and close() stops every pending retry.
 */
import t from 'tap';
import { fail, ok } from '../../../../core/result.js';
import { DeleteRetries } from '../../../../supervisor/workspaces/delete-retry.js';

// The retry timers are unref'd (they never keep a supervisor alive): this keeps the test's alive.
const keepAlive = setInterval(() => undefined, 1000);
t.teardown(() => clearInterval(keepAlive));

t.test('the delay doubles from the first and stays at the cap', async (t) => {
  const retries = new DeleteRetries(
    async () => ok({}),
    () => undefined,
    { firstDelayMs: 100, maxDelayMs: 500 },
  );
  t.same(
    [1, 2, 3, 4, 5, 60].map((n) => retries.delayBefore(n)),
    [100, 200, 400, 500, 500, 500],
  );
});

t.test('a delete failing twice is retried until it succeeds, then no more', async (t) => {
  const failures: Array<[string, number, string, number]> = [];
  let calls = 0;
  let succeeded!: () => void;
  const done = new Promise<void>((resolve) => (succeeded = resolve));
  const retries = new DeleteRetries(
    async (id) => {
      calls++;
      if (calls < 3) return fail('workspace_busy', `${id} still busy (${calls})`);
      succeeded();
      return ok({});
    },
    (id, attempt, detail, delay) => failures.push([id, attempt, detail, delay]),
    { firstDelayMs: 1, maxDelayMs: 4 },
  );
  retries.schedule('ws1', 0, 'release: busy');
  await done;
  await new Promise((resolve) => setImmediate(resolve));
  t.equal(calls, 3, 'three attempts after the first failure');
  t.same(failures, [
    ['ws1', 0, 'release: busy', 1],
    ['ws1', 1, 'ws1 still busy (1)', 2],
    ['ws1', 2, 'ws1 still busy (2)', 4],
  ]);
  retries.close();
});

t.test('close() stops a pending retry, and cancel() one workspace', async (t) => {
  let calls = 0;
  const retries = new DeleteRetries(
    async () => {
      calls++;
      return ok({});
    },
    () => undefined,
    { firstDelayMs: 1, maxDelayMs: 1 },
  );
  retries.schedule('a', 0, 'x');
  retries.cancel('a');
  retries.schedule('b', 0, 'x');
  retries.close();
  retries.schedule('c', 0, 'x');
  // Past every delay: a retry that was going to run would have run by the next macrotask turns.
  for (let i = 0; i < 5; i++) await new Promise((resolve) => setTimeout(resolve, 5));
  t.equal(calls, 0, 'no attempt ran');
});
