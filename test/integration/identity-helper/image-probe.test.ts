/**
 * The workspace image probe (op image_probe) against the real helper (ASan build), real loop
 * devices and real ext4 mounts, as root: in the separate_uid helper and in the shared launcher
 * of a root supervisor it proves a bound (a write and a file past a throwaway image refused with
 * ENOSPC); on a host without usable loop devices (/dev/loop-control masked by /dev/null in a
 * mount namespace of the test's, or block major 7 denied by a device cgroup, as a unit without
 * DeviceAllow would) it fails naming the step and the call; a non-root shared launcher is
 * refused. After each run, success or failure, no loop device is configured over anything in
 * the probe's workspaces root and no mount of it is left in this namespace. The status the
 * probes build from it (probeWorkspaceCap) says enforced only when the probe succeeded.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';
import { runHelperImageProbe } from '../../../supervisor/identity/helper-workspace-image.js';
import { writeSharedLauncherConfig } from '../../../supervisor/identity/helper-config.js';
import type { HelperLocation } from '../../../supervisor/identity/helper-process.js';
import { probeWorkspaceCap } from '../../../supervisor/probes/workspaces.js';
import { runWorkerHostProbes } from '../../../supervisor/probes/index.js';
import { createMemoryLogger } from '../../../core/log.js';
import { probeConfig } from '../../support/probe-tree.js';
import {
  asanHelper,
  buildNative,
  descriptorText,
  reportSelf,
  runWithDescriptor,
  tempDir,
  writeConfig,
} from './fixture.js';

buildNative();
const UID_RANGE = { first: 3_296_000, count: 4 };
const NON_ROOT_UID = 3_296_010;
const dir = tempDir('image-probe');
const workspaceRoot = path.join(dir, 'workspaces');
fs.mkdirSync(workspaceRoot, { mode: 0o755 });
const configPath = writeConfig(dir, {
  uidRange: UID_RANGE,
  workspaceRoots: [workspaceRoot],
  uidLockDir: path.join(dir, 'locks'),
  uidLeaseDir: path.join(dir, 'leases'),
});
const helper: HelperLocation = { path: asanHelper, configPath };
const sharedConfigPath = path.join(dir, 'shared-launcher.conf');
writeSharedLauncherConfig(sharedConfigPath, {
  cgroupRoots: [],
  workerExec: reportSelf,
  workerArgs: [],
  workspaceRoots: [workspaceRoot],
});
const launcher: HelperLocation = { path: asanHelper, configPath: sharedConfigPath, shared: true };

/**
 * The helper as a host without usable loop devices runs it: in a mount namespace of its own
 * where /dev/loop-control is /dev/null (an open that works, an ioctl the device refuses).
 */
const masked = path.join(dir, 'masked-helper');
fs.writeFileSync(
  masked,
  `#!/bin/sh\nexec /usr/bin/unshare -m /bin/sh -c '/bin/mount --bind /dev/null /dev/loop-control && exec "$0" "$@"' ${asanHelper} "$@"\n`,
  { mode: 0o755 },
);
const maskedHelper: HelperLocation = { path: masked, configPath };
const maskedLauncher: HelperLocation = { path: masked, configPath: sharedConfigPath, shared: true };

t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));

/** Loop devices configured over a file beneath the probe's workspaces root (the probe's image). */
function probeLoops(): string[] {
  const listed = execFileSync('losetup', ['-a'], { encoding: 'utf8' });
  return listed.split('\n').filter((line) => line.includes(workspaceRoot));
}

/** Mounts of this namespace at or beneath the probe's workspaces root. */
function probeMounts(): string[] {
  return fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .filter((line) => (line.split(' ')[4] ?? '').startsWith(workspaceRoot));
}

/** Nothing of the image is left: no loop device over it, no mount, no file in the images directory. */
function assertNothingLeft(t: Test): void {
  t.same(probeLoops(), [], 'no loop device is left over the probe image');
  t.same(probeMounts(), [], 'no mount is left');
  const images = path.join(workspaceRoot, '.turnhost-images');
  t.same(fs.existsSync(images) ? fs.readdirSync(images) : [], [], 'no image file is left');
}

t.test("a probe removes a killed probe's image, never a live probe's", async (t) => {
  const images = path.join(workspaceRoot, '.turnhost-images');
  fs.mkdirSync(images, { mode: 0o700, recursive: true });
  // A process that has ended: its pid names a probe killed before its cleanup.
  const ended = execFileSync('/bin/sh', ['-c', 'echo $$'], { encoding: 'utf8' }).trim();
  const stale = path.join(images, `.probe-${ended}.img`);
  const live = path.join(images, `.probe-${process.pid}.img`);
  fs.writeFileSync(stale, '');
  fs.writeFileSync(live, '');
  const proved = await runHelperImageProbe(helper, workspaceRoot);
  t.ok(proved.ok, `the probe succeeds: ${proved.ok ? '' : `${proved.reason}: ${proved.detail}`}`);
  t.notOk(fs.existsSync(stale), "the ended process's image is removed");
  t.ok(fs.existsSync(live), "a live process's image is kept");
  fs.rmSync(live);
  assertNothingLeft(t);
});

