import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import Database from 'better-sqlite3';
import t from 'tap';
import { CodedError } from '../../../../core/result.js';
import { openDatabase } from '../../../../supervisor/db/open.js';
import { MIGRATIONS } from '../../../../supervisor/db/migrations.js';
import { EVENT_KINDS, type EventKind } from '../../../../supervisor/events/kinds.js';
import { eventQuerySql } from '../../../../supervisor/events/store.js';
import type { GovernanceEvent } from '../../../../supervisor/events/types.js';
import { denial, storeIn, tempDir } from './fixtures/helpers.js';

const here = path.dirname(fileURLToPath(import.meta.url));

function storedIds(result: ReturnType<ReturnType<typeof storeIn>['store']['append']>): number[] {
  if (!result.ok || result.stored !== 'database')
    throw new Error(`expected a database write: ${JSON.stringify(result)}`);
  return result.ids;
}

function page(
  store: ReturnType<typeof storeIn>['store'],
  query: Parameters<ReturnType<typeof storeIn>['store']['query']>[0],
) {
  const result = store.query(query);
  if (!result.ok) throw new Error(`query failed: ${result.detail}`);
  return result;
}

t.test('database: 0600 file, WAL, migrations applied once, turns table present', async (t) => {
  const dir = tempDir(t);
  const dbPath = path.join(dir, 'sub', 'events.db');
  const first = openDatabase(dbPath);
  t.ok(first.ok);
  if (!first.ok) return;
  t.equal(fs.statSync(dbPath).mode & 0o777, 0o600);
  t.equal(first.db.pragma('journal_mode', { simple: true }), 'wal');
  t.equal(first.db.pragma('foreign_keys', { simple: true }), 1);
  t.equal(first.db.pragma('user_version', { simple: true }), MIGRATIONS.length);
  const tables = first.db.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").pluck().all();
  t.ok(tables.includes('events') && tables.includes('turns'));
  first.db
    .prepare(
      "INSERT INTO turns (id, session_id, mode, profile, state, created_at) VALUES ('t', 's', 'ordinary', 'governed', 'running', 'now')",
    )
    .run();
  first.db.close();
  fs.chmodSync(dbPath, 0o644);
  const again = openDatabase(dbPath);
  t.ok(again.ok, 'reopening applies nothing twice');
  if (again.ok) {
    t.equal(again.db.prepare('SELECT tty FROM turns').pluck().get(), 0);
    again.db.pragma('user_version = 99');
    again.db.close();
  }
  t.equal(fs.statSync(dbPath).mode & 0o777, 0o600, 'a widened file is tightened');
  const newer = openDatabase(dbPath);
  t.notOk(newer.ok, 'a schema newer than this build is refused');
  if (!newer.ok) t.match(newer.detail, 'newer than this build');
});

t.test('appends are stored in id order with the full envelope', async (t) => {
  const { store } = storeIn(tempDir(t));
  const a = storedIds(store.append(denial({ at: '2026-01-02T03:04:05+01:00' })));
  const b = storedIds(
    store.appendBatch([denial({ sessionId: null, turnId: null }), denial({ model: 'm1', profile: 'strict' })]),
  );
  t.equal(a.length, 1);
  t.same(b, [a[0]! + 1, a[0]! + 2]);
  const { events, nextAfter } = page(store, {});
  t.equal(nextAfter, null);
  t.same(
    events.map((e) => e.id),
    [...a, ...b],
  );
  t.same(events[0], {
    id: a[0],
    sessionId: 's1',
    turnId: 't1',
    at: '2026-01-02T02:04:05.000Z',
    kind: 'egress_denial',
    schemaVersion: 1,
    actor: 'server',
    model: null,
    profile: 'governed',
    payload: { host: 'example.test', port: 443, reason: 'not_allowed' },
  });
  t.match(events[1]!.at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/, 'at defaults to now');
  t.equal(events[2]!.model, 'm1');
  store.close();
});

