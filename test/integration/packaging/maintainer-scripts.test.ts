/**
 * The package's maintainer scripts, run for real by dpkg in a throwaway root: an overlay of
 * this host's own root filesystem (its dpkg, adduser, passwd and nodejs) whose writes land in
 * a temp directory, mounted in a private mount namespace that disappears with each command.
 * Nothing reaches the host: not the turnhost user, not /etc/subuid, not the dpkg database.
 * The installed supervisor is then started there as user turnhost, as the unit would.
 *
 * The package: fixture.ts (TURNHOST_DEB, else dist/turnhost_<v>-1_<arch>.deb, rebuilt when stale).
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { packageUnderTest } from './fixture.js';

const WINDOW_FIRST = 1879048192; // postinst's search window for worker uid ranges
const RANGE_COUNT = 65536;

const deb = packageUnderTest();
// The throwaway root is this host's root: its nodejs must be a dpkg package that satisfies the
// Depends line (deb.test.ts checks that line). Where node came from elsewhere, only that
// dependency is forced, and the run says so.
// The same for systemd: the unit needs >= 254 (DelegateSubgroup=), and Debian 12 build machines
// have 252; the maintainer scripts do not depend on it.
const nodejsPackaged = packageVersion('nodejs')?.split('.')[0] === process.versions.node.split('.')[0];
const systemdNewEnough = Number(packageVersion('systemd')?.split('.')[0] ?? 0) >= 254;
const DPKG_INSTALL = nodejsPackaged && systemdNewEnough ? 'dpkg -i' : 'dpkg -i --force-depends';
if (!nodejsPackaged) t.comment('this node is not the dpkg package nodejs: installing with --force-depends');
if (!systemdNewEnough) t.comment('this host has systemd < 254: installing with --force-depends');

function packageVersion(name: string): string | null {
  const query = spawnSync('dpkg-query', ['-W', '-f=${Version}', name], { encoding: 'utf8' });
  return query.status === 0 ? query.stdout : null;
}

// $1: the root's directory (upper, work, merged, pkg); $2: the script to run inside. pivot_root
// (not chroot) so the root matches the mount namespace's: unprivileged user namespaces, which
// the supervisor's network-namespace probe creates, are refused inside a chroot.
const ENTER_ROOT = `
set -e
dir=$1; root=$dir/merged
mount -t overlay overlay -o "lowerdir=/,upperdir=$dir/upper,workdir=$dir/work" "$root"
mount -t proc proc "$root/proc"
mount --rbind /dev "$root/dev"
mount --rbind /sys "$root/sys"
mount -t tmpfs tmpfs "$root/run"
mount -t tmpfs tmpfs "$root/tmp"
mount --bind "$dir/pkg" "$root/mnt"
mkdir "$root/run/old-root"
cd "$root"
pivot_root . run/old-root
umount -l /run/old-root
rmdir /run/old-root
cd /
exec /bin/sh -c "$2"
`;

interface Root {
  run(script: string): { code: number | null; stdout: string; stderr: string };
  state(): Record<string, string>;
}

/** A fresh throwaway root; removed at the end of the test that made it. */
function throwawayRoot(t: { teardown(fn: () => void): void }): Root {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-maint-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  for (const sub of ['upper', 'work', 'merged', 'pkg']) fs.mkdirSync(path.join(dir, sub));
  fs.copyFileSync(deb, path.join(dir, 'pkg', 'turnhost.deb'));
  const run = (script: string) => {
    // env -i: the test runner instruments child processes through NODE_OPTIONS, which would
    // reach the installed turnhost inside the root.
    const environment = ['PATH=/usr/sbin:/usr/bin:/sbin:/bin', 'LC_ALL=C', 'DEBIAN_FRONTEND=noninteractive'];
    const command = ['unshare', '-m', '--propagation', 'private', 'sh', '-c', ENTER_ROOT, 'sh', dir, script];
    const result = spawnSync('env', ['-i', ...environment, ...command], { encoding: 'utf8' });
    return { code: result.status, stdout: result.stdout, stderr: result.stderr };
  };
  const state = (): Record<string, string> => {
    const out = run(`
      q() { "$@" 2>/dev/null || true; }
      echo "user=$(q getent passwd turnhost | cut -d: -f1,6,7)"
      echo "group=$(q getent group turnhost | cut -d: -f1)"
      echo "subuid=$(q grep '^turnhost:' /etc/subuid)"
      echo "subgid=$(q grep '^turnhost:' /etc/subgid)"
      echo "override=$(q dpkg-statoverride --list /usr/lib/turnhost/identity-helper)"
      echo "helper=$(q stat -c '%a %U:%G' /usr/lib/turnhost/identity-helper)"
      echo "stateDir=$(q stat -c '%a %U:%G' /var/lib/turnhost)"
      echo "token=$(q stat -c '%a %U:%G' /var/lib/turnhost/api-token)"
      echo "leaseDir=$(q stat -c '%a %U:%G' /var/lib/turnhost-uid-leases)"
      echo "tokenHash=$(q cat /var/lib/turnhost/api-token | md5sum | cut -c1-32)"
      echo "config=$(q ls /etc/turnhost | tr '\\n' ' ')"
      echo "enabled=$(q readlink /etc/systemd/system/multi-user.target.wants/turnhost.service)"
    `);
    if (out.code !== 0) throw new Error(`reading state failed: ${out.stderr}`);
    return Object.fromEntries(
      out.stdout
        .trim()
        .split('\n')
        .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
    );
  };
  return { run, state };
}