t.test('before any probe nothing is configured over the workspaces root', async (t) => {
  t.same(probeLoops(), []);
  t.same(probeMounts(), []);
});

for (const [name, location] of [
  ['separate_uid helper', helper],
  ['shared launcher of a root supervisor', launcher],
] as const) {
  t.test(`${name}: the probe proves the bound and leaves nothing`, async (t) => {
    const proved = await runHelperImageProbe(location, workspaceRoot);
    t.ok(proved.ok, `the probe succeeds: ${proved.ok ? '' : `${proved.reason}: ${proved.detail}`}`);
    if (proved.ok) {
      t.equal(proved.imageBytes, 1024 * 1024, 'a 1 MiB image');
      t.ok(proved.bytesWritten < proved.imageBytes, `ENOSPC came after ${proved.bytesWritten} bytes, within the image`);
      t.ok(proved.filesMade > 0 && proved.filesMade <= 42, `ENOSPC came after ${proved.filesMade} files`);
    }
    const images = fs.statSync(path.join(workspaceRoot, '.turnhost-images'));
    t.equal(images.uid, 0, "the images directory is root's");
    t.equal(images.mode & 0o7777, 0o700, 'mode 0700');
    assertNothingLeft(t);
  });

  t.test(`${name}: without usable loop devices it fails naming the step and the call`, async (t) => {
    const refused = await runHelperImageProbe(location === helper ? maskedHelper : maskedLauncher, workspaceRoot);
    t.notOk(refused.ok, 'the probe fails');
    if (!refused.ok) {
      t.equal(refused.reason, 'internal');
      t.match(refused.detail, /^image_probe loop_attach: .*LOOP_CTL_GET_FREE: Inappropriate ioctl for device/);
    }
    assertNothingLeft(t);
  });
}

const devicesHierarchy = '/sys/fs/cgroup/devices';
t.test(
  'a device cgroup denying loop devices (a unit without DeviceAllow) fails the probe at the attach',
  { skip: fs.existsSync(path.join(devicesHierarchy, 'devices.deny')) ? false : 'no cgroup v1 devices hierarchy here' },
  async (t) => {
    const own = fs
      .readFileSync('/proc/self/cgroup', 'utf8')
      .split('\n')
      .find((line) => line.split(':')[1]?.split(',').includes('devices'));
    const cgroup = path.join(devicesHierarchy, own?.split(':')[2] ?? '/', `turnhost-image-probe-${process.pid}`);
    fs.mkdirSync(cgroup);
    t.teardown(() => fs.rmdirSync(cgroup));
    fs.writeFileSync(path.join(cgroup, 'devices.deny'), 'b 7:* rwm');
    const descriptor = descriptorText(['op image_probe', `workspace ${workspaceRoot}`]);
    const run = runWithDescriptor(
      ['/bin/sh', '-c', `echo $$ > ${cgroup}/cgroup.procs && exec "$0" "$@"`, asanHelper, '--config', configPath],
      descriptor,
      dir,
    );
    t.equal(run.code, 76, run.stderr);
    t.match(
      run.stderr,
      /image_probe loop_attach: image: attaching a loop device: \/dev\/loop\d+: Operation not permitted/,
    );
    assertNothingLeft(t);
  },
);

t.test('a mount refused after the attach fails the probe at mount and detaches its loop device', async (t) => {
  // The filter refuses only the image's mount (flags nosuid,nodev): the loop device is attached
  // by then, so this is the failure that has one to give back.
  const denyImageMount = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures/deny-image-mount.py');
  for (const [name, args] of [
    ['separate_uid helper', ['--config', configPath]],
    ['shared launcher', ['--shared', '--config', sharedConfigPath]],
  ] as const) {
    const run = runWithDescriptor(
      ['/usr/bin/python3', denyImageMount, asanHelper, ...args],
      descriptorText(['op image_probe', `workspace ${workspaceRoot}`]),
      dir,
    );
    t.equal(run.code, 76, `${name}: ${run.stderr}`);
    t.match(run.stderr, /image_probe mount: image probe: mount: Operation not permitted/, `${name}: the step is mount`);
    assertNothingLeft(t);
  }
});

