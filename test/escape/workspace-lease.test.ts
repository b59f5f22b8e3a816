/**
 * Attacks on the workspace uid leases of the identity helper (real helper, real uids, as root,
 * a private config whose lease directory, lock directory and workspace roots live under this
 * test's temp directory): links planted in a workspace must never lead a release out of it,
 * a symlinked workspace or workspace root is refused, a mount inside is never touched, and
 * shared mode lends no lease at all.
 */
import t from 'tap';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { runHelperLease } from '../../supervisor/identity/helper-lease.js';
import { HELPER_EXIT_CODES, type HelperLocation } from '../../supervisor/identity/helper-process.js';
import { runHelperRelease, runHelperUsage } from '../../supervisor/identity/helper-workspace-tree.js';
import { writeSharedLauncherConfig } from '../../supervisor/identity/helper-config.js';
import {
  asanHelper,
  buildNative,
  descriptorText,
  leaseWorkspace,
  reportSelf,
  runWithDescriptor,
  tempDir,
  uniqueUidRange,
  writeConfig,
} from '../integration/identity-helper/fixture.js';

buildNative();
const dir = tempDir('ws-lease-escape');
const uidRange = uniqueUidRange();
const workspaceRoot = path.join(dir, 'workspaces');
fs.mkdirSync(workspaceRoot, { mode: 0o755 });
// A configured root reached through a symlink: the helper must refuse to use it.
const linkedRoot = path.join(dir, 'linked-workspaces');
fs.symlinkSync(workspaceRoot, linkedRoot);
const configPath = writeConfig(dir, {
  uidRange,
  workspaceRoots: [workspaceRoot, linkedRoot],
  uidLockDir: path.join(dir, 'locks'),
  uidLeaseDir: path.join(dir, 'leases'),
});
const helper: HelperLocation = { path: asanHelper, configPath, owner: 'own_escape' };
const mounted: string[] = [];
t.teardown(() => {
  for (const target of mounted) execFileSync('umount', ['-l', target]);
  fs.rmSync(dir, { recursive: true, force: true });
});

const workspaceOf = (id: string, root = workspaceRoot): string => path.join(root, id);

async function lease(id: string, uid = uidRange.first): Promise<number> {
  return (await leaseWorkspace(helper, workspaceRoot, id, uid)).uid;
}

/** An outside file and an outside directory with content, each reached by a link from inside. */
function plantOutsideTargets(workspace: string, tag: string): { file: string; directory: string } {
  const file = path.join(dir, `${tag}-outside-file`);
  const directory = path.join(dir, `${tag}-outside-dir`);
  fs.writeFileSync(file, 'outside file');
  fs.mkdirSync(path.join(directory, 'nested'), { recursive: true });
  fs.writeFileSync(path.join(directory, 'nested/precious'), 'outside directory content');
  fs.mkdirSync(path.join(workspace, 'sub'), { recursive: true });
  fs.symlinkSync(file, path.join(workspace, 'link-to-file'));
  fs.symlinkSync(directory, path.join(workspace, 'link-to-dir'));
  fs.symlinkSync(directory, path.join(workspace, 'sub/deeper-link-to-dir'));
  fs.symlinkSync('../../..', path.join(workspace, 'sub/relative-up'));
  fs.linkSync(file, path.join(workspace, 'hard-link-to-file'));
  return { file, directory };
}

t.test('release removes links, never what they point to', async (t) => {
  await lease('links', uidRange.first + 1);
  const workspace = workspaceOf('links');
  const outside = plantOutsideTargets(workspace, 'release');
  const released = await runHelperRelease(helper, { lease: 'links', workspace });
  t.ok(released.ok, released.ok ? '' : released.detail);
  if (released.ok) t.equal(released.removedFiles, 5, 'four symlinks and one hard link');
  t.notOk(fs.existsSync(workspace), 'the workspace is gone');
  t.equal(fs.readFileSync(outside.file, 'utf8'), 'outside file', 'the outside file survives');
  t.equal(
    fs.readFileSync(path.join(outside.directory, 'nested/precious'), 'utf8'),
    'outside directory content',
    'the outside directory survives with its content',
  );
  t.ok(fs.existsSync(path.join(dir, 'leases')), 'the lease directory is still there');
  t.ok(fs.existsSync(workspaceRoot), 'the workspace root is still there');
});