function rangeOf(entry: string | undefined): { first: number; count: number } {
  const [, first, count] = (entry ?? '').split(':');
  return { first: Number(first), count: Number(count) };
}

const EMPTY_MD5 = 'd41d8cd98f00b204e9800998ecf8427e';

t.test('install, upgrade, remove and purge', async (t) => {
  const root = throwawayRoot(t);
  const install = root.run(`${DPKG_INSTALL} /mnt/turnhost.deb`);
  t.equal(install.code, 0, 'dpkg -i installs', { stderr: install.stderr });

  const installed = root.state();
  t.equal(installed['user'], 'turnhost:/var/lib/turnhost:/usr/sbin/nologin', 'system user turnhost');
  t.equal(installed['group'], 'turnhost', 'system group turnhost');
  const range = rangeOf(installed['subuid']);
  t.ok(range.first >= WINDOW_FIRST && range.count === RANGE_COUNT, `worker range reserved: ${installed['subuid']}`);
  t.equal(installed['subgid'], installed['subuid'], 'the same range in /etc/subgid');
  t.equal(installed['override'], 'root turnhost 4750 /usr/lib/turnhost/identity-helper', 'statoverride registered');
  t.equal(installed['helper'], '4750 root:turnhost', 'helper is setuid root, group turnhost only');
  t.equal(installed['stateDir'], '750 turnhost:turnhost', '/var/lib/turnhost 0750');
  t.equal(installed['token'], '600 turnhost:turnhost', 'API token private to turnhost');
  t.equal(installed['leaseDir'], '700 root:root', 'workspace uid lease records: root only');
  t.not(installed['tokenHash'], EMPTY_MD5, 'token is not empty');
  t.equal(installed['config'], 'identity-helper.conf turnhost.json ', 'both conffiles installed');
  t.equal(installed['enabled'], '/lib/systemd/system/turnhost.service', 'unit enabled');

  const upgrade = root.run(`${DPKG_INSTALL} /mnt/turnhost.deb`);
  t.equal(upgrade.code, 0, 'dpkg -i again (upgrade) succeeds', { stderr: upgrade.stderr });
  t.same(root.state(), installed, 'a second configure (upgrade) changes nothing: same range, token, override');

  const remove = root.run('dpkg -r turnhost');
  t.equal(remove.code, 0, 'dpkg -r succeeds', { stderr: remove.stderr });
  const removed = root.state();
  t.equal(removed['helper'], '', 'program files are gone');
  for (const key of [
    'user',
    'group',
    'subuid',
    'subgid',
    'stateDir',
    'token',
    'tokenHash',
    'config',
    'leaseDir',
  ] as const)
    t.equal(removed[key], installed[key], `remove keeps ${key}`);

  const purge = root.run('dpkg -P turnhost');
  t.equal(purge.code, 0, 'dpkg -P succeeds', { stderr: purge.stderr });
  const purged = root.state();
  for (const key of [
    'user',
    'group',
    'subuid',
    'subgid',
    'override',
    'stateDir',
    'token',
    'leaseDir',
    'config',
    'enabled',
  ] as const)
    t.equal(purged[key], '', `purge removes ${key}`);
});

