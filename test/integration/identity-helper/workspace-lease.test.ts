/**
 * Workspace uid leases against the real helper (ASan build), real uids, as root: lease, usage,
 * release, mkdir, leased and unleased launches. Every lease record, uid lock and workspace lives under
 * this test's own temp directory (a private config), never the system lease directory.
 */
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { spawn, type ChildProcess } from 'node:child_process';
import { spawnHelperLaunch } from '../../../supervisor/identity/helper-launch.js';
import { runHelperLease } from '../../../supervisor/identity/helper-lease.js';
import { parseHelperRefusal, type HelperLocation } from '../../../supervisor/identity/helper-process.js';
import {
  runHelperMakeDirectory,
  runHelperRelease,
  runHelperUsage,
} from '../../../supervisor/identity/helper-workspace-tree.js';
import {
  asanHelper,
  buildNative,
  descriptorText,
  leaseWorkspace,
  parseReport,
  runHelperLaunch,
  runHelperRaw,
  tempDir,
  uniqueUidRange,
  writeConfig,
} from './fixture.js';
import { until } from '../../support/until.js';

buildNative();
const dir = tempDir('ws-lease');
const uidRange = uniqueUidRange();
const workspaceRoot = path.join(dir, 'workspaces');
fs.mkdirSync(workspaceRoot, { mode: 0o755 });
const privateDirs = { uidLockDir: path.join(dir, 'locks'), uidLeaseDir: path.join(dir, 'leases') };
const configPath = writeConfig(dir, { uidRange, workspaceRoots: [workspaceRoot], ...privateDirs });
const OWNER = 'own_first';
const helper: HelperLocation = { path: asanHelper, configPath, owner: OWNER };
const started: ChildProcess[] = [];
t.teardown(() => {
  for (const child of started) child.kill('SIGKILL');
  fs.rmSync(dir, { recursive: true, force: true });
});

const workspaceOf = (id: string): string => path.join(workspaceRoot, id);

function lease(id: string, uid = uidRange.first): Promise<{ uid: number; existing: boolean }> {
  return leaseWorkspace(helper, workspaceRoot, id, uid);
}

t.test('a lease is made once and answered again with the same uid', async (t) => {
  const first = await lease('same-1');
  t.same(first, { uid: uidRange.first, existing: false });
  const again = await lease('same-1', uidRange.first + 5);
  t.same(again, { uid: first.uid, existing: true }, 'the search start does not matter for an existing lease');
  const stat = fs.statSync(workspaceOf('same-1'));
  t.equal(stat.uid, first.uid, 'the workspace belongs to the leased uid');
  t.equal(stat.gid, process.getgid?.(), "its group is the caller's");
  t.equal(stat.mode & 0o7777, 0o2770);
  const record = fs.statSync(path.join(privateDirs.uidLeaseDir, 'same-1'));
  t.equal(record.uid, 0);
  t.equal(record.mode & 0o777, 0o600);
  t.equal(fs.statSync(privateDirs.uidLeaseDir).mode & 0o777, 0o700, 'the lease directory is private');
  t.match(fs.readFileSync(path.join(privateDirs.uidLeaseDir, 'same-1'), 'utf8'), `uid ${first.uid}\n`);
});

t.test('two workspaces get two uids, and a new helper process sees both leases', async (t) => {
  const a = await lease('pair-a', uidRange.first + 10);
  const b = await lease('pair-b', uidRange.first + 10);
  t.not(a.uid, b.uid);
  // Every helper run is a new process: what it knows of the leases comes from the records.
  t.same(await lease('pair-a'), { uid: a.uid, existing: true });
  t.same(await lease('pair-b'), { uid: b.uid, existing: true });
});

