import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { execFileSync, spawn } from 'node:child_process';
import type { HelperLaunchDescriptor } from '../../../supervisor/identity/helper-descriptor.js';
import { runHelperKill } from '../../../supervisor/identity/helper-kill.js';
import { spawnHelperLaunch } from '../../../supervisor/identity/helper-launch.js';
import { runHelperProbe } from '../../../supervisor/identity/helper-probe.js';
import { parseHelperRefusal, type HelperLocation } from '../../../supervisor/identity/helper-process.js';
import { runHelperView } from '../../../supervisor/identity/helper-view.js';
import {
  asanHelper,
  buildNative,
  descriptorText,
  helperDir,
  makeTestCgroup,
  reportSelf,
  parseReport,
  runHelperLaunch,
  runHelperRaw,
  tempDir,
  uniqueUidRange,
  viewKeys,
  viewLines,
  writeConfig,
  type RawRun,
} from './fixture.js';

buildNative();
const dir = tempDir('helper-it');
const uidRange = uniqueUidRange();
const cgroup = makeTestCgroup('it');
const configPath = writeConfig(dir, { uidRange, cgroupRoots: [cgroup.root] });
const helper: HelperLocation = { path: asanHelper, configPath };
t.teardown(() => {
  cgroup.remove();
  fs.rmSync(dir, { recursive: true, force: true });
});

function launchAndCollect(descriptor: Omit<HelperLaunchDescriptor, 'profile' | 'workspace'>): Promise<RawRun> {
  return runHelperLaunch(helper, { ...viewKeys(dir), ...descriptor });
}

t.test('probe proves the switch to the first uid of the range', async (t) => {
  const probe = await runHelperProbe(helper);
  if (!probe.ok) throw new Error(probe.detail);
  t.equal(probe.workerUid, uidRange.first);
  t.same(probe.uidRange, uidRange);
  t.equal(probe.helperVersion, '0.1.0');
  t.equal(probe.receipt.worker_groups, '0');
  t.equal(probe.receipt.worker_no_new_privs, '1');
  t.equal(probe.receipt.worker_cap_bnd, '0000000000000000');
  t.equal(probe.receipt.protocol_versions, '2');
  t.equal(probe.receipt.identity, 'separate');
});

t.test('probe with an explicit uid reports that uid', async (t) => {
  const probe = await runHelperProbe(helper, uidRange.first + 3);
  t.ok(probe.ok);
  if (probe.ok) t.equal(probe.workerUid, uidRange.first + 3);
});

t.test('launch runs the worker with exactly the documented confinement', async (t) => {
  const uid = uidRange.first + 1;
  const env = { PATH: '/usr/bin:/bin', TURN_ID: 'turn-it-1', WITH_SPACE: 'a b  c' };
  const run = await launchAndCollect({
    uid,
    gid: uid,
    cwd: '/',
    hostname: 'turn-it',
    cgroups: [cgroup.leaf],
    rlimits: { nofile: 256, nproc: 4096 },
    env,
  });
  t.equal(run.code, 0, run.stderr);
  const report = parseReport(run.stdout);
  t.same(report.get('uid'), [`${uid} ${uid} ${uid}`]);
  t.same(report.get('gid'), [`${uid} ${uid} ${uid}`]);
  t.same(report.get('groups'), ['0']);
  const status = new Map((report.get('status') ?? []).map((line) => line.split(' ') as [string, string]));
  t.equal(status.get('NoNewPrivs'), '1');
  t.equal(status.get('CapEff'), '0000000000000000');
  t.equal(status.get('CapPrm'), '0000000000000000');
  t.equal(status.get('CapBnd'), '0000000000000000');
  t.equal(status.get('CapAmb'), '0000000000000000');
  t.same(report.get('fd'), ['0', '1', '2', '3']);
  t.same(report.get('netdev'), ['lo up']);
  t.same(report.get('hostname'), ['turn-it']);
  t.same(report.get('cwd'), ['/']);
  t.same(
    (report.get('env') ?? []).sort(),
    Object.entries(env)
      .map(([k, v]) => `${k}=${v}`)
      .sort(),
  );
  // A cgroup namespace rooted at the leaf: the worker is at its root, and the leaf the view shows
  // at /sys/fs/cgroup/pids is the host's leaf (same inode) and holds the worker.
  const pidsLine = (report.get('cgroup') ?? []).find((line) => /^\d+:pids:/.test(line));
  t.match(pidsLine, /^\d+:pids:\/$/, 'the cgroup namespace is rooted at the worker cgroup');
  t.same(
    report.get('leaf')?.filter((line) => line.startsWith('pids ')),
    [`pids ${fs.statSync(cgroup.leaf).ino}`],
  );
  t.ok(report.get('leaf-proc')?.includes(`pids ${report.get('pid')?.[0]}`), 'the worker is in the leaf');
  t.ok(
    (report.get('limit') ?? []).some((line) => /^Max open files\s+256\s+256\s/.test(line)),
    'nofile lowered',
  );
});