t.test('the installed helper runs workers under the reserved range, for group turnhost only', async (t) => {
  const root = throwawayRoot(t);
  t.equal(root.run(`${DPKG_INSTALL} /mnt/turnhost.deb`).code, 0, 'dpkg -i installs');
  const range = rangeOf(root.state()['subuid']);
  const probe = (user: string, group: string): ReturnType<Root['run']> =>
    root.run(`printf 'turnhost-descriptor 2\\nop probe\\nend\\n' > /tmp/probe
      exec setpriv --reuid=${user} --regid=${group} --init-groups /usr/lib/turnhost/identity-helper 3</tmp/probe`);
  const asTurnhost = probe('turnhost', 'turnhost');
  t.equal(asTurnhost.code, 0, 'group turnhost runs the helper probe', { stderr: asTurnhost.stderr });
  t.match(asTurnhost.stdout, new RegExp(`^worker_uid ${range.first}$`, 'm'), 'first uid of the reserved range');
  t.match(asTurnhost.stdout, /^worker_no_new_privs 1$/m, 'worker has no_new_privs');
  t.match(asTurnhost.stdout, /^worker_cap_bnd 0000000000000000$/m, 'worker has an empty bounding set');
  const asNobody = probe('nobody', 'nogroup');
  t.not(asNobody.code, 0, 'a user outside group turnhost cannot run the helper');
  t.notMatch(asNobody.stdout, /worker_uid/, 'and gets no receipt');
});

t.test('the worker range overlaps no existing user or subordinate range', async (t) => {
  const root = throwawayRoot(t);
  // The first block is another user's subordinate range; the second holds an account's uid.
  const seeded = root.run(`
    echo "someone:${WINDOW_FIRST}:${RANGE_COUNT}" >> /etc/subuid
    echo "squatter:x:${WINDOW_FIRST + RANGE_COUNT + 5}:${WINDOW_FIRST + RANGE_COUNT + 5}::/nonexistent:/usr/sbin/nologin" >> /etc/passwd
    ${DPKG_INSTALL} /mnt/turnhost.deb`);
  t.equal(seeded.code, 0, 'dpkg -i installs', { stderr: seeded.stderr });
  t.equal(rangeOf(root.state()['subuid']).first, WINDOW_FIRST + 2 * RANGE_COUNT, 'first free block after both');
});

t.test('no free block: configure fails and says what to do', async (t) => {
  const root = throwawayRoot(t);
  const blocked = root.run(`
    echo "blocker:${WINDOW_FIRST}:${2147352576 - WINDOW_FIRST}" >> /etc/subgid
    ${DPKG_INSTALL} /mnt/turnhost.deb`);
  t.not(blocked.code, 0, 'dpkg reports the failed configure');
  t.match(blocked.stderr, /no free block of 65536 worker uids/, 'names the problem');
  t.match(blocked.stderr, /turnhost:FIRST:COUNT/, 'and the fix');
  t.equal(root.state()['subuid'], '', 'nothing reserved');
});