t.test('usage counts allocated bytes and non-directories, and follows no link', async (t) => {
  await lease('usage-1', uidRange.first + 12);
  const workspace = workspaceOf('usage-1');
  fs.mkdirSync(path.join(workspace, 'a/b/c'), { recursive: true });
  fs.writeFileSync(path.join(workspace, 'a/b/c/data'), Buffer.alloc(1 << 20, 7));
  fs.writeFileSync(path.join(workspace, 'a/small'), 'x');
  const big = path.join(dir, 'big-outside');
  fs.writeFileSync(big, Buffer.alloc(8 << 20, 1));
  fs.symlinkSync(big, path.join(workspace, 'a/link-to-big-file'));
  fs.symlinkSync(dir, path.join(workspace, 'link-to-outside-dir'));
  let expectedBytes = 0;
  let expectedFiles = 0;
  const measure = (entry: string): void => {
    const stat = fs.lstatSync(entry);
    expectedBytes += stat.blocks * 512;
    if (!stat.isDirectory()) expectedFiles++;
    else for (const name of fs.readdirSync(entry)) measure(path.join(entry, name));
  };
  measure(workspace);
  const usage = await runHelperUsage(helper, { lease: 'usage-1', workspace });
  if (!usage.ok) throw new Error(usage.detail);
  t.equal(usage.files, 4, 'two files and two symlinks');
  t.equal(usage.files, expectedFiles);
  t.equal(usage.bytes, expectedBytes);
  t.ok(usage.bytes >= 1 << 20, 'the 1 MiB file is counted');
  t.ok(usage.bytes < 8 << 20, 'the 8 MiB file behind the link is not');
  t.equal(usage.complete, true, 'a walk within its bounds is a complete measure');
});

t.test('the usage answer is bytes, files, complete yes and image no for a plain tree within the bounds', async (t) => {
  await lease('usage-answer', uidRange.first + 14);
  const workspace = workspaceOf('usage-answer');
  fs.mkdirSync(path.join(workspace, 'd'));
  fs.writeFileSync(path.join(workspace, 'd/one'), 'x');
  fs.writeFileSync(path.join(workspace, 'two'), 'y');
  const run = runHelperRaw(
    configPath,
    descriptorText(['op usage', 'lease usage-answer', `owner ${OWNER}`, `workspace ${workspace}`]),
    dir,
  );
  t.equal(run.code, 0, run.stderr);
  t.match(run.stdout, /^bytes \d+\nfiles 2\ncomplete yes\nimage no\n$/);
});

t.test("mkdir makes the missing directories owned by the lease's uid, for its owner only", async (t) => {
  const { uid } = await lease('mkdir-1', uidRange.first + 9);
  const workspace = workspaceOf('mkdir-1');
  const request = (dir: string) => ({ lease: 'mkdir-1', workspace, dir });
  const made = await runHelperMakeDirectory(helper, request('a/b/c'));
  t.same(made, { ok: true, made: 3 });
  for (const dir of ['a', 'a/b', 'a/b/c']) {
    const stat = fs.lstatSync(path.join(workspace, dir));
    t.equal(stat.uid, uid, `${dir}: the lease's uid`);
    t.equal(stat.gid, process.getgid?.(), `${dir}: the caller's group`);
    t.equal(stat.mode & 0o7777, 0o2770, `${dir}: 02770`);
  }
  t.same(await runHelperMakeDirectory(helper, request('a/b/c')), { ok: true, made: 0 }, 'existing: none made');

  const other = await runHelperMakeDirectory({ ...helper, owner: 'own_other' }, request('x'));
  t.equal(other.ok ? 'ok' : other.reason, 'lease_owner_mismatch', "another owner's mkdir is refused");
  t.notOk(fs.existsSync(path.join(workspace, 'x')));

  const outside = path.join(dir, 'mkdir-outside');
  fs.mkdirSync(outside, { mode: 0o777 });
  fs.symlinkSync(outside, path.join(workspace, 'out'));
  const viaLink = await runHelperMakeDirectory(helper, request('out/evil'));
  t.equal(viaLink.ok ? 'ok' : viaLink.reason, 'lease_refused');
  t.match(viaLink.ok ? '' : viaLink.detail, /is a symlink/);
  t.same(fs.readdirSync(outside), [], 'nothing made through the link');
  fs.writeFileSync(path.join(workspace, 'file'), 'x');
  const viaFile = await runHelperMakeDirectory(helper, request('file/sub'));
  t.match(viaFile.ok ? '' : viaFile.detail, /is not a directory/);
  const escape = await runHelperMakeDirectory(helper, request('../mkdir-escaped'));
  t.notOk(escape.ok, 'a .. component is refused');
  t.notOk(fs.existsSync(path.join(workspaceRoot, 'mkdir-escaped')));
  const elsewhere = await runHelperMakeDirectory(helper, { ...request('y'), workspace: workspaceOf('same-1') });
  t.equal(elsewhere.ok ? 'ok' : elsewhere.reason, 'lease_refused', "another workspace than the lease's");
});