t.test('invalid events are refused, naming the kind and field; a batch is all-or-nothing', async (t) => {
  const { store } = storeIn(tempDir(t));
  const cases: Array<[string, ReturnType<typeof denial>, RegExp]> = [
    ['unknown kind', denial({ kind: 'nope' }), /kind 'nope'/],
    ['payload field', denial({ payload: { host: 'x', port: 'a', reason: 'r' } }), /egress_denial: payload\.port/],
    ['missing field', denial({ payload: { host: 'x', port: 1 } }), /payload\.reason is required/],
    ['actor', denial({ actor: 'root' as never }), /egress_denial: actor/],
    ['profile', denial({ profile: 'loose' as never }), /profile/],
    ['sessionId', denial({ sessionId: '' }), /sessionId/],
    ['at', denial({ at: 'yesterday' }), /\bat must be/],
    ['payload type', denial({ payload: [] as never }), /payload must be an object/],
  ];
  for (const [name, input, detail] of cases) {
    const result = store.append(input);
    t.equal(result.ok ? 'ok' : result.reason, 'invalid_event', name);
    if (!result.ok) t.match(result.detail, detail, name);
  }
  const batch = store.appendBatch([denial(), denial({ kind: 'worker_exit' })]);
  t.equal(batch.ok ? 'ok' : batch.reason, 'invalid_event');
  if (!batch.ok) t.match(batch.detail, /^event 1: worker_exit: payload\.status is required/);
  t.equal(store.appendBatch([]).ok, false, 'empty batch refused');
  t.same(page(store, {}).events, [], 'nothing from the refused batch was stored');
  store.close();
});

t.test('every filter, alone and combined, with after', async (t) => {
  const { store } = storeIn(tempDir(t));
  const inputs = [
    denial({ sessionId: 'A', turnId: 'A1' }),
    denial({ sessionId: 'A', turnId: 'A2', kind: 'host_write_refused', payload: { path: '/x', reason: 'r' } }),
    denial({ sessionId: 'B', turnId: 'B1' }),
    denial({ sessionId: 'A', turnId: 'A1', kind: 'host_write_refused', payload: { path: '/y', reason: 'r' } }),
    denial({ sessionId: null, turnId: null }),
  ];
  const ids = storedIds(store.appendBatch(inputs));
  const idsOf = (q: object) => page(store, q).events.map((e) => e.id);
  t.same(idsOf({ session: 'A' }), [ids[0], ids[1], ids[3]]);
  t.same(idsOf({ turn: 'A1' }), [ids[0], ids[3]]);
  t.same(idsOf({ kind: 'host_write_refused' }), [ids[1], ids[3]]);
  t.same(idsOf({ session: 'A', kind: 'egress_denial' }), [ids[0]]);
  t.same(idsOf({ session: 'A', turn: 'A1', kind: 'host_write_refused' }), [ids[3]]);
  t.same(idsOf({ after: ids[2] }), [ids[3], ids[4]]);
  t.same(idsOf({ session: 'A', after: ids[1] }), [ids[3]]);
  t.same(idsOf({ session: 'nobody' }), []);
  store.close();
});

t.test('paging across nextAfter, default limit and limit bounds', async (t) => {
  const { store } = storeIn(tempDir(t));
  storedIds(store.appendBatch(Array.from({ length: 1200 }, (_, i) => denial({}, `h${i}.test`))));
  const first = page(store, {});
  t.equal(first.events.length, 100, 'default limit 100');
  t.equal(first.nextAfter, first.events[99]!.id);
  const max = page(store, { limit: 1000 });
  t.equal(max.events.length, 1000);

  const seen: number[] = [];
  let after: number | undefined;
  let pages = 0;
  for (;;) {
    const p = page(store, { session: 's1', limit: 400, after });
    seen.push(...p.events.map((e) => e.id));
    pages++;
    if (p.nextAfter === null) break;
    after = p.nextAfter;
  }
  t.equal(pages, 4, 'an exactly full last page is followed by one empty page');
  t.equal(seen.length, 1200);
  t.same(
    seen,
    [...seen].sort((a, b) => a - b),
  );
  t.equal(new Set(seen).size, 1200);
  t.equal(page(store, { limit: 7, after: seen[1195] }).nextAfter, null, 'a short page ends paging');

  const bad: Array<[object, string]> = [
    [{ limit: 0 }, 'limit'],
    [{ limit: 1001 }, 'limit'],
    [{ limit: 2.5 }, 'limit'],
    [{ limit: '10' }, 'limit'],
    [{ after: -1 }, 'after'],
    [{ after: Number.NaN }, 'after'],
    [{ session: '' }, 'session'],
    [{ turn: 5 }, 'turn'],
    [{ kind: 'x'.repeat(300) }, 'kind'],
  ];
  for (const [query, parameter] of bad) {
    const result = store.query(query);
    t.equal(result.ok ? 'ok' : result.reason, 'invalid_query', JSON.stringify(query).slice(0, 40));
    if (!result.ok) t.match(result.detail, new RegExp(`^${parameter} `));
  }
  store.close();
});