t.test('the installed supervisor runs as turnhost from the packaged layout and qualifies its helper', async (t) => {
  const root = throwawayRoot(t);
  t.equal(root.run(`${DPKG_INSTALL} /mnt/turnhost.deb`).code, 0, 'dpkg -i installs');
  const range = rangeOf(root.state()['subuid']);
  // A unix socket instead of the packaged 127.0.0.1:7707: tests never take fixed ports.
  const served = root.run(`
    install -d -o turnhost -g turnhost /run/turnhost
    TURNHOST_LISTEN=none TURNHOST_SOCKET=/run/turnhost/api.sock \\
      setpriv --reuid=turnhost --regid=turnhost --init-groups turnhost serve > /tmp/serve.log 2>&1 &
    serve=$!
    i=0; while [ ! -S /run/turnhost/api.sock ] && [ $i -lt 300 ] && kill -0 $serve 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
    turnhost check --server unix:/run/turnhost/api.sock --json > /tmp/check.json
    echo "check-exit=$?" >&2
    kill $serve; wait $serve
    echo "serve-exit=$?" >&2
    cat /tmp/serve.log >&2
    cat /tmp/check.json`);
  t.match(served.stderr, /check-exit=[04]\n/, 'turnhost check answers (0 available, 4 unavailable)', {
    stderr: served.stderr,
  });
  t.match(served.stderr, /serve-exit=0\n/, 'serve stops cleanly on SIGTERM');
  t.match(
    served.stderr,
    /"msg":"configuration loaded".*"file":"\/etc\/turnhost\/turnhost\.json".*"dataDir":"\/var\/lib\/turnhost"/,
    'installed layout: packaged config and state directory',
  );
  let status: {
    identity?: string;
    workerUid?: number;
    boundary?: Record<string, { available?: boolean; qualified?: boolean; path?: string }>;
  } = {};
  try {
    status = JSON.parse(served.stdout) as typeof status;
  } catch {
    t.fail('check --json printed JSON', { stdout: served.stdout });
    return;
  }
  t.equal(status.identity, 'separate_uid', 'a configured helper: separate_uid');
  t.equal(status.boundary?.['identityHelper']?.path, '/usr/lib/turnhost/identity-helper');
  t.equal(
    status.boundary?.['identityHelper']?.qualified,
    true,
    'the installed helper passes the ownership and mode checks',
  );
  t.equal(status.boundary?.['seccomp']?.available, true, 'seccomp available');
  t.equal(status.boundary?.['networkNamespaces']?.available, true, 'network namespaces available to the turnhost user');
  t.equal(status.workerUid, range.first, 'the helper probe verified the first uid of the reserved range');
});

t.test('configure never writes through a link planted in the state directory', async (t) => {
  const root = throwawayRoot(t);
  t.equal(root.run(`${DPKG_INSTALL} /mnt/turnhost.deb`).code, 0, 'dpkg -i installs');
  // What a compromised supervisor (uid turnhost, owner of /var/lib/turnhost) could leave
  // behind before the next upgrade: no token, and links where a naive script writes.
  const planted = root.run(`
    echo original > /etc/victim
    cd /var/lib/turnhost
    setpriv --reuid=turnhost --regid=turnhost --clear-groups sh -c '
      rm -f api-token
      for name in api-token.new api-token.tmp .api-token; do ln -s /etc/victim "$name"; done'
    ${DPKG_INSTALL} /mnt/turnhost.deb >/dev/null
    echo "victim=$(stat -c '%U %a' /etc/victim) $(cat /etc/victim)"
    echo "token=$(stat -c '%F %a %U' /var/lib/turnhost/api-token)"`);
  t.equal(planted.code, 0, 'the upgrade succeeds', { stderr: planted.stderr });
  t.match(planted.stdout, /^victim=root 644 original$/m, 'the link target is untouched');
  t.match(planted.stdout, /^token=regular file 600 turnhost$/m, 'a new private token is created');
});
