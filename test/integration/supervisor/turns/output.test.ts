/**
 * A turn's output over plain HTTP and over a late attach, on real served supervisors in both
 * identity modes (separate_uid with the helper, shared_uid): every byte kept on disk up to
 * turns.outputRetainBytes, read back whole (compared byte for byte), stdout and stderr apart,
 * the cap's drop counted in headers, the result and an explicit attach message, offsets, the
 * files the supervisor's own and removed with the session. And run-and-wait: `wait=S` on
 * create, read and cancel.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { stopTapInjectingIntoChildren } from '../../../support/no-tap-inject.js';
import { servedApi, type ServedApi } from '../../../support/served-api.js';
import {
  setUpHelper,
  startSupervisor,
  stopSupervisors,
  supervisorBase,
  type ServedSupervisor,
} from '../../../support/served-supervisor.js';

stopTapInjectingIntoChildren();

/** Above the 3,000,000-byte turns, below the 4,000,000-byte one: its last 500,000 are dropped. */
const RETAIN = 3_500_000;
const helper = setUpHelper([supervisorBase('output-separate').dataDir], { first: 3_187_000, count: 8 });
t.teardown(() => helper.remove());
const turns = { outputRetainBytes: RETAIN };
const supervisors: Array<[string, ServedSupervisor]> = [
  ['separate_uid', await startSupervisor({ name: 'output-separate', helper, turns })],
  ['shared_uid', await startSupervisor({ name: 'output-shared', turns })],
];
t.teardown(() => stopSupervisors(supervisors.map(([, supervisor]) => supervisor)));

/** `seq` cut to exactly `bytes`: text whose every offset differs, so a gap or a repeat shows. */
const seqBytes = (bytes: number, from = 1): string => `seq ${from} 2000000 | head -c ${bytes}`;
const expected = (script: string): Buffer => execFileSync('/bin/sh', ['-c', script], { maxBuffer: 64 << 20 });

interface Turn {
  id: string;
  state: string;
  result: { status: string; output?: Record<string, { written: number; dropped: number }> } | null;
}
const turnOf = (body: unknown): Turn => (body as { turn: Turn }).turn;

function outputHeaders(headers: Record<string, unknown>): { written: number; dropped: number; complete: string } {
  return {
    written: Number(headers['x-turnhost-output-written']),
    dropped: Number(headers['x-turnhost-output-dropped']),
    complete: String(headers['x-turnhost-output-complete']),
  };
}

/** Runs argv to its end with `wait`; answers the ended record. */
async function runToEnd(api: ServedApi, cwd: string, sessionId: string, argv: string[], extra = {}): Promise<Turn> {
  const created = await api.request('POST', '/api/turns?wait=120', {
    sessionId,
    mode: 'ordinary',
    argv,
    cwd,
    ...extra,
  });
  if (created.status !== 201) throw new Error(JSON.stringify(created.body));
  const turn = turnOf(created.body);
  if (turn.state !== 'finished') throw new Error(`turn ${turn.id} still ${turn.state} after 120 s`);
  return turn;
}

/** Each stream's bytes an attach delivered, its dropped counts, and the message types in order. */
function collected(messages: Array<{ type: string; stream?: string; data?: string; bytes?: number }>): {
  streams: Record<string, Buffer>;
  dropped: Record<string, number>;
  types: string[];
} {
  const chunks: Record<string, Buffer[]> = {};
  const dropped: Record<string, number> = {};
  for (const m of messages) {
    if (m.type === 'output') (chunks[m.stream!] ??= []).push(Buffer.from(m.data ?? '', 'base64'));
    if (m.type === 'dropped') dropped[m.stream!] = (dropped[m.stream!] ?? 0) + (m.bytes ?? 0);
  }
  const streams = Object.fromEntries(Object.entries(chunks).map(([stream, parts]) => [stream, Buffer.concat(parts)]));
  return { streams, dropped, types: [...new Set(messages.map((m) => m.type))] };
}

