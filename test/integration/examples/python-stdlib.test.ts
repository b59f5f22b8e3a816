/**
 * examples/python/turnhost_stdlib.py against a real supervisor, in both identity modes: an
 * integrator with only Python's standard library creates a workspace, uploads a tree, runs a
 * command and reads all of its output and its exit code, lists and downloads the results, and
 * deletes everything.
 */
import { spawn } from 'node:child_process';
import path from 'node:path';
import t from 'tap';
import { plainUid, serveForTest, setUpHelper, supervisorBase } from '../../support/served-supervisor.js';
import { REPO_ROOT } from '../../support/turn-harness.js';

interface Seen {
  exitCode: number;
  status: string;
  stdout: { text: string; written: number; dropped: number };
  stderr: { text: string; written: number; dropped: number };
  listing: string[];
  count: string;
  workspacesLeft: number;
}

const separateBase = supervisorBase('python-separate');
const helper = setUpHelper(
  [separateBase.dataDir],
  { first: 3_197_000, count: 4 },
  { roots: [separateBase.workspacesRoot] },
);
t.teardown(() => helper.remove());
const MODES = [
  { mode: 'separate_uid, root supervisor', options: { name: 'python-separate', helper } },
  { mode: 'shared_uid, non-root supervisor', options: { name: 'python-user', uid: plainUid(9) } },
];

for (const { mode, options } of MODES) {
  t.test(`Python's standard library drives a workspace end to end (${mode})`, async (t) => {
    const served = await serveForTest(t, { ...options, workspaces: true });
    const child = spawn(
      'python3',
      [path.join(REPO_ROOT, 'examples/python/turnhost_stdlib.py'), '--socket', served.socket],
      { env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', TURNHOST_TOKEN: served.token }, stdio: 'pipe' },
    );
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    t.equal(code, 0, `the script ran (${stderr})`);
    const seen = JSON.parse(stdout) as Seen;
    t.equal(seen.exitCode, 7, "the command's exit code");
    t.equal(seen.status, 'nonzero_exit');
    t.same(seen.stdout, { text: 'one\ntwo\nthree\n', written: 14, dropped: 0 }, 'all of stdout');
    t.same(seen.stderr, { text: 'to-stderr\n', written: 10, dropped: 0 }, 'stderr apart');
    t.same(seen.listing, ['app.py', 'count.txt', 'lib'], 'the upload and what the turn wrote beside it');
    t.equal(seen.count, '3', 'the result downloaded');
    t.equal(seen.workspacesLeft, 0, 'everything deleted');
  });
}
