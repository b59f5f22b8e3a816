/**
 * Workspaces through the CLI of a real `turnhost serve`: a root supervisor with the identity
 * helper (separate_uid) and a non-root supervisor without one (shared_uid, the worker in a user
 * namespace of the supervisor's uid). In each: create, a turn writes, a turn of another session
 * changes it, show counts it, another workspace's turn cannot see it, delete removes it.
 */
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { plainUid } from '../support/served-supervisor.js';
import { startServedSupervisors } from '../support/served-workspaces.js';
import { stopTapInjectingIntoChildren } from '../support/no-tap-inject.js';

stopTapInjectingIntoChildren();

const supervisors = await startServedSupervisors(t.teardown.bind(t), { first: 3_189_000, count: 8 }, [
  { label: 'separate_uid, root supervisor', name: 'ws-separate', helper: true },
  { label: 'shared_uid, non-root supervisor', name: 'ws-user', uid: plainUid(5) },
]);

for (const [name, supervisor] of supervisors) {
  t.test(name, async (t) => {
    const root = path.join(path.dirname(supervisor.dataDir), 'workspaces');
    const created = await supervisor.cli(['workspace', 'create', 'project', '--session', 'one']);
    t.equal(created.code, 0, created.stderr);
    t.equal(created.stdout, 'project\n');
    const write = await supervisor.cli([
      'run',
      '--workspace',
      'project',
      '--session',
      'one',
      '--',
      '/bin/sh',
      '-c',
      'mkdir -p src && echo first > src/file && id -u',
    ]);
    t.equal(write.code, 0, write.stderr);
    const change = await supervisor.cli([
      'run',
      '--workspace',
      'project',
      '--cwd',
      'src',
      '--session',
      'two',
      '--',
      '/bin/sh',
      '-c',
      'echo second >> file && cat file',
    ]);
    t.equal(change.code, 0, change.stderr);
    t.equal(change.stdout, 'first\nsecond\n', "the second turn changed the first one's file");
    const shown = await supervisor.cli(['workspace', 'show', 'project', '--json']);
    t.equal(shown.code, 0, shown.stderr);
    const workspace = JSON.parse(shown.stdout).workspace;
    t.ok(workspace.files >= 1 && workspace.bytes > 0, 'show counts the files');
    if (name.startsWith('separate')) t.equal(String(workspace.uid), write.stdout.trim(), 'the turn ran as the lease');
    else t.equal(workspace.uid, null);

    t.equal((await supervisor.cli(['workspace', 'create', 'other'])).code, 0);
    const peek = await supervisor.cli([
      'run',
      '--workspace',
      'other',
      '--',
      '/bin/sh',
      '-c',
      `cat ${root}/project/src/file; ls ${root}; echo x > ${root}/project/planted; true`,
    ]);
    t.equal(peek.code, 0, peek.stderr);
    t.notMatch(peek.stdout, /first|project/, 'the other workspace sees nothing of it');
    t.notOk(fs.existsSync(path.join(root, 'project', 'planted')));

    const listed = await supervisor.cli(['workspace', 'list', '--session', 'one']);
    t.match(listed.stdout, /^project /m);
    const absolute = await supervisor.cli(['run', '--workspace', 'project', '--cwd', '/etc', '--', 'true']);
    t.equal(absolute.code, 2, 'an absolute --cwd with --workspace is a usage error');
    t.match(absolute.stderr, /cwd/);
    const deleted = await supervisor.cli(['workspace', 'delete', 'project']);
    t.equal(deleted.code, 0, deleted.stderr);
    t.notOk(fs.existsSync(path.join(root, 'project')), 'the tree is gone');
    t.equal((await supervisor.cli(['workspace', 'show', 'project'])).code, 3, 'not found afterwards');
    t.equal((await supervisor.cli(['workspace', 'delete', 'other'])).code, 0);
    t.equal((await supervisor.cli(['workspace', 'frobnicate'])).code, 2);
  });
}