t.test('release removes the tree and the lease, then the id leases anew', async (t) => {
  const { uid } = await lease('release-1', uidRange.first + 13);
  const workspace = workspaceOf('release-1');
  fs.mkdirSync(path.join(workspace, 'deep/er'), { recursive: true });
  fs.writeFileSync(path.join(workspace, 'deep/er/file'), Buffer.alloc(65536, 3));
  const released = await runHelperRelease(helper, { lease: 'release-1', workspace });
  if (!released.ok) throw new Error(released.detail);
  t.equal(released.uid, uid);
  t.equal(released.removedFiles, 1);
  t.ok(released.removedBytes >= 65536);
  t.notOk(fs.existsSync(workspace), 'the workspace is gone');
  t.notOk(fs.existsSync(path.join(privateDirs.uidLeaseDir, 'release-1')), 'the record is gone');
  const again = await runHelperRelease(helper, { lease: 'release-1', workspace });
  t.equal(again.ok ? 'ok' : again.reason, 'lease_refused', 'a lease that does not exist is refused');
  t.same((await lease('release-1', uid)).existing, false);
});

t.test('release is refused while a process of the uid lives', async (t) => {
  const { uid } = await lease('busy-proc', uidRange.first + 15);
  const workspace = workspaceOf('busy-proc');
  fs.writeFileSync(path.join(workspace, 'kept'), 'still here');
  const sleeper = spawn('setpriv', [`--reuid=${uid}`, `--regid=${uid}`, '--clear-groups', 'sleep', '600'], {
    stdio: 'ignore',
  });
  started.push(sleeper);
  t.ok(
    await until(() => {
      try {
        return fs.statSync(`/proc/${sleeper.pid}`).uid === uid;
      } catch {
        return false;
      }
    }, 10_000),
    'a process of the uid runs',
  );
  const refused = await runHelperRelease(helper, { lease: 'busy-proc', workspace });
  t.equal(refused.ok ? 'ok' : refused.reason, 'workspace_busy');
  t.match(refused.ok ? '' : refused.detail, /process of its uid/);
  t.equal(fs.readFileSync(path.join(workspace, 'kept'), 'utf8'), 'still here', 'nothing was removed');
  sleeper.kill('SIGKILL');
  await new Promise((resolve) => sleeper.on('close', resolve));
  const released = await runHelperRelease(helper, { lease: 'busy-proc', workspace });
  t.ok(released.ok, released.ok ? '' : released.detail);
});