t.test('only a configured workspace_root is probed, matched exactly', async (t) => {
  const elsewhere = await runHelperImageProbe(helper, dir);
  t.match(elsewhere, {
    ok: false,
    reason: 'lease_refused',
    detail: /image_probe workspace_root: .* is not a configured workspace_root/,
  });
  t.notOk(fs.existsSync(path.join(dir, '.turnhost-images')), 'nothing is made outside the configured root');
});

t.test('a non-root shared launcher is refused before anything is made', async (t) => {
  const ownRoot = path.join(dir, 'user-workspaces');
  fs.mkdirSync(ownRoot, { mode: 0o755 });
  fs.chownSync(ownRoot, NON_ROOT_UID, NON_ROOT_UID);
  const ownConfig = path.join(dir, 'user-launcher.conf');
  writeSharedLauncherConfig(ownConfig, {
    cgroupRoots: [],
    workerExec: reportSelf,
    workerArgs: [],
    workspaceRoots: [ownRoot],
  });
  fs.chownSync(ownConfig, NON_ROOT_UID, NON_ROOT_UID);
  const run = runWithDescriptor(
    [
      '/usr/bin/setpriv',
      `--reuid=${NON_ROOT_UID}`,
      `--regid=${NON_ROOT_UID}`,
      '--clear-groups',
      asanHelper,
      '--shared',
      '--config',
      ownConfig,
    ],
    descriptorText(['op image_probe', `workspace ${ownRoot}`]),
    dir,
  );
  t.equal(run.code, 67, run.stderr);
  t.match(run.stderr, /image_probe root: a workspace image needs root/);
  t.notOk(fs.existsSync(path.join(ownRoot, '.turnhost-images')), 'nothing is made');
});

t.test('the status claims a bound only when the probe proved one', async (t) => {
  const base = probeConfig({ proc: '/proc', sysFsCgroup: '/sys/fs/cgroup' });
  const config = {
    ...base,
    identityHelper: { path: asanHelper, configPath },
    workspaces: { ...base.workspaces, root: workspaceRoot, maxBytes: 8 << 20, maxFiles: 100 },
  };
  const enforced = await probeWorkspaceCap(config, (root) => runHelperImageProbe(helper, root));
  t.same(enforced, { enforced: true, mechanism: 'image', maxBytes: 8 << 20, maxFiles: 100 });
  const refused = await probeWorkspaceCap(config, (root) => runHelperImageProbe(maskedHelper, root));
  t.match(refused, { enforced: false, mechanism: 'measured', maxBytes: 8 << 20, maxFiles: 100 });
  t.match(
    refused?.requirement,
    /^a workspace filesystem needs loop devices and ext4 mounts: image_probe loop_attach: .*LOOP_CTL_GET_FREE/,
  );
  const unverified = await probeWorkspaceCap(config, undefined);
  t.match(unverified, {
    enforced: false,
    mechanism: 'measured',
    requirement: /unverified, no image probe can run here/,
  });
  assertNothingLeft(t);
});

t.test("the boot status takes the helper's probe and logs a cap it could not prove", async (t) => {
  const base = probeConfig({ proc: '/proc', sysFsCgroup: '/sys/fs/cgroup' });
  const config = {
    ...base,
    identityHelper: { path: asanHelper, configPath },
    workspaces: { ...base.workspaces, root: workspaceRoot, maxBytes: 8 << 20, maxFiles: null },
  };
  const proven = createMemoryLogger();
  const held = await runWorkerHostProbes(
    {
      config,
      logger: proven.logger,
      helperImageProbe: (root) => runHelperImageProbe(helper, root),
      // A shared launcher's probe is not the mounter's when a helper is configured.
      sharedImageProbe: (root) => runHelperImageProbe(maskedLauncher, root),
    },
    'boot',
  );
  t.match(held.workspaceCap, { enforced: true, mechanism: 'image' });
  t.notOk(
    proven.lines.some((line) => line.includes('workspace cap not enforced')),
    'nothing is logged about a cap that holds',
  );
  const masked = createMemoryLogger();
  const refused = await runWorkerHostProbes(
    { config, logger: masked.logger, helperImageProbe: (root) => runHelperImageProbe(maskedHelper, root) },
    'boot',
  );
  t.match(refused.workspaceCap, {
    enforced: false,
    mechanism: 'measured',
    requirement: /needs loop devices and ext4 mounts: image_probe loop_attach: .*LOOP_CTL_GET_FREE/,
  });
  t.ok(
    masked.lines.some((line) => /workspace cap not enforced: .*image_probe loop_attach/.test(line)),
    'the boot probe logs the requirement',
  );
  assertNothingLeft(t);
});
