import t from 'tap';
import path from 'node:path';
import { createTurnHarness, runTurn, NATIVE_BUILD } from '../../support/turn-harness.js';

const harness = await createTurnHarness({ slot: 1 });
t.teardown(() => harness.close());

t.test('a turn runs as a separate uid and reports its exit', async (t) => {
  const run = await runTurn(harness, { argv: ['/bin/sh', '-c', 'id -u; echo out; echo err >&2; exit 3'] });
  t.equal(run.result.status, 'nonzero_exit', run.result.detail ?? run.stderr);
  t.equal(run.result.exitCode, 3);
  const uid = Number(run.stdout.split('\n')[0]);
  t.ok(uid >= harness.uidRange.first && uid < harness.uidRange.first + harness.uidRange.count, `uid ${uid} in range`);
  t.match(run.stdout, /out/);
  t.match(run.stderr, /err/);
  t.equal(run.record.identity, 'separate_uid');
  t.equal(run.record.workerUid, uid);
});

t.test('inside the command: the boundary holds', async (t) => {
  const run = await runTurn(harness, { argv: [path.join(NATIVE_BUILD, 'report-self')] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  t.comment(run.stdout);
});
