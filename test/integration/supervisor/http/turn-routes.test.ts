import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { createMemoryLogger } from '../../../../core/log.js';
import { fail, ok } from '../../../../core/result.js';
import { defaultConfig } from '../../../../supervisor/config/load.js';
import { ENDED_TURN_CONTROLS, OutputFiles, outputAttachment, TurnOutput } from '../../../../supervisor/turns/output.js';
import type { TurnAttachment, TurnManager, TurnRecord, TurnResult } from '../../../../supervisor/turns/types.js';
import { validateTurnRequest } from '../../../../supervisor/turns/validate.js';
import { nextMessages, opened, startTestServer, TOKEN, upgradeRefusal } from '../../../support/app-server.js';
import { until } from '../../../support/until.js';

const RESULT: TurnResult = {
  status: 'nonzero_exit',
  exitCode: 3,
  signal: null,
  durationMs: 5,
  usage: {
    userCpuUsec: 1,
    systemCpuUsec: 1,
    maxRssKiB: 1,
    cgroupCpuUsec: null,
    memoryPeakBytes: null,
    pidsPeak: null,
    oomKills: null,
  },
  limitHits: [],
};

/**
 * A turn manager that validates with the real validator and echoes input back as output, kept
 * by the real output store in a directory of its own.
 */
function fakeTurns(): {
  turns: TurnManager;
  inputs: string[];
  resizes: Array<[number, number]>;
  signals: string[];
  finish(id: string): void;
  mode: { next: string | null };
  /** Every wait the routes started, and whether it was aborted. */
  waits: AbortSignal[];
} {
  const config = defaultConfig({ installed: false, cwd: '/work' });
  config.turns.workspaceRoots = ['/work'];
  const records = new Map<string, TurnRecord>();
  const outputDir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-routes-output-'));
  t.teardown(() => fs.rmSync(outputDir, { recursive: true, force: true }));
  const files = new OutputFiles(outputDir);
  const channels = new Map<string, TurnOutput>();
  const ended = new Map<string, () => void>();
  const waits: AbortSignal[] = [];
  const inputs: string[] = [];
  const resizes: Array<[number, number]> = [];
  const signals: string[] = [];
  const mode = { next: null as string | null };
  const finish = (id: string): void => {
    const record = records.get(id)!;
    record.state = 'finished';
    record.result = RESULT;
    channels.get(id)!.end(RESULT);
    ended.get(id)?.();
  };
  const turns: TurnManager = {
    async create(body) {
      if (mode.next === 'unsupported') return fail('worker_host_unsupported', 'cgroup v2 delegation is missing');
      if (mode.next === 'capacity')
        return fail('capacity_exhausted', '4 turns are running; the limit is 4 (turns.maxConcurrent)');
      const validated = validateTurnRequest(body, config);
      if (!validated.ok) return validated;
      const id = validated.request.turnId ?? `turn_${records.size + 1}`;
      if (records.has(id)) return { ...fail('conflict', `turn ${id} already exists`), field: 'turnId' };
      const record: TurnRecord = {
        id,
        sessionId: validated.request.sessionId,
        mode: validated.request.mode,
        profile: 'governed',
        state: 'running',
        identity: 'shared_uid',
        workerUid: null,
        createdAt: new Date().toISOString(),
        endedAt: null,
        tty: validated.request.tty !== undefined,
        result: null,
        argv: validated.request.argv,
        cwd: validated.request.cwd,
        envNames: Object.keys(validated.request.env ?? {}).sort(),
        limits: {},
        timeoutSeconds: validated.request.timeoutSeconds ?? 600,
      };
      records.set(id, record);
      const channel = TurnOutput.open(files, id, record.tty, 1024 * 1024, createMemoryLogger().logger);
      channel.push('stdout', Buffer.from('before attach\n'));
      channels.set(id, channel);
      return ok({ turn: record });
    },
    get: (id) => records.get(id),
    list: (filter) =>
      [...records.values()].filter((r) => filter?.sessionId === undefined || r.sessionId === filter.sessionId),
    page: (query) =>
      ok({
        turns: [...records.values()].filter((r) => query.sessionId === undefined || r.sessionId === query.sessionId),
        nextAfter: null,
      }),
    deleteSession: async (sessionId) => fail('not_found', `no session ${sessionId}`),
    load: () => ({ turnsRunning: 0, maxTurns: 4, draining: false }),
    setDraining: () => false,
    pruneSessions: () => ok({ deleted: [] }),
    listSessions: () => ok({ sessions: [], nextAfter: null }),
    cancel(id) {
      const record = records.get(id);
      if (!record) return fail('not_found', `no turn ${id}`);
      if (record.state === 'finished') return fail('not_running', `turn ${id} has already finished`);
      finish(id);
      return ok({ turn: record });
    },
    attach(id, offsets = {}) {
      const channel = channels.get(id);
      if (!channel) return fail('not_found', `no turn ${id}`);
      const attachment: TurnAttachment = outputAttachment(channel, offsets, {
        ...ENDED_TURN_CONTROLS,
        write: (data) => {
          inputs.push(data.toString());
          channel.push('stderr', data);
          return ok({});
        },
        endInput: () => ok({}),
        resize: (cols, rows) => void resizes.push([cols, rows]),
        signal: (signal) => void signals.push(signal),
      });
      return ok({ attachment });
    },
    output(id) {
      const channel = channels.get(id);
      return channel ? ok({ output: channel }) : fail('not_found', `no turn ${id}`);
    },
    waitForEnd: (id, seconds, signal) =>
      new Promise<void>((resolve) => {
        waits.push(signal);
        if (records.get(id)?.state !== 'running') return resolve();
        const timer = setTimeout(resolve, seconds * 1000);
        signal.addEventListener('abort', () => (clearTimeout(timer), resolve()));
        ended.set(id, () => (clearTimeout(timer), resolve()));
      }),
    roots: (id) => fail('not_found', `no turn ${id}`),
    wait: async () => undefined,
    preparedWorkers: () => ({ ready: 0, starting: 0 }),
    egressRelay: () => null,
    close: async () => undefined,
  };
  return { turns, inputs, resizes, signals, finish, mode, waits };
}

