/**
 * The turn temp's ownership through the helper (docs/identity-helper-protocol.md, "Turn temp
 * ownership"): launch hands a caller-owned temp beneath a temp_root to the worker uid; reclaim
 * hands the worker's tree back without following a symlink or touching a multi-link file.
 */
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { runHelperReclaim } from '../../../supervisor/identity/helper-client.js';
import {
  asanHelper,
  buildNative,
  descriptorText,
  runHelperRaw,
  tempDir,
  uniqueUidRange,
  writeConfig,
} from './fixture.js';

buildNative();
const dir = tempDir('temp-own');
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
const uidRange = uniqueUidRange();
const tempRoot = path.join(dir, 'temp-root');
fs.mkdirSync(tempRoot, { mode: 0o711 });
fs.chmodSync(tempRoot, 0o711);
const workspace = path.join(dir, 'workspace');
fs.mkdirSync(workspace, { mode: 0o777 });

const TEMP_REFUSED = 79;

/** The worker fills its temp: nested directories, a file, a FIFO and a symlink to `outside`. */
function workerConfig(outside: string): string {
  const script = [
    'set -e',
    'cd "$TURN_TEMP"',
    'mkdir -p a/b/c',
    'echo data > a/b/c/file',
    'mkfifo a/fifo',
    `ln -s ${outside} a/link`,
    'chmod 0500 a/b',
  ].join('; ');
  return writeConfig(
    dir,
    { uidRange, workerExec: '/bin/sh', workerArgs: ['-c', script], tempRoots: [tempRoot] },
    'temp-worker.conf',
  );
}

function launchLines(uid: number, temp: string): string[] {
  return [
    'op launch',
    `uid ${uid}`,
    `gid ${uid}`,
    'cwd /',
    `env TURN_TEMP=${temp}`,
    'profile governed',
    `workspace ${workspace}`,
    `temp ${temp}`,
  ];
}

/** A temp as a non-root supervisor creates it: its own, 0700 (here the caller is root). */
function callerTemp(parent: string, name: string): string {
  const temp = path.join(parent, name);
  fs.mkdirSync(temp, { mode: 0o700 });
  return temp;
}

function owner(file: string): number {
  return fs.lstatSync(file).uid;
}

t.test('launch hands the temp to the worker; reclaim hands the tree back', async (t) => {
  const uid = uidRange.first + 1;
  const outside = path.join(dir, 'outside-worker-file');
  fs.writeFileSync(outside, 'outside\n', { mode: 0o644 });
  fs.chownSync(outside, uid, uid);
  const config = workerConfig(outside);
  const temp = callerTemp(tempRoot, 'turn-launch');

  const run = runHelperRaw(config, descriptorText(launchLines(uid, temp)), dir);
  t.equal(run.code, 0, run.stderr);
  t.equal(owner(temp), uid, 'the temp belongs to the worker uid after launch');
  t.equal(fs.statSync(temp).mode & 0o777, 0o700);
  for (const entry of ['a', 'a/b', 'a/b/c', 'a/b/c/file', 'a/fifo', 'a/link'])
    t.equal(owner(path.join(temp, entry)), uid, `${entry} made by the worker`);
  // A hard link to an outside file the worker owns (the worker's view could not make one: EXDEV).
  fs.linkSync(outside, path.join(temp, 'a/hardlink'));

  const reclaimConfig = writeConfig(dir, { uidRange, tempRoots: [tempRoot] }, 'temp-reclaim.conf');
  const reclaimed = await runHelperReclaim({ path: asanHelper, configPath: reclaimConfig }, { uid, temp });
  if (!reclaimed.ok) throw new Error(reclaimed.detail);
  t.match(reclaimed, { workerUid: uid, reclaimed: 7, skipped: 1 }, 'six entries and the temp; the hard link skipped');
  for (const entry of ['', 'a', 'a/b', 'a/b/c', 'a/b/c/file', 'a/fifo', 'a/link'])
    t.equal(owner(path.join(temp, entry)), 0, `${entry || 'temp'} reclaimed`);
  t.ok(fs.statSync(path.join(temp, 'a/fifo')).isFIFO(), 'the FIFO was not opened or replaced');
  t.equal(owner(outside), uid, 'the symlink target and hard-linked outside file keep their owner');
  t.equal(
    fs.statSync(path.join(temp, 'a/b')).mode & 0o700,
    0o700,
    'a directory the worker closed is usable by its new owner',
  );

  const again = await runHelperReclaim({ path: asanHelper, configPath: reclaimConfig }, { uid, temp });
  t.same(again.ok && again.reclaimed, 0, 'reclaim is idempotent');
});

