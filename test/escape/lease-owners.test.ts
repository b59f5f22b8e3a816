/**
 * Two separate_uid supervisors whose configurations name the same identity helper: one helper
 * config, one workspaces root, one uid range and one lease directory (what a packaged host gives
 * a second instance). Each supervisor leases as its own instance's owner, so the second one,
 * with its own token, can neither take over the first one's workspace by creating its id, nor
 * read, write, delete or run a turn in it; the first one's workspace, files and uid stay
 * intact, and its uid is never handed to another workspace.
 */
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import t from 'tap';
import { contractProblems } from '../support/api-contract.js';
import { servedApi, type ApiResponse, type ServedApi } from '../support/served-api.js';
import { setUpHelper, startSupervisor, stopSupervisors, supervisorBase } from '../support/served-supervisor.js';
import { stopTapInjectingIntoChildren } from '../support/no-tap-inject.js';

stopTapInjectingIntoChildren();

const RANGE = { first: 3_193_000, count: 6 };
const sharedRoot = `/var/lib/turnhost-esc-owned-workspaces-${process.pid}`;
fs.mkdirSync(sharedRoot, { mode: 0o711 });
t.teardown(() => fs.rmSync(sharedRoot, { recursive: true, force: true }));
const helper = setUpHelper([supervisorBase('owner-a').dataDir, supervisorBase('owner-b').dataDir], RANGE, {
  roots: [sharedRoot],
});
t.teardown(() => helper.remove());
const a = await startSupervisor({ name: 'owner-a', helper, workspaces: true, workspacesRoot: sharedRoot });
const b = await startSupervisor({ name: 'owner-b', helper, workspaces: true, workspacesRoot: sharedRoot });
t.teardown(() => stopSupervisors([a, b]));
const apiA = servedApi(a);
const apiB = servedApi(b);

/** A raw host write (application/octet-stream), its answer checked against the API contract. */
function putFile(api: ServedApi, id: string, rel: string, data: string): Promise<ApiResponse> {
  const urlPath = `/api/workspaces/${id}/files?path=${encodeURIComponent(rel)}`;
  const target = api.connection.target;
  if (target.kind !== 'unix') throw new Error('a unix socket is expected');
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        socketPath: target.path,
        method: 'PUT',
        path: urlPath,
        headers: {
          authorization: `Bearer ${api.connection.token}`,
          'content-type': 'application/octet-stream',
          'content-length': String(Buffer.byteLength(data)),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          const problems = contractProblems('PUT', urlPath, res.statusCode ?? 0, res.headers, text);
          if (problems.length > 0) return reject(new Error(`contract: ${problems.join('; ')}`));
          resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) as unknown });
        });
      },
    );
    req.on('error', reject);
    req.end(data);
  });
}

const codeOf = (answer: ApiResponse): unknown => (answer.body as { code?: unknown }).code;
const uidOf = (answer: ApiResponse): unknown => (answer.body as { workspace?: { uid?: unknown } }).workspace?.uid;

t.test("the second supervisor cannot take, read, write, delete or run in the first one's workspace", async (t) => {
  const created = await apiA.request('POST', '/api/workspaces', { id: 'project' });
  t.equal(created.status, 201, JSON.stringify(created.body));
  const uid = uidOf(created);
  t.type(uid, 'number', 'the workspace has a leased uid');
  const wrote = await a.cli(['run', '--workspace', 'project', '--', '/bin/sh', '-c', 'echo mine > secret && id -u']);
  t.equal(wrote.code, 0, wrote.stderr);
  t.equal(wrote.stdout.trim(), String(uid), "the first supervisor's turn runs as the lease's uid");
  const secret = path.join(sharedRoot, 'project', 'secret');

  const taken = await apiB.request('POST', '/api/workspaces', { id: 'project' });
  t.equal(taken.status, 409, `creating the id is refused: ${JSON.stringify(taken.body)}`);
  t.equal(codeOf(taken), 'workspace_owned_elsewhere');
  t.match((taken.body as { error: string }).error, /another owner/);

  const shown = await apiB.request('GET', '/api/workspaces/project');
  t.equal(shown.status, 404, 'the second supervisor has no such workspace');
  const listed = await apiB.request('GET', '/api/workspaces');
  t.same(listed.body, { workspaces: [] }, 'nor lists it');
  const read = await apiB.request('GET', '/api/workspaces/project/files?path=secret');
  t.equal(read.status, 404, 'nor reads its files');
  const written = await putFile(apiB, 'project', 'secret', 'theirs\n');
  t.equal(written.status, 404, 'nor writes them');
  const deleted = await apiB.request('DELETE', '/api/workspaces/project');
  t.equal(deleted.status, 404, 'nor deletes it');
  const turn = await b.cli(['run', '--workspace', 'project', '--', '/bin/sh', '-c', 'echo theirs > secret']);
  t.not(turn.code, 0, 'nor runs a turn in it');
  t.match(turn.stderr, /no workspace project/);

  t.equal(fs.readFileSync(secret, 'utf8'), 'mine\n', 'the file is untouched');
  const still = await apiA.request('GET', '/api/workspaces/project');
  t.equal(still.status, 200, 'the first supervisor still has its workspace');
  t.equal(uidOf(still), uid, 'with its uid');
  const again = await a.cli(['run', '--workspace', 'project', '--', '/bin/sh', '-c', 'cat secret && id -u']);
  t.equal(again.code, 0, again.stderr);
  t.equal(again.stdout, `mine\n${String(uid)}\n`, 'and its turns still run in it as its uid');

  // The uid stays the workspace's: no other workspace of either supervisor gets it.
  const theirs = await apiB.request('POST', '/api/workspaces', { id: 'theirs' });
  t.equal(theirs.status, 201, JSON.stringify(theirs.body));
  const second = await apiA.request('POST', '/api/workspaces', { id: 'second' });
  t.equal(second.status, 201, JSON.stringify(second.body));
  t.not(uidOf(theirs), uid, "the second supervisor's workspace has another uid");
  t.not(uidOf(second), uid, "the first supervisor's other workspace has another uid");

  // Each supervisor still deletes its own.
  t.equal((await apiB.request('DELETE', '/api/workspaces/theirs')).status, 200);
  t.equal((await apiA.request('DELETE', '/api/workspaces/second')).status, 200);
  t.equal((await apiA.request('DELETE', '/api/workspaces/project')).status, 200);
  t.notOk(fs.existsSync(path.join(sharedRoot, 'project')), 'the owner deleted its workspace');
});