t.test('stored events keep the schemaVersion they were written with', async (t) => {
  const dir = tempDir(t);
  const kindAt = (schemaVersion: number): EventKind => ({ ...EVENT_KINDS.get('egress_denial')!, schemaVersion });
  const v1 = storeIn(dir, { kinds: new Map([['egress_denial', kindAt(1)]]) });
  storedIds(v1.store.append(denial()));
  v1.store.close();
  const v2 = storeIn(dir, { kinds: new Map([['egress_denial', kindAt(2)]]) });
  storedIds(v2.store.append(denial()));
  t.same(
    page(v2.store, {}).events.map((e) => e.schemaVersion),
    [1, 2],
  );
  v2.store.close();
});

t.test('events of unknown kinds and unknown fields are returned untouched', async (t) => {
  const dir = tempDir(t);
  const { store } = storeIn(dir);
  storedIds(store.append(denial()));
  const newer = new Database(path.join(dir, 'events.db'));
  const payload = { future: { nested: [1, 'two'] }, flag: true };
  newer
    .prepare(
      `INSERT INTO events (session_id, turn_id, at, kind, schema_version, actor, model, profile, payload)
       VALUES ('s1', 't1', '2030-01-01T00:00:00.000Z', 'kind_from_the_future', 7, 'server', NULL, NULL, ?)`,
    )
    .run(JSON.stringify(payload));
  newer.close();
  const events = page(store, { session: 's1' }).events;
  t.equal(events.length, 2);
  t.match(events[1], { kind: 'kind_from_the_future', schemaVersion: 7, payload });
  t.same(page(store, { kind: 'kind_from_the_future' }).events.length, 1);
  store.close();
});

t.test('deleteSession removes only that session', async (t) => {
  const { store } = storeIn(tempDir(t));
  storedIds(
    store.appendBatch([
      denial({ sessionId: 'gone' }),
      denial({ sessionId: 'gone' }),
      denial({ sessionId: 'kept' }),
      denial({ sessionId: null }),
    ]),
  );
  t.equal(store.deleteSession('gone'), 2);
  t.equal(store.deleteSession('gone'), 0);
  t.same(
    page(store, {}).events.map((e) => e.sessionId),
    ['kept', null],
  );
  store.close();
});

t.test('retention prunes only unbound events older than the configured days', async (t) => {
  const { store } = storeIn(tempDir(t), { unboundRetentionDays: 7 });
  const now = new Date('2026-06-30T12:00:00.000Z');
  storedIds(
    store.appendBatch([
      denial({ sessionId: null, at: '2026-06-01T00:00:00.000Z' }, 'old-unbound'),
      denial({ sessionId: 's', at: '2026-06-01T00:00:00.000Z' }, 'old-bound'),
      denial({ sessionId: null, at: '2026-06-25T00:00:00.000Z' }, 'recent-unbound'),
    ]),
  );
  t.equal(store.pruneUnbound(now), 1);
  t.same(
    page(store, {}).events.map((e) => e.payload.host),
    ['old-bound', 'recent-unbound'],
  );
  t.equal(store.pruneUnbound(now), 0);
  store.close();
});

t.test('subscribers see committed events in id order; a throwing listener breaks nothing', async (t) => {
  const { store, lines } = storeIn(tempDir(t));
  const seen: GovernanceEvent[] = [];
  const visibleAtNotify: boolean[] = [];
  store.subscribe(() => {
    throw new Error('listener bug');
  });
  const unsubscribe = store.subscribe((event) => {
    seen.push(event);
    visibleAtNotify.push(page(store, { after: event.id - 1, limit: 1 }).events[0]?.id === event.id);
  });
  const ids = [...storedIds(store.append(denial())), ...storedIds(store.appendBatch([denial(), denial()]))];
  t.equal(store.append(denial({ kind: 'nope' })).ok, false);
  t.same(
    seen.map((e) => e.id),
    ids,
  );
  t.same(visibleAtNotify, [true, true, true], 'listeners run after commit');
  t.same(seen[0]!.payload, denial().payload);
  t.ok(lines.some((l) => l.includes('event listener threw')));
  unsubscribe();
  storedIds(store.append(denial()));
  t.equal(seen.length, 3);
  store.close();
});