const body = (extra: Record<string, unknown> = {}) =>
  JSON.stringify({ sessionId: 's1', mode: 'ordinary', argv: ['/bin/true'], cwd: '/work', ...extra });
const json = { 'content-type': 'application/json' };

t.test('turn routes exist only with a turn manager', async (t) => {
  const s = await startTestServer();
  t.teardown(() => s.close());
  t.equal((await s.request('POST', '/api/turns', { body: body(), headers: json })).status, 404);
  t.equal((await s.request('GET', '/api/turns')).status, 404);
});

t.test('create, read, list, cancel and their errors', async (t) => {
  const fake = fakeTurns();
  const s = await startTestServer({ turns: fake.turns });
  t.teardown(() => s.close());

  const created = await s.request('POST', '/api/turns', { body: body({ turnId: 'one' }), headers: json });
  t.equal(created.status, 201);
  t.equal(created.headers['location'], '/api/turns/one', 'a 201 names where the turn is read');
  t.match(created.json.turn, { id: 'one', sessionId: 's1', state: 'running', mode: 'ordinary' });

  const invalid: Array<[Record<string, unknown>, string]> = [
    [{ sessionId: '' }, 'sessionId'],
    [{ mode: 'fast' }, 'mode'],
    [{ argv: [] }, 'argv'],
    [{ argv: ['/bin/true', 5] }, 'argv[1]'],
    [{ cwd: 'relative' }, 'cwd'],
    [{ cwd: '/elsewhere' }, 'cwd'],
    [{ env: { A: 1 } }, 'env.A'],
    [{ tty: { cols: 0, rows: 24 } }, 'tty.cols'],
    [{ timeoutSeconds: -1 }, 'timeoutSeconds'],
    [{ egressAllow: [1] }, 'egressAllow'],
    [{ limits: { disk: 1 } }, 'limits.disk'],
    [{ surprise: true }, 'surprise'],
  ];
  for (const [extra, field] of invalid) {
    const res = await s.request('POST', '/api/turns', { body: body(extra), headers: json });
    t.equal(res.status, 400, field);
    t.equal(res.json.code, 'invalid_request');
    t.equal(res.json.field, field);
    t.match(res.json.error, new RegExp(`^${field.replace(/[[\].]/g, '\\$&')}: `));
  }
  const several = await s.request('POST', '/api/turns', {
    body: body({ surprise: 1, mode: 'fast', argv: ['/bin/true', 5], cwd: '/elsewhere', tty: { cols: 0, rows: 0 } }),
    headers: json,
  });
  t.equal(several.status, 400);
  t.equal(several.json.field, 'surprise', 'the first refusal stays in field and error');
  t.match(several.json.error, /^surprise: unknown field$/);
  t.same(
    several.json.errors.map((e: { field: string }) => e.field),
    ['surprise', 'mode', 'argv[1]', 'cwd', 'tty.cols', 'tty.rows'],
    'every refused field is reported, in the body order',
  );
  t.match(several.json.errors[3], { field: 'cwd', detail: /workspace root/ });
  const notJson = await s.request('POST', '/api/turns', { body: '{bad', headers: json });
  t.same(notJson.json, { error: 'body: not valid JSON', code: 'invalid_request' });
  const noType = await s.request('POST', '/api/turns', { body: body() });
  t.equal(noType.status, 400);
  t.match(noType.json.error, /^body: /);
  const array = await s.request('POST', '/api/turns', { body: '[1]', headers: json });
  t.match(array.json, { code: 'invalid_request', error: /^body: / });
  const big = await s.request('POST', '/api/turns', {
    body: Buffer.alloc(2 * 1024 * 1024, ' '),
    headers: { ...json, 'transfer-encoding': 'chunked' },
  });
  t.equal(big.status, 413, 'a chunked body over the cap');
  t.equal(big.json.code, 'body_too_large');

  const conflict = await s.request('POST', '/api/turns', { body: body({ turnId: 'one' }), headers: json });
  t.equal(conflict.status, 409);
  t.equal(conflict.json.code, 'conflict');

  fake.mode.next = 'unsupported';
  const refused = await s.request('POST', '/api/turns', { body: body(), headers: json });
  t.equal(refused.status, 503);
  t.same(refused.json, {
    error: 'cgroup v2 delegation is missing',
    code: 'worker_host_unsupported',
    requirement: 'cgroup v2 delegation is missing',
  });
  fake.mode.next = 'capacity';
  const full = await s.request('POST', '/api/turns', { body: body(), headers: json });
  t.equal(full.status, 429);
  t.equal(full.json.code, 'capacity_exhausted');
  t.equal(full.headers['retry-after'], '1');
  fake.mode.next = null;

  await s.request('POST', '/api/turns', { body: body({ sessionId: 's2', turnId: 'two' }), headers: json });
  t.same(
    (await s.request('GET', '/api/turns')).json.turns.map((r: TurnRecord) => r.id),
    ['one', 'two'],
  );
  t.same(
    (await s.request('GET', '/api/turns?session=s2')).json.turns.map((r: TurnRecord) => r.id),
    ['two'],
  );
  t.match((await s.request('GET', '/api/turns?sesion=s2')).json, {
    code: 'invalid_request',
    error: /^sesion: unknown parameter/,
  });
  t.equal((await s.request('GET', '/api/turns/one')).json.turn.id, 'one');
  t.equal((await s.request('GET', '/api/turns/nope')).status, 404);
  t.equal((await s.request('GET', '/api/turns/..%2F..')).status, 404);
  t.equal((await s.request('DELETE', '/api/turns/one')).status, 405);

  const cancelled = await s.request('POST', '/api/turns/one/cancel');
  t.equal(cancelled.status, 200);
  t.equal(cancelled.json.turn.state, 'finished');
  const again = await s.request('POST', '/api/turns/one/cancel');
  t.equal(again.status, 409);
  t.equal(again.json.code, 'not_running');
  t.equal((await s.request('POST', '/api/turns/zzz/cancel')).status, 404);
  t.equal(
    (await s.request('POST', '/api/turns/two/cancel', { body: '{}', headers: json })).status,
    400,
    'cancel takes no body',
  );
  t.equal((await s.request('GET', '/api/turns/two/cancel')).status, 405);
});

