/**
 * The workspace file API through a real `turnhost serve`, driven with curl over its unix socket,
 * in separate_uid under a root supervisor (a helper copy) and under a non-root one (a setuid
 * helper with its config compiled in, the supervisor's gid its caller group), and in shared_uid
 * (non-root supervisor, the worker in a user namespace of its uid): an upload into a new directory leaves a directory the
 * workspace's next turn writes in; listing, mkdir and delete; every operation refuses traversal
 * and links; a turn swapping a directory for a link to a host directory while the host writes,
 * makes directories, lists and removes there gets nothing done outside the workspace.
 */
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { plainUid } from '../support/served-supervisor.js';
import { curl, startServedSupervisors } from '../support/served-workspaces.js';
import { stopTapInjectingIntoChildren } from '../support/no-tap-inject.js';

stopTapInjectingIntoChildren();
// Three real supervisors, each with turns: on a loaded machine this takes minutes.
t.setTimeout(600_000);

const supervisors = await startServedSupervisors(t.teardown.bind(t), { first: 3_191_000, count: 8 }, [
  { label: 'separate_uid, root supervisor', name: 'wsf-separate', helper: true },
  { label: 'shared_uid, non-root supervisor', name: 'wsf-user', uid: plainUid(6) },
  {
    label: 'separate_uid, non-root supervisor',
    name: 'wsf-separate-user',
    helper: true,
    uid: plainUid(32),
    range: { first: 3_198_500, count: 8 },
  },
]);

const files = (id: string, query: Record<string, string>) =>
  `/api/workspaces/${id}/files?${new URLSearchParams(query).toString()}`;