t.test('launch and reclaim refuse a temp outside every temp_root', async (t) => {
  const uid = uidRange.first + 2;
  const config = writeConfig(dir, { uidRange, workerExec: '/bin/true', tempRoots: [tempRoot] }, 'temp-outside.conf');
  const temp = callerTemp(dir, 'outside-temp');
  const run = runHelperRaw(config, descriptorText(launchLines(uid, temp)), dir);
  t.equal(run.code, TEMP_REFUSED, run.stderr);
  t.match(run.stderr, /not beneath a temp_root/);
  t.equal(owner(temp), 0, 'owner unchanged');
  fs.chownSync(temp, uid, uid);
  const reclaim = runHelperRaw(config, descriptorText(['op reclaim', `uid ${uid}`, `temp ${temp}`]), dir);
  t.equal(reclaim.code, TEMP_REFUSED, reclaim.stderr);
  t.equal(owner(temp), uid, 'owner unchanged');
});

t.test('launch and reclaim refuse a temp reached through a symlink', async (t) => {
  const uid = uidRange.first + 3;
  const config = writeConfig(dir, { uidRange, workerExec: '/bin/true', tempRoots: [tempRoot] }, 'temp-symlink.conf');
  const real = callerTemp(tempRoot, 'real');
  const realParent =
    fs.mkdirSync(path.join(tempRoot, 'real-parent'), { recursive: true }) ?? path.join(tempRoot, 'real-parent');
  const nested = callerTemp(realParent, 'turn');
  fs.symlinkSync(real, path.join(tempRoot, 'link'));
  fs.symlinkSync(realParent, path.join(tempRoot, 'link-parent'));
  for (const temp of [path.join(tempRoot, 'link'), path.join(tempRoot, 'link-parent/turn')]) {
    const run = runHelperRaw(config, descriptorText(launchLines(uid, temp)), dir);
    t.equal(run.code, TEMP_REFUSED, `launch ${temp}: ${run.stderr}`);
    const reclaim = runHelperRaw(config, descriptorText(['op reclaim', `uid ${uid}`, `temp ${temp}`]), dir);
    t.equal(reclaim.code, TEMP_REFUSED, `reclaim ${temp}: ${reclaim.stderr}`);
  }
  t.equal(owner(real), 0, 'the symlink target was not chowned');
  t.equal(owner(nested), 0, 'the directory behind a symlinked component was not chowned');
});

t.test('launch and reclaim refuse a temp owned by someone else', async (t) => {
  const uid = uidRange.first + 4;
  const other = uidRange.first + 5;
  const config = writeConfig(dir, { uidRange, workerExec: '/bin/true', tempRoots: [tempRoot] }, 'temp-other.conf');
  const temp = callerTemp(tempRoot, 'turn-other');
  fs.chownSync(temp, other, other);
  const run = runHelperRaw(config, descriptorText(launchLines(uid, temp)), dir);
  t.equal(run.code, TEMP_REFUSED, run.stderr);
  t.match(run.stderr, /must be owned by the caller/);
  const reclaim = runHelperRaw(config, descriptorText(['op reclaim', `uid ${uid}`, `temp ${temp}`]), dir);
  t.equal(reclaim.code, TEMP_REFUSED, reclaim.stderr);
  t.equal(owner(temp), other, 'owner unchanged');
});

t.test('reclaim needs uid and temp, and a uid in range', async (t) => {
  const config = writeConfig(dir, { uidRange, tempRoots: [tempRoot] }, 'temp-keys.conf');
  const temp = callerTemp(tempRoot, 'turn-keys');
  t.equal(runHelperRaw(config, descriptorText(['op reclaim', `temp ${temp}`]), dir).code, 65, 'uid required');
  t.equal(runHelperRaw(config, descriptorText(['op reclaim', `uid ${uidRange.first}`]), dir).code, 65, 'temp required');
  t.equal(
    runHelperRaw(config, descriptorText(['op reclaim', 'uid 1', `temp ${temp}`]), dir).code,
    68,
    'uid out of range',
  );
});
