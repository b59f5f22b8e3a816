/**
 * Prepared workers (supervisor/turns/prepared-workers.ts) through the real turn manager: the
 * next turn with the same key claims the worker booted after the previous turn, each prepared
 * worker serves one turn, its events and temp belong to the turn that claimed it, and nothing
 * is left when the pool lets a worker go.
 */
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { createTurnHarness, runTurn } from '../../../support/turn-harness.js';
import {
  noPreparedWorker,
  preparedWorker,
  workerProcesses,
  workerUidProcesses,
} from '../../../support/prepared-workers.js';

const harness = await createTurnHarness({ slot: 72 });
t.teardown(() => harness.close());

function eventsOf(turnId: string, kind: string) {
  const page = harness.events.query({ turn: turnId, kind });
  if (!page.ok) throw new Error(page.detail);
  return page.events;
}

t.test('the first turn starts its own worker; the next claims the one prepared after it', async (t) => {
  t.same(harness.turns.preparedWorkers(), { ready: 0, starting: 0 }, 'nothing is prepared before a turn ran');
  const first = await runTurn(harness, { argv: ['/bin/sh', '-c', 'id -u'] });
  t.equal(first.result.status, 'ok', first.result.detail ?? first.stderr);
  const prepared = await preparedWorker(harness);
  t.not(prepared.uid, first.record.workerUid, 'the prepared worker has a uid of its own');

  const second = await runTurn(harness, { argv: ['/bin/sh', '-c', 'id -u; echo "$TMPDIR"; ls -d "$TMPDIR"'] });
  t.equal(second.result.status, 'ok', second.result.detail ?? second.stderr);
  const [uid, tmpdir] = second.stdout.split('\n');
  t.equal(Number(uid), prepared.uid, 'the command ran in the prepared worker');
  t.equal(second.record.workerUid, prepared.uid, 'the record names that uid');
  t.equal(second.record.identity, 'separate_uid');
  t.equal(tmpdir, '/tmp', 'its turn temp is the tmpfs made for the worker');

  const launch = eventsOf(second.id, 'worker_launch');
  t.equal(launch.length, 1, 'worker_launch is recorded for the claiming turn');
  t.match(launch[0]?.payload, { identity: 'separate_uid', workerUid: prepared.uid });
  t.equal(eventsOf(second.id, 'worker_exit').length, 1);
  t.equal(eventsOf(second.id, 'turn_temp_purge').length, 1, 'the temp purge receipt belongs to the claiming turn');

  const third = await preparedWorker(harness);
  t.not(third.uid, prepared.uid, 'a prepared worker serves one turn: the next one is new');
});