t.test('an unleased launch never gets a leased uid', async (t) => {
  // A private range of three uids, two of them leased.
  const small = { first: uidRange.first + 16, count: 3 };
  const smallConfig = writeConfig(
    dir,
    { uidRange: small, workspaceRoots: [workspaceRoot], ...privateDirs },
    'small.conf',
  );
  const smallHelper: HelperLocation = { path: asanHelper, configPath: smallConfig, owner: OWNER };
  const leaseSmall = async (id: string): Promise<number> => {
    const result = await runHelperLease(smallHelper, { uid: small.first, lease: id, workspace: workspaceOf(id) });
    if (!result.ok) throw new Error(result.detail);
    return result.uid;
  };
  const leased = [await leaseSmall('small-a'), await leaseSmall('small-b')];
  t.same(leased, [small.first, small.first + 1]);
  const viewWorkspace = path.join(dir, 'unleased-view');
  fs.mkdirSync(viewWorkspace, { mode: 0o777 });
  const launch = (uid: number, uidSearch: boolean) =>
    runHelperLaunch(smallHelper, {
      uid,
      gid: uid,
      uidSearch,
      cwd: '/',
      profile: 'governed',
      workspace: viewWorkspace,
    });
  const searched = await launch(small.first, true);
  t.equal(searched.code, 0, searched.stderr);
  t.same(parseReport(searched.stdout).get('uid'), [`${small.first + 2} ${small.first + 2} ${small.first + 2}`]);
  const exact = await launch(small.first + 1, false);
  t.equal(parseHelperRefusal(exact.code, exact.stderr)?.reason, 'uid_in_use', 'a leased uid asked exactly');
  t.match(exact.stderr, /workspace/);
  await leaseSmall('small-c');
  const full = await launch(small.first, true);
  t.equal(parseHelperRefusal(full.code, full.stderr)?.reason, 'uid_in_use', 'every uid leased');
  for (const id of ['small-a', 'small-b', 'small-c']) {
    const released = await runHelperRelease(smallHelper, { lease: id, workspace: workspaceOf(id) });
    t.ok(released.ok, id);
  }
});

t.test('leased launches run as the lease uid, together; release waits for them', async (t) => {
  const { uid } = await lease('shared-turns', uidRange.first + 6);
  const workspace = workspaceOf('shared-turns');
  const shConfig = writeConfig(
    dir,
    {
      uidRange,
      workspaceRoots: [workspaceRoot],
      ...privateDirs,
      workerExec: '/bin/sh',
      workerArgs: ['-c', 'id -u > .started-$N && mv .started-$N started-$N; while [ ! -e go ]; do sleep 0.05; done'],
    },
    'sh.conf',
  );
  const shHelper: HelperLocation = { path: asanHelper, configPath: shConfig, owner: OWNER };
  const turns = [1, 2].map((n) => {
    const { child, protocol } = spawnHelperLaunch(
      shHelper,
      {
        uid,
        gid: uid,
        lease: 'shared-turns',
        owner: OWNER,
        cwd: workspace,
        profile: 'governed',
        workspace,
        env: { N: String(n) },
      },
      { stdio: 'pipe' },
    );
    protocol.on('error', () => undefined);
    child.stdin?.end();
    started.push(child);
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    return new Promise<{ code: number | null; stderr: string }>((resolve) =>
      child.on('close', (code) => {
        protocol.destroy();
        resolve({ code, stderr });
      }),
    );
  });
  const startedFiles = (): string[] => fs.readdirSync(workspace).filter((name) => name.startsWith('started-'));
  t.ok(await until(() => startedFiles().length === 2, 60_000), 'both turns run at once');
  for (const name of startedFiles()) {
    t.equal(fs.readFileSync(path.join(workspace, name), 'utf8').trim(), String(uid), `${name} ran as the lease uid`);
  }
  const busy = await runHelperRelease(helper, { lease: 'shared-turns', workspace });
  t.equal(busy.ok ? 'ok' : busy.reason, 'workspace_busy', 'release refused while turns hold the uid');
  t.match(busy.ok ? '' : busy.detail, /a turn holds its uid/);
  fs.writeFileSync(path.join(workspace, 'go'), '');
  for (const turn of await Promise.all(turns)) t.equal(turn.code, 0, turn.stderr);
  const released = await runHelperRelease(helper, { lease: 'shared-turns', workspace });
  t.ok(released.ok, released.ok ? '' : released.detail);
});

