/**
 * Workspaces end to end through the real HTTP app, as root, with the real helper and real uids
 * (separate_uid) and with the shared_uid launcher: a git repository made by one turn is changed
 * and committed by a turn of another session; the host reads it back; two concurrent turns on
 * two workspaces cannot read or write each other's files; delete is refused while a turn runs,
 * and afterwards leaves no files, no lease and no process of the uid. Every answer is checked
 * against the OpenAPI document.
 */
import t from 'tap';
import { stopTapInjectingIntoChildren } from '../support/no-tap-inject.js';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import Database from 'better-sqlite3';
import { contractProblems } from '../support/api-contract.js';
import { serveHarnessApp } from '../support/app-server.js';
import { createTurnHarness, type TurnHarness } from '../support/turn-harness.js';
import type { TurnResult } from '../../supervisor/turns/types.js';

stopTapInjectingIntoChildren();
const TOKEN = 'workspaces-test-token-0123456789';

async function serve(harness: TurnHarness) {
  const { port, close } = await serveHarnessApp(harness, TOKEN);
  // Every answer is checked against the OpenAPI document; the test asserts none mismatched.
  const problems: string[] = [];
  const request = (method: string, url: string, body?: unknown, raw?: Buffer) =>
    new Promise<{ status: number; json: any; text: string; headers: http.IncomingHttpHeaders }>((resolve, reject) => {
      const data = raw ?? (body === undefined ? undefined : Buffer.from(JSON.stringify(body)));
      const req = http.request(
        {
          host: '127.0.0.1',
          port,
          method,
          path: url,
          headers: {
            authorization: `Bearer ${TOKEN}`,
            ...(data ? { 'content-type': raw ? 'application/octet-stream' : 'application/json' } : {}),
            ...(data ? { 'content-length': data.length } : {}),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString();
            problems.push(...contractProblems(method, url, res.statusCode ?? 0, res.headers, text));
            let json: any = null;
            try {
              json = JSON.parse(text);
            } catch {
              json = null;
            }
            resolve({ status: res.statusCode ?? 0, json, text, headers: res.headers });
          });
        },
      );
      req.on('error', reject);
      req.end(data);
    });
  return { request, problems, close };
}

type Api = Awaited<ReturnType<typeof serve>>['request'];

async function runTurn(api: Api, harness: TurnHarness, body: Record<string, unknown>) {
  const created = await api('POST', '/api/turns', { mode: 'ordinary', ...body });
  if (created.status !== 201) throw new Error(`turn refused: ${created.text}`);
  const id = created.json.turn.id as string;
  const attached = harness.turns.attach(id);
  if (!attached.ok) throw new Error(attached.detail);
  const out: Buffer[] = [];
  // The exit comes after the replay of every kept byte (the turn's own end may come before it).
  const result = await new Promise<TurnResult>((resolve) =>
    attached.attachment.onEvent((e) => {
      if (e.type === 'output') out.push(e.data);
      if (e.type === 'exit') resolve(e.result);
    }),
  );
  return { id, result, output: Buffer.concat(out).toString(), record: harness.turns.get(id)! };
}

function processesOf(uid: number): number[] {
  return fs
    .readdirSync('/proc')
    .filter((name) => /^[0-9]+$/.test(name))
    .filter((pid) => {
      try {
        const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
        const line = status.split('\n').find((l) => l.startsWith('Uid:'));
        return line !== undefined && Number(line.split(/\s+/)[1]) === uid && !status.includes('State:\tZ');
      } catch {
        return false;
      }
    })
    .map(Number);
}

const GIT = 'git -c user.email=a@example.org -c user.name=agent -c init.defaultBranch=main -c safe.directory=*';