t.test('fd 3 stays the protocol socket: the worker reads what the caller writes after the descriptor', async (t) => {
  const catConfig = writeConfig(
    dir,
    { uidRange, workerExec: '/bin/sh', workerArgs: ['-c', 'exec cat <&3'] },
    'cat.conf',
  );
  const uid = uidRange.first + 2;
  const { child, protocol } = spawnHelperLaunch(
    { path: asanHelper, configPath: catConfig },
    { uid, gid: uid, cwd: '/', ...viewKeys(dir) },
  );
  let stdout = '';
  child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  protocol.end('{"launch":"message"}\n');
  const code = await new Promise((resolve) => child.on('close', resolve));
  t.equal(code, 0);
  t.equal(stdout, '{"launch":"message"}\n');
});

t.test('a refused launch is reported through parseHelperRefusal', async (t) => {
  const run = await launchAndCollect({
    uid: uidRange.first + uidRange.count,
    gid: uidRange.first + uidRange.count,
    cwd: '/',
  });
  const refusal = parseHelperRefusal(run.code, run.stderr);
  t.equal(refusal?.reason, 'uid_out_of_range');
  t.match(refusal?.detail, /outside the worker range/);
  t.equal(run.stderr.trim().split('\n').length, 1, 'exactly one line on stderr');
});

t.test('launch into an unusable cwd fails with cwd_unusable', async (t) => {
  const uid = uidRange.first + 1;
  const run = await launchAndCollect({ uid, gid: uid, cwd: dir.replace(/[^/]+$/, 'no-such-dir-xyz') });
  t.equal(parseHelperRefusal(run.code, run.stderr)?.reason, 'cwd_unusable');
});

t.test('view reports read and write as the worker identity', async (t) => {
  const ownedByWorker = path.join(dir, 'worker-file');
  fs.writeFileSync(ownedByWorker, 'x', { mode: 0o600 });
  fs.chownSync(ownedByWorker, uidRange.first + 4, uidRange.first + 4);
  const view = await runHelperView(helper, {
    uid: uidRange.first + 4,
    profile: 'strict',
    paths: ['/etc/shadow', '/etc/passwd', ownedByWorker, '/nonexistent-turnhost-path'],
  });
  if (!view.ok) throw new Error(view.detail);
  t.equal(view.workerUid, uidRange.first + 4);
  t.equal(view.viewBuilt, false, 'no workspace: the host tree as it is');
  t.same(view.entries, [
    { path: '/etc/shadow', read: false, write: false, exists: true, empty: null },
    { path: '/etc/passwd', read: true, write: false, exists: true, empty: false },
    { path: ownedByWorker, read: true, write: true, exists: true, empty: false },
    { path: '/nonexistent-turnhost-path', read: false, write: false, exists: false, empty: null },
  ]);
});