t.test('a leased launch must name the lease uid and stay in its workspace', async (t) => {
  const { uid } = await lease('launch-checks', uidRange.first + 7);
  const workspace = workspaceOf('launch-checks');
  const base = { lease: 'launch-checks', owner: OWNER, cwd: '/', profile: 'governed' as const, workspace };
  const wrongUid = await runHelperLaunch(helper, { ...base, uid: uid + 1, gid: uid + 1 });
  t.equal(parseHelperRefusal(wrongUid.code, wrongUid.stderr)?.reason, 'uid_out_of_range');
  t.match(wrongUid.stderr, new RegExp(`uid must be ${uid}`));
  const elsewhere = path.join(dir, 'not-the-workspace');
  fs.mkdirSync(elsewhere, { recursive: true });
  const outside = await runHelperLaunch(helper, { ...base, uid, gid: uid, workspace: elsewhere });
  t.equal(parseHelperRefusal(outside.code, outside.stderr)?.reason, 'lease_refused');
  const noLease = await runHelperLaunch(helper, { ...base, lease: 'no-such-lease', uid, gid: uid });
  t.equal(parseHelperRefusal(noLease.code, noLease.stderr)?.reason, 'lease_refused');
  const ran = await runHelperLaunch(helper, { ...base, uid, gid: uid });
  t.equal(ran.code, 0, ran.stderr);
  t.same(parseReport(ran.stdout).get('uid'), [`${uid} ${uid} ${uid}`]);
});

t.test('lease descriptors are refused on their syntax, naming the field', async (t) => {
  for (const id of ['bad.id', 'a/b', '', 'x'.repeat(65)]) {
    const run = runHelperRaw(
      configPath,
      descriptorText([
        'op lease',
        `uid ${uidRange.first}`,
        `lease ${id}`,
        `owner ${OWNER}`,
        `workspace ${workspaceRoot}/x`,
      ]),
      dir,
    );
    t.equal(parseHelperRefusal(run.code, run.stderr)?.reason, 'descriptor_malformed', JSON.stringify(id));
    if (id !== '') t.match(run.stderr, /lease: 1-64 bytes of \[A-Za-z0-9_-\]/);
  }
  const withUid = runHelperRaw(
    configPath,
    descriptorText(['op usage', `uid ${uidRange.first}`, 'lease u', `owner ${OWNER}`, `workspace ${workspaceRoot}/u`]),
    dir,
  );
  t.equal(parseHelperRefusal(withUid.code, withUid.stderr)?.reason, 'descriptor_malformed');
  t.match(withUid.stderr, /key 'uid' not valid for op usage/);
  const missing = runHelperRaw(configPath, descriptorText(['op release', 'lease u', `owner ${OWNER}`]), dir);
  t.match(missing.stderr, /missing required key 'workspace' for op release/);
});

t.test('concurrent leases from one search start get distinct uids', async (t) => {
  const ids = ['race-a', 'race-b', 'race-c', 'race-d'];
  const results = await Promise.all(ids.map((id) => lease(id, uidRange.first + 8)));
  t.equal(new Set(results.map((result) => result.uid)).size, ids.length, JSON.stringify(results));
  for (const result of results) t.equal(result.existing, false);
  for (const id of ids) t.ok((await runHelperRelease(helper, { lease: id, workspace: workspaceOf(id) })).ok, id);
});

t.test('a lease directory others could change, or a torn record, is refused, not guessed around', async (t) => {
  const loose = path.join(dir, 'loose-leases');
  fs.mkdirSync(loose, { mode: 0o755 });
  fs.chmodSync(loose, 0o755);
  const looseConfig = writeConfig(
    dir,
    { uidRange, workspaceRoots: [workspaceRoot], uidLockDir: privateDirs.uidLockDir, uidLeaseDir: loose },
    'loose.conf',
  );
  const refused = await runHelperLease(
    { path: asanHelper, configPath: looseConfig, owner: OWNER },
    { uid: uidRange.first, lease: 'loose', workspace: workspaceOf('loose') },
  );
  t.equal(refused.ok ? 'ok' : refused.reason, 'config_invalid');
  t.match(refused.ok ? '' : refused.detail, /uid_lease_dir .* mode 0700/);

  const torn = path.join(privateDirs.uidLeaseDir, 'torn');
  fs.writeFileSync(torn, 'turnhost-uid-lease 1\nuid ', { mode: 0o600 });
  const usage = await runHelperUsage(helper, { lease: 'torn', workspace: workspaceOf('torn') });
  t.equal(usage.ok ? 'ok' : usage.reason, 'internal');
  t.match(usage.ok ? '' : usage.detail, /lease record torn: not in the record format/);
  const viewWorkspace = path.join(dir, 'torn-view');
  fs.mkdirSync(viewWorkspace, { recursive: true });
  const launch = await runHelperLaunch(helper, {
    uid: uidRange.first,
    gid: uidRange.first,
    uidSearch: true,
    cwd: '/',
    profile: 'governed',
    workspace: viewWorkspace,
  });
  t.equal(parseHelperRefusal(launch.code, launch.stderr)?.reason, 'internal', 'an unleased launch fails closed too');
  fs.rmSync(torn);
});

