import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { ok, fail } from '../../../../core/result.js';
import { probeIdentity, qualifyIdentityHelper } from '../../../../supervisor/probes/identity.js';

const ROOT_IDS = { uid: 0, euid: 0 };
const USER_IDS = { uid: 998, euid: 998 };
const NOBODY = 65534;

/**
 * Helpers live under /run (root-owned 0755), not /tmp: /tmp is world-writable, which is
 * itself a failing ancestor.
 */
function helperDir(t: { teardown(fn: () => void): void }): { dir: string; helper: string } {
  const dir = fs.mkdtempSync('/run/turnhost-helper-test-');
  fs.chmodSync(dir, 0o755);
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const helper = path.join(dir, 'identity-helper');
  fs.writeFileSync(helper, '#!/bin/sh\nexit 0\n', { mode: 0o755 });
  fs.chmodSync(helper, 0o755);
  return { dir, helper };
}

function requirementOf(result: ReturnType<typeof qualifyIdentityHelper>): string {
  return result.ok ? '' : result.detail;
}

t.test('a root-owned, non-writable helper in root-owned directories qualifies for a root supervisor', async (t) => {
  const { helper } = helperDir(t);
  t.same(qualifyIdentityHelper(helper, ROOT_IDS), { ok: true, realPath: helper });
});

t.test('relative path', async (t) => {
  t.equal(
    requirementOf(qualifyIdentityHelper('bin/identity-helper', ROOT_IDS)),
    'identity helper path must be absolute: "bin/identity-helper"',
  );
});

t.test('group-writable helper', async (t) => {
  const { helper } = helperDir(t);
  fs.chmodSync(helper, 0o775);
  t.equal(
    requirementOf(qualifyIdentityHelper(helper, ROOT_IDS)),
    `identity helper ${helper} must not be writable by group or others (mode 0775)`,
  );
});

t.test('other-writable helper', async (t) => {
  const { helper } = helperDir(t);
  fs.chmodSync(helper, 0o757);
  t.match(
    requirementOf(qualifyIdentityHelper(helper, ROOT_IDS)),
    /must not be writable by group or others \(mode 0757\)/,
  );
});

t.test('helper not owned by root', async (t) => {
  const { helper } = helperDir(t);
  fs.chownSync(helper, NOBODY, NOBODY);
  t.equal(
    requirementOf(qualifyIdentityHelper(helper, ROOT_IDS)),
    `identity helper ${helper} must be owned by root (owner is uid ${NOBODY})`,
  );
});

t.test('non-root supervisor needs a setuid-root helper', async (t) => {
  const { helper } = helperDir(t);
  t.equal(
    requirementOf(qualifyIdentityHelper(helper, USER_IDS)),
    `identity helper ${helper} must be setuid root (mode 4750, owner root) because the supervisor runs as uid 998`,
  );
  fs.chmodSync(helper, 0o4750);
  t.equal(qualifyIdentityHelper(helper, USER_IDS).ok, true);
  // Effective uid decides: a setuid-root supervisor (euid 0) can run the helper directly.
  fs.chmodSync(helper, 0o755);
  t.equal(qualifyIdentityHelper(helper, { uid: 998, euid: 0 }).ok, true);
});

t.test('not executable, missing, or a directory', async (t) => {
  const { dir, helper } = helperDir(t);
  fs.chmodSync(helper, 0o644);
  t.match(requirementOf(qualifyIdentityHelper(helper, ROOT_IDS)), /must be executable \(mode 0644\)/);
  t.match(requirementOf(qualifyIdentityHelper(path.join(dir, 'absent'), ROOT_IDS)), /does not exist/);
  t.match(requirementOf(qualifyIdentityHelper(dir, ROOT_IDS)), /must be a regular file/);
});

t.test('a writable ancestor directory', async (t) => {
  const { dir } = helperDir(t);
  const sub = path.join(dir, 'libexec');
  fs.mkdirSync(sub);
  fs.chmodSync(sub, 0o777);
  const helper = path.join(sub, 'helper');
  fs.writeFileSync(helper, '', { mode: 0o755 });
  t.equal(
    requirementOf(qualifyIdentityHelper(helper, ROOT_IDS)),
    `identity helper directory ${sub} must not be writable by group or others (mode 0777)`,
  );
  fs.chmodSync(sub, 0o775);
  t.match(requirementOf(qualifyIdentityHelper(helper, ROOT_IDS)), /mode 0775/);
});

t.test('an ancestor directory not owned by root', async (t) => {
  const { dir } = helperDir(t);
  const sub = path.join(dir, 'libexec');
  fs.mkdirSync(sub, { mode: 0o755 });
  fs.chownSync(sub, NOBODY, NOBODY);
  const helper = path.join(sub, 'helper');
  fs.writeFileSync(helper, '', { mode: 0o755 });
  t.equal(
    requirementOf(qualifyIdentityHelper(helper, ROOT_IDS)),
    `identity helper directory ${sub} must be owned by root (owner is uid ${NOBODY})`,
  );
});