t.test('usage does not follow a planted link either', async (t) => {
  await lease('usage-links', uidRange.first + 2);
  const workspace = workspaceOf('usage-links');
  const outside = plantOutsideTargets(workspace, 'usage');
  fs.writeFileSync(path.join(outside.directory, 'big'), Buffer.alloc(4 << 20, 1));
  const usage = await runHelperUsage(helper, { lease: 'usage-links', workspace });
  if (!usage.ok) throw new Error(usage.detail);
  t.equal(usage.files, 5);
  t.ok(usage.bytes < 4 << 20, `the 4 MiB file behind a link is not counted (${usage.bytes})`);
});

t.test('a mount inside the workspace refuses the release and is left alone', async (t) => {
  await lease('mounted', uidRange.first + 3);
  const workspace = workspaceOf('mounted');
  fs.writeFileSync(path.join(workspace, 'beside'), 'kept');
  const target = path.join(workspace, 'mnt');
  fs.mkdirSync(target);
  execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=1m', 'turnhost-test', target]);
  mounted.push(target);
  fs.writeFileSync(path.join(target, 'inside-mount'), 'kept too');
  const refused = await runHelperRelease(helper, { lease: 'mounted', workspace });
  t.equal(refused.ok ? 'ok' : refused.reason, 'workspace_busy');
  t.match(refused.ok ? '' : refused.detail, /mount point/);
  t.equal(fs.readFileSync(path.join(target, 'inside-mount'), 'utf8'), 'kept too', 'the mount is untouched');
  t.equal(fs.readFileSync(path.join(workspace, 'beside'), 'utf8'), 'kept', 'nothing was removed');
  t.ok(fs.existsSync(path.join(dir, 'leases/mounted')), 'the lease stays');
  execFileSync('umount', [target]);
  mounted.pop();
  const released = await runHelperRelease(helper, { lease: 'mounted', workspace });
  t.ok(released.ok, released.ok ? '' : released.detail);
});

t.test('a workspace that is a symlink is never leased, chowned or removed', async (t) => {
  const victim = path.join(dir, 'victim-dir');
  fs.mkdirSync(victim);
  fs.writeFileSync(path.join(victim, 'content'), 'victim');
  fs.symlinkSync(victim, workspaceOf('planted'));
  const refused = await runHelperLease(helper, {
    uid: uidRange.first,
    lease: 'planted',
    workspace: workspaceOf('planted'),
  });
  t.equal(refused.ok ? 'ok' : refused.reason, 'lease_refused');
  t.match(refused.ok ? '' : refused.detail, /symlink/);
  t.equal(fs.statSync(victim).uid, 0, 'the link target keeps its owner');
  t.notOk(fs.existsSync(path.join(dir, 'leases/planted')), 'no lease was recorded');

  // A lease whose workspace is swapped for a link afterwards: release refuses, target intact.
  await lease('swapped', uidRange.first + 4);
  fs.rmdirSync(workspaceOf('swapped'));
  fs.symlinkSync(victim, workspaceOf('swapped'));
  const release = await runHelperRelease(helper, { lease: 'swapped', workspace: workspaceOf('swapped') });
  t.equal(release.ok ? 'ok' : release.reason, 'lease_refused');
  t.equal(fs.readFileSync(path.join(victim, 'content'), 'utf8'), 'victim', 'the link target is untouched');
  const usage = await runHelperUsage(helper, { lease: 'swapped', workspace: workspaceOf('swapped') });
  t.equal(usage.ok ? 'ok' : usage.reason, 'lease_refused');
});