t.test('a locked database sends events to the fallback log; the next open replays them', async (t) => {
  const dir = tempDir(t);
  const { store } = storeIn(dir, { busyTimeoutMs: 20 });
  storedIds(store.append(denial({}, 'before')));
  const holder = new Database(path.join(dir, 'events.db'));
  holder.exec('BEGIN EXCLUSIVE');
  const result = store.appendBatch([
    denial({ at: '2026-03-01T00:00:00.000Z' }, 'locked-1'),
    denial({ kind: 'host_write_refused', payload: { path: '/p', reason: 'r' } }),
  ]);
  t.match(result, { ok: true, stored: 'fallback' });
  t.match(store.status(), { fallbackActive: true, fallbackPendingEvents: 2, lastFallbackReason: /SQLITE_BUSY/ });
  t.equal(page(store, {}).events.length, 1, 'readers still work while a writer holds the lock');
  const log = path.join(dir, 'events.fallback.jsonl');
  t.equal(fs.readFileSync(log, 'utf8').trim().split('\n').length, 2);
  t.equal(fs.statSync(log).mode & 0o777, 0o600);
  holder.exec('ROLLBACK');
  holder.close();
  storedIds(store.append(denial({}, 'after')));
  store.close();

  const reopened = storeIn(dir);
  t.match(reopened.store.status(), { fallbackActive: false, fallbackPendingEvents: 0, replayedAtStart: 2 });
  const events = page(reopened.store, {}).events;
  t.same(
    events.map((e) => e.payload.host ?? e.payload.path),
    ['before', 'after', 'locked-1', '/p'],
  );
  t.match(events[2], { at: '2026-03-01T00:00:00.000Z', kind: 'egress_denial', schemaVersion: 1, sessionId: 's1' });
  t.equal(events[3]!.kind, 'host_write_refused');
  t.equal(fs.statSync(log).size, 0, 'log truncated after the replay committed');
  reopened.store.close();
  t.equal(storeIn(dir).store.status().replayedAtStart, 0, 'nothing replays twice');
});

t.test('a database that cannot be opened: appends go to the fallback log, queries say unavailable', async (t) => {
  const dir = tempDir(t);
  const dbPath = path.join(dir, 'events.db');
  fs.mkdirSync(dbPath);
  const { store, lines } = storeIn(dir);
  t.match(store.status(), { fallbackActive: false, lastFallbackReason: /cannot open database/ });
  t.match(store.append(denial({}, 'kept')), { ok: true, stored: 'fallback' });
  t.match(store.query({}), { ok: false, reason: 'store_unavailable' });
  t.throws(
    () => store.deleteSession('s1'),
    new CodedError('store_unavailable', 'the event database could not be opened'),
  );
  t.match(store.status(), { fallbackActive: true, fallbackPendingEvents: 1 });
  t.ok(lines.some((l) => l.includes('event database unavailable')));
  store.close();

  const stillBroken = storeIn(dir);
  t.match(stillBroken.store.status(), { fallbackActive: true, fallbackPendingEvents: 1, replayedAtStart: 0 });
  stillBroken.store.close();

  fs.rmdirSync(dbPath);
  const repaired = storeIn(dir);
  t.equal(repaired.store.status().replayedAtStart, 1);
  t.same(
    page(repaired.store, {}).events.map((e) => e.payload.host),
    ['kept'],
  );
  repaired.store.close();
});

t.test('when database and fallback log both fail: typed event_lost and a kind-only error line', async (t) => {
  const dir = tempDir(t);
  fs.mkdirSync(path.join(dir, 'events.db'));
  fs.mkdirSync(path.join(dir, 'events.fallback.jsonl'));
  const { store, lines } = storeIn(dir);
  const result = store.append(denial({}, 'secret-host.test'));
  t.match(result, { ok: false, reason: 'event_lost' });
  const lost = lines.filter((l) => l.includes('governance events lost'));
  t.equal(lost.length, 1);
  t.match(JSON.parse(lost[0]!), { level: 'error', kinds: ['egress_denial'], count: 1 });
  t.notOk(
    lines.some((l) => l.includes('secret-host')),
    'no payload in any log line',
  );
  store.close();
});