for (const separate of [true, false]) {
  t.test(separate ? 'separate_uid' : 'shared_uid', async (t) => {
    const harness = await createTurnHarness({
      slot: separate ? 86 : 87,
      separateUid: separate,
      // Outside /tmp: the view replaces /tmp, which would hide a root there whatever it did.
      workspaces: { root: `/var/lib/turnhost-workspaces-test-${separate ? 86 : 87}-${process.pid}` },
      configure: (config) => {
        config.turns.preparedWorkers = 0;
        config.modes.restricted.enabled = true;
      },
    });
    const server = await serve(harness);
    const api = server.request;
    t.teardown(async () => {
      await server.close();
      await harness.close();
    });
    const root = harness.config.workspaces.root!;

    const created = await api('POST', '/api/workspaces', { sessionId: 'session-one', id: 'repo' });
    t.equal(created.status, 201, created.text);
    t.equal(created.headers.location, '/api/workspaces/repo');
    const uid = created.json.workspace.uid as number | null;
    if (separate) t.ok(uid !== null && uid >= harness.uidRange.first, 'a uid of the range is leased');
    else t.equal(uid, null, 'shared_uid leases no uid');

    // A malformed create names every field at fault, and creates nothing.
    const badCreate = await api('POST', '/api/workspaces', { id: '../up', sessionId: '', owner: 'x' });
    t.equal(badCreate.status, 400, badCreate.text);
    t.equal(badCreate.json.code, 'invalid_request');
    t.same(
      badCreate.json.errors.map((e: { field: string }) => e.field),
      ['owner', 'sessionId', 'id'],
      'every refused field, unknown first',
    );
    t.equal(badCreate.json.field, 'owner');
    const notJson = await api('POST', '/api/workspaces', undefined, Buffer.from('id=x'));
    t.equal(notJson.status, 400, 'a body that is not JSON is refused, not ignored');
    t.equal(notJson.json.field, 'body');
    t.same(
      (await api('GET', '/api/workspaces')).json.workspaces.map((w: { id: string }) => w.id),
      ['repo'],
      'the refused requests created no workspace',
    );

    const first = await runTurn(api, harness, {
      sessionId: 'session-one',
      workspace: 'repo',
      argv: [
        '/bin/sh',
        '-c',
        `${GIT} init -q && echo one > notes.txt && ${GIT} add notes.txt && ${GIT} commit -qm one && id -u`,
      ],
    });
    t.equal(first.result.status, 'ok', first.output);
    t.equal(first.record.workspaceId, 'repo');
    if (separate) t.equal(first.record.workerUid, uid, 'the turn ran as the leased uid');
    t.ok(first.result.workspace && first.result.workspace.files > 0, 'the result measures the workspace');

    const second = await runTurn(api, harness, {
      sessionId: 'session-two',
      workspace: 'repo',
      cwd: '.',
      argv: ['/bin/sh', '-c', `echo two >> notes.txt && ${GIT} commit -qam two && ${GIT} log --oneline | wc -l`],
    });
    t.equal(second.result.status, 'ok', second.output);
    t.match(second.output, /2/, 'the second turn committed on the first one');

    const read = await api('GET', '/api/workspaces/repo/files?path=notes.txt');
    t.equal(read.status, 200);
    t.equal(read.text, 'one\ntwo\n', 'the host reads the file back');
    const written = await api('PUT', '/api/workspaces/repo/files?path=host.txt', undefined, Buffer.from('from host\n'));
    t.equal(written.status, 201, written.text);
    t.equal(written.headers.location, '/api/workspaces/repo/files?path=host.txt', 'a created file names its address');
    t.equal((await api('GET', written.headers.location!)).text, 'from host\n', 'which reads the file back');
    const third = await runTurn(api, harness, {
      sessionId: 'session-two',
      workspace: 'repo',
      argv: ['/bin/sh', '-c', 'echo agent >> host.txt && cat host.txt'],
    });
    t.equal(third.output, 'from host\nagent\n', 'a turn changes what the host wrote');
    const piped = await runTurn(api, harness, {
      sessionId: 'session-two',
      workspace: 'repo',
      stdin: 'a\nb\nc\n',
      argv: ['wc', '-l'],
    });
    t.equal(piped.result.status, 'ok', 'the piped turn ends with its input (no timeout)');
    t.equal(piped.output.trim(), '3', 'the turn counted the lines it was given');
    const inRepo = await api('GET', '/api/turns?workspace=repo&limit=2');
    t.equal(inRepo.status, 200, inRepo.text);
    t.same(
      inRepo.json.turns.map((turn: { id: string }) => turn.id),
      [piped.id, third.id],
      'the listing by workspace pages newest first',
    );
    const rest = await api('GET', `/api/turns?workspace=repo&after=${inRepo.json.nextAfter}`);
    t.same(
      rest.json.turns.map((turn: { id: string }) => turn.id),
      [second.id, first.id],
    );
    t.equal(rest.json.nextAfter, null);
    t.equal((await api('GET', '/api/turns?workspace=../x')).json.field, 'workspace');

    const shown = await api('GET', '/api/workspaces/repo');
    t.equal(shown.status, 200);
    t.ok(shown.json.workspace.bytes > 0 && shown.json.workspace.files > 0, 'usage is shown');
    const listed = await api('GET', '/api/workspaces?session=session-one');
    t.same(
      listed.json.workspaces.map((w: { id: string }) => w.id),
      ['repo'],
    );

    // Route validation.
    t.equal((await api('POST', '/api/workspaces', { id: '../x' })).status, 400);
    t.equal((await api('POST', '/api/workspaces', { colour: 'red' })).json.field, 'colour');
    t.equal((await api('POST', '/api/workspaces', { id: 'repo' })).status, 409);
    t.equal((await api('GET', '/api/workspaces/missing')).json.code, 'workspace_not_found');
    t.equal((await api('GET', '/api/workspaces/repo/files?path=../etc/passwd')).status, 400);
    const badList = await api('GET', '/api/workspaces?session=a%20b&colour=red');
    t.same(
      [badList.status, badList.json.field, badList.json.errors],
      [
        400,
        'colour',
        [
          { field: 'colour', detail: 'unknown parameter' },
          { field: 'session', detail: 'expected 1-128 characters of [A-Za-z0-9_.:-]' },
        ],
      ],
      'a refused query names every parameter, unknown ones first as for bodies',
    );
    const badPut = await api('PUT', '/api/workspaces/repo/files?mode=append', undefined, Buffer.from('x'));
    t.same(
      badPut.json.errors,
      [
        { field: 'path', detail: 'required' },
        { field: 'mode', detail: "expected 'create' or 'replace'" },
      ],
      'a file write without a path and with a bad mode is refused for both',
    );
    t.equal((await api('DELETE', '/api/workspaces/repo?cancel=yes')).json.field, 'cancel');
    const withBody = await api('DELETE', '/api/workspaces/repo', { cancel: true });
    t.match(withBody, { status: 400, json: { code: 'invalid_request', error: /^body: / } }, 'a delete takes no body');
    t.equal((await api('GET', '/api/workspaces/repo')).status, 200, 'and deleted nothing');
    t.equal((await api('GET', '/api/workspaces/repo/files?path=absent')).status, 404);
    const absolute = await api('POST', '/api/turns', {
      sessionId: 's',
      mode: 'ordinary',
      workspace: 'repo',
      cwd: '/tmp',
      argv: ['true'],
    });
    t.equal(absolute.status, 400);
    t.equal(absolute.json.field, 'cwd', 'an absolute cwd with a workspace names cwd');
    const plain = await api('POST', '/api/turns', { sessionId: 's', mode: 'ordinary', cwd: root, argv: ['true'] });
    t.equal(plain.status, 400, 'a plain cwd in the workspaces root is refused');

    const unknown = await api('POST', '/api/turns', {
      sessionId: 's',
      mode: 'ordinary',
      workspace: 'nope',
      argv: ['true'],
    });
    t.equal(unknown.status, 400);
    t.equal(unknown.json.field, 'workspace', 'an unknown workspace names the field');

    // Host write refusals of the guard: create over an existing file, a body above the cap.
    const again = await api('PUT', '/api/workspaces/repo/files?path=host.txt&mode=create', undefined, Buffer.from('x'));
    t.equal(again.status, 409, again.text);
    t.equal(again.json.code, 'exists');
    const writeCap = harness.config.fs.hostWriteMaxBytes;
    harness.config.fs.hostWriteMaxBytes = 8;
    const tooLarge = await api('PUT', '/api/workspaces/repo/files?path=big.txt', undefined, Buffer.alloc(9, 0x61));
    t.equal(tooLarge.status, 413, tooLarge.text);
    t.equal(tooLarge.json.code, 'body_too_large');
    t.notOk(fs.existsSync(path.join(root, 'repo', 'big.txt')), 'nothing of a refused write is left');
    harness.config.fs.hostWriteMaxBytes = writeCap;

    // The byte cap: a workspace above it takes no host write and starts no turn.
    const cap = harness.config.workspaces.maxBytes;
    harness.config.workspaces.maxBytes = 1024;
    const full = await api('PUT', '/api/workspaces/repo/files?path=more.txt', undefined, Buffer.from('more\n'));
    t.equal(full.status, 409);
    t.equal(full.json.code, 'workspace_full');
    const overCap = await api('POST', '/api/turns', {
      sessionId: 's',
      mode: 'ordinary',
      workspace: 'repo',
      argv: ['true'],
    });
    t.equal(overCap.status, 503, overCap.text);
    t.match(overCap.json.requirement, /workspaces\.maxBytes/, 'the refusal names the requirement');
    harness.config.workspaces.maxBytes = cap;

    // A link out of the workspace is not followed by the host read.
    fs.symlinkSync('/etc/hostname', path.join(root, 'repo', 'link'));
    t.equal((await api('GET', '/api/workspaces/repo/files?path=link')).status, 409, 'a link is refused');

    // Two concurrent turns on two workspaces.
    t.equal((await api('POST', '/api/workspaces', { id: 'alpha' })).status, 201);
    t.equal((await api('POST', '/api/workspaces', { id: 'beta' })).status, 201);
    const alphaTurn = await api('POST', '/api/turns', {
      sessionId: 'session-a',
      mode: 'ordinary',
      workspace: 'alpha',
      argv: ['/bin/sh', '-c', 'echo alpha-secret > secret && echo tmp-secret > /tmp/secret && sleep 600'],
    });
    t.equal(alphaTurn.status, 201, alphaTurn.text);
    const alphaId = alphaTurn.json.turn.id as string;
    for (let i = 0; i < 200 && !fs.existsSync(path.join(root, 'alpha', 'secret')); i++)
      await new Promise((resolve) => setTimeout(resolve, 50));
    const beta = await runTurn(api, harness, {
      sessionId: 'session-b',
      workspace: 'beta',
      argv: [
        '/bin/sh',
        '-c',
        [
          `cat ${root}/alpha/secret && echo READ-ALPHA`,
          `echo x > ${root}/alpha/planted && echo WROTE-ALPHA`,
          `ls ${root} | grep -q alpha && echo LISTED-ROOT`,
          `ls ${root}/repo/notes.txt && echo SAW-REPO`,
          `cat /tmp/secret && echo READ-ALPHA-TMP`,
          'pwd',
          'true',
        ].join('; '),
      ],
    });
    t.equal(beta.result.status, 'ok', beta.output);
    // The strict profile: the root shows the turn's own workspace (read-only) and nothing else.
    const strict = await runTurn(api, harness, {
      sessionId: 'session-b',
      mode: 'restricted',
      workspace: 'beta',
      argv: ['/bin/sh', '-c', `ls -A ${root}; cat ${root}/alpha/secret; echo x > mine || echo READ-ONLY`],
    });
    t.equal(strict.result.status, 'ok', strict.output);
    t.match(strict.output, /^beta\n/, 'the strict root shows only its own workspace');
    t.notMatch(strict.output, /alpha-secret|repo/, strict.output);
    t.match(strict.output, /READ-ONLY/, 'the strict workspace is read-only');
    t.notMatch(beta.output, /READ-ALPHA|WROTE-ALPHA|LISTED-ROOT|SAW-REPO|alpha-secret|tmp-secret/, beta.output);
    t.notOk(fs.existsSync(path.join(root, 'alpha', 'planted')), 'nothing planted in alpha');

    // Delete while a turn runs: refused; with cancel: the turn ends, then the workspace goes.
    const busy = await api('DELETE', '/api/workspaces/alpha');
    t.equal(busy.status, 409);
    t.equal(busy.json.code, 'workspace_busy');
    const alphaUid = harness.turns.get(alphaId)!.workerUid!;
    const cancelled = await api('DELETE', '/api/workspaces/alpha?cancel=1');
    t.equal(cancelled.status, 200, cancelled.text);
    t.equal(harness.turns.get(alphaId)!.result!.status, 'cancelled');
    t.notOk(fs.existsSync(path.join(root, 'alpha')), 'alpha is gone');
    if (separate) t.same(processesOf(alphaUid), [], 'no process of its uid is left');

    const deleted = await api('DELETE', '/api/workspaces/repo');
    t.equal(deleted.status, 200, deleted.text);
    t.ok(deleted.json.filesRemoved > 0, 'the removal is counted');
    t.notOk(fs.existsSync(path.join(root, 'repo')), 'the tree is gone');
    t.ok(fs.existsSync('/etc/hostname'), 'the link target is untouched');
    t.equal((await api('GET', '/api/workspaces/repo')).status, 404);
    const kinds = harness.events.query({ kind: 'workspace_deleted', limit: 10 });
    t.ok(kinds.ok && kinds.events.length === 2, 'workspace_deleted is recorded');
    if (separate && uid !== null) {
      // The lease is released: a new workspace may get the same uid again.
      t.same(processesOf(uid), [], 'no process of the released uid');
    }
    t.equal((await api('DELETE', '/api/workspaces/beta')).status, 200);

    // A delete that stopped half way (its row left `deleting`) is hidden but retried by DELETE.
    t.equal((await api('POST', '/api/workspaces', { id: 'half' })).status, 201);
    const db = new Database(path.join(harness.config.dataDir, 'turnhost.db'));
    db.prepare(`UPDATE workspaces SET state = 'deleting' WHERE id = 'half'`).run();
    db.close();
    t.equal((await api('GET', '/api/workspaces/half')).status, 404, 'a half-deleted workspace is not shown');
    t.equal((await api('DELETE', '/api/workspaces/half')).status, 200, 'its delete is retried');
    t.notOk(fs.existsSync(path.join(root, 'half')), 'the retry removed it');

    // A session's delete takes its workspaces; a turn of another session on one refuses it.
    t.equal((await api('POST', '/api/workspaces', { id: 'bound', sessionId: 'session-three' })).status, 201);
    const own = await runTurn(api, harness, { sessionId: 'session-three', workspace: 'bound', argv: ['true'] });
    t.equal(own.result.status, 'ok');
    const visitor = await api('POST', '/api/turns', {
      sessionId: 'session-four',
      mode: 'ordinary',
      workspace: 'bound',
      argv: ['sleep', '600'],
    });
    t.equal(visitor.status, 201, visitor.text);
    const refused = await api('DELETE', '/api/sessions/session-three');
    t.equal(refused.status, 409, refused.text);
    t.equal(refused.json.code, 'session_busy');
    t.ok(fs.existsSync(path.join(root, 'bound')), 'a refused session delete removes nothing');
    t.equal((await api('POST', `/api/turns/${visitor.json.turn.id as string}/cancel`)).status, 200);
    await harness.turns.wait(visitor.json.turn.id as string);
    const sessionGone = await api('DELETE', '/api/sessions/session-three');
    t.equal(sessionGone.status, 200, sessionGone.text);
    t.match(sessionGone.json.deleted, { sessionId: 'session-three', turns: 1, workspaces: 1 });
    t.ok(sessionGone.json.deleted.events > 0, 'its events are deleted');
    t.notOk(fs.existsSync(path.join(root, 'bound')), 'its workspace is gone');
    t.same((await api('GET', '/api/turns?session=session-three')).json.turns, [], 'its turns are gone');
    const left = harness.events.query({ session: 'session-three' });
    t.same(left.ok ? left.events : left, [], 'its events are gone');
    const receipt = harness.events.query({ kind: 'session_deleted' });
    t.ok(receipt.ok);
    if (receipt.ok)
      t.match(receipt.events.at(-1), {
        sessionId: null,
        payload: { sessionId: 'session-three', turns: 1, workspaces: 1, trigger: 'api' },
      });
    const visitorId = visitor.json.turn.id as string;
    t.same(server.problems, [], 'every answer matches the OpenAPI document');
    t.equal((await api('GET', `/api/turns/${visitorId}`)).status, 200, 'the other session keeps its turn');
  });
}