for (const [name, supervisor] of supervisors) {
  t.test(name, async (t) => {
    const root = path.join(path.dirname(supervisor.dataDir), 'workspaces');
    const id = 'files';
    const run = (script: string) => supervisor.cli(['run', '--workspace', id, '--', '/bin/sh', '-c', script]);
    t.equal((await supervisor.cli(['workspace', 'create', id])).code, 0);
    const shown = JSON.parse((await supervisor.cli(['workspace', 'show', id, '--json'])).stdout).workspace;
    const owner = shown.uid ?? supervisor.uid;
    t.equal(shown.identity, name.startsWith('separate') ? 'separate_uid' : 'shared_uid');

    t.test('an upload into a new directory: the next turn writes beside it', async (t) => {
      const put = await curl(supervisor, 'PUT', files(id, { path: 'src/app.py' }), 'print(1)\n');
      t.equal(put.status, 201, put.body);
      const st = fs.statSync(path.join(root, id, 'src'));
      t.equal(st.uid, owner, 'the new directory is the workspace uid');
      t.equal(st.mode & 0o7777, 0o2770, '02770');
      const turn = await run('echo new > src/new.py && mkdir src/sub && rm src/app.py && ls src');
      t.equal(turn.code, 0, turn.stderr);
      t.equal(turn.stdout, 'new.py\nsub\n');
    });

    t.test('list, stat fields, mkdir, delete', async (t) => {
      const top = await curl(supervisor, 'GET', files(id, { path: '' }));
      t.equal(top.status, 200, top.body);
      t.same(
        top.json.entries.map((e: any) => [e.name, e.type]),
        [['src', 'directory']],
      );
      const src = await curl(supervisor, 'GET', `/api/workspaces/${id}/files?path=src`);
      const entry = src.json.entries.find((e: any) => e.name === 'new.py');
      t.match(entry, { type: 'file', size: 4 });
      t.ok(Number.isInteger(entry.mode) && !Number.isNaN(Date.parse(entry.mtime)), 'mode and mtime');
      t.equal((await curl(supervisor, 'GET', files(id, { path: '.' }))).json.entries.length, 1, '. is the top');

      const made = await curl(supervisor, 'POST', files(id, { path: 'a/b/c', type: 'directory' }));
      t.equal(made.status, 201, made.body);
      t.equal(made.json.made, 3);
      t.equal((await curl(supervisor, 'POST', files(id, { path: 'a/b/c', type: 'directory' }))).json.made, 0);
      t.equal(fs.statSync(path.join(root, id, 'a/b')).uid, owner);
      const noType = await curl(supervisor, 'POST', files(id, { path: 'x' }));
      t.equal(noType.status, 400);
      t.equal(noType.json.field, 'type');
      t.equal((await run('echo deep > a/b/c/file && cat a/b/c/file')).stdout, 'deep\n', 'a turn writes in it');

      const full = await curl(supervisor, 'DELETE', files(id, { path: 'a' }));
      t.equal(full.status, 409);
      t.equal(full.json.code, 'not_empty');
      t.match(full.json.error, /recursive/, 'the refusal names recursive');
      t.ok(fs.existsSync(path.join(root, id, 'a/b/c/file')), 'nothing removed');
      const one = await curl(supervisor, 'DELETE', files(id, { path: 'src/new.py' }));
      t.same(one.json, { path: 'src/new.py', files: 1, bytes: 4, directories: 0 });
      const tree = await curl(supervisor, 'DELETE', files(id, { path: 'a', recursive: '1' }));
      t.equal(tree.status, 200, tree.body);
      t.match(tree.json, { files: 1, directories: 3 });
      t.notOk(fs.existsSync(path.join(root, id, 'a')));
      t.equal((await curl(supervisor, 'DELETE', files(id, { path: 'a' }))).status, 404);
    });

    t.test('the CLI: workspace files put, ls, get, mkdir, rm', async (t) => {
      const cli = (args: string[], input?: string) =>
        supervisor.cli(['workspace', 'files', ...args], input === undefined ? {} : { input });
      const put = await cli(['put', id, 'cli/in.txt', '-'], 'from stdin\n');
      t.equal(put.code, 0, put.stderr);
      t.equal(put.stdout, 'created cli/in.txt: 11 bytes\n');
      t.match((await cli(['ls', id, 'cli'])).stdout, /^file\s+0666\s+11 \S+ in\.txt\n$/);
      t.equal((await cli(['get', id, 'cli/in.txt'])).stdout, 'from stdin\n');
      t.equal((await cli(['mkdir', id, 'cli/sub'])).stdout, 'made cli/sub\n');
      t.equal((await run('echo turn > cli/sub/t && cat cli/in.txt')).stdout, 'from stdin\n');
      const refused = await cli(['rm', id, 'cli']);
      t.equal(refused.code, 8, 'a non-empty directory without --recursive is a conflict');
      t.match(refused.stderr, /recursive/);
      t.equal((await cli(['rm', id, 'cli', '--recursive'])).code, 0);
      t.equal((await cli(['get', id, 'cli/in.txt'])).code, 3, 'gone');
      t.equal((await cli(['frob', id, 'x'])).code, 2);
    });

    t.test('traversal and links refused by every operation', async (t) => {
      const outside = fs.mkdtempSync(path.join(path.dirname(supervisor.dataDir), 'outside-'));
      fs.writeFileSync(path.join(outside, 'keep'), 'host\n');
      fs.chownSync(outside, supervisor.uid, supervisor.uid);
      fs.chownSync(path.join(outside, 'keep'), supervisor.uid, supervisor.uid);
      t.equal((await run(`ln -s ${outside} link && ln -s ${outside}/keep filelink && mkdir real`)).code, 0);
      for (const rel of ['../x', '/etc/passwd', 'a/../../x', 'a//b']) {
        for (const [method, query] of [
          ['GET', {}],
          ['PUT', {}],
          ['POST', { type: 'directory' }],
          ['DELETE', {}],
        ] as const) {
          const answer = await curl(
            supervisor,
            method,
            files(id, { path: rel, ...query }),
            method === 'PUT' ? 'x' : undefined,
          );
          t.equal(answer.status, 400, `${method} ${rel}`);
          t.equal(answer.json.field, 'path');
        }
      }
      const refusals: Array<[string, string, Record<string, string>, string | undefined]> = [
        ['GET', 'link/keep', {}, undefined],
        ['GET', 'link', {}, undefined],
        ['GET', 'filelink', {}, undefined],
        ['PUT', 'link/planted', {}, 'x'],
        ['PUT', 'filelink', { mode: 'replace' }, 'x'],
        ['POST', 'link/made', { type: 'directory' }, undefined],
        ['POST', 'link', { type: 'directory' }, undefined],
        ['DELETE', 'link/keep', {}, undefined],
        ['DELETE', 'link/keep', { recursive: '1' }, undefined],
      ];
      for (const [method, rel, query, data] of refusals) {
        const answer = await curl(supervisor, method, files(id, { path: rel, ...query }), data);
        t.equal(answer.status, 409, `${method} ${rel}: ${answer.body}`);
        t.match(answer.json.code, /alias_denied|not_a_directory|exists/);
      }
      const link = await curl(supervisor, 'DELETE', files(id, { path: 'link', recursive: '1' }));
      t.equal(link.status, 200, 'the link itself is removed');
      t.same(fs.readdirSync(outside), ['keep'], 'nothing made, removed or written outside');
      t.equal(fs.readFileSync(path.join(outside, 'keep'), 'utf8'), 'host\n');
      fs.rmSync(outside, { recursive: true });
    });

    t.test('a turn swapping a directory for a link during the operations', async (t) => {
      const outside = fs.mkdtempSync(path.join(path.dirname(supervisor.dataDir), 'swap-'));
      fs.writeFileSync(path.join(outside, 'keep'), 'host\n');
      fs.chownSync(outside, supervisor.uid, supervisor.uid);
      const swapper = run(
        `while [ ! -e stop ]; do rm -rf d; mkdir d; echo in > d/f; mkdir d/sub; rm -rf d; ln -s ${outside} d; done 2>/dev/null; rm -rf d`,
      );
      for (let i = 0; i < 30; i++) {
        await curl(supervisor, 'PUT', files(id, { path: `d/w${i}` }), 'x');
        await curl(supervisor, 'POST', files(id, { path: `d/m${i}/n`, type: 'directory' }));
        await curl(supervisor, 'GET', files(id, { path: 'd' }));
        await curl(supervisor, 'DELETE', files(id, { path: 'd/keep' }));
        await curl(supervisor, 'DELETE', files(id, { path: 'd', recursive: '1' }));
      }
      t.equal((await curl(supervisor, 'PUT', files(id, { path: 'stop' }), '')).status < 300, true);
      const ended = await swapper;
      t.equal(ended.code, 0, ended.stderr);
      t.same(fs.readdirSync(outside), ['keep'], 'nothing landed in or vanished from the host directory');
      t.equal(fs.readFileSync(path.join(outside, 'keep'), 'utf8'), 'host\n');
      fs.rmSync(outside, { recursive: true });
    });
  });
}