t.test('attach: backlog, input, resize, signal, exit record, auth', async (t) => {
  const fake = fakeTurns();
  const s = await startTestServer({ turns: fake.turns });
  t.teardown(() => s.close());
  await s.request('POST', '/api/turns', { body: body({ turnId: 'att' }), headers: json });

  t.equal((await upgradeRefusal(s.ws('/api/turns/att/attach', null))).status, 401);
  t.equal((await upgradeRefusal(s.ws('/api/turns/nope/attach'))).status, 404);
  const withQuery = await upgradeRefusal(s.ws('/api/turns/att/attach?after=3'));
  t.match(withQuery, {
    status: 400,
    json: { code: 'invalid_request', field: 'after', errors: [{ field: 'after', detail: 'unknown parameter' }] },
  });

  const ws = s.ws('/api/turns/att/attach');
  const first = nextMessages(ws, 1);
  await opened(ws);
  const [backlog] = await first;
  t.same(backlog, { type: 'output', stream: 'stdout', data: Buffer.from('before attach\n').toString('base64') });

  const echoed = nextMessages(ws, 1);
  ws.send(JSON.stringify({ type: 'input', data: Buffer.from('hello').toString('base64') }));
  const [echo] = await echoed;
  t.equal(Buffer.from(echo.data, 'base64').toString(), 'hello');
  t.equal(echo.stream, 'stderr');
  t.same(fake.inputs, ['hello']);

  const errors = nextMessages(ws, 8, (m) => m.type === 'error');
  ws.send(JSON.stringify({ type: 'resize', cols: 100, rows: 30 }));
  ws.send(JSON.stringify({ type: 'signal', signal: 'SIGINT' }));
  ws.send(JSON.stringify({ type: 'resize', cols: 0, rows: 30 }));
  ws.send(JSON.stringify({ type: 'signal', signal: 'SIGKILL' }));
  ws.send('not json');
  ws.send(JSON.stringify({ type: 'teleport' }));
  ws.send(JSON.stringify({ type: 'resize', cols: 0, rows: 5000, extra: true }));
  ws.send(JSON.stringify({ type: 'input', data: 'not base64!' }));
  ws.send(JSON.stringify({ type: 'eof', data: '' }));
  ws.send(Buffer.from('binary'), { binary: true });
  const errs = await errors;
  t.same(
    errs.map((e) => e.error.split(':')[0]),
    ['cols', 'signal', 'message', 'type', 'extra', 'data', 'data', 'message'],
  );
  t.same(errs[2], {
    type: 'error',
    code: 'invalid_request',
    error: 'message: not valid JSON',
    field: 'message',
    errors: [{ field: 'message', detail: 'not valid JSON' }],
  });
  // Every refused field of one message, unknown fields first, as an HTTP refusal lists them.
  t.same(errs[4]!.errors, [
    { field: 'extra', detail: 'unknown field' },
    { field: 'cols', detail: 'expected an integer 1-1000' },
    { field: 'rows', detail: 'expected an integer 1-1000' },
  ]);
  t.same(errs[5]!.errors, [{ field: 'data', detail: 'expected base64 text' }]);
  t.same(errs[6]!.errors, [{ field: 'data', detail: 'unknown field' }]);
  t.same(fake.resizes, [[100, 30]]);
  t.same(fake.signals, ['SIGINT']);

  const exit = nextMessages(ws, 1, (m) => m.type === 'exit');
  const closed = new Promise<number>((r) => ws.once('close', (code) => r(code)));
  fake.finish('att');
  t.same((await exit)[0], { type: 'exit', result: RESULT });
  t.equal(await closed, 1000, 'normal close after the exit record');

  const late = s.ws('/api/turns/att/attach');
  const replay = nextMessages(late, 3);
  const lateMessages = await replay;
  t.same(
    lateMessages.map((m) => m.type),
    ['output', 'output', 'exit'],
    'a finished turn replays its backlog and exit',
  );
});

