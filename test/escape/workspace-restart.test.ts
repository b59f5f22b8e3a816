/**
 * A supervisor restart keeps workspaces and their leases (real helper, real uids, as root): the
 * workspace made before it keeps its uid and files, and a turn after it changes the files of a
 * turn before it. A workspace a crash left half made (its row `creating`, the helper's lease
 * already taken) is removed at the next boot, lease and directory, and one left half deleted
 * (`deleting`) is finished.
 */
import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import Database from 'better-sqlite3';
import { runHelperLease } from '../../supervisor/identity/helper-lease.js';
import { helperLocation } from '../../supervisor/turns/worker-process.js';
import { createTurnHarness, harnessUidRange, runTurn, type TurnHarness } from '../support/turn-harness.js';

const SLOT = 88;
const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-ws-restart-'));
const leaseDir = `/run/turnhost-ws-restart-leases-${process.pid}`;
const root = `/var/lib/turnhost-ws-restart-${process.pid}`;
const options = {
  slot: SLOT,
  stateDir,
  workspaces: { root, uidLeaseDir: leaseDir },
  configure: (config: TurnHarness['config']) => (config.turns.preparedWorkers = 0),
};
t.teardown(() => {
  for (const dir of [stateDir, leaseDir, root]) fs.rmSync(dir, { recursive: true, force: true });
});

t.test('workspaces and leases survive a restart; a crash is finished at boot', async (t) => {
  const before = await createTurnHarness({ ...options, keepStateOnClose: true });
  const created = await before.workspaces.create({ id: 'kept', sessionId: 'one' });
  if (!created.ok) throw new Error(created.detail);
  const uid = created.workspace.uid;
  const first = await runTurn(before, { argv: ['/bin/sh', '-c', 'echo before > file'], workspace: 'kept', cwd: '.' });
  t.equal(first.result.status, 'ok', first.stderr);
  // A crash between the helper's lease and the supervisor's own record: the lease exists, the row
  // says creating. And one in the middle of a delete.
  const helper = helperLocation(before.config)!;
  const half = await runHelperLease(helper, {
    lease: 'half',
    workspace: path.join(root, 'half'),
    uid: harnessUidRange(SLOT).first,
  });
  t.ok(half.ok, 'the helper leased the half-made workspace');
  const gone = await before.workspaces.create({ id: 'gone' });
  t.ok(gone.ok);
  await before.close();
  const db = new Database(path.join(stateDir, 'data/turnhost.db'));
  db.prepare(
    `INSERT INTO workspaces (id, session_id, uid, identity, path, state, created_at) VALUES ('half', NULL, NULL, 'separate_uid', ?, 'creating', ?)`,
  ).run(path.join(root, 'half'), new Date().toISOString());
  db.prepare(`UPDATE workspaces SET state = 'deleting' WHERE id = 'gone'`).run();
  db.close();
  // An upgrade from a release whose lease records named no owner: the kept workspace's record
  // in format 1, and one no row of this instance claims.
  const keptRecord = path.join(leaseDir, 'kept');
  const legacy = (text: string): string =>
    text.replace('turnhost-uid-lease 2\n', 'turnhost-uid-lease 1\n').replace(/owner .*\n/, '');
  fs.writeFileSync(keptRecord, legacy(fs.readFileSync(keptRecord, 'utf8')), { mode: 0o600 });
  const foreignRecord = path.join(leaseDir, 'foreign');
  const foreignText = `turnhost-uid-lease 1\nuid ${harnessUidRange(SLOT).first + 7}\nworkspace ${path.join(root, 'foreign')}\n`;
  fs.writeFileSync(foreignRecord, foreignText, { mode: 0o600 });

  const after = await createTurnHarness(options);
  t.teardown(() => after.close());
  const kept = after.workspaces.get('kept');
  t.equal(kept?.uid, uid, 'the workspace keeps its uid across the restart');
  t.match(
    fs.readFileSync(keptRecord, 'utf8'),
    /^turnhost-uid-lease 2\nuid \d+\nowner own_[0-9a-f]{32}\n/,
    'adopted at boot',
  );
  t.equal(fs.readFileSync(foreignRecord, 'utf8'), foreignText, 'a lease no row of this instance holds is not adopted');
  const taken = await after.workspaces.create({ id: 'foreign' });
  t.equal(taken.ok ? 'created' : taken.reason, 'workspace_owned_elsewhere', 'nor taken by a create');
  fs.rmSync(foreignRecord);
  const second = await runTurn(after, {
    argv: ['/bin/sh', '-c', 'echo after >> file && cat file && id -u'],
    workspace: 'kept',
    sessionId: 'two',
  });
  t.equal(second.stdout, `before\nafter\n${uid}\n`, 'the turn after the restart changes the file of the one before');
  t.notOk(after.workspaces.get('half'), 'the half-made workspace is gone');
  t.notOk(fs.existsSync(path.join(root, 'half')), 'its directory is gone');
  t.notOk(fs.existsSync(path.join(leaseDir, 'half')), 'its lease record is gone');
  t.notOk(after.workspaces.get('gone'), 'the half-deleted workspace is gone');
  t.notOk(fs.existsSync(path.join(root, 'gone')), 'its directory is gone');
  t.notOk(fs.existsSync(path.join(leaseDir, 'gone')), 'its lease record is gone');
  t.ok(fs.existsSync(path.join(leaseDir, 'kept')), 'the kept lease stays');
  const deleted = await after.workspaces.delete('kept');
  t.ok(deleted.ok, deleted.ok ? '' : deleted.detail);
  t.notOk(fs.existsSync(path.join(leaseDir, 'kept')), 'delete releases the lease');

  // Session deletion's entry point: every workspace bound to the session goes, others stay.
  for (const id of ['bound-a', 'bound-b']) t.ok((await after.workspaces.create({ id, sessionId: 'ending' })).ok);
  t.ok((await after.workspaces.create({ id: 'unbound' })).ok);
  const ended = await after.workspaces.deleteForSession('ending');
  t.same(ended.ok ? ended.deleted : ended.detail, ['bound-a', 'bound-b']);
  t.notOk(fs.existsSync(path.join(root, 'bound-a')), 'a bound workspace is gone');
  t.ok(after.workspaces.get('unbound'), 'an unbound workspace stays');
  t.ok((await after.workspaces.delete('unbound')).ok);

  // A delete while a turn of the workspace is still starting (claimed, not yet running) is
  // refused: the tree is never removed under a turn that is being launched.
  t.ok((await after.workspaces.create({ id: 'starting' })).ok);
  const starting = after.turns.create({ sessionId: 's', mode: 'ordinary', workspace: 'starting', argv: ['true'] });
  const early = await after.workspaces.delete('starting');
  t.equal(early.ok ? 'deleted' : early.reason, 'workspace_busy', 'a starting turn keeps its workspace');
  const startedTurn = await starting;
  t.ok(startedTurn.ok, startedTurn.ok ? '' : startedTurn.detail);
  if (startedTurn.ok) await after.turns.wait(startedTurn.turn.id);
  t.ok((await after.workspaces.delete('starting')).ok, 'deleted once the turn ended');
});

