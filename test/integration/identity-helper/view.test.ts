/**
 * The filesystem view the helper builds (docs/filesystem-view.md), seen by a real worker
 * identity: the `view` operation on a sentinel tree, and launches running /bin/sh as the
 * worker. Sentinel files and directories are world-writable, so a write that fails is refused
 * by the view's mounts, not by file permissions.
 */
import t from 'tap';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { HelperProfile, HelperProtectRule } from '../../../supervisor/identity/helper-descriptor.js';
import type { HelperLocation } from '../../../supervisor/identity/helper-process.js';
import { runHelperView } from '../../../supervisor/identity/helper-view.js';
import { probeMaskedView } from '../../../supervisor/probes/view.js';
import {
  asanHelper,
  buildNative,
  repoRoot,
  runHelperLaunch,
  tempDir,
  uniqueUidRange,
  writeConfig,
  type RawRun,
} from './fixture.js';

buildNative();
const dir = tempDir('helper-view');
const uidRange = uniqueUidRange();
const uid = uidRange.first + 11;
const otherUid = uidRange.first + 12;
const configPath = writeConfig(dir, { uidRange, viewPaths: [repoRoot] });
const shellConfig = writeConfig(
  dir,
  { uidRange, workerExec: '/bin/sh', workerArgs: ['-c', 'eval "$VIEW_SCRIPT"'] },
  'shell.conf',
);
const helper: HelperLocation = { path: asanHelper, configPath };
const hostTmpSentinel = fs.mkdtempSync('/tmp/turnhost-view-host-tmp-');
const varTmpProbe = `/var/tmp/turnhost-view-probe-${process.pid}`;
t.teardown(() => {
  fs.rmSync(dir, { recursive: true, force: true });
  fs.rmSync(hostTmpSentinel, { recursive: true, force: true });
  fs.rmSync(varTmpProbe, { force: true });
});

const workspace = path.join(dir, 'workspace');
const outsideSecret = path.join(dir, 'outside-secret.txt');

function writable(file: string, content: string): void {
  fs.writeFileSync(file, content);
  fs.chmodSync(file, 0o666);
}

function makeSentinelTree(): void {
  fs.rmSync(workspace, { recursive: true, force: true });
  fs.mkdirSync(path.join(workspace, 'secretdir'), { recursive: true });
  fs.mkdirSync(path.join(workspace, 'open'));
  for (const sub of ['', 'secretdir', 'open']) fs.chmodSync(path.join(workspace, sub), 0o777);
  writable(path.join(workspace, '.env'), 'API_KEY=sentinel-secret\n');
  writable(path.join(workspace, 'secretdir/key.pem'), 'sentinel-key\n');
  writable(path.join(workspace, 'locked.txt'), 'locked\n');
}

makeSentinelTree();
writable(outsideSecret, 'outside-sentinel\n');

const protect: HelperProtectRule[] = [
  { mode: 'mask_file', path: '.env' },
  { mode: 'mask_directory', path: 'secretdir' },
  { mode: 'read_only', path: 'locked.txt' },
  { mode: 'mask_file', path: 'absent/never-created' },
];

async function view(profile: HelperProfile, paths: string[], rules = protect) {
  const answer = await runHelperView(helper, { uid, profile, paths, workspace, protect: rules });
  if (!answer.ok) throw new Error(`${answer.reason}: ${answer.detail}`);
  t.ok(answer.viewBuilt);
  return new Map(answer.entries.map((entry) => [entry.path, entry]));
}

