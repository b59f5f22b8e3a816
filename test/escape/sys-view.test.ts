/**
 * What a turn sees of `/sys`, in every configuration the supervisor allows (separate_uid, and
 * shared_uid under a root and a non-root supervisor): a sysfs of the turn's own network
 * namespace (only `lo` in `/sys/class/net`, no host interface, no host MAC address), a
 * `/sys/fs/cgroup` that shows the turn's own cgroup and no other turn's, even while a turn of
 * another supervisor runs, a cgroup namespace rooted at the turn's cgroup, and nothing under
 * `/sys` the turn can write. Decisions: docs/filesystem-view.md ("/sys").
 */
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import {
  cgroupMountOf,
  plainUid,
  setUpHelper,
  startSupervisor,
  stopSupervisors,
  supervisorBase,
  type CliResult,
  type ServedSupervisor,
} from '../support/served-supervisor.js';
import { stopTapInjectingIntoChildren } from '../support/no-tap-inject.js';
import { until } from '../support/until.js';

stopTapInjectingIntoChildren();

const SEPARATE_RANGE = { first: 3_194_000, count: 8 };
const NON_ROOT_UID = plainUid(7);

type ConfigName = 'separate_uid' | 'shared_uid, root supervisor' | 'shared_uid, non-root supervisor';

const helper = setUpHelper([supervisorBase('sys-separate').dataDir], SEPARATE_RANGE);
t.teardown(() => helper.remove());
const supervisors: Array<[ConfigName, ServedSupervisor]> = [
  ['separate_uid', await startSupervisor({ name: 'sys-separate', helper })],
  ['shared_uid, root supervisor', await startSupervisor({ name: 'sys-shared-root' })],
  ['shared_uid, non-root supervisor', await startSupervisor({ name: 'sys-shared-user', uid: NON_ROOT_UID })],
];
t.teardown(() => stopSupervisors(supervisors.map(([, supervisor]) => supervisor)));

/** The host's network interfaces other than lo, with their MAC addresses. */
function hostInterfaces(): Array<{ name: string; mac: string }> {
  return fs
    .readdirSync('/sys/class/net')
    .filter((name) => name !== 'lo')
    .map((name) => {
      let mac = '';
      try {
        mac = fs.readFileSync(path.join('/sys/class/net', name, 'address'), 'utf8').trim();
      } catch {
        // an interface without an address file
      }
      return { name, mac };
    });
}

/** The host directory of a running turn's cgroup leaf (found by its turn id), or null. */
function hostLeafOf(turnId: string): string | null {
  const mount = cgroupMountOf('pids') ?? '/sys/fs/cgroup';
  const pending = [mount];
  while (pending.length > 0) {
    const dir = pending.pop()!;
    let entries: fs.Dirent[] = [];
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch {
      continue; // removed while walking
    }
    for (const entry of entries) {
      if (!entry.isDirectory()) continue;
      const child = path.join(dir, entry.name);
      if (entry.name === turnId) return child;
      pending.push(child);
    }
  }
  return null;
}

function lines(text: string, prefix: string): string[] {
  return text
    .split('\n')
    .filter((line) => line.startsWith(prefix))
    .map((line) => line.slice(prefix.length));
}

const LIST_SYS =
  'for n in /sys/class/net/*; do echo "net $(basename "$n") $(cat "$n/address" 2>/dev/null)"; done; ' +
  'find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null | sed "s/^/cgdir /"; ' +
  'sed "s/^/proc-cgroup /" /proc/self/cgroup; ';

const TRY_WRITES =
  'w() { if (echo 1 >> "$1") 2>/dev/null; then echo "wrote $1"; fi; }; ' +
  'm() { if mkdir "$1" 2>/dev/null; then echo "made $1"; fi; }; ' +
  'for f in $(find /sys/fs/cgroup -type f 2>/dev/null); do w "$f"; done; ' +
  'for d in /sys/fs/cgroup $(find /sys/fs/cgroup -mindepth 1 -type d 2>/dev/null); do m "$d/escape-$$"; done; ' +
  'w /sys/class/net/lo/mtu; w /sys/kernel/mm/transparent_hugepage/enabled; w /sys/kernel/uevent_helper; ' +
  'm /sys/escape-$$; m /sys/class/escape-$$; touch /sys/escape-file-$$ 2>/dev/null && echo "made /sys/escape-file"; ' +
  'echo done';

for (const [index, [config, supervisor]] of supervisors.entries()) {
  t.test(`${config}: /sys/class/net lists only lo, no host interface or MAC address`, async (t) => {
    const run = await supervisor.run(['/bin/sh', '-c', LIST_SYS]);
    t.equal(run.code, 0, run.stderr);
    const interfaces = lines(run.stdout, 'net ');
    t.same(
      interfaces.map((line) => line.split(' ')[0]),
      ['lo'],
      'only lo',
    );
    for (const host of hostInterfaces()) {
      t.notMatch(run.stdout, new RegExp(`^net ${host.name} `, 'm'), `host interface ${host.name} absent`);
      if (host.mac !== '' && host.mac !== '00:00:00:00:00:00')
        t.notOk(run.stdout.includes(host.mac), `host MAC ${host.mac} absent`);
    }
  });

  t.test(`${config}: /sys/fs/cgroup shows no other turn while one runs, and nothing is writable`, async (t) => {
    const [, other] = supervisors[(index + 1) % supervisors.length]!;
    const sleeperId = `sysview-sleeper-${index}-${process.pid}`;
    const sleeper: Promise<CliResult> = other.run(['/bin/sleep', '12'], { turnId: sleeperId });
    const found: { leaf: string | null } = { leaf: null };
    t.ok(
      await until(() => (found.leaf = hostLeafOf(sleeperId)) !== null, 20_000),
      `the other supervisor's turn ${sleeperId} has a cgroup leaf on the host`,
    );
    const probeId = `sysview-probe-${index}-${process.pid}`;
    const run = await supervisor.run(['/bin/sh', '-c', LIST_SYS + TRY_WRITES], { turnId: probeId });
    await sleeper;
    t.equal(run.code, 0, run.stderr);
    t.match(run.stdout, /^done$/m, 'the attack script ran to its end');
    t.notOk(run.stdout.includes(sleeperId), `the other turn's leaf (${found.leaf ?? 'unknown'}) is not visible`);
    const dirs = lines(run.stdout, 'cgdir ');
    t.comment(`/sys/fs/cgroup directories: ${dirs.join(' ') || '(none)'}`);
    // A leaf of the turn's own has no cgroup below it: a directory two levels down would be one.
    t.same(
      dirs.filter((dir) => dir.split('/').length > 5),
      [],
      'no cgroup below the turn’s own leaves',
    );
    for (const line of lines(run.stdout, 'proc-cgroup '))
      t.match(line, /:\/$/, `the cgroup namespace is rooted at the turn's cgroup (${line})`);
    t.same(lines(run.stdout, 'wrote '), [], 'no file under /sys written');
    t.same(lines(run.stdout, 'made '), [], 'nothing under /sys created');
  });
}
