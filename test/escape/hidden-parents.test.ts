/**
 * A supervisor whose checkout, data directory and workspaces root all lie under `/root`, one of
 * the paths every view hides: workspace turns (and turns on a configured workspace root) still
 * run and write in their workspace, the worker's program is found, and nothing else of `/root`
 * shows: not a sibling file of the supervisor's directories, not root's own dotfiles, not the
 * data directory. The view keeps `/root` hidden with a nested mask (a tmpfs of its own with only
 * the kept paths re-exposed). Root supervisors in separate_uid and shared_uid: a non-root
 * supervisor cannot reach a directory under `/root` at all. Decisions: docs/filesystem-view.md
 * ("Nested masks").
 */
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import {
  setUpHelper,
  startSupervisor,
  stopSupervisors,
  supervisorBase,
  type ServedSupervisor,
} from '../support/served-supervisor.js';
import { stopTapInjectingIntoChildren } from '../support/no-tap-inject.js';

stopTapInjectingIntoChildren();

const RANGE = { first: 3_200_000, count: 8 };

const top = fs.mkdtempSync('/root/turnhost-test-');
const sibling = path.join(top, 'sibling-secret');
fs.writeFileSync(sibling, 'sibling secret\n', { mode: 0o644 });
t.teardown(() => fs.rmSync(top, { recursive: true, force: true }));

const separateBase = supervisorBase('hp-separate', top);
const helper = setUpHelper(
  [separateBase.dataDir],
  RANGE,
  { roots: [separateBase.workspacesRoot] },
  separateBase.codeRoot,
);
t.teardown(() => helper.remove());
const common = { workspaces: true, baseParent: top, codeInBase: true };
const supervisors: Array<[string, ServedSupervisor]> = [
  ['separate_uid, root supervisor', await startSupervisor({ name: 'hp-separate', helper, ...common })],
  ['shared_uid, root supervisor', await startSupervisor({ name: 'hp-shared', ...common })],
];
t.teardown(() => stopSupervisors(supervisors.map(([, supervisor]) => supervisor)));

/** Entries of a directory, one per line, as `ls -A` prints them; `-` when it cannot be listed. */
const listing = (dir: string): string => `ls -A ${dir} 2>/dev/null | tr '\\n' ' ' || echo -`;

for (const [name, supervisor] of supervisors) {
  t.test(name, async (t) => {
    const base = path.dirname(supervisor.dataDir);
    const workspacesRoot = path.join(base, 'workspaces');
    t.match(supervisor.codeRoot, /^\/root\//, "the worker's program lies under /root");

    const status = await supervisor.cli(['check', '--json']);
    t.equal(status.code, 0, status.stderr);
    const body = JSON.parse(status.stdout);
    t.equal(body.ordinary?.available, true, JSON.stringify(body.ordinary));
    t.equal(body.workspaceTurns?.available, true, JSON.stringify(body.workspaceTurns));

    t.equal((await supervisor.cli(['workspace', 'create', 'project'])).code, 0);
    t.equal((await supervisor.cli(['workspace', 'create', 'other'])).code, 0);
    const write = await supervisor.cli([
      'run',
      '--workspace',
      'project',
      '--',
      '/bin/sh',
      '-c',
      'echo written > note && cat note',
    ]);
    t.equal(write.code, 0, write.stderr);
    t.equal(write.stdout, 'written\n', 'the workspace turn ran and wrote');
    t.equal(fs.readFileSync(path.join(workspacesRoot, 'project', 'note'), 'utf8'), 'written\n');

    const plain = await supervisor.run(['/bin/sh', '-c', 'echo plain > plain-note && cat plain-note']);
    t.equal(plain.code, 0, plain.stderr);
    t.equal(plain.stdout, 'plain\n', 'a turn on the configured workspace root under /root ran too');

    const look = await supervisor.cli([
      'run',
      '--workspace',
      'project',
      '--',
      '/bin/sh',
      '-c',
      [
        `echo "root: $(${listing('/root')})"`,
        `echo "top: $(${listing(top)})"`,
        `echo "base: $(${listing(base)})"`,
        `echo "workspaces: $(${listing(workspacesRoot)})"`,
        `cat ${sibling} 2>/dev/null && echo sibling-read`,
        `test -e /root/.gitconfig && echo gitconfig-seen`,
        `test -e /root/.ssh && echo ssh-seen`,
        `test -e ${supervisor.dataDir} && echo data-seen`,
        `echo x > /root/planted 2>/dev/null && echo root-written`,
        `mkdir ${top}/planted 2>/dev/null && echo top-written`,
        'true',
      ].join('; '),
    ]);
    t.equal(look.code, 0, look.stderr);
    const lines = look.stdout.split('\n');
    t.equal(lines[0], `root: ${path.basename(top)} `, 'only the chain to the kept paths shows in /root');
    t.equal(lines[1], `top: ${path.basename(base)} `, 'the sibling file stays hidden');
    t.equal(lines[2], 'base: code workspaces ', 'the data directory and everything else of the base stay hidden');
    t.equal(lines[3], 'workspaces: project ', 'no other workspace shows');
    for (const leak of ['sibling-read', 'gitconfig-seen', 'ssh-seen', 'data-seen', 'root-written', 'top-written'])
      t.notOk(lines.includes(leak), leak);
    t.notOk(fs.existsSync('/root/planted'));
  });
}
