/**
 * Attacks on the identity helper: each case proves the helper refuses (with its documented
 * exit code) or that the confinement holds. Runs as root against the ASan/UBSan build, plus a
 * hardened setuid copy for the non-root caller cases.
 */
import t, { type Test } from 'tap';
import { closeChannelEnd, openListenerChannel } from '../../supervisor/turns/listener-channel.js';
import { execFileSync, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { HELPER_EXIT_CODES } from '../../supervisor/identity/helper-process.js';
import {
  asanHelper,
  buildNative,
  descriptorText,
  helperDir,
  makeTestCgroup,
  parseReport,
  reportSelf,
  runHelperRaw,
  runWithDescriptor,
  tempDir,
  uniqueUidRange,
  viewLines,
  writeConfig,
} from '../integration/identity-helper/fixture.js';

buildNative();
const dir = tempDir('helper-escape');
const uidRange = uniqueUidRange();
const cgroup = makeTestCgroup('escape');
const configPath = writeConfig(dir, { uidRange, cgroupRoots: [cgroup.root] });
const uid = uidRange.first + 7;
t.teardown(() => {
  cgroup.remove();
  fs.rmSync(dir, { recursive: true, force: true });
});

function launchLines(extra: string[], launchUid = uid): string {
  return descriptorText(['op launch', `uid ${launchUid}`, `gid ${launchUid}`, 'cwd /', ...viewLines(dir), ...extra]);
}

function expectRefusal(
  t: Test,
  run: { code: number | null; stdout: string; stderr: string },
  code: number,
  pattern: RegExp,
): void {
  t.equal(run.code, code, `exit code ${code}`);
  t.equal(run.stdout, '', 'no worker output');
  t.match(run.stderr, /^identity-helper: .+\n$/, 'exactly one identity-helper line');
  t.match(run.stderr, pattern);
}

t.test('uid outside the range is refused (above, below, zero)', async (t) => {
  for (const bad of [uidRange.first + uidRange.count, uidRange.first - 1, 0]) {
    expectRefusal(
      t,
      runHelperRaw(configPath, launchLines([], bad), dir),
      HELPER_EXIT_CODES.uid_out_of_range,
      /outside the worker range/,
    );
  }
  const probe = runHelperRaw(configPath, descriptorText(['op probe', `uid ${uidRange.first + uidRange.count}`]), dir);
  expectRefusal(t, probe, HELPER_EXIT_CODES.uid_out_of_range, /outside the worker range/);
});

t.test('gid different from uid is refused', async (t) => {
  const text = descriptorText(['op launch', `uid ${uid}`, `gid ${uid + 1}`, 'cwd /', ...viewLines(dir)]);
  expectRefusal(t, runHelperRaw(configPath, text, dir), HELPER_EXIT_CODES.uid_out_of_range, /gid .* must equal uid/);
});

t.test('a cgroup outside the allowed root is refused', async (t) => {
  const outside = path.join(path.dirname(cgroup.root), 'not-ours');
  expectRefusal(
    t,
    runHelperRaw(configPath, launchLines([`cgroup ${outside}`]), dir),
    HELPER_EXIT_CODES.cgroup_refused,
    /not beneath a cgroup_root/,
  );
  expectRefusal(
    t,
    runHelperRaw(configPath, launchLines([`cgroup ${cgroup.root}`]), dir),
    HELPER_EXIT_CODES.cgroup_refused,
    /not beneath/,
  );
  const dotdot = runHelperRaw(configPath, launchLines([`cgroup ${cgroup.root}/../not-ours`]), dir);
  expectRefusal(t, dotdot, HELPER_EXIT_CODES.descriptor_malformed, /canonical/);
});

t.test('a cgroup reached through a symlink is refused', async (t) => {
  // cgroupfs cannot hold symlinks, so the configured root is a plain directory whose entries
  // point into the real test cgroup: following them would succeed.
  const linkRoot = path.join(dir, 'link-root');
  fs.mkdirSync(linkRoot);
  fs.symlinkSync(cgroup.leaf, path.join(linkRoot, 'leaf-link'));
  fs.symlinkSync(cgroup.root, path.join(linkRoot, 'parent-link'));
  const linkConfig = writeConfig(dir, { uidRange, cgroupRoots: [linkRoot] }, 'link.conf');
  for (const target of ['leaf-link', 'parent-link/turn-1']) {
    const run = runHelperRaw(linkConfig, launchLines([`cgroup ${linkRoot}/${target}`]), dir);
    expectRefusal(t, run, HELPER_EXIT_CODES.cgroup_refused, /not a plain directory/);
  }
  t.equal(fs.readFileSync(path.join(cgroup.leaf, 'cgroup.procs'), 'utf8'), '', 'nothing joined the real cgroup');
});

t.test('a directory that is not a cgroup is refused', async (t) => {
  const plainRoot = path.join(dir, 'plain-root');
  fs.mkdirSync(path.join(plainRoot, 'turn'), { recursive: true });
  const plainConfig = writeConfig(dir, { uidRange, cgroupRoots: [plainRoot] }, 'plain.conf');
  const run = runHelperRaw(plainConfig, launchLines([`cgroup ${plainRoot}/turn`]), dir);
  expectRefusal(t, run, HELPER_EXIT_CODES.cgroup_refused, /not on a cgroup filesystem/);
});

t.test('malformed descriptors are refused', async (t) => {
  const malformed: Array<[string, string | Buffer, RegExp]> = [
    ['empty', '', /end of input/],
    ['no header', 'op probe\nend\n', /first line/],
    ['no end', 'turnhost-descriptor 2\nop probe\n', /end of input/],
    ['missing op', descriptorText([]), /missing required key 'op'/],
    ['missing cwd', descriptorText(['op launch', `uid ${uid}`, `gid ${uid}`]), /missing required key 'cwd'/],
    ['duplicate uid', descriptorText(['op probe', `uid ${uid}`, `uid ${uid}`]), /duplicate key 'uid'/],
    ['leading zero', descriptorText(['op probe', `uid 0${uid}`]), /uid: must be a decimal/],
    ['negative', descriptorText(['op probe', 'uid -1']), /uid: must be a decimal/],
    ['too large', descriptorText(['op probe', 'uid 4294967295']), /uid: must be a decimal/],
    ['hex', descriptorText(['op probe', 'uid 0x10']), /uid: must be a decimal/],
    ['NUL byte', Buffer.from(descriptorText(['op probe', `uid ${uid}\0`])), /control byte 0x00/],
    ['tab', descriptorText(['op\tprobe']), /control byte 0x09/],
    ['CR', descriptorText(['op probe\r']), /control byte 0x0d/],
    ['no value', descriptorText(['op']), /expected 'key value'/],
    ['uppercase key', descriptorText(['OP probe']), /key must be/],
    ['key for another op', descriptorText(['op probe', 'cwd /']), /not valid for op probe/],
    ['env without =', launchLines(['env NOVALUE']), /env: expected NAME=VALUE/],
    ['env duplicate', launchLines(['env A=1', 'env A=2']), /env: duplicate name/],
    ['relative cwd', descriptorText(['op launch', `uid ${uid}`, `gid ${uid}`, 'cwd tmp']), /cwd: must be a canonical/],
    ['hostname', launchLines(['hostname bad_name']), /hostname/],
    ['9 cgroups', launchLines(Array.from({ length: 9 }, (_, i) => `cgroup ${cgroup.root}/c${i}`)), /more than 8/],
    ['257 env', launchLines(Array.from({ length: 257 }, (_, i) => `env V${i}=x`)), /more than 256/],
    ['rlimit duplicate', launchLines(['rlimit nofile 10', 'rlimit nofile 10']), /duplicate nofile/],
    [
      'launch without a view',
      descriptorText(['op launch', `uid ${uid}`, `gid ${uid}`, 'cwd /']),
      /missing required key 'profile'/,
    ],
    ['protect escaping the workspace', launchLines(['protect read_only ../etc']), /protect: path must be relative/],
    ['protect absolute', launchLines(['protect mask_file /etc/shadow']), /protect: path must be relative/],
    ['protect dot', launchLines(['protect mask_directory .']), /protect: path must be relative/],
    ['protect without a path', launchLines(['protect mask_file']), /expected 'MODE RELPATH'/],
    ['65 protect', launchLines(Array.from({ length: 65 }, (_, i) => `protect read_only p${i}`)), /more than 64/],
    [
      'workspace /',
      descriptorText(['op view', 'profile governed', 'workspace /', 'path /']),
      /workspace: must be a canonical absolute path other than \//,
    ],
    [
      'protect without workspace',
      descriptorText(['op view', 'profile governed', 'protect read_only x', 'path /']),
      /need a workspace/,
    ],
    [
      'uid_search for view',
      descriptorText(['op view', 'profile governed', 'uid_search yes', 'path /']),
      /not valid for op view/,
    ],
    [
      'hide without workspace',
      descriptorText(['op view', 'profile governed', 'hide /var/lib/turnhost', 'path /']),
      /need a workspace/,
    ],
    ['hide relative', launchLines(['hide var/lib/turnhost']), /hide: must be a canonical absolute path other than \//],
    ['hide /', launchLines(['hide /']), /hide: must be a canonical absolute path other than \//],
    ['tmp_size too small', launchLines(['tmp_size 4096']), /tmp_size: bytes from/],
    ['tmp_size leading zero', launchLines(['tmp_size 0134217728']), /tmp_size: bytes from/],
    ['uid_search other than yes', launchLines(['uid_search no']), /uid_search: the only value is yes/],
  ];
  for (const [name, text, pattern] of malformed) {
    t.test(name, async (t) =>
      expectRefusal(t, runHelperRaw(configPath, text, dir), HELPER_EXIT_CODES.descriptor_malformed, pattern),
    );
  }
});

t.test('oversized descriptors are refused', async (t) => {
  const longLine = descriptorText(['op launch', `env LONG=${'x'.repeat(4096)}`]);
  expectRefusal(
    t,
    runHelperRaw(configPath, longLine, dir),
    HELPER_EXIT_CODES.descriptor_malformed,
    /longer than 4096 bytes/,
  );
  const manyLines = Array.from({ length: 40 }, (_, i) => `env A${i}=${'y'.repeat(2000)}`);
  const huge = descriptorText(['op launch', ...manyLines]);
  expectRefusal(
    t,
    runHelperRaw(configPath, huge, dir),
    HELPER_EXIT_CODES.descriptor_malformed,
    /larger than 65536 bytes/,
  );
});

t.test('unknown keys, versions, operations, rlimits and profiles are refused', async (t) => {
  const unknown: Array<[string, string, RegExp]> = [
    ['version 1', 'turnhost-descriptor 1\nop probe\nend\n', /unknown protocol version 1/],
    ['version 3', 'turnhost-descriptor 3\nop probe\nend\n', /unknown protocol version 3/],
    ['version 0', 'turnhost-descriptor 0\nop probe\nend\n', /unknown protocol version 0/],
    ['unknown key', descriptorText(['op probe', 'exec /bin/sh']), /unknown key 'exec'/],
    ['worker program key', launchLines(['worker_exec /bin/sh']), /unknown key 'worker_exec'/],
    ['unknown op', descriptorText(['op shell']), /unknown operation/],
    ['retired op reclaim', descriptorText(['op reclaim', `uid ${uid}`]), /unknown operation/],
    ['retired key temp', launchLines(['temp /run/turnhost/turn-temp/t1']), /unknown key 'temp'/],
    ['unknown rlimit', launchLines(['rlimit core 0']), /unknown name/],
    ['unknown profile', descriptorText(['op view', 'profile open', 'path /']), /unknown profile/],
    ['unknown protect mode', launchLines(['protect hide .env']), /protect: unknown mode/],
  ];
  for (const [name, text, pattern] of unknown) {
    t.test(name, async (t) =>
      expectRefusal(t, runHelperRaw(configPath, text, dir), HELPER_EXIT_CODES.descriptor_unknown, pattern),
    );
  }
});

t.test('an rlimit above the hard limit is refused (the helper only lowers)', async (t) => {
  const run = runHelperRaw(configPath, launchLines(['rlimit nofile 999999999999']), dir);
  expectRefusal(t, run, HELPER_EXIT_CODES.rlimit_refused, /would raise the hard limit/);
});

t.test('a config that is group-writable or a symlink is refused', async (t) => {
  const writable = writeConfig(dir, { uidRange }, 'writable.conf');
  fs.chmodSync(writable, 0o664);
  expectRefusal(
    t,
    runHelperRaw(writable, descriptorText(['op probe']), dir),
    HELPER_EXIT_CODES.config_invalid,
    /owned by root, not group\/other-writable/,
  );
  const link = path.join(dir, 'symlinked.conf');
  fs.symlinkSync(configPath, link);
  expectRefusal(
    t,
    runHelperRaw(link, descriptorText(['op probe']), dir),
    HELPER_EXIT_CODES.config_invalid,
    /cannot open/,
  );
});

t.test('a setuid-root binary run as the worker does not elevate', async (t) => {
  const setuidCopy = path.join(dir, 'report-self-setuid');
  fs.copyFileSync(reportSelf, setuidCopy);
  fs.chownSync(setuidCopy, 0, 0);
  fs.chmodSync(setuidCopy, 0o4755);
  // Control: without no_new_privs the bit works on this filesystem, so the case below is real.
  const control = spawnSync('setpriv', [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', setuidCopy], {
    encoding: 'utf8',
  });
  t.match(control.stdout, new RegExp(`^uid ${uid} 0 0$`, 'm'), 'control: setuid bit elevates without no_new_privs');
  // The copy lives under /tmp, which the view replaces: view_path keeps it (nosuid, like every
  // mount of the view, so no_new_privs and nosuid both stand in the way here).
  const setuidConfig = writeConfig(dir, { uidRange, workerExec: setuidCopy, viewPaths: [dir] }, 'setuid.conf');
  const run = runHelperRaw(setuidConfig, launchLines([]), dir);
  t.equal(run.code, 0, run.stderr);
  const report = parseReport(run.stdout);
  t.same(report.get('uid'), [`${uid} ${uid} ${uid}`], 'euid stays the worker uid');
  t.ok(report.get('status')?.includes('CapEff 0000000000000000'));
});

t.test('an fd the caller leaks beyond 3 never reaches the worker', async (t) => {
  const secret = path.join(dir, 'root-only-secret');
  fs.writeFileSync(secret, 'secret', { mode: 0o600 });
  const descriptorFile = path.join(dir, 'leak-descriptor');
  fs.writeFileSync(descriptorFile, launchLines([]));
  const descriptorFd = fs.openSync(descriptorFile, 'r');
  const leakedFds = [0, 1, 2].map(() => fs.openSync(secret, 'r'));
  try {
    const run = spawnSync(asanHelper, ['--config', configPath], {
      stdio: ['ignore', 'pipe', 'pipe', descriptorFd, ...leakedFds],
      encoding: 'utf8',
    });
    t.equal(run.status, 0, run.stderr);
    t.same(parseReport(run.stdout).get('fd'), ['0', '1', '2', '3']);
  } finally {
    for (const fd of [descriptorFd, ...leakedFds]) fs.closeSync(fd);
  }
});

t.test('fd 4 reaches the worker only as a unix SOCK_SEQPACKET socket, the listener channel', async (t) => {
  const descriptorFile = path.join(dir, 'channel-descriptor');
  fs.writeFileSync(descriptorFile, launchLines([]));
  const descriptorFd = fs.openSync(descriptorFile, 'r');
  const channel = openListenerChannel();
  if (!channel.ok) throw new Error(channel.detail);
  const secret = path.join(dir, 'root-only-secret-2');
  fs.writeFileSync(secret, 'secret', { mode: 0o600 });
  const leaked = fs.openSync(secret, 'r');
  try {
    const run = spawnSync(asanHelper, ['--config', configPath], {
      stdio: ['ignore', 'pipe', 'pipe', descriptorFd, channel.workerFd, leaked],
      encoding: 'utf8',
    });
    t.equal(run.status, 0, run.stderr);
    t.same(
      parseReport(run.stdout).get('fd'),
      ['0', '1', '2', '3', '4'],
      'the channel passes, the file after it does not',
    );
  } finally {
    for (const fd of [descriptorFd, leaked]) fs.closeSync(fd);
    closeChannelEnd(channel.workerFd);
    closeChannelEnd(channel.supervisorFd);
  }
});

t.test("the caller's supplementary groups never reach the worker", async (t) => {
  const run = runWithDescriptor(
    ['setpriv', '--groups=4,27,100', asanHelper, '--config', configPath],
    launchLines([]),
    dir,
  );
  t.equal(run.code, 0, run.stderr);
  t.same(parseReport(run.stdout).get('groups'), ['0']);
});

t.test('callers that are not root', async (t) => {
  const tag = crypto.randomBytes(3).toString('hex');
  const group = `thg${tag}`;
  const member = `thm${tag}`;
  const outsider = `tho${tag}`;
  const userDir = tempDir('helper-users');
  t.teardown(() => {
    for (const user of [member, outsider]) spawnSync('userdel', [user]);
    spawnSync('groupdel', [group]);
    fs.rmSync(userDir, { recursive: true, force: true });
  });
  execFileSync('groupadd', [group]);
  execFileSync('useradd', ['-M', '-N', '-g', 'nogroup', '-G', group, '-s', '/usr/sbin/nologin', member]);
  execFileSync('useradd', ['-M', '-N', '-g', 'nogroup', '-s', '/usr/sbin/nologin', outsider]);
  const compiledConfig = writeConfig(userDir, { uidRange, callerGroup: group });
  const otherConfig = writeConfig(userDir, { uidRange, callerGroup: 'nogroup' }, 'other.conf');
  // 4755 so the helper's own caller check is what refuses; 4750 is the production mode.
  const openHelper = path.join(userDir, 'identity-helper-4755');
  const productionHelper = path.join(userDir, 'identity-helper-4750');
  execFileSync('make', [
    '-s',
    '-C',
    helperDir,
    'custom',
    `CUSTOM_CONFIG_PATH=${compiledConfig}`,
    `CUSTOM_OUT=${openHelper}`,
  ]);
  fs.copyFileSync(openHelper, productionHelper);
  fs.chownSync(openHelper, 0, 0);
  fs.chmodSync(openHelper, 0o4755);
  fs.chownSync(
    productionHelper,
    0,
    Number(execFileSync('getent', ['group', group], { encoding: 'utf8' }).split(':')[2]),
  );
  fs.chmodSync(productionHelper, 0o4750);
  // runuser, not setpriv: setpriv keeps its capabilities until execve, so the kernel's exec
  // permission check (the 4750 case) would pass for anyone.
  const asUser = (user: string, helper: string, args: string[] = []): string[] => [
    'runuser',
    '-u',
    user,
    '--',
    helper,
    ...args,
  ];
  const probe = descriptorText(['op probe']);

  t.test('a member of caller_group may probe through the setuid helper', async (t) => {
    const run = runWithDescriptor(asUser(member, openHelper), probe, userDir);
    t.equal(run.code, 0, run.stderr);
    t.match(run.stdout, new RegExp(`^worker_ruid ${uidRange.first}$`, 'm'));
  });
  t.test('a caller not in caller_group is refused by the helper', async (t) => {
    const run = runWithDescriptor(asUser(outsider, openHelper), probe, userDir);
    expectRefusal(t, run, HELPER_EXIT_CODES.caller_not_permitted, /neither root nor in caller_group/);
    const launch = runWithDescriptor(asUser(outsider, openHelper), launchLines([], uidRange.first), userDir);
    expectRefusal(t, launch, HELPER_EXIT_CODES.caller_not_permitted, /neither root nor in caller_group/);
  });
  t.test('with the production mode 4750 a non-member cannot even execute it', async (t) => {
    const run = runWithDescriptor(asUser(outsider, productionHelper), probe, userDir);
    t.not(run.code, 0);
    t.match(run.stderr, /Permission denied/);
    const allowed = runWithDescriptor(asUser(member, productionHelper), probe, userDir);
    t.equal(allowed.code, 0, allowed.stderr);
  });
  t.test('a non-root caller cannot override the config', async (t) => {
    const run = runWithDescriptor(asUser(member, openHelper, ['--config', otherConfig]), probe, userDir);
    expectRefusal(t, run, HELPER_EXIT_CODES.caller_not_permitted, /--config requires real uid 0/);
  });
});