t.test('governed view: workspace writable, protected paths masked or read-only, host read-only', async (t) => {
  const ws = (name: string) => path.join(workspace, name);
  const seen = await view('governed', [
    workspace,
    ws('open'),
    ws('.env'),
    ws('secretdir'),
    ws('secretdir/key.pem'),
    ws('locked.txt'),
    '/usr',
    '/etc',
    '/var/tmp',
    '/dev/shm',
    '/dev/log',
    '/run/systemd',
    '/tmp',
    hostTmpSentinel,
    `/proc/${process.pid}`,
    '/proc/self/status',
    '/home',
  ]);
  t.match(seen.get(workspace), { read: true, write: true });
  t.match(seen.get(ws('open')), { write: true });
  t.match(seen.get(ws('.env')), { exists: true, read: true, write: false, empty: true }, 'masked file reads empty');
  t.match(seen.get(ws('secretdir')), { exists: true, write: false, empty: true }, 'masked directory is empty');
  t.match(seen.get(ws('secretdir/key.pem')), { exists: false }, 'nothing beneath a masked directory');
  t.match(
    seen.get(ws('locked.txt')),
    { read: true, write: false, empty: false },
    'read_only keeps content, refuses writes',
  );
  for (const hostPath of ['/usr', '/etc'])
    t.match(seen.get(hostPath), { exists: true, write: false }, `${hostPath} read-only`);
  for (const own of ['/tmp', '/var/tmp', '/dev/shm'])
    t.match(seen.get(own), { write: true }, `${own} is the turn's own`);
  t.match(seen.get(hostTmpSentinel), { exists: false }, "the host's /tmp is not visible");
  t.match(seen.get('/dev/log'), { exists: false }, "the host's /dev (and its log socket) is not visible");
  t.match(seen.get('/run/systemd'), { exists: false }, "the host's /run is not visible");
  t.match(seen.get(`/proc/${process.pid}`), { exists: false }, 'a process outside the turn is invisible in /proc');
  t.match(seen.get('/proc/self/status'), { exists: true, read: true }, 'own processes stay visible');
  t.match(seen.get('/home'), { exists: true }, 'governed keeps the host tree (read-only)');
});

t.test('strict view: minimal system, no /home or /etc/shadow, workspace read-only, /tmp writable', async (t) => {
  const ws = (name: string) => path.join(workspace, name);
  const seen = await view('strict', [
    workspace,
    ws('open'),
    ws('.env'),
    ws('secretdir'),
    ws('locked.txt'),
    '/dev/shm',
    '/usr/bin/env',
    '/bin/sh',
    '/etc/passwd',
    '/etc/shadow',
    '/home',
    '/root',
    '/var',
    '/dev/null',
    '/dev/urandom',
    '/tmp',
    path.join(repoRoot, 'dist'),
    `/proc/${process.pid}`,
  ]);
  t.match(seen.get(workspace), { read: true, write: false }, 'workspace read-only');
  t.match(seen.get(ws('open')), { write: false });
  t.match(seen.get(ws('.env')), { empty: true, write: false }, 'masks hold in strict too');
  t.match(seen.get(ws('secretdir')), { empty: true });
  t.match(seen.get('/dev/shm'), { write: true }, "the turn's own /dev/shm");
  t.match(seen.get('/usr/bin/env'), { exists: true, read: true, write: false });
  t.match(seen.get('/bin/sh'), { exists: true }, 'merged-usr symlinks recreated');
  t.match(seen.get('/etc/passwd'), { exists: true, write: false });
  for (const absent of ['/etc/shadow', '/home', '/root', '/var', `/proc/${process.pid}`])
    t.match(seen.get(absent), { exists: false }, `${absent} absent`);
  t.match(seen.get('/dev/null'), { read: true, write: true });
  t.match(seen.get('/dev/urandom'), { read: true });
  t.match(seen.get('/tmp'), { write: true });
  t.match(seen.get(path.join(repoRoot, 'dist')), { exists: true, write: false }, 'view_path kept read-only');
});

t.test('a protected path that is or crosses a symlink refuses the view', async (t) => {
  t.teardown(makeSentinelTree);
  const attacks: Array<[string, () => void, HelperProtectRule]> = [
    [
      'mask_file replaced by a link to an outside file',
      () => {
        fs.rmSync(path.join(workspace, '.env'));
        fs.symlinkSync(outsideSecret, path.join(workspace, '.env'));
      },
      { mode: 'mask_file', path: '.env' },
    ],
    [
      'read_only replaced by a link to a writable outside file',
      () => {
        fs.rmSync(path.join(workspace, 'locked.txt'));
        fs.symlinkSync(outsideSecret, path.join(workspace, 'locked.txt'));
      },
      { mode: 'read_only', path: 'locked.txt' },
    ],
    [
      'mask_directory replaced by a link to /etc',
      () => {
        fs.rmSync(path.join(workspace, 'secretdir'), { recursive: true });
        fs.symlinkSync('/etc', path.join(workspace, 'secretdir'));
      },
      { mode: 'mask_directory', path: 'secretdir' },
    ],
    [
      'a parent of the protected path is a link',
      () => {
        fs.symlinkSync(path.dirname(outsideSecret), path.join(workspace, 'parent'));
      },
      { mode: 'read_only', path: 'parent/outside-secret.txt' },
    ],
  ];
  for (const [name, plant, rule] of attacks) {
    makeSentinelTree();
    plant();
    const answer = await runHelperView(helper, {
      uid,
      profile: 'governed',
      paths: [workspace],
      workspace,
      protect: [rule],
    });
    t.equal(answer.ok ? 'ok' : answer.reason, 'view_refused', name);
    if (!answer.ok) t.match(answer.detail, /symbolic link/);
  }
  t.equal(fs.readFileSync(outsideSecret, 'utf8'), 'outside-sentinel\n', 'the outside file is untouched');
});

