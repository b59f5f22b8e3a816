/**
 * A supervisor whose checkout, data directory and workspaces root all lie under `/root`, one of
 * the paths every view hides: workspace turns (and turns on a configured workspace root) still
 * run and write in their workspace, the worker's program is found, and nothing else of `/root`
 * shows: not a sibling file of the supervisor's directories, not root's own dotfiles, not the
 * data directory. The view keeps `/root` hidden with a nested mask (a tmpfs of its own with only
 * the kept paths re-exposed). Also with only the checkout under `/root` (the worker's program
 * must not be masked). Root supervisors in separate_uid and shared_uid: a non-root supervisor
 * cannot reach a directory under `/root` at all. Decisions: docs/filesystem-view.md
 * ("Nested masks").
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import {
  setUpHelper,
  startSupervisor,
  type HelperSetup,
  stopSupervisors,
  supervisorBase,
  type ServedSupervisor,
} from '../support/served-supervisor.js';
import { stopTapInjectingIntoChildren } from '../support/no-tap-inject.js';
import { HELPER_PATH, REPO_ROOT } from '../support/turn-harness.js';

stopTapInjectingIntoChildren();

const RANGE = { first: 3_200_000, count: 8 };

const top = fs.mkdtempSync('/root/turnhost-test-');
const sibling = path.join(top, 'sibling-secret');
fs.writeFileSync(sibling, 'sibling secret\n', { mode: 0o644 });
t.teardown(() => fs.rmSync(top, { recursive: true, force: true }));

interface Layout {
  name: string;
  /** The supervisor's own directories (data, workspaces root, turns' workspace root) under `top`. */
  stateUnderRoot: boolean;
  separate: boolean;
}

const layouts: Layout[] = [
  { name: 'hp-sep-all', stateUnderRoot: true, separate: true },
  { name: 'hp-shr-all', stateUnderRoot: true, separate: false },
  { name: 'hp-sep-code', stateUnderRoot: false, separate: true },
  { name: 'hp-shr-code', stateUnderRoot: false, separate: false },
];

/** Where a layout's checkout is bound: its base's `code`, or a directory of its own under `top`. */
function codeRootOf(layout: Layout): string {
  const base = supervisorBase(layout.name, layout.stateUnderRoot ? top : undefined);
  return layout.stateUnderRoot ? base.codeRoot : path.join(top, `code-${layout.name}`);
}

function describe(layout: Layout): string {
  const identity = layout.separate ? 'separate_uid' : 'shared_uid';
  const where = layout.stateUnderRoot ? 'code, data and workspaces under /root' : 'only the code under /root';
  return `${identity}, root supervisor, ${where}`;
}

let nextRange = RANGE.first;
const supervisors: Array<[Layout, ServedSupervisor]> = [];
t.teardown(() => stopSupervisors(supervisors.map(([, supervisor]) => supervisor)));
for (const layout of layouts) {
  const baseParent = layout.stateUnderRoot ? top : undefined;
  const base = supervisorBase(layout.name, baseParent);
  const codeRoot = codeRootOf(layout);
  let helper: HelperSetup | undefined;
  if (layout.separate) {
    const range = { first: nextRange, count: RANGE.count };
    nextRange += RANGE.count;
    const setUp = setUpHelper([base.dataDir], range, { roots: [base.workspacesRoot] }, { codeRoot });
    t.teardown(() => setUp.remove());
    helper = setUp;
  }
  const options = {
    name: layout.name,
    workspaces: true,
    codeRoot,
    ...(baseParent === undefined ? {} : { baseParent }),
    ...(helper === undefined ? {} : { helper }),
  };
  supervisors.push([layout, await startSupervisor(options)]);
}

/** Entries of a directory, one per line, as `ls -A` prints them; `-` when it cannot be listed. */
const listing = (dir: string): string => `ls -A ${dir} 2>/dev/null | tr '\\n' ' ' || echo -`;