t.test("a prepared worker's egress is attributed to the turn that claimed it", async (t) => {
  await preparedWorker(harness);
  const request =
    "const port = process.env.HTTP_PROXY.split(':')[2];" +
    "require('http').get({ host: '127.0.0.1', port, path: 'http://denied.example.test/' }, (r) => console.log(r.statusCode))";
  const run = await runTurn(harness, { argv: [process.execPath, '-e', request] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  t.equal(run.stdout.trim(), '403');
  const denials = eventsOf(run.id, 'egress_denial');
  t.equal(denials.length, 1, 'the denial carries the claiming turn id');
  t.equal(denials[0]?.sessionId, 'session-test');
});

t.test('a turn with another cwd does not claim the worker prepared for the workspace', async (t) => {
  const prepared = await preparedWorker(harness);
  const sub = path.join(harness.workspace, 'sub');
  fs.mkdirSync(sub, { recursive: true, mode: 0o777 });
  fs.chmodSync(sub, 0o777);
  const created = await harness.turns.create({
    sessionId: 'session-test',
    mode: 'ordinary',
    cwd: sub,
    argv: ['/bin/sh', '-c', 'id -u'],
  });
  if (!created.ok) throw new Error(created.detail);
  const result = await harness.turns.wait(created.turn.id);
  t.equal(result?.status, 'ok');
  t.not(harness.turns.get(created.turn.id)?.workerUid, prepared.uid, 'the other cwd started its own worker');
  // Capacity 1: the worker for the new cwd replaces the workspace one, which is stopped.
  const next = await preparedWorker(harness, prepared.uid);
  t.notOk(
    workerProcesses(harness).some((p) => p.uid === prepared.uid),
    'the replaced worker is gone',
  );
  const back = await runTurn(harness, { argv: ['/bin/sh', '-c', 'id -u'] });
  t.not(Number(back.stdout.trim()), next.uid, 'the worker prepared for the other cwd does not serve the workspace');
});

t.test('a prepared worker that died while idle is dropped and the turn starts its own', async (t) => {
  const prepared = await preparedWorker(harness);
  process.kill(prepared.pid, 'SIGKILL');
  const run = await runTurn(harness, { argv: ['/bin/sh', '-c', 'id -u'] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  t.not(Number(run.stdout.trim()), prepared.uid);
});

t.test('an unclaimed prepared worker is stopped after its idle time, leaving nothing', async (t) => {
  const idle = await createTurnHarness({
    slot: 74,
    configure: (config) => (config.turns.preparedWorkerIdleSeconds = 1),
  });
  t.teardown(() => idle.close());
  const run = await runTurn(idle, { argv: ['/bin/true'] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  await preparedWorker(idle);
  await noPreparedWorker(idle);
  t.pass('the pool emptied and no worker process is left');
  t.ok(idle.logLines.some((line) => line.includes('prepared worker stopped') && line.includes('idle')));
});

t.test('closing the manager stops prepared workers', async (t) => {
  const closing = await createTurnHarness({ slot: 75 });
  const run = await runTurn(closing, { argv: ['/bin/true'] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  await preparedWorker(closing);
  await closing.close();
  t.same(workerUidProcesses(closing), [], 'no worker process is left after close');
});

t.test('a turn that finds every uid held stops an idle prepared worker instead of being refused', async (t) => {
  const single = await createTurnHarness({ slot: 78, uidCount: 1 });
  t.teardown(() => single.close());
  const first = await runTurn(single, { argv: ['/bin/true'] });
  t.equal(first.result.status, 'ok', first.result.detail ?? first.stderr);
  const prepared = await preparedWorker(single);
  t.equal(prepared.uid, single.uidRange.first, 'the prepared worker holds the only uid');
  const sub = path.join(single.workspace, 'sub');
  fs.mkdirSync(sub, { recursive: true, mode: 0o777 });
  fs.chmodSync(sub, 0o777);
  const created = await single.turns.create({
    sessionId: 'session-test',
    mode: 'ordinary',
    cwd: sub,
    argv: ['/bin/true'],
  });
  t.ok(created.ok, created.ok ? 'the turn started' : `refused: ${created.reason}: ${created.detail}`);
  if (created.ok) t.equal((await single.turns.wait(created.turn.id))?.status, 'ok');
});

t.test('turns.preparedWorkers 0 prepares nothing', async (t) => {
  const off = await createTurnHarness({ slot: 76, configure: (config) => (config.turns.preparedWorkers = 0) });
  t.teardown(() => off.close());
  const run = await runTurn(off, { argv: ['/bin/true'] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  t.same(off.turns.preparedWorkers(), { ready: 0, starting: 0 });
  t.same(workerUidProcesses(off), []);
});

t.test('a client cannot name a turn like a prepared worker', async (t) => {
  const created = await harness.turns.create({
    sessionId: 'session-test',
    turnId: 'prepared_mine',
    mode: 'ordinary',
    cwd: harness.workspace,
    argv: ['/bin/true'],
  });
  t.match(created, { ok: false, reason: 'invalid_request', field: 'turnId', detail: /prefix prepared_ is reserved/ });
});