t.test('a mask_file with a second hard link is refused', async (t) => {
  t.teardown(makeSentinelTree);
  fs.linkSync(path.join(workspace, '.env'), path.join(workspace, 'open/copy'));
  const answer = await runHelperView(helper, {
    uid,
    profile: 'governed',
    paths: [workspace],
    workspace,
    protect,
  });
  t.equal(answer.ok ? 'ok' : answer.reason, 'view_refused');
  if (!answer.ok) t.match(answer.detail, /hard links/);
});

t.test('workspace, hidden and view paths are refused when they are links or the wrong kind', async (t) => {
  const linkedWorkspace = path.join(dir, 'workspace-link');
  fs.symlinkSync(workspace, linkedWorkspace);
  // Outside the /tmp the view replaces, so the view still shows it.
  const linkedHidden = path.join(repoRoot, `.turnhost-hide-link-${process.pid}`);
  fs.symlinkSync(path.join(repoRoot, 'docs'), linkedHidden);
  t.teardown(() => fs.rmSync(linkedHidden, { force: true }));
  const cases: Array<[string, Parameters<typeof runHelperView>[1], RegExp]> = [
    [
      'workspace link',
      { uid, profile: 'governed', paths: ['/'], workspace: linkedWorkspace },
      /workspace .* symbolic link/,
    ],
    [
      'workspace file',
      { uid, profile: 'governed', paths: ['/'], workspace: outsideSecret },
      /workspace .* is not a directory/,
    ],
    [
      'a hidden path through a link',
      { uid, profile: 'governed', paths: ['/'], workspace, hide: [path.join(linkedHidden, 'architecture.md')] },
      /hide .* symbolic link/,
    ],
    [
      'mask_directory on a file',
      { uid, profile: 'governed', paths: ['/'], workspace, protect: [{ mode: 'mask_directory', path: '.env' }] },
      /not a directory/,
    ],
    [
      'mask_file on a directory',
      { uid, profile: 'governed', paths: ['/'], workspace, protect: [{ mode: 'mask_file', path: 'open' }] },
      /is a directory/,
    ],
  ];
  for (const [name, request, pattern] of cases) {
    const answer = await runHelperView(helper, request);
    t.equal(answer.ok ? 'ok' : answer.reason, 'view_refused', name);
    if (!answer.ok) t.match(answer.detail, pattern, name);
  }
  const linkedViewPath = path.join(dir, 'view-path-link');
  fs.symlinkSync(repoRoot, linkedViewPath);
  const linkedConfig = writeConfig(dir, { uidRange, viewPaths: [linkedViewPath] }, 'linked-view.conf');
  const answer = await runHelperView(
    { path: asanHelper, configPath: linkedConfig },
    { uid, profile: 'strict', paths: ['/'], workspace },
  );
  t.equal(answer.ok ? 'ok' : answer.reason, 'view_refused', 'a view_path through a link');
});

function launchShell(
  profile: HelperProfile,
  script: string,
  rules = protect,
  extra: { hide?: string[]; tmpSize?: number } = {},
): Promise<RawRun> {
  return runHelperLaunch(
    { path: asanHelper, configPath: shellConfig },
    {
      uid,
      gid: uid,
      cwd: workspace,
      profile,
      workspace,
      protect: rules,
      ...extra,
      env: { PATH: '/usr/bin:/bin', VIEW_SCRIPT: script, WS: workspace, TEMPDIR: '/tmp' },
    },
  );
}

const TRY_WRITE =
  'w() { if (echo probe >> "$1") 2>/dev/null; then echo "write $1 yes"; else echo "write $1 no"; fi; }; ';