t.test('deletes and session deletes serialise against each other and against starts', async (t) => {
  const harness = await createTurnHarness({ ...options, stateDir: fs.mkdtempSync(path.join(os.tmpdir(), 'ws-race-')) });
  t.teardown(() => harness.close());
  const workspaces = harness.workspaces;

  // Two deletes of one workspace at once: one removal, one receipt, both callers answered.
  t.ok((await workspaces.create({ id: 'twice' })).ok);
  const [a, b] = await Promise.all([workspaces.delete('twice'), workspaces.delete('twice')]);
  t.ok(a.ok && b.ok, 'both deletes answer the one removal');
  const receipts = harness.events.query({ kind: 'workspace_deleted', limit: 1000 });
  t.equal(
    receipts.ok ? receipts.events.filter((e) => e.payload['workspaceId'] === 'twice').length : -1,
    1,
    'one workspace_deleted receipt',
  );

  // A delete that stopped half way (row left `deleting`) is retried by the next delete.
  t.ok((await workspaces.create({ id: 'half-deleted' })).ok);
  const db = new Database(path.join(harness.config.dataDir, 'turnhost.db'));
  db.prepare(`UPDATE workspaces SET state = 'deleting' WHERE id = 'half-deleted'`).run();
  db.close();
  const retried = await workspaces.delete('half-deleted');
  t.ok(retried.ok, retried.ok ? '' : retried.detail);
  t.notOk(fs.existsSync(path.join(root, 'half-deleted')), 'the retry removed the tree');
  t.notOk(fs.existsSync(path.join(leaseDir, 'half-deleted')), 'and the lease');

  // While a session's delete is under way, no turn of it and none on its workspace may start.
  t.ok((await workspaces.create({ id: 'bound', sessionId: 'ending' })).ok);
  await runTurn(harness, { argv: ['/bin/true'], workspace: 'bound', cwd: '.', sessionId: 'ending' });
  const deleting = harness.turns.deleteSession('ending');
  const ownTurn = await harness.turns.create({
    sessionId: 'ending',
    mode: 'ordinary',
    argv: ['/bin/true'],
    cwd: harness.workspace,
  });
  t.match(ownTurn, { ok: false, reason: 'conflict', field: 'sessionId' }, 'a turn of the session is refused');
  const visitor = await harness.turns.create({
    sessionId: 'visitor',
    mode: 'ordinary',
    argv: ['/bin/true'],
    workspace: 'bound',
  });
  t.match(visitor, { ok: false, reason: 'conflict', field: 'workspace' }, 'a turn on its workspace is refused');
  const done = await deleting;
  t.match(done, { ok: true, deleted: { sessionId: 'ending', workspaces: 1, turns: 1 } });

  // A workspace still being created keeps its session: the session delete is refused, not half done.
  const making = workspaces.create({ id: 'making', sessionId: 'young' });
  const refused = await harness.turns.deleteSession('young');
  t.match(refused, { ok: false, reason: 'session_busy' }, 'refused while its workspace is being created');
  t.ok((await making).ok);
  t.ok(workspaces.get('making'), 'the workspace was made');
  t.match(await harness.turns.deleteSession('young'), { ok: true, deleted: { workspaces: 1 } });
});