t.test("another owner's lease is refused for lease, release, usage and a leased launch, and left intact", async (t) => {
  const { uid } = await lease('owned', uidRange.first + 17);
  const workspace = workspaceOf('owned');
  fs.writeFileSync(path.join(workspace, 'mine'), 'kept');
  const recordFile = path.join(privateDirs.uidLeaseDir, 'owned');
  t.equal(
    fs.readFileSync(recordFile, 'utf8'),
    `turnhost-uid-lease 2\nuid ${uid}\nowner ${OWNER}\nworkspace ${workspace}\n`,
    'the record names its owner',
  );
  const other: HelperLocation = { ...helper, owner: 'own_second' };
  const request = { lease: 'owned', workspace };
  const refusals = {
    lease: await runHelperLease(other, { ...request, uid: uidRange.first }),
    adopt: await runHelperLease(other, { ...request, uid, adopt: true }),
    usage: await runHelperUsage(other, request),
    release: await runHelperRelease(other, request),
  };
  for (const [op, refused] of Object.entries(refusals)) {
    t.equal(refused.ok ? 'ok' : refused.reason, 'lease_owner_mismatch', op);
    t.match(refused.ok ? '' : refused.detail, /held by another owner/, op);
    t.notMatch(refused.ok ? '' : refused.detail, new RegExp(OWNER), `${op}: the owner is not told`);
  }
  const launch = await runHelperLaunch(other, {
    ...request,
    owner: 'own_second',
    uid,
    gid: uid,
    cwd: '/',
    profile: 'governed',
  });
  t.equal(parseHelperRefusal(launch.code, launch.stderr)?.reason, 'lease_owner_mismatch', 'a leased launch');
  t.equal(fs.readFileSync(path.join(workspace, 'mine'), 'utf8'), 'kept', 'the workspace is untouched');
  t.equal(fs.statSync(workspace).uid, uid, 'and still its uid');
  t.match(fs.readFileSync(recordFile, 'utf8'), `owner ${OWNER}\n`, 'the record keeps its owner');
  t.same(await lease('owned'), { uid, existing: true }, 'the owner still has it');
  const usage = await runHelperUsage(helper, request);
  t.ok(usage.ok && usage.files === 1, 'and measures it');
  const released = await runHelperRelease(helper, request);
  t.ok(released.ok, released.ok ? '' : released.detail);
});