t.test('a governed worker: real writes, reads and /proc', async (t) => {
  const sleeper = spawn('setpriv', [`--reuid=${otherUid}`, `--regid=${otherUid}`, '--clear-groups', 'sleep', '300'], {
    stdio: 'ignore',
  });
  t.teardown(() => sleeper.kill('SIGKILL'));
  const script =
    TRY_WRITE +
    [
      `w /etc/turnhost-probe; w ${varTmpProbe}; w $WS/open/new; w $WS/new; w $WS/.env; w $WS/locked.txt; w $WS/secretdir/new; w $TEMPDIR/new; w /tmp/new`,
      'echo "env [$(cat $WS/.env)]"',
      'echo "secretdir [$(ls -A $WS/secretdir)]"',
      'echo "locked [$(cat $WS/locked.txt)]"',
      'if rm -f $WS/locked.txt 2>/dev/null; then echo "remove locked yes"; else echo "remove locked no"; fi',
      `if [ -e /proc/${sleeper.pid} ]; then echo "sleeper visible"; else echo "sleeper hidden"; fi`,
      'if [ -e /proc/$$ ]; then echo "self visible"; fi',
    ].join('; ');
  const run = await launchShell('governed', script);
  t.equal(run.code, 0, run.stderr);
  for (const refused of ['/etc/turnhost-probe', '$WS/.env', '$WS/locked.txt', '$WS/secretdir/new'])
    t.match(run.stdout, `write ${refused.replace('$WS', workspace)} no`, `${refused} refused`);
  for (const allowed of ['$WS/open/new', '$WS/new', '$TEMPDIR/new', '/tmp/new', varTmpProbe])
    t.match(
      run.stdout,
      `write ${allowed.replace('$WS', workspace).replace('$TEMPDIR', '/tmp')} yes`,
      `${allowed} writable`,
    );
  t.notOk(fs.existsSync(varTmpProbe), "the /var/tmp write stayed in the turn's own tmpfs");
  t.match(run.stdout, 'env []', 'masked file reads empty');
  t.match(run.stdout, 'secretdir []', 'masked directory is empty');
  t.match(run.stdout, 'locked [locked]');
  t.match(run.stdout, 'remove locked no');
  t.match(run.stdout, 'sleeper hidden');
  t.match(run.stdout, 'self visible');
  t.equal(
    fs.readFileSync(path.join(workspace, '.env'), 'utf8'),
    'API_KEY=sentinel-secret\n',
    'the real file is unchanged',
  );
  t.equal(fs.readFileSync(path.join(workspace, 'locked.txt'), 'utf8'), 'locked\n');
  t.ok(fs.existsSync(path.join(workspace, 'new')), 'the workspace write landed on the host');
  t.notOk(fs.existsSync(path.join(hostTmpSentinel, '..', 'new')), "the /tmp write stayed in the worker's /tmp");
});

t.test('a strict worker cannot write its workspace and sees no /home', async (t) => {
  const script =
    TRY_WRITE +
    [
      'w $WS/new-strict; w $WS/open/new-strict; w $TEMPDIR/strict; w /tmp/strict',
      'if [ -e /home ]; then echo "home visible"; else echo "home absent"; fi',
      'if [ -e /etc/shadow ]; then echo "shadow visible"; else echo "shadow absent"; fi',
      'echo "env [$(cat $WS/.env)]"',
    ].join('; ');
  const run = await launchShell('strict', script);
  t.equal(run.code, 0, run.stderr);
  t.match(run.stdout, `write ${workspace}/new-strict no`);
  t.match(run.stdout, `write ${workspace}/open/new-strict no`);
  t.match(run.stdout, 'write /tmp/strict yes');
  t.match(run.stdout, 'home absent');
  t.match(run.stdout, 'shadow absent');
  t.match(run.stdout, 'env []');
});

t.test('a launch whose protected path was swapped for a symlink runs nothing', async (t) => {
  t.teardown(makeSentinelTree);
  fs.rmSync(path.join(workspace, 'locked.txt'));
  fs.symlinkSync(outsideSecret, path.join(workspace, 'locked.txt'));
  const run = await launchShell('governed', 'echo ran; echo overwritten > $WS/locked.txt; cat $WS/locked.txt');
  t.equal(run.code, 78, 'view_refused');
  t.equal(run.stdout, '', 'the worker never ran');
  t.match(run.stderr, /read_only locked\.txt is or passes through a symbolic link/);
  t.equal(fs.readFileSync(outsideSecret, 'utf8'), 'outside-sentinel\n');
});