t.test('a workspace outside every workspace_root, or under a symlinked one, is refused', async (t) => {
  const outside = await runHelperLease(helper, {
    uid: uidRange.first,
    lease: 'stray',
    workspace: path.join(dir, 'stray'),
  });
  t.equal(outside.ok ? 'ok' : outside.reason, 'lease_refused');
  t.match(outside.ok ? '' : outside.detail, /workspace_root/);
  const nested = await runHelperLease(helper, {
    uid: uidRange.first,
    lease: 'stray',
    workspace: path.join(workspaceRoot, 'deeper/stray'),
  });
  t.equal(nested.ok ? 'ok' : nested.reason, 'lease_refused', 'the workspace is exactly <root>/<id>');
  const viaLink = await runHelperLease(helper, {
    uid: uidRange.first,
    lease: 'via-link',
    workspace: workspaceOf('via-link', linkedRoot),
  });
  t.equal(viaLink.ok ? 'ok' : viaLink.reason, 'lease_refused');
  t.match(viaLink.ok ? '' : viaLink.detail, /symlink/);
  t.notOk(fs.existsSync(workspaceOf('via-link')), 'nothing made through the link');
  const mismatched = await runHelperLease(helper, {
    uid: uidRange.first,
    lease: 'other-id',
    workspace: workspaceOf('not-the-id'),
  });
  t.equal(mismatched.ok ? 'ok' : mismatched.reason, 'lease_refused', 'the last component is the lease id');
});

t.test('a helper config without workspace_root leases nothing', async (t) => {
  const bare = writeConfig(
    dir,
    { uidRange, uidLockDir: path.join(dir, 'locks'), uidLeaseDir: path.join(dir, 'leases') },
    'bare.conf',
  );
  const refused = await runHelperLease(
    { path: asanHelper, configPath: bare, owner: 'own_escape' },
    { uid: uidRange.first, lease: 'bare', workspace: workspaceOf('bare') },
  );
  t.equal(refused.ok ? 'ok' : refused.reason, 'lease_refused');
  t.match(refused.ok ? '' : refused.detail, /none is configured/);
});

t.test('shared mode refuses a lease (67) and walks no tree outside a workspace_root (81)', async (t) => {
  const sharedConfig = path.join(dir, 'shared.conf');
  writeSharedLauncherConfig(sharedConfig, { cgroupRoots: [], workerExec: reportSelf, workerArgs: [] });
  const lease = runWithDescriptor(
    [asanHelper, '--shared', '--config', sharedConfig],
    descriptorText([
      'op lease',
      `uid ${process.getuid?.() ?? 0}`,
      'lease anything',
      'owner own_escape',
      `workspace ${workspaceOf('anything')}`,
    ]),
    dir,
  );
  t.equal(lease.code, HELPER_EXIT_CODES.caller_not_permitted, 'lease');
  t.match(lease.stderr, /shared mode lends no privilege/);
  // Shared mode's release and usage walk only the caller's own <workspace_root>/<id>, and this
  // config names no workspace_root.
  for (const op of ['release', 'usage']) {
    const lines = [`op ${op}`, 'lease anything', 'owner own_escape', `workspace ${workspaceOf('anything')}`];
    const run = runWithDescriptor([asanHelper, '--shared', '--config', sharedConfig], descriptorText(lines), dir);
    t.equal(run.code, HELPER_EXIT_CODES.lease_refused, op);
    t.match(run.stderr, /none is configured/);
  }
  const launch = runWithDescriptor(
    [asanHelper, '--shared', '--config', sharedConfig],
    descriptorText([
      'op launch',
      'lease anything',
      'owner own_escape',
      'cwd /',
      'profile governed',
      `workspace ${workspaceOf('anything')}`,
    ]),
    dir,
  );
  t.equal(launch.code, HELPER_EXIT_CODES.caller_not_permitted, 'a leased launch too');
  t.match(launch.stderr, /shared mode has no workspace leases/);
});

t.test('shared mode config may not carry the uid lease keys', async (t) => {
  const sharedConfig = path.join(dir, 'shared-with-lease.conf');
  fs.writeFileSync(sharedConfig, `worker_exec ${reportSelf}\nuid_lease_dir ${path.join(dir, 'leases')}\n`, {
    mode: 0o600,
  });
  const run = runWithDescriptor([asanHelper, '--shared', '--config', sharedConfig], descriptorText(['op probe']), dir);
  t.equal(run.code, HELPER_EXIT_CODES.config_invalid);
  t.match(run.stderr, /uid_lease_dir is a separate-uid key/);
});
