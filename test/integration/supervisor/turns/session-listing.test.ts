/**
 * What a served supervisor tells about what ran: `GET /api/sessions` pages sessions with their
 * counts and activity, `GET /api/governance/events?order=desc` pages events newest first, and a
 * turn's record says what ran (argv, cwd, env names, limits, timeout, tty) without an env value.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { stopTapInjectingIntoChildren } from '../../../support/no-tap-inject.js';
import { servedApi } from '../../../support/served-api.js';
import { startSupervisor } from '../../../support/served-supervisor.js';
import { REPO_ROOT } from '../../../support/turn-harness.js';
import type { EventsPage, SessionList, TurnAnswer } from '../../../../api/schema/index.js';

stopTapInjectingIntoChildren();

const served = await startSupervisor({ name: 'session-listing' });
t.teardown(() => served.stop());
const api = servedApi(served);

/** `turnhost session list --config <the served config> ...`: a subcommand takes its options after it. */
function sessionList(args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(
    process.execPath,
    [path.join(REPO_ROOT, 'dist/supervisor/cli/main.js'), 'session', 'list', '--config', served.configPath, ...args],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

async function finishedTurn(sessionId: string, extra: Record<string, unknown> = {}): Promise<string> {
  const created = await api.createTurn(sessionId, ['/bin/true'], extra);
  if (created.status !== 201) throw new Error(JSON.stringify(created.body));
  const id = (created.body as TurnAnswer).turn.id;
  const attached = await api.attach(id);
  await attached.waitFor((m) => m.type === 'exit');
  attached.close();
  return id;
}

t.test('sessions are listed with their counts and activity, most recently begun first', async (t) => {
  const counts: Array<[string, number]> = [
    ['sl-first', 2],
    ['sl-second', 1],
    ['sl-third', 3],
  ];
  for (const [session, turns] of counts) for (let i = 0; i < turns; i++) await finishedTurn(session);

  const seen: SessionList['sessions'] = [];
  let after: string | null = null;
  let pages = 0;
  do {
    const answer = await api.request('GET', `/api/sessions?limit=2${after === null ? '' : `&after=${after}`}`);
    t.equal(answer.status, 200, JSON.stringify(answer.body));
    const page = answer.body as SessionList;
    t.ok(page.sessions.length <= 2);
    seen.push(...page.sessions);
    after = page.nextAfter;
    pages += 1;
  } while (after !== null && pages < 10);
  t.equal(pages, 2, '3 sessions in pages of 2');
  t.same(
    seen.map((s) => s.id),
    ['sl-third', 'sl-second', 'sl-first'],
    'each once, the most recently begun first',
  );
  for (const [session, turns] of counts) {
    const listed = seen.find((s) => s.id === session)!;
    t.equal(listed.turns, turns, `${session}: its turns`);
    t.equal(listed.workspaces, 0);
    t.ok(listed.events >= turns, `${session}: its events (${listed.events})`);
    t.ok(listed.firstActivity < listed.lastActivity, `${session}: first before last activity`);
    const records = (await api.request('GET', `/api/turns?session=${session}`)).body as { turns: TurnAnswer['turn'][] };
    const lastEnd = records.turns
      .map((turn) => turn.endedAt!)
      .sort()
      .at(-1)!;
    t.ok(listed.lastActivity >= lastEnd, `${session}: last activity is at or after its last turn's end`);
  }
  const one = (await api.request('GET', '/api/sessions?limit=3')).body as SessionList;
  t.equal(one.nextAfter, null, 'a page that holds the rest is the last');
});

t.test('bad session list parameters are refused naming them', async (t) => {
  const cases: Array<[string, string]> = [
    ['after=!!', 'after'],
    [`after=${Buffer.from('["x"]').toString('base64url')}`, 'after'],
    ['limit=0', 'limit'],
    ['limit=1001', 'limit'],
    ['bogus=1', 'bogus'],
  ];
  for (const [query, field] of cases) {
    const answer = await api.request('GET', `/api/sessions?${query}`);
    t.equal(answer.status, 400, query);
    t.match(answer.body, { code: 'invalid_request', field }, query);
  }
});

t.test('events page newest first with before, and each order refuses the other cursor', async (t) => {
  await finishedTurn('sl-events');
  const ascending = (await api.request('GET', '/api/governance/events?limit=1000')).body as EventsPage;
  const ids = ascending.events.map((e) => e.id);
  t.ok(ids.length > 5, `${ids.length} events stored`);
  const newest = ids.at(-1)!;
  // Anything written from here on is newer than the first page: page from the newest id seen.
  const seen: number[] = [];
  let before: number | null = newest + 1;
  let pages = 0;
  do {
    const answer = await api.request('GET', `/api/governance/events?order=desc&limit=4&before=${before}`);
    t.equal(answer.status, 200, JSON.stringify(answer.body));
    const page = answer.body as EventsPage;
    t.equal(page.nextAfter, null, 'no ascending cursor on a descending page');
    seen.push(...page.events.map((e) => e.id));
    before = page.nextBefore;
    pages += 1;
  } while (before !== null && pages < 1000);
  t.same(seen, [...ids].reverse(), 'every event once, newest first');

  const first = (await api.request('GET', '/api/governance/events?order=desc&limit=1')).body as EventsPage;
  t.ok(first.events[0]!.id >= newest, 'without before: the newest event first');
  t.equal(first.nextBefore, first.events[0]!.id);
  const session = (await api.request('GET', '/api/governance/events?order=desc&session=sl-events')).body as EventsPage;
  const sessionIds = session.events.map((e) => e.id);
  t.same(
    sessionIds,
    [...sessionIds].sort((a, b) => b - a),
    'a filtered page is newest first too',
  );
  t.ok(session.events.every((e) => e.sessionId === 'sl-events'));

  const refusals: Array<[string, string]> = [
    ['order=desc&after=3', 'after'],
    ['before=3', 'before'],
    ['order=asc&before=3', 'before'],
    ['order=sideways', 'order'],
    ['order=desc&before=x', 'before'],
  ];
  for (const [query, field] of refusals) {
    const answer = await api.request('GET', `/api/governance/events?${query}`);
    t.equal(answer.status, 400, query);
    t.match(answer.body, { code: 'invalid_request', field }, query);
  }
});

t.test("a tty turn's record says what ran, and no env value is stored", async (t) => {
  const secret = `record-secret-${process.pid}`;
  const id = await finishedTurn('sl-record', {
    argv: ['/bin/sh', '-c', 'true'],
    tty: { cols: 90, rows: 30 },
    env: { ZED: secret, ALPHA: secret },
    timeoutSeconds: 42,
    limits: { memory: '256M' },
  });
  const answer = (await api.request('GET', `/api/turns/${id}`)).body as TurnAnswer;
  t.match(answer.turn, {
    argv: ['/bin/sh', '-c', 'true'],
    cwd: served.workspace,
    envNames: ['ALPHA', 'ZED'],
    limits: { memory: 256 * 1024 * 1024 },
    timeoutSeconds: 42,
    tty: true,
  });
  t.notMatch(JSON.stringify(answer), secret);
  const files = ['turnhost.db', 'turnhost.db-wal'].map((name) => path.join(served.dataDir, name));
  for (const file of files.filter((f) => fs.existsSync(f)))
    t.notOk(fs.readFileSync(file).includes(secret), `${path.basename(file)} holds no env value`);
});

t.test('the CLI lists sessions and pages events newest first', async (t) => {
  const sessions = await sessionList(['--json', '--all', '--limit', '1']);
  t.equal(sessions.code, 0, sessions.stderr);
  const listed = JSON.parse(sessions.stdout) as SessionList;
  t.ok(
    ['sl-first', 'sl-second', 'sl-third', 'sl-record'].every((id) => listed.sessions.some((s) => s.id === id)),
    'every session, through every page',
  );
  t.equal(listed.nextAfter, null);
  const text = await sessionList([]);
  t.match(text.stdout, /^sl-first {2}turns=2 workspaces=0 events=\d+ {2}\S+ \.\. \S+$/m);

  const desc = await served.cli(['events', '--desc', '--limit', '3', '--json']);
  t.equal(desc.code, 0, desc.stderr);
  const page = JSON.parse(desc.stdout) as EventsPage;
  const ids = page.events.map((e) => e.id);
  t.same(
    ids,
    [...ids].sort((a, b) => b - a),
    'newest first',
  );
  const older = await served.cli(['events', '--desc', '--before', String(page.nextBefore), '--limit', '3', '--json']);
  t.ok(
    (JSON.parse(older.stdout) as EventsPage).events.every((e) => e.id < ids.at(-1)!),
    'the next page is older',
  );
  const refused = await served.cli(['events', '--desc', '--after', '3']);
  t.not(refused.code, 0);
  t.match(refused.stderr, /after/);
});