for (const [layout, supervisor] of supervisors) {
  t.test(describe(layout), async (t) => {
    const base = path.dirname(supervisor.dataDir);
    const workspacesRoot = path.join(base, 'workspaces');
    t.match(supervisor.codeRoot, /^\/root\//, 'the checkout lies under /root');

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
        `cat ${supervisor.dataDir}/api-token 2>/dev/null && echo token-read`,
        `echo x > /root/planted 2>/dev/null && echo root-written`,
        `mkdir ${top}/planted 2>/dev/null && echo top-written`,
        'true',
      ].join('; '),
    ]);
    t.equal(look.code, 0, look.stderr);
    const lines = look.stdout.split('\n');
    // The worker runs from a descriptor the helper holds, so no view keeps the checkout for it:
    // only a configured view_path (the separate_uid test helper keeps the checkout for its native
    // test programs) and the workspace show beneath the masks.
    const codeKept = layout.separate;
    const rootShows = codeKept || layout.stateUnderRoot;
    t.equal(
      lines[0],
      rootShows ? `root: ${path.basename(top)} ` : 'root: ',
      'only the chain to the kept paths shows in /root',
    );
    if (layout.stateUnderRoot) {
      t.equal(lines[1], `top: ${path.basename(base)} `, 'the sibling file stays hidden');
      t.equal(
        lines[2],
        codeKept ? 'base: code workspaces ' : 'base: workspaces ',
        'the data directory and everything else of the base stay hidden',
      );
    } else {
      t.equal(
        lines[1],
        codeKept ? `top: code-${layout.name} ` : 'top: ',
        "the sibling file and other supervisors' code stay hidden",
      );
    }
    t.equal(lines[3], 'workspaces: project ', 'no other workspace shows');
    const leaks = ['sibling-read', 'gitconfig-seen', 'ssh-seen', 'token-read', 'root-written', 'top-written'];
    // Outside /root the data directory is masked (an empty directory), under it absent.
    if (layout.stateUnderRoot) leaks.push('data-seen');
    for (const leak of leaks) t.notOk(lines.includes(leak), leak);
    t.notOk(fs.existsSync('/root/planted'));
  });
}

/**
 * A non-root supervisor cannot reach a directory under /root (and its configuration refuses a
 * workspaces root inside its data directory), so its shared_uid launcher's view is built
 * directly, as its uid, for the same shape: a hidden directory holding the worker's program and
 * a hidden workspaces root holding the workspace. Two nested masks, a view_path and the
 * workspace re-exposed inside them, all in the user namespace of that uid.
 */
const NON_ROOT_UID = 3_200_100;
t.test('shared_uid, non-root supervisor: nested masks in its user namespace', async (t) => {
  const base = fs.mkdtempSync('/var/lib/turnhost-esc-hp-user-');
  t.teardown(() => fs.rmSync(base, { recursive: true, force: true }));
  const hidden = path.join(base, 'hidden');
  const code = path.join(hidden, 'code');
  const workspacesRoot = path.join(hidden, 'workspaces');
  const workspace = path.join(workspacesRoot, 'project');
  for (const dir of [code, workspace, path.join(workspacesRoot, 'other')]) fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(code, 'main.js'), '// the worker\n');
  fs.writeFileSync(path.join(hidden, 'secret'), 'secret\n');
  fs.writeFileSync(path.join(workspacesRoot, 'other', 'file'), 'other\n');
  const configPath = path.join(base, 'launcher.conf');
  fs.writeFileSync(configPath, `worker_exec /bin/true\nview_path ${code}\n`, { mode: 0o600 });
  for (const entry of [base, hidden, code, workspacesRoot, workspace, configPath, path.join(code, 'main.js')])
    fs.chownSync(entry, NON_ROOT_UID, NON_ROOT_UID);

  const paths = [
    workspace,
    path.join(code, 'main.js'),
    path.join(hidden, 'secret'),
    path.join(workspacesRoot, 'other'),
    hidden,
    workspacesRoot,
  ];
  const view = (profile: 'governed' | 'strict') => {
    const request = { profile, workspace, hide: [hidden, workspacesRoot], paths };
    const run = spawnSync(
      'setpriv',
      [
        `--reuid=${NON_ROOT_UID}`,
        `--regid=${NON_ROOT_UID}`,
        '--clear-groups',
        process.execPath,
        '--import',
        'tsx',
        path.join(REPO_ROOT, 'test/escape/fixtures/shared-view.ts'),
        HELPER_PATH,
        configPath,
        JSON.stringify(request),
      ],
      { cwd: REPO_ROOT, encoding: 'utf8', env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', HOME: base } },
    );
    t.equal(run.status, 0, run.stderr);
    const answer = JSON.parse(run.stdout);
    t.equal(answer.ok, true, JSON.stringify(answer));
    return answer.entries ?? [];
  };
  for (const profile of ['governed', 'strict'] as const) {
    const [ownWorkspace, program, secret, other, hiddenDir, rootDir] = view(profile);
    const writable = profile === 'governed';
    t.match(ownWorkspace, { exists: true, read: true, write: writable }, `${profile}: the workspace`);
    t.match(program, { exists: true, read: true, empty: false }, `${profile}: the worker's program is visible`);
    t.match(secret, { exists: false }, `${profile}: a sibling file in the hidden directory stays hidden`);
    t.match(other, { exists: false }, `${profile}: another workspace stays hidden`);
    t.match(hiddenDir, { exists: true, write: false }, `${profile}: the hidden directory is read-only`);
    t.match(rootDir, { exists: true, write: false }, `${profile}: the workspaces root is read-only`);
  }
});