t.test('a helper under world-writable /tmp never qualifies', async (t) => {
  const dir = fs.mkdtempSync('/tmp/turnhost-helper-test-');
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const helper = path.join(dir, 'helper');
  fs.writeFileSync(helper, '', { mode: 0o755 });
  t.match(
    requirementOf(qualifyIdentityHelper(helper, ROOT_IDS)),
    /directory \/tmp must not be writable by group or others \(mode 01777\)/,
  );
});

t.test('symbolic links: every directory reached through a link is checked', async (t) => {
  const { dir, helper } = helperDir(t);
  const good = path.join(dir, 'link-to-helper');
  fs.symlinkSync('identity-helper', good);
  t.same(qualifyIdentityHelper(good, ROOT_IDS), { ok: true, realPath: helper });

  const open = path.join(dir, 'open');
  fs.mkdirSync(open);
  fs.chmodSync(open, 0o777);
  fs.writeFileSync(path.join(open, 'helper'), '', { mode: 0o755 });
  const viaOpen = path.join(dir, 'via-open');
  fs.symlinkSync(path.join(open, 'helper'), viaOpen);
  t.match(
    requirementOf(qualifyIdentityHelper(viaOpen, ROOT_IDS)),
    `identity helper directory ${open} must not be writable`,
  );

  const loop = path.join(dir, 'loop');
  fs.symlinkSync('loop', loop);
  t.match(requirementOf(qualifyIdentityHelper(loop, ROOT_IDS)), /more than 40 symbolic links/);
});

const receipt = { workerUid: 200_001, uidRange: { first: 200_000, count: 100 }, helperVersion: '1' };

t.test("no helper configured: shared_uid only with the launcher's receipt from this probe", async (t) => {
  const unprobed = await probeIdentity(null, ROOT_IDS, undefined);
  t.equal(unprobed.identity, undefined, 'no launcher probe, no identity claimed');
  t.match(unprobed.requirement, /shared_uid workers cannot be started: no shared_uid launcher is available/);

  const failed = await probeIdentity(null, ROOT_IDS, undefined, async () => fail('exec_failed', 'launcher exited 5'));
  t.equal(failed.identity, undefined);
  t.match(failed.requirement, /launcher exited 5/);

  const threw = await probeIdentity(null, ROOT_IDS, undefined, async () => {
    throw new Error('spawn ENOENT');
  });
  t.match(threw.requirement, /Error: spawn ENOENT/);

  const otherUid = await probeIdentity(null, USER_IDS, undefined, async () =>
    ok({ workerUid: 0, userNamespace: true, helperVersion: '2' }),
  );
  t.equal(otherUid.identity, undefined);
  t.match(otherUid.requirement, /worker ran as uid 0, not 998/);

  const verified = await probeIdentity(null, USER_IDS, undefined, async () =>
    ok({ workerUid: USER_IDS.euid, userNamespace: true, helperVersion: '2' }),
  );
  t.equal(verified.identity, 'shared_uid');
  t.equal(verified.requirement, undefined);
  t.equal(verified.workerUid, USER_IDS.euid);
  t.equal(verified.userNamespace, true);
});

t.test('an unqualified helper never falls back to shared_uid', async (t) => {
  const { helper } = helperDir(t);
  fs.chmodSync(helper, 0o775);
  let probed = false;
  const probe = await probeIdentity(helper, ROOT_IDS, async () => {
    probed = true;
    return ok(receipt);
  });
  t.equal(probed, false, 'an unqualified helper is never run');
  t.equal(probe.identity, undefined, 'neither separate_uid nor shared_uid is claimed');
  t.equal(probe.workerUid, undefined);
  t.match(probe.requirement, /must not be writable by group or others/);
  t.equal(probe.helper.qualified, false);
});

t.test('a qualified helper needs a valid receipt from this probe', async (t) => {
  const { helper } = helperDir(t);
  const unprobed = await probeIdentity(helper, ROOT_IDS, undefined);
  t.match(unprobed.requirement, /qualifies but no helper probe ran/);
  t.equal(unprobed.helper.qualified, true);

  const failed = await probeIdentity(helper, ROOT_IDS, async () => fail('exec_failed', 'helper exited 3'));
  t.equal(failed.requirement, `identity helper ${helper} probe failed: helper exited 3`);
  t.equal(failed.workerUid, undefined);

  const threw = await probeIdentity(helper, ROOT_IDS, async () => {
    throw new Error('spawn EACCES');
  });
  t.match(threw.requirement, /probe failed: Error: spawn EACCES/);

  for (const [bad, why] of [
    [{ ...receipt, workerUid: 0 }, /must be a nonzero integer/],
    [{ ...receipt, workerUid: 300_000 }, /outside its reserved range 200000-200099/],
    [{ ...receipt, workerUid: 998, uidRange: { first: 900, count: 200 } }, /the supervisor's own uid/],
  ] as const) {
    fs.chmodSync(helper, 0o4755);
    const probe = await probeIdentity(helper, USER_IDS, async () => ok(bad));
    t.match(probe.requirement, why);
    t.equal(probe.workerUid, undefined);
  }

  const verified = await probeIdentity(helper, ROOT_IDS, async () => ok(receipt));
  t.equal(verified.identity, 'separate_uid');
  t.equal(verified.workerUid, 200_001);
  t.equal(verified.requirement, undefined);
  t.equal(verified.helper.available, true);
});
