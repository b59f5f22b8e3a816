/**
 * A turn cannot make its workspace undeletable: in every configuration a turn builds, inside
 * its workspace, a directory chain deeper than PATH_MAX (a path-based removal meets
 * ENAMETOOLONG) and a tree whose directories are mode 000 (a non-root supervisor's path-based
 * removal meets EACCES); then DELETE succeeds and nothing is left on disk or in the database.
 * Each a real `turnhost serve` driven through its CLI.
 */
import Database from 'better-sqlite3';
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { plainUid } from '../support/served-supervisor.js';
import { startServedSupervisors } from '../support/served-workspaces.js';
import { stopTapInjectingIntoChildren } from '../support/no-tap-inject.js';

stopTapInjectingIntoChildren();

const supervisors = await startServedSupervisors(t.teardown.bind(t), { first: 3_196_000, count: 8 }, [
  { label: 'separate_uid', name: 'del-separate', helper: true },
  { label: 'shared_uid, root supervisor', name: 'del-shared-root' },
  { label: 'shared_uid, non-root supervisor', name: 'del-shared-user', uid: plainUid(8) },
]);

/** Builds, fd by fd, a chain of `levels` 200-byte names (past PATH_MAX at 21), a file at its end. */
const DEEP_CHAIN = `
import os, sys
fd = os.open('.', os.O_RDONLY | os.O_DIRECTORY)
name = 'd' * 200
for _ in range(int(sys.argv[1])):
    os.mkdir(name, dir_fd=fd)
    child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = child
with open(os.open('bottom', os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=fd), 'w') as bottom:
    bottom.write('x')
print('deep', flush=True)
`;

const LOCKED_TREE =
  'mkdir -p locked/inner/core && echo secret > locked/inner/core/file && chmod 000 locked/inner/core locked/inner locked && echo locked';

function rowsOf(dataDir: string, id: string): number {
  const db = new Database(path.join(dataDir, 'turnhost.db'), { readonly: true, fileMustExist: true });
  try {
    return (db.prepare('SELECT COUNT(*) AS n FROM workspaces WHERE id = ?').get(id) as { n: number }).n;
  } finally {
    db.close();
  }
}

const ATTACKS: Array<[string, string[], string]> = [
  ['a chain deeper than PATH_MAX', ['/usr/bin/python3', '-c', DEEP_CHAIN, '30'], 'deep\n'],
  ['a tree of mode 000 directories', ['/bin/sh', '-c', LOCKED_TREE], 'locked\n'],
];

for (const [name, supervisor] of supervisors) {
  for (const [index, [attack, argv, made]] of ATTACKS.entries()) {
    t.test(`${name}: ${attack} does not defeat DELETE`, async (t) => {
      const root = path.join(path.dirname(supervisor.dataDir), 'workspaces');
      const id = `undeletable-${index}`;
      t.equal((await supervisor.cli(['workspace', 'create', id])).code, 0);
      const turn = await supervisor.cli(['run', '--workspace', id, '--', ...argv]);
      t.equal(turn.code, 0, turn.stderr);
      t.equal(turn.stdout, made, `the turn made ${attack}`);

      const deleted = await supervisor.cli(['workspace', 'delete', id]);
      t.equal(deleted.code, 0, `delete succeeds: ${(deleted.stdout + deleted.stderr).slice(0, 300)}`);
      t.notOk(fs.existsSync(path.join(root, id)), 'nothing is left on disk');
      t.equal(rowsOf(supervisor.dataDir, id), 0, 'nothing is left in the database');
      t.equal((await supervisor.cli(['workspace', 'show', id])).code, 3, 'not found afterwards');
      t.same(supervisor.contractProblems, [], 'every answer matches the API document');
    });
  }
}