t.test('the probe verifies both profiles on its own sentinel tree', async (t) => {
  const options = { workerUid: uid, hide: [], ownState: [] };
  for (const profile of ['governed', 'strict'] as const) {
    const probed = await probeMaskedView((request) => runHelperView(helper, request), profile, options);
    t.equal(probed.requirement, undefined, `${profile} holds`);
  }
  const broken = writeConfig(dir, { uidRange, viewPaths: ['/nonexistent-turnhost-view-path'] }, 'broken-view.conf');
  const probed = await probeMaskedView(
    (request) => runHelperView({ path: asanHelper, configPath: broken }, request),
    'governed',
    options,
  );
  t.match(
    probed.requirement,
    /the governed worker view cannot be built: view: view_path \/nonexistent-turnhost-view-path/,
  );
});

t.test('hidden host paths show empty in the view; an absent one is skipped; the host copy is untouched', async (t) => {
  // Outside /tmp, which the view replaces anyway; beneath the checkout, a view path of strict.
  const hiddenDir = path.join(repoRoot, `.turnhost-hide-test-${process.pid}`);
  const hiddenFile = `${hiddenDir}-file`;
  fs.mkdirSync(hiddenDir, { recursive: true });
  fs.writeFileSync(path.join(hiddenDir, 'database'), 'sentinel-state\n');
  writable(hiddenFile, 'api-token\n');
  t.teardown(() => fs.rmSync(hiddenDir, { recursive: true, force: true }));
  t.teardown(() => fs.rmSync(hiddenFile, { force: true }));
  const hide = [hiddenDir, hiddenFile, path.join(repoRoot, '.turnhost-never-created')];
  for (const profile of ['governed', 'strict'] as const) {
    const script =
      TRY_WRITE +
      `echo "dir [$(ls -A ${hiddenDir} 2>&1)]"; echo "file [$(cat ${hiddenFile} 2>&1)]"; w ${hiddenDir}/x; w ${hiddenFile}`;
    const run = await launchShell(profile, script, protect, { hide });
    t.equal(run.code, 0, run.stderr);
    t.match(run.stdout, `dir []`, `${profile}: a hidden directory is empty`);
    t.match(run.stdout, `write ${hiddenDir}/x no`, `${profile}: and read-only`);
    t.match(run.stdout, 'file []', `${profile}: a hidden file reads empty`);
    t.match(run.stdout, `write ${hiddenFile} no`, `${profile}: and refuses writes`);
  }
  t.equal(fs.readFileSync(path.join(hiddenDir, 'database'), 'utf8'), 'sentinel-state\n');
  t.equal(fs.readFileSync(hiddenFile, 'utf8'), 'api-token\n');
});

t.test("tmp_size bounds the turn's /tmp and /dev/shm; the host's /tmp is untouched", async (t) => {
  const MiB = 1024 * 1024;
  const script = [
    'df -k /tmp /dev/shm | tail -2',
    'if dd if=/dev/zero of=/tmp/fill bs=1M count=8 2>/dev/null; then echo "tmp filled"; else echo "tmp full"; fi',
    'if dd if=/dev/zero of=/dev/shm/fill bs=1M count=8 2>/dev/null; then echo "shm filled"; else echo "shm full"; fi',
    'du -k /tmp/fill',
  ].join('; ');
  const run = await launchShell('governed', script, protect, { tmpSize: 4 * MiB });
  t.equal(run.code, 0, run.stderr);
  t.match(run.stdout, /\s4096\s+0\s+4096\s+0% \/tmp$/m, '/tmp is a 4 MiB tmpfs');
  t.match(run.stdout, /\s4096\s+0\s+4096\s+0% \/dev\/shm$/m, '/dev/shm is another of 4 MiB');
  t.match(run.stdout, 'tmp full', 'writing 8 MiB into a 4 MiB /tmp stops');
  t.match(run.stdout, 'shm full', 'so does /dev/shm');
  t.match(run.stdout, /^4096\s+\/tmp\/fill$/m, 'the file stopped at the bound');
  t.notOk(fs.existsSync('/tmp/fill'), "nothing reached the host's /tmp");
});