t.test('a record without owner (older release) is refused to all until adopted with its exact uid', async (t) => {
  const uid = uidRange.first + 19;
  const workspace = workspaceOf('legacy');
  const recordFile = path.join(privateDirs.uidLeaseDir, 'legacy');
  const legacyRecord = `turnhost-uid-lease 1\nuid ${uid}\nworkspace ${workspace}\n`;
  fs.writeFileSync(recordFile, legacyRecord, { mode: 0o600 });
  fs.mkdirSync(workspace, { mode: 0o2770 });
  fs.chownSync(workspace, uid, process.getgid?.() ?? 0);
  fs.writeFileSync(path.join(workspace, 'old'), 'from before');
  const request = { lease: 'legacy', workspace };
  const refusals = {
    lease: await runHelperLease(helper, { ...request, uid: uidRange.first }),
    usage: await runHelperUsage(helper, request),
    release: await runHelperRelease(helper, request),
    'adopt with another uid': await runHelperLease(helper, { ...request, uid: uid - 1, adopt: true }),
  };
  for (const [op, refused] of Object.entries(refusals)) {
    t.equal(refused.ok ? 'ok' : refused.reason, 'lease_owner_mismatch', op);
    t.match(refused.ok ? '' : refused.detail, op.startsWith('adopt') ? /uid is not/ : /no owner/, op);
  }
  const launch = await runHelperLaunch(helper, {
    ...request,
    owner: OWNER,
    uid,
    gid: uid,
    cwd: '/',
    profile: 'governed',
  });
  t.equal(parseHelperRefusal(launch.code, launch.stderr)?.reason, 'lease_owner_mismatch', 'a leased launch');
  t.equal(fs.readFileSync(recordFile, 'utf8'), legacyRecord, 'nothing adopted it so far');
  // Unleased launches still pass over its uid: the record holds it whoever owns it.
  const exact = await runHelperLaunch(helper, { uid, gid: uid, cwd: '/', profile: 'governed', workspace });
  t.equal(parseHelperRefusal(exact.code, exact.stderr)?.reason, 'uid_in_use');

  const adopted = await runHelperLease(helper, { ...request, uid, adopt: true });
  t.same(adopted.ok ? { uid: adopted.uid, existing: adopted.existing } : adopted.detail, { uid, existing: true });
  t.equal(
    fs.readFileSync(recordFile, 'utf8'),
    `turnhost-uid-lease 2\nuid ${uid}\nowner ${OWNER}\nworkspace ${workspace}\n`,
    'the record is rewritten with its owner',
  );
  const late = await runHelperLease({ ...helper, owner: 'own_second' }, { ...request, uid, adopt: true });
  t.equal(late.ok ? 'ok' : late.reason, 'lease_owner_mismatch', 'a second adoption is refused');
  const none = await runHelperLease(helper, {
    lease: 'never-leased',
    workspace: workspaceOf('never-leased'),
    uid,
    adopt: true,
  });
  t.equal(none.ok ? 'ok' : none.reason, 'lease_refused', 'adopt never makes a lease');
  t.notOk(fs.existsSync(workspaceOf('never-leased')));
  t.equal(fs.readFileSync(path.join(workspace, 'old'), 'utf8'), 'from before');
  t.ok((await runHelperRelease(helper, request)).ok, 'the adopter releases it');
});

t.test('owner and adopt are refused on their syntax, naming the key', async (t) => {
  const refused = (lines: string[], pattern: RegExp, what: string): void => {
    const run = runHelperRaw(configPath, descriptorText(lines), dir);
    t.equal(parseHelperRefusal(run.code, run.stderr)?.reason, 'descriptor_malformed', what);
    t.match(run.stderr, pattern, what);
  };
  const workspace = `workspace ${workspaceRoot}/syntax`;
  refused(['op lease', `uid ${uidRange.first}`, 'lease syntax', workspace], /missing required key 'owner'/, 'lease');
  refused(['op usage', 'lease syntax', workspace], /missing required key 'owner' for op usage/, 'usage');
  refused(['op release', 'lease syntax', workspace], /missing required key 'owner' for op release/, 'release');
  for (const owner of ['a.b', 'x'.repeat(65), 'a b'])
    refused(['op usage', 'lease syntax', `owner ${owner}`, workspace], /owner: 1-64 bytes/, JSON.stringify(owner));
  const launch = ['op launch', `uid ${uidRange.first}`, 'cwd /', 'profile governed', workspace];
  refused([...launch, 'lease syntax'], /lease and owner together .*'owner'/, 'a leased launch without owner');
  refused([...launch, `owner ${OWNER}`], /lease and owner together .*'lease'/, 'an owner without lease');
  refused(
    ['op lease', `uid ${uidRange.first}`, 'uid_search yes', 'adopt yes', 'lease syntax', `owner ${OWNER}`, workspace],
    /adopt: .*not with uid_search/,
    'adopt with a search',
  );
  refused(['op release', 'adopt yes', 'lease syntax', `owner ${OWNER}`, workspace], /'adopt' not valid/, 'adopt');
  refused(
    ['op lease', `uid ${uidRange.first}`, 'adopt no', 'lease syntax', `owner ${OWNER}`, workspace],
    /adopt/,
    'no',
  );
});