t.test(
  'replay: a crash between commit and truncation does not duplicate; unreadable lines are kept aside',
  async (t) => {
    const dir = tempDir(t);
    const log = path.join(dir, 'events.fallback.jsonl');
    fs.mkdirSync(path.join(dir, 'events.db'));
    const broken = storeIn(dir);
    broken.store.appendBatch([denial({}, 'one'), denial({}, 'two')]);
    broken.store.close();
    fs.rmdirSync(path.join(dir, 'events.db'));
    fs.appendFileSync(log, '{"sessionId":"s1","kind":"egress_den');
    const saved = fs.readFileSync(log);

    const first = storeIn(dir);
    t.equal(first.store.status().replayedAtStart, 2);
    t.equal(fs.readFileSync(`${log}.unreadable`, 'utf8'), '{"sessionId":"s1","kind":"egress_den\n');
    t.ok(first.lines.some((l) => l.includes('unreadable')));
    first.store.close();

    fs.writeFileSync(log, saved);
    const second = storeIn(dir);
    t.equal(second.store.status().replayedAtStart, 0, 'the same log is recognised as already replayed');
    t.same(
      page(second.store, {}).events.map((e) => e.payload.host),
      ['one', 'two'],
    );
    t.equal(fs.statSync(log).size, 0);
    second.store.close();
  },
);

t.test('two processes appending to one database: every event stored once with a unique id', async (t) => {
  const dir = tempDir(t);
  const dbPath = path.join(dir, 'events.db');
  const child = path.join(here, './fixtures/writer-child.ts');
  const run = (writer: string) =>
    promisify(execFile)(process.execPath, [
      '--import',
      'tsx',
      child,
      dbPath,
      path.join(dir, `fallback-${writer}.jsonl`),
      writer,
      '400',
    ]);
  const outputs = await Promise.all([run('a'), run('b')]);
  for (const output of outputs) t.same(JSON.parse(output.stdout), { inDatabase: 400 });
  const { store } = storeIn(dir);
  const all: GovernanceEvent[] = [];
  let after: number | undefined;
  for (;;) {
    const p = page(store, { limit: 1000, after });
    all.push(...p.events);
    if (p.nextAfter === null) break;
    after = p.nextAfter;
  }
  t.equal(all.length, 800);
  t.equal(new Set(all.map((e) => e.id)).size, 800);
  for (const writer of ['a', 'b']) {
    const hosts = all.filter((e) => e.sessionId === `writer-${writer}`).map((e) => e.payload.host);
    t.same(
      hosts,
      Array.from({ length: 400 }, (_, i) => `h${i}.test`),
      `writer ${writer}: all present, in its order`,
    );
  }
  store.close();
});

t.test('each filter combination is driven by the most selective index', async (t) => {
  const opened = openDatabase(path.join(tempDir(t), 'plan.db'));
  if (!opened.ok) throw new Error(opened.detail);
  const plan = (sql: string, params: number) =>
    opened.db
      .prepare(`EXPLAIN QUERY PLAN ${sql}`)
      .all(...Array<string>(params).fill('x'))
      .map((row) => (row as { detail: string }).detail)
      .join('; ');
  const expected: Array<[boolean, boolean, boolean, RegExp]> = [
    [false, false, false, /INTEGER PRIMARY KEY \(rowid>\?\)/],
    [true, false, false, /INDEX events_session_id \(session_id=\? AND id>\?\)/],
    [false, true, false, /INDEX events_turn_id \(turn_id=\? AND id>\?\)/],
    [false, false, true, /INDEX events_kind_id \(kind=\? AND id>\?\)/],
    [true, false, true, /INDEX events_session_id \(session_id=\? AND id>\?\)/],
    [true, true, false, /INDEX events_turn_id \(turn_id=\? AND id>\?\)/],
    [false, true, true, /INDEX events_turn_id \(turn_id=\? AND id>\?\)/],
    [true, true, true, /INDEX events_turn_id \(turn_id=\? AND id>\?\)/],
  ];
  for (const [bySession, byTurn, byKind, index] of expected) {
    const filters = [bySession, byTurn, byKind].filter(Boolean).length;
    const detail = plan(eventQuerySql(bySession, byTurn, byKind), filters + 2);
    t.match(detail, index, `session=${bySession} turn=${byTurn} kind=${byKind}`);
    t.notMatch(detail, /TEMP B-TREE/, 'no sort step');
  }
  t.match(
    plan('DELETE FROM events INDEXED BY events_unbound_at WHERE session_id IS NULL AND at < ?', 1),
    /INDEX events_unbound_at \(at<\?\)/,
  );
  opened.db.close();
});