/** Resolves once `pid` has exec'd sleep (setpriv switched its ids first). */
async function runningAsSleep(pid: number): Promise<void> {
  for (;;) {
    const comm = fs.readFileSync(`/proc/${pid}/comm`, 'utf8').trim();
    if (comm === 'sleep') return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

t.test('kill signals every live process of the worker uid and nothing else', async (t) => {
  const uid = uidRange.first + 5;
  const sleepers = [0, 1].map(() =>
    spawn('setpriv', [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', 'sleep', '300'], { stdio: 'ignore' }),
  );
  const bystander = spawn('setpriv', [`--reuid=${uid + 1}`, `--regid=${uid + 1}`, '--clear-groups', 'sleep', '300'], {
    stdio: 'ignore',
  });
  t.teardown(() => bystander.kill('SIGKILL'));
  await Promise.all([...sleepers, bystander].map((child) => runningAsSleep(child.pid ?? 0)));
  const exits = sleepers.map((child) => new Promise((resolve) => child.on('exit', (_code, signal) => resolve(signal))));
  const killed = await runHelperKill(helper, uid);
  if (!killed.ok) throw new Error(killed.detail);
  t.equal(killed.workerUid, uid);
  t.ok(killed.signalled >= 2);
  t.same(await Promise.all(exits), ['SIGKILL', 'SIGKILL']);
  t.equal(bystander.exitCode, null, 'a process of another uid is untouched');
  t.equal(bystander.signalCode, null);
});

t.test('kill refuses a uid outside the range', async (t) => {
  const killed = await runHelperKill(helper, 0);
  t.equal(killed.ok ? 'ok' : killed.reason, 'uid_out_of_range');
});

t.test('the helper never reads past the final end line of fd 3', async (t) => {
  const catConfig = writeConfig(
    dir,
    { uidRange, workerExec: '/bin/sh', workerArgs: ['-c', 'exec cat <&3'] },
    'cat-file.conf',
  );
  const uid = uidRange.first + 2;
  const descriptor = descriptorText([`op launch`, `uid ${uid}`, `gid ${uid}`, 'cwd /', ...viewLines(dir)]);
  const run = runHelperRaw(catConfig, descriptor + 'bytes after end reach the worker\n', dir);
  t.equal(run.code, 0, run.stderr);
  t.equal(run.stdout, 'bytes after end reach the worker\n');
});

t.test('uid_range_subuid takes the range from the subuid entry of the named user', async (t) => {
  const subuid = path.join(dir, 'subuid');
  fs.writeFileSync(subuid, `someone:100000:65536\nturnhost:${uidRange.first + 10}:5\nturnhost:1:1\n`, { mode: 0o644 });
  const binary = path.join(dir, 'identity-helper-subuid');
  execFileSync('make', [
    '-s',
    '-C',
    helperDir,
    'custom',
    `CUSTOM_CONFIG_PATH=/nonexistent`,
    `CUSTOM_OUT=${binary}`,
    `CUSTOM_SUBUID_PATH=${subuid}`,
  ]);
  const subuidConfig = path.join(dir, 'subuid.conf');
  fs.writeFileSync(subuidConfig, `uid_range_subuid turnhost\ncaller_group root\nworker_exec ${reportSelf}\n`, {
    mode: 0o644,
  });
  const probe = await runHelperProbe({ path: binary, configPath: subuidConfig });
  if (!probe.ok) throw new Error(probe.detail);
  t.same(probe.uidRange, { first: uidRange.first + 10, count: 5 }, 'first matching entry');
  t.equal(probe.workerUid, uidRange.first + 10);
  fs.chmodSync(subuid, 0o666);
  const writable = await runHelperProbe({ path: binary, configPath: subuidConfig });
  t.equal(writable.ok ? 'ok' : writable.reason, 'config_invalid', 'a writable subuid file is refused');
});
