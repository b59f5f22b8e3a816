/**
 * CI's final line (.ci/summarize.mjs) and the VM runners' skip (test/vm/lib.sh, vm_skip): a tier
 * that did not run is printed and counted as skipped, and on a CI machine a tier that cannot
 * build its guest is counted as failed. Runs both as CI does, through node and bash.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t, { type Test } from 'tap';

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const summarizer = path.join(repo, '.ci/summarize.mjs');
const vmLib = path.join(repo, 'test/vm/lib.sh');

function summarize(t: Test, log: string, exitStatus: number): string[] {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-summarize-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const file = path.join(dir, 'ci.log');
  fs.writeFileSync(file, log);
  const result = spawnSync(process.execPath, [summarizer, file, String(exitStatus)], { encoding: 'utf8' });
  t.equal(result.status, 0, `summarize.mjs exits 0 (stderr: ${result.stderr})`);
  return result.stdout.trimEnd().split('\n');
}

/** The log lines .ci/run writes around one tier's output. */
function tier(name: string, seconds: number, exit: number, output: string): string {
  return `ci: tier ${name} started\n${output}ci: tier ${name} took ${seconds} s (exit ${exit})\n`;
}

/**
 * Runs lib.sh's vm_require_image for tier vm-test against a stand-in build-image.sh that fails
 * to download (exit 77), with the environment given: what a runner prints and its exit status.
 */
function vmTierWithoutImage(t: Test, env: Record<string, string>): { output: string; status: number | null } {
  const vmDir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-vm-skip-'));
  t.teardown(() => fs.rmSync(vmDir, { recursive: true, force: true }));
  fs.writeFileSync(
    path.join(vmDir, 'build-image.sh'),
    'echo "SKIPPED: debootstrap could not download trixie from the mirror"\nexit 77\n',
  );
  const result = spawnSync(
    'bash',
    ['-c', `. "$1"; VM_TIER=vm-test; vm_require_image; echo "image ready"`, 'vm-skip-test', vmLib],
    { encoding: 'utf8', env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', VM_DIR: vmDir, ...env } },
  );
  return { output: result.stdout, status: result.status };
}

t.test('tap summary lines are added up, skipped tests included', async (t) => {
  const log = 'ok 1 - a\n# { total: 12, pass: 10, skip: 2 }\n# { total: 3, pass: 2, fail: 1 }\n';
  t.same(summarize(t, log, 1), ['12 passed, 1 failed, 2 skipped']);
});

t.test('a failing exit with no failing test counted is one failure', async (t) => {
  t.same(summarize(t, '# { total: 4, pass: 4 }\n', 2), ['4 passed, 1 failed, 0 skipped']);
  t.same(summarize(t, '# { total: 4, pass: 4 }\n', 0), ['4 passed, 0 failed, 0 skipped']);
});

t.test('a skipped VM tier is printed and counted as skipped', async (t) => {
  const log =
    tier('make-test', 600, 0, '# { total: 20, pass: 20 }\n') +
    tier('vm-test', 3, 0, 'SKIPPED: vm-test: debootstrap could not download trixie\n') +
    tier('vm-deb-test', 400, 0, '# { total: 30, pass: 30 }\n');
  t.same(summarize(t, log, 0), [
    'ci: tier make-test: 600 s, 20 passed, 0 failed, 0 skipped',
    'ci: tier vm-test: 3 s, 0 passed, 0 failed, 1 skipped',
    'ci: SKIPPED vm-test: debootstrap could not download trixie',
    'ci: tier vm-deb-test: 400 s, 30 passed, 0 failed, 0 skipped',
    '50 passed, 0 failed, 1 skipped',
  ]);
});

t.test('a tier that fails without a failing test counts as one failure, even when others fail', async (t) => {
  const log =
    tier('make-test', 600, 1, '# { total: 20, pass: 19, fail: 1 }\n') +
    tier('vm-test', 5, 1, 'vm-image: debootstrap failed\n');
  t.same(summarize(t, log, 1), [
    'ci: tier make-test: 600 s, 19 passed, 1 failed, 0 skipped',
    'ci: tier vm-test: 5 s, 0 passed, 1 failed, 0 skipped (exited 1 without a failing test counted)',
    '19 passed, 2 failed, 0 skipped',
  ]);
});

t.test('outside CI a guest image that cannot be downloaded skips the tier', async (t) => {
  const run = vmTierWithoutImage(t, {});
  t.equal(run.status, 0);
  t.equal(run.output, 'SKIPPED: vm-test: debootstrap could not download trixie from the mirror\n');
  t.same(summarize(t, tier('vm-test', 2, run.status ?? -1, run.output), 0), [
    'ci: tier vm-test: 2 s, 0 passed, 0 failed, 1 skipped',
    'ci: SKIPPED vm-test: debootstrap could not download trixie from the mirror',
    '0 passed, 0 failed, 1 skipped',
  ]);
});

t.test('with CI=true a guest image that cannot be downloaded fails the tier', async (t) => {
  const run = vmTierWithoutImage(t, { CI: 'true' });
  t.equal(run.status, 1);
  t.notMatch(run.output, /SKIPPED:|image ready/);
  t.match(run.output, /^not ok 1 - vm-test could not run: debootstrap could not download trixie/m);
  t.same(summarize(t, tier('vm-test', 2, run.status ?? -1, run.output), 1), [
    'ci: tier vm-test: 2 s, 0 passed, 1 failed, 0 skipped',
    '0 passed, 1 failed, 0 skipped',
  ]);
});

t.test('TURNHOST_VM_REQUIRED decides over CI', async (t) => {
  t.equal(vmTierWithoutImage(t, { TURNHOST_VM_REQUIRED: '1' }).status, 1);
  t.equal(vmTierWithoutImage(t, { CI: 'true', TURNHOST_VM_REQUIRED: '0' }).status, 0);
  t.equal(vmTierWithoutImage(t, { CI: 'false' }).status, 0);
});
