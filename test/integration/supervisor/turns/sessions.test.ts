/**
 * Deleting a session: on a served supervisor, DELETE /api/sessions/:id removes the session's
 * events and turn records and leaves an unbound `session_deleted` receipt; it is refused with
 * 409 while a turn of the session runs (nothing deleted) and 404 for an unknown session.
 * Retention (the function the daemon runs hourly, driven here with its clock) deletes an ended
 * session idle past `events.sessionRetentionDays` and keeps a recent one, a running one and one
 * with a workspace bound to it.
 * A database that cannot be used answers store_unavailable.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { createLogger } from '../../../../core/log.js';
import { openDatabase } from '../../../../supervisor/db/open.js';
import { deleteSession } from '../../../../supervisor/turns/sessions.js';
import type { EventPage } from '../../../../supervisor/events/types.js';
import type { TurnPage } from '../../../../supervisor/turns/types.js';
import { stopTapInjectingIntoChildren } from '../../../support/no-tap-inject.js';
import { servedApi } from '../../../support/served-api.js';
import { serveForTest } from '../../../support/served-supervisor.js';
import { createTurnHarness, runTurn } from '../../../support/turn-harness.js';

stopTapInjectingIntoChildren();

const quiet = createLogger({ level: 'error', fields: {} });

t.test('DELETE /api/sessions/:id on a served supervisor', async (t) => {
  const served = await serveForTest(t, { name: 'sessions' });
  const api = servedApi(served);
  const finished = async (sessionId: string): Promise<string> => {
    const created = await api.createTurn(sessionId, ['/bin/true']);
    const id = (created.body as { turn: { id: string } }).turn.id;
    const attached = await api.attach(id);
    await attached.waitFor((m) => m.type === 'exit');
    attached.close();
    return id;
  };
  await finished('doomed');
  await finished('doomed');
  await finished('kept');
  const events = async (query: string): Promise<EventPage> =>
    (await api.request('GET', `/api/governance/events?${query}`)).body as EventPage;
  const before = (await events('session=doomed&limit=1000')).events.length;
  t.ok(before >= 4, `the session has events (${before})`);

  const deleted = await api.request('DELETE', '/api/sessions/doomed');
  t.equal(deleted.status, 200, JSON.stringify(deleted.body));
  t.same(deleted.body, { deleted: { sessionId: 'doomed', events: before, turns: 2, workspaces: 0 } });
  t.same((await events('session=doomed')).events, [], 'its events are gone');
  t.same(((await api.request('GET', '/api/turns?session=doomed')).body as TurnPage).turns, [], 'its turns too');
  t.equal(((await api.request('GET', '/api/turns?session=kept')).body as TurnPage).turns.length, 1, 'others stay');
  const receipt = (await events('kind=session_deleted')).events;
  t.equal(receipt.length, 1);
  t.match(receipt[0], {
    sessionId: null,
    turnId: null,
    payload: { sessionId: 'doomed', events: before, turns: 2, workspaces: 0, trigger: 'api' },
  });

  t.match(await api.request('DELETE', '/api/sessions/doomed'), { status: 404, body: { code: 'not_found' } });
  t.match(await api.request('DELETE', '/api/sessions/never'), { status: 404, body: { code: 'not_found' } });

  const running = await api.createTurn('busy', ['/bin/sleep', '60']);
  const runningId = (running.body as { turn: { id: string } }).turn.id;
  const busy = await api.request('DELETE', '/api/sessions/busy');
  t.match(busy, { status: 409, body: { code: 'session_busy' } });
  t.equal(((await api.request('GET', '/api/turns?session=busy')).body as TurnPage).turns.length, 1, 'nothing deleted');
  t.ok((await events('session=busy')).events.length > 0, 'its events stay');
  t.equal((await api.request('POST', `/api/turns/${runningId}/cancel`)).status, 200);
  const attached = await api.attach(runningId);
  await attached.waitFor((m) => m.type === 'exit');
  attached.close();
  t.equal((await api.request('DELETE', '/api/sessions/busy')).status, 200, 'deletable once ended');
});

t.test('retention deletes an old ended session and keeps a recent, a running and a workspace one', async (t) => {
  const harness = await createTurnHarness({
    slot: 91,
    workspaces: {},
    configure: (config) => (config.events.sessionRetentionDays = 5),
  });
  t.teardown(() => harness.close());
  const day = 86_400_000;
  await runTurn(harness, { argv: ['/bin/true'], sessionId: 'old' });
  await runTurn(harness, { argv: ['/bin/true'], sessionId: 'recent' });
  const bound = await harness.workspaces.create({ id: 'kept-ws', sessionId: 'kept' });
  t.ok(bound.ok, bound.ok ? '' : bound.detail);
  // Activity three days from now: at six days from now it is three days old, within retention.
  harness.events.append({
    sessionId: 'recent',
    turnId: null,
    kind: 'host_write_refused',
    actor: 'server',
    model: null,
    profile: null,
    at: new Date(Date.now() + 3 * day).toISOString(),
    payload: { path: 'x', reason: 'test' },
  });
  const running = await harness.turns.create({
    sessionId: 'running',
    mode: 'ordinary',
    argv: ['/bin/sleep', '60'],
    cwd: harness.workspace,
  });
  t.ok(running.ok);

  const pruned = harness.turns.pruneSessions(new Date(Date.now() + 6 * day));
  t.ok(pruned.ok);
  if (!pruned.ok) return;
  t.same(
    pruned.deleted.map((d) => d.sessionId),
    ['old'],
  );
  const count = (session: string): number => {
    const page = harness.events.query({ session, limit: 1000 });
    return page.ok ? page.events.length : -1;
  };
  t.equal(count('old'), 0);
  t.ok(count('recent') > 0, 'the recent session stays');
  t.ok(count('running') > 0, 'the running session stays');
  t.ok(count('kept') > 0, 'a session with a workspace stays');
  t.ok(harness.workspaces.get('kept-ws'), 'and so does its workspace');
  t.ok((await harness.workspaces.delete('kept-ws')).ok);
  const unbound = harness.turns.pruneSessions(new Date(Date.now() + 6 * day));
  t.same(unbound.ok && unbound.deleted.map((d) => d.sessionId), ['kept'], 'without its workspace it goes');
  const receipts = harness.events.query({ kind: 'session_deleted' });
  t.match(receipts.ok && receipts.events, [
    { sessionId: null, payload: { sessionId: 'old', trigger: 'retention' } },
    { sessionId: null, payload: { sessionId: 'kept', trigger: 'retention' } },
  ]);

  harness.config.events.sessionRetentionDays = 0;
  const off = harness.turns.pruneSessions(new Date(Date.now() + 600 * day));
  t.same(off.ok && off.deleted, [], '0 keeps every session');
  if (running.ok) {
    harness.turns.cancel(running.turn.id);
    await harness.turns.wait(running.turn.id);
  }
});

t.test('a database that cannot be used answers store_unavailable and deletes nothing', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-sessions-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const opened = openDatabase(path.join(dir, 'turnhost.db'));
  if (!opened.ok) throw new Error(opened.detail);
  const appended: unknown[] = [];
  const deps = {
    db: opened.db,
    events: { append: (e: unknown) => (appended.push(e), { ok: true as const, stored: 'database' as const, ids: [] }) },
    logger: quiet,
    isBusy: () => false,
    removeTurnOutput: () => undefined,
  };
  opened.db.close();
  const answer = deleteSession(deps, 'any', { trigger: 'api' });
  t.match(answer, { ok: false, reason: 'store_unavailable' });
  t.same(appended, [], 'no receipt for a delete that did not happen');
});

t.test('the hook before the delete can stop it', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-sessions-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const opened = openDatabase(path.join(dir, 'turnhost.db'));
  if (!opened.ok) throw new Error(opened.detail);
  t.teardown(() => opened.db.close());
  opened.db
    .prepare(
      "INSERT INTO events (session_id, turn_id, at, kind, schema_version, actor, payload) VALUES ('s', NULL, '2026-01-01T00:00:00.000Z', 'egress_denial', 1, 'server', '{}')",
    )
    .run();
  const deps = {
    db: opened.db,
    events: { append: () => ({ ok: true as const, stored: 'database' as const, ids: [] }) },
    logger: quiet,
    isBusy: () => false,
    removeTurnOutput: () => undefined,
  };
  const refused = deleteSession(deps, 's', {
    trigger: 'api',
    beforeDelete: () => ({ ok: false, reason: 'workspace_busy', detail: 'a workspace of s is leased' }),
  });
  t.match(refused, { ok: false, reason: 'workspace_busy' });
  t.equal((opened.db.prepare("SELECT count(*) AS n FROM events WHERE session_id = 's'").get() as { n: number }).n, 1);
  t.match(deleteSession(deps, 's', { trigger: 'api', beforeDelete: () => ({ ok: true }) }), {
    ok: true,
    deleted: { sessionId: 's', events: 1, turns: 0 },
  });
});
