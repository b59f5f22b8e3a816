/**
 * A failed launch is the operator's to see: the supervisor logs it at warning with its reason,
 * and the turn's `worker_exit` event carries the same detail, so neither the log nor the event
 * store alone leaves a refused turn unexplained. A turn whose command merely fails stays at info.
 */
import path from 'node:path';
import t from 'tap';
import { createTurnHarness, NATIVE_BUILD, runTurn, WORKER_PROGRAM } from '../../../support/turn-harness.js';

const logLines = (lines: string[]): Array<Record<string, unknown>> =>
  lines.map((line) => JSON.parse(line) as Record<string, unknown>);

t.test('a refused launch: a warning with its reason, and worker_exit carries the detail', async (t) => {
  // A worker that hands over something else than its egress listener: the launch is refused.
  const harness = await createTurnHarness({
    slot: 83,
    worker: { exec: path.join(NATIVE_BUILD, 'decoy-listener-worker'), args: [WORKER_PROGRAM] },
  });
  t.teardown(() => harness.close());
  const run = await runTurn(harness, { argv: ['/bin/sh', '-c', 'echo the-command-ran'] });
  t.equal(run.result.status, 'launch_refused');
  const lines = logLines(harness.logLines).filter((line) => line['turnId'] === run.id);
  const failed = lines.find((line) => line['msg'] === 'turn launch failed');
  t.match(failed, { level: 'warn', status: 'launch_refused', detail: /egress listener/ }, 'a warning with the reason');
  t.notOk(
    lines.some((line) => line['msg'] === 'turn finished'),
    'not also logged as an ordinary finish',
  );
  const exits = harness.events.query({ turn: run.id, kind: 'worker_exit' });
  t.match(exits.ok && exits.events[0]?.payload, { status: 'launch_refused', detail: /egress listener/ });
});

t.test('a command that is not found: info, and worker_exit says why', async (t) => {
  const harness = await createTurnHarness({ slot: 84 });
  t.teardown(() => harness.close());
  const run = await runTurn(harness, { argv: ['no-such-cmd'] });
  t.equal(run.result.status, 'nonzero_exit');
  const finished = logLines(harness.logLines).find(
    (line) => line['turnId'] === run.id && line['msg'] === 'turn finished',
  );
  t.match(finished, { level: 'info', exitCode: 127, detail: /command not found/ });
  const exits = harness.events.query({ turn: run.id, kind: 'worker_exit' });
  t.match(exits.ok && exits.events[0]?.payload, {
    exitCode: 127,
    spawnError: 'not_found',
    detail: /command not found/,
  });
});