t.test('a wait ends when its client goes away, and does not hold up shutdown', async (t) => {
  const fake = fakeTurns();
  const s = await startTestServer({ turns: fake.turns });
  await s.request('POST', '/api/turns', { body: body({ turnId: 'long' }), headers: json });
  const port = s.server.tcp!.port;
  const leaving = http.request({
    host: '127.0.0.1',
    port,
    path: '/api/turns/long?wait=300',
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  leaving.on('error', () => undefined);
  leaving.end();
  t.ok(await until(() => fake.waits.length === 1), 'the route waits');
  t.notOk(fake.waits[0]!.aborted);
  leaving.destroy();
  t.ok(await until(() => fake.waits[0]!.aborted), 'the disconnect aborted the wait');

  const staying = http.request({
    host: '127.0.0.1',
    port,
    path: '/api/turns/long/cancel?wait=300',
    method: 'POST',
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  staying.on('error', () => undefined);
  staying.end();
  t.ok(await until(() => fake.waits.length === 2));
  // The fake ends the turn on cancel: the wait answered at once with the ended record.
  t.ok(fake.waits[1]);

  const third = http.request({
    host: '127.0.0.1',
    port,
    path: '/api/turns/att2?wait=300',
    headers: { authorization: `Bearer ${TOKEN}` },
  });
  third.on('error', () => undefined);
  await s.request('POST', '/api/turns', { body: body({ turnId: 'att2' }), headers: json });
  third.end();
  t.ok(await until(() => fake.waits.length === 3));
  await s.close();
  // The server's close resolves as it destroys the connections; their close events come next.
  t.ok(await until(() => fake.waits[2]!.aborted), 'closing the server ended the pending wait');
});