for (const [config, served] of supervisors) {
  const api = servedApi(served);
  const run = (sessionId: string, argv: string[], extra = {}) =>
    runToEnd(api, served.workspace, sessionId, argv, extra);
  const create = (sessionId: string, argv: string[], extra = {}) =>
    api.request('POST', '/api/turns', { sessionId, mode: 'ordinary', argv, cwd: served.workspace, ...extra });

  t.test(`${config}: run and wait`, async (t) => {
    const quick = await api.request('POST', '/api/turns?wait=60', {
      sessionId: 'out-wait',
      mode: 'ordinary',
      argv: ['/bin/sh', '-c', 'echo done'],
      cwd: served.workspace,
    });
    t.equal(quick.status, 201);
    t.match(turnOf(quick.body), { state: 'finished', result: { status: 'ok', exitCode: 0 } }, 'answered at its end');

    const long = await api.request('POST', '/api/turns?wait=0.2', {
      sessionId: 'out-wait',
      mode: 'ordinary',
      argv: ['/bin/sleep', '600'],
      cwd: served.workspace,
    });
    t.equal(long.status, 201);
    const id = turnOf(long.body).id;
    t.match(turnOf(long.body), { state: 'running', result: null }, 'the wait passed: the turn as it is, running');
    const read = await api.request('GET', `/api/turns/${id}?wait=0.2`);
    t.match(turnOf(read.body), { state: 'running', result: null });

    const cancelled = await api.request('POST', `/api/turns/${id}/cancel?wait=60`);
    t.equal(cancelled.status, 200);
    t.match(turnOf(cancelled.body), { state: 'finished', result: { status: 'cancelled' } }, 'cancel answers ended');
    const again = await api.request('GET', `/api/turns/${id}?wait=30`);
    t.match(turnOf(again.body), { state: 'finished' }, 'an ended turn answers at once');

    const refusals: Array<[string, string]> = [
      ['wait=0', 'wait'],
      ['wait=301', 'wait'],
      ['wait=abc', 'wait'],
      ['wait=1&wait=2', 'wait'],
      ['later=1', 'later'],
    ];
    for (const [query, field] of refusals) {
      const refused = await api.request('GET', `/api/turns/${id}?${query}`);
      t.match(refused, { status: 400, body: { code: 'invalid_request', field } }, query);
      const create = await api.request('POST', `/api/turns?${query}`, {
        sessionId: 'out-wait',
        mode: 'ordinary',
        argv: ['/bin/true'],
        cwd: served.workspace,
      });
      t.match(create, { status: 400, body: { field } }, `create refuses ${query} before any turn`);
    }
    const listed = await api.request('GET', '/api/turns?session=out-wait');
    t.equal((listed.body as { turns: unknown[] }).turns.length, 2, 'no refused create started a turn');
  });

  t.test(`${config}: 3,000,000 bytes of stdout whole over HTTP and over a late attach`, async (t) => {
    const script = seqBytes(3_000_000);
    const want = expected(script);
    t.equal(want.length, 3_000_000);
    const turn = await run('out-big', ['/bin/sh', '-c', script]);
    t.same(turn.result?.output, { stdout: { written: 3_000_000, dropped: 0 }, stderr: { written: 0, dropped: 0 } });

    const read = await api.bytes('GET', `/api/turns/${turn.id}/output?stream=stdout`);
    t.equal(read.status, 200);
    t.equal(read.headers['content-type'], 'application/octet-stream');
    t.same(outputHeaders(read.headers), { written: 3_000_000, dropped: 0, complete: 'true' });
    t.ok(read.data.equals(want), 'every byte, in order');
    const byDefault = await api.bytes('GET', `/api/turns/${turn.id}/output`);
    t.ok(byDefault.data.equals(want), 'the default stream is stdout');

    const from = await api.bytes('GET', `/api/turns/${turn.id}/output?stream=stdout&offset=1234567`);
    t.ok(from.data.equals(want.subarray(1_234_567)), 'an offset read answers from there');
    const atEnd = await api.bytes('GET', `/api/turns/${turn.id}/output?offset=3000000`);
    t.equal(atEnd.data.length, 0, 'at the end: nothing, not an error');
    const beyond = await api.request('GET', `/api/turns/${turn.id}/output?offset=3000001`);
    t.match(beyond, { status: 400, body: { field: 'offset', error: /^offset: beyond the 3000000 bytes kept/ } });
    const noPty = await api.request('GET', `/api/turns/${turn.id}/output?stream=pty`);
    t.match(noPty, { status: 400, body: { field: 'stream' } }, 'a pipe turn has no pty stream');
    const badStream = await api.request('GET', `/api/turns/${turn.id}/output?stream=fd3`);
    t.match(badStream, { status: 400, body: { field: 'stream' } });

    const late = await api.attach(turn.id);
    t.teardown(() => late.close());
    t.ok(await late.waitFor((m) => m.type === 'exit', 60_000), 'the exit arrives');
    const got = collected(late.messages);
    t.ok(got.streams['stdout']?.equals(want), 'a late attach replays every byte');
    t.same(got.types, ['output', 'exit'], 'nothing dropped, the exit last');
    t.equal(late.messages.at(-1)?.type, 'exit');

    const resumed = await api.attach(turn.id, 'offset=2999990');
    t.teardown(() => resumed.close());
    await resumed.waitFor((m) => m.type === 'exit');
    t.ok(collected(resumed.messages).streams['stdout']?.equals(want.subarray(2_999_990)), 'an attach from an offset');
    await t.rejects(api.attach(turn.id, 'offset=3000001'), /HTTP 400/, 'an attach offset past the kept bytes');
  });

  t.test(`${config}: while it runs: HTTP reads what is there, an attach replays then follows live`, async (t) => {
    // The first half, then a line of input, then the second half: the attach comes in between.
    const script = `${seqBytes(3_000_000)} > /tmp/all; head -c 1500000 /tmp/all; read go; tail -c +1500001 /tmp/all`;
    const want = expected(seqBytes(3_000_000));
    const created = await create('out-live', ['/bin/sh', '-c', script]);
    t.equal(created.status, 201);
    const id = turnOf(created.body).id;
    // Polled over HTTP until the first half is there (bounded against a hang, not a timing:
    // the turn then waits for its input, so the count stops there).
    let written = 0;
    for (let tries = 0; written < 1_500_000 && tries < 15_000; tries++) {
      written = outputHeaders((await api.bytes('GET', `/api/turns/${id}/output`)).headers).written;
      if (written < 1_500_000) await new Promise((resolve) => setTimeout(resolve, 20));
    }
    t.equal(written, 1_500_000, 'the first half is written');
    const running = await api.bytes('GET', `/api/turns/${id}/output`);
    t.same(outputHeaders(running.headers), { written: 1_500_000, dropped: 0, complete: 'false' });
    t.ok(running.data.equals(want.subarray(0, 1_500_000)), 'a running turn answers what is there now');

    const attached = await api.attach(id);
    t.teardown(() => attached.close());
    t.ok(
      await attached.waitFor(() => (collected(attached.messages).streams['stdout']?.length ?? 0) === 1_500_000),
      'the replay',
    );
    attached.send({ type: 'input', data: Buffer.from('go\n').toString('base64') });
    t.ok(await attached.waitFor((m) => m.type === 'exit', 60_000));
    t.ok(collected(attached.messages).streams['stdout']?.equals(want), 'replay then live: no gap, no repeat');
    const done = await api.request('GET', `/api/turns/${id}?wait=60`);
    t.same(turnOf(done.body).result?.output?.['stdout'], { written: 3_000_000, dropped: 0 });
  });

  t.test(`${config}: stdout and stderr apart`, async (t) => {
    const out = seqBytes(700_000);
    const err = seqBytes(400_000, 500_000);
    const turn = await run('out-apart', ['/bin/sh', '-c', `${err} >&2 & ${out}; wait`]);
    t.same(turn.result?.output, { stdout: { written: 700_000, dropped: 0 }, stderr: { written: 400_000, dropped: 0 } });
    const stdout = await api.bytes('GET', `/api/turns/${turn.id}/output?stream=stdout`);
    const stderr = await api.bytes('GET', `/api/turns/${turn.id}/output?stream=stderr`);
    t.ok(stdout.data.equals(expected(out)), 'stdout alone');
    t.ok(stderr.data.equals(expected(err)), 'stderr alone');
    const attached = await api.attach(turn.id, 'stderrOffset=399000');
    t.teardown(() => attached.close());
    await attached.waitFor((m) => m.type === 'exit');
    const got = collected(attached.messages);
    t.ok(got.streams['stdout']?.equals(expected(out)));
    t.ok(got.streams['stderr']?.equals(expected(err).subarray(399_000)), 'stderrOffset starts stderr there');
  });

  t.test(`${config}: the retention cap keeps the first bytes and counts the rest as dropped`, async (t) => {
    const script = seqBytes(4_000_000);
    const want = expected(script);
    const turn = await run('out-cap', ['/bin/sh', '-c', script]);
    t.same(turn.result?.output?.['stdout'], { written: 4_000_000, dropped: 500_000 });
    const read = await api.bytes('GET', `/api/turns/${turn.id}/output?stream=stdout`);
    t.same(outputHeaders(read.headers), { written: 4_000_000, dropped: 500_000, complete: 'true' });
    t.ok(read.data.equals(want.subarray(0, RETAIN)), 'the first 3,500,000 bytes');
    const file = path.join(served.dataDir, 'output', turn.id, 'stdout');
    t.equal(fs.statSync(file).size, RETAIN, 'the file stops at the cap');

    const late = await api.attach(turn.id);
    t.teardown(() => late.close());
    await late.waitFor((m) => m.type === 'exit', 60_000);
    const got = collected(late.messages);
    t.ok(got.streams['stdout']?.equals(want.subarray(0, RETAIN)));
    t.same(got.dropped, { stdout: 500_000 }, 'the drop is a message, never a silent cut');
    t.same(
      late.messages.slice(-2).map((m) => m.type),
      ['dropped', 'exit'],
    );

    // A client attached while the bytes are written gets them all: the cap bounds what is kept.
    const created = await create('out-cap', ['/bin/sh', '-c', `read go; ${script}`]);
    const id = turnOf(created.body).id;
    const live = await api.attach(id);
    t.teardown(() => live.close());
    live.send({ type: 'input', data: Buffer.from('go\n').toString('base64') });
    t.ok(await live.waitFor((m) => m.type === 'exit', 60_000));
    const all = collected(live.messages);
    t.ok(all.streams['stdout']?.equals(want), 'live: every byte, past the cap too');
    t.same(all.dropped, {}, 'nothing was missed live');
    const kept = await api.bytes('GET', `/api/turns/${id}/output`);
    t.same(outputHeaders(kept.headers), { written: 4_000_000, dropped: 500_000, complete: 'true' });
    t.ok(kept.data.equals(want.subarray(0, RETAIN)), 'and still only the cap kept');
  });

  t.test(`${config}: a terminal turn's output is its pty stream`, async (t) => {
    const turn = await run('out-tty', ['/bin/sh', '-c', 'printf tty-output'], { tty: { cols: 80, rows: 24 } });
    t.same(Object.keys(turn.result?.output ?? {}), ['pty']);
    const read = await api.bytes('GET', `/api/turns/${turn.id}/output?stream=pty`);
    t.match(read.data.toString(), /tty-output/);
    const noStdout = await api.request('GET', `/api/turns/${turn.id}/output?stream=stdout`);
    t.match(noStdout, { status: 400, body: { field: 'stream' } });
  });

  t.test(`${config}: the files are the supervisor's own and go with the session`, async (t) => {
    const turn = await run('out-delete', ['/bin/sh', '-c', 'echo kept; echo also >&2']);
    const dir = path.join(served.dataDir, 'output', turn.id);
    const stat = fs.statSync(dir);
    t.equal(stat.mode & 0o777, 0o700);
    t.equal(stat.uid, served.uid, 'owned by the supervisor');
    t.equal(fs.statSync(path.dirname(dir)).mode & 0o777, 0o700);
    for (const stream of ['stdout', 'stderr']) t.equal(fs.statSync(path.join(dir, stream)).mode & 0o777, 0o600);
    t.equal(fs.readFileSync(path.join(dir, 'stdout'), 'utf8'), 'kept\n');

    const deleted = await api.request('DELETE', '/api/sessions/out-delete');
    t.equal(deleted.status, 200);
    t.notOk(fs.existsSync(dir), 'the output is removed with the session');
    const gone = await api.request('GET', `/api/turns/${turn.id}/output`);
    t.equal(gone.status, 404);
  });
}
