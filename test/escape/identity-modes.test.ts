/**
 * The same attacks against every configuration the supervisor allows, each a real
 * `turnhost serve` driven through `turnhost run` and `turnhost check`:
 *   - separate_uid: a root supervisor with the identity helper;
 *   - shared_uid under a root supervisor (no helper): the worker is uid 0 with no capability;
 *   - shared_uid under a non-root supervisor: the worker keeps its uid in a user namespace.
 * Every case must hold in all three, except what a root shared_uid worker keeps by being uid 0
 * (the owner's access to root-owned files the view shows), which the root-server warning says
 * and this suite checks the warning says. Then `check` must claim what the attacks found.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import t from 'tap';
import { NATIVE_BUILD, REPO_ROOT } from '../support/turn-harness.js';
import {
  plainUid,
  setUpHelper,
  startSupervisor,
  stopSupervisors,
  supervisorBase,
  type ServedSupervisor,
} from '../support/served-supervisor.js';
import { stopTapInjectingIntoChildren } from '../support/no-tap-inject.js';
import { servedApi } from '../support/served-api.js';
import type { WorkerHostStatus } from '../../supervisor/probes/types.js';

stopTapInjectingIntoChildren();

const SEPARATE_RANGE = { first: 3_185_000, count: 8 };
const NON_ROOT_UID = plainUid(1);
const TMP_SIZE = 16 * 1024 * 1024;
const NODE = process.execPath;

type ConfigName = 'separate_uid' | 'shared_uid, root supervisor' | 'shared_uid, non-root supervisor';

const helper = setUpHelper([supervisorBase('separate').dataDir], SEPARATE_RANGE);
t.teardown(() => helper.remove());
const supervisors: Array<[ConfigName, ServedSupervisor]> = [
  ['separate_uid', await startSupervisor({ name: 'separate', helper })],
  ['shared_uid, root supervisor', await startSupervisor({ name: 'shared-root' })],
  ['shared_uid, non-root supervisor', await startSupervisor({ name: 'shared-user', uid: NON_ROOT_UID })],
];
t.teardown(() => stopSupervisors(supervisors.map(([, supervisor]) => supervisor)));

/** Host-side fixtures every configuration is attacked with. */
const SECRET_DIR = fs.mkdtempSync('/var/lib/turnhost-esc-secret-');
fs.chmodSync(SECRET_DIR, 0o755);
const ROOT_SECRET = path.join(SECRET_DIR, 'root-only');
fs.writeFileSync(ROOT_SECRET, 'root-secret\n', { mode: 0o600 });
const HOST_TMP = `/tmp/turnhost-esc-host-${process.pid}`;
const HOST_SHM = `/dev/shm/turnhost-esc-host-${process.pid}`;
fs.writeFileSync(HOST_TMP, 'host-tmp\n', { mode: 0o644 });
fs.writeFileSync(HOST_SHM, 'host-shm\n', { mode: 0o644 });
// The checkout may lie where a view hides it (a clone under /tmp is behind the turn's own /tmp),
// so the probe binary runs from a host directory every view shows read-only.
const TOOLS_DIR = fs.mkdtempSync('/var/lib/turnhost-esc-tools-');
fs.chmodSync(TOOLS_DIR, 0o755);
const REPORT_SELF = path.join(TOOLS_DIR, 'report-self');
fs.copyFileSync(path.join(NATIVE_BUILD, 'report-self'), REPORT_SELF);
fs.chmodSync(REPORT_SELF, 0o755);
// The installed configuration directory, world-readable here so only the view can keep it out.
const INSTALLED_CONFIG_DIR = '/etc/turnhost';
const madeConfigDir = !fs.existsSync(INSTALLED_CONFIG_DIR);
const CONFIG_SECRET = path.join(INSTALLED_CONFIG_DIR, `esc-secret-${process.pid}`);
fs.mkdirSync(INSTALLED_CONFIG_DIR, { recursive: true, mode: 0o755 });
fs.writeFileSync(CONFIG_SECRET, '{"apiToken":"config-secret"}\n', { mode: 0o644 });
t.teardown(() => {
  fs.rmSync(CONFIG_SECRET, { force: true });
  if (madeConfigDir) fs.rmSync(INSTALLED_CONFIG_DIR, { recursive: true, force: true });
  fs.rmSync(SECRET_DIR, { recursive: true, force: true });
  fs.rmSync(TOOLS_DIR, { recursive: true, force: true });
  fs.rmSync(HOST_TMP, { force: true });
  fs.rmSync(HOST_SHM, { force: true });
});

function field(report: string, key: string): string | undefined {
  return report
    .split('\n')
    .find((line) => line.startsWith(`${key} `))
    ?.slice(key.length + 1);
}

async function check(supervisor: ServedSupervisor): Promise<WorkerHostStatus> {
  const answer = await supervisor.cli(['check', '--json']);
  return JSON.parse(answer.stdout) as WorkerHostStatus;
}

for (const [config, supervisor] of supervisors) {
  const sharedRoot = config === 'shared_uid, root supervisor';

  t.test(`${config}: no capability, no_new_privs, seccomp, the expected uid`, async (t) => {
    const run = await supervisor.run([REPORT_SELF]);
    t.equal(run.code, 0, run.stderr);
    t.equal(field(run.stdout, 'status NoNewPrivs'), '1');
    t.equal(field(run.stdout, 'status CapEff'), '0000000000000000');
    t.equal(field(run.stdout, 'status CapPrm'), '0000000000000000');
    t.equal(field(run.stdout, 'status CapBnd'), '0000000000000000');
    t.equal(field(run.stdout, 'status Seccomp'), '2');
    const uid = Number((field(run.stdout, 'uid') ?? '').split(' ')[0]);
    if (config === 'separate_uid') {
      t.ok(uid >= SEPARATE_RANGE.first && uid < SEPARATE_RANGE.first + SEPARATE_RANGE.count, `uid ${uid} in the range`);
    } else t.equal(uid, supervisor.uid, "the supervisor's own uid");
  });

  t.test(`${config}: a variable the caller names arrives; a name the boundary owns is refused`, async (t) => {
    const secret = `env-value-${process.pid}-${supervisor.uid}`;
    const turnId = `env-${supervisor.uid}-${process.pid}`;
    const argv = ['/bin/sh', '-c', 'printf "%s|%s" "$FOO" "$NODE_USE_ENV_PROXY"'];
    const run = await supervisor.run(argv, {
      turnId,
      extra: ['--env', 'FOO=bar', '--env', `SECRET_TOKEN=${secret}`, '--timeout', '77', '--limit', 'pids=50'],
    });
    t.equal(run.code, 0, run.stderr);
    t.equal(run.stdout, 'bar|1', '--env FOO=bar reaches the command, and Node is told to use the proxy');
    const api = servedApi(supervisor);
    // The record says what ran, and keeps the names of the variables, never their values.
    const record = await api.request('GET', `/api/turns/${turnId}`);
    t.equal(record.status, 200);
    t.match(record.body, {
      turn: {
        argv,
        cwd: supervisor.workspace,
        envNames: ['FOO', 'SECRET_TOKEN'],
        limits: { pids: 50 },
        timeoutSeconds: 77,
        tty: false,
      },
    });
    t.notMatch(JSON.stringify(record.body), secret, 'no value in the answer');
    const stored = ['turnhost.db', 'turnhost.db-wal']
      .map((name) => path.join(supervisor.dataDir, name))
      .filter((file) => fs.existsSync(file))
      .map((file) => fs.readFileSync(file));
    t.ok(stored.length > 0, 'the database files exist');
    t.ok(
      stored.every((bytes) => !bytes.includes(secret)),
      'no value anywhere in the database files',
    );
    for (const name of ['LD_PRELOAD', 'HTTPS_PROXY', 'no_proxy', 'TMPDIR', 'NODE_USE_ENV_PROXY']) {
      const refused = await api.createTurn('s-env-reserved', ['/bin/true'], { env: { FOO: 'bar', [name]: 'x' } });
      t.equal(refused.status, 400, name);
      t.match(refused.body, { code: 'invalid_request', field: `env.${name}`, errors: [{ field: `env.${name}` }] });
    }
    const cli = await supervisor.run(['/bin/true'], { extra: ['--env', 'LD_PRELOAD=/tmp/evil.so'] });
    t.not(cli.code, 0, 'the CLI run is refused too');
    t.match(cli.stderr, /env\.LD_PRELOAD/);
  });

  t.test(`${config}: the host tree and the checkout are read-only`, async (t) => {
    const targets = [`/etc/turnhost-esc-${process.pid}`, `/usr/turnhost-esc-${process.pid}`];
    targets.push(path.join(supervisor.codeRoot, `turnhost-esc-${process.pid}`));
    const script = targets.map((p) => `echo x > ${p} && echo "WROTE ${p}"`).join('; ');
    const run = await supervisor.run(['/bin/sh', '-c', `${script}; true`]);
    t.equal(run.code, 0, run.stderr);
    t.notMatch(run.stdout, /WROTE/);
    for (const target of [...targets.slice(0, 2), path.join(REPO_ROOT, `turnhost-esc-${process.pid}`)])
      t.notOk(fs.existsSync(target), `${target} not created on the host`);
  });

  t.test(
    `${config}: the supervisor's token, database, installed config and the host's shadow file are out of reach`,
    async (t) => {
      const data = supervisor.dataDir;
      const run = await supervisor.run([
        '/bin/sh',
        '-c',
        [
          `ls -A ${data} | sed 's/^/listed /'`,
          `cat ${data}/api-token && echo "READ token"`,
          `echo x >> ${data}/turnhost.db && echo "APPENDED db"`,
          `cat /etc/shadow | grep -q . && echo "READ shadow"`,
          `cat ${CONFIG_SECRET} && echo "READ installed config"`,
          `ls -A ${INSTALLED_CONFIG_DIR} | sed 's/^/listed /'`,
          'true',
        ].join('; '),
      ]);
      t.equal(run.code, 0, run.stderr);
      t.notMatch(run.stdout, /listed|READ|APPENDED/);
    },
  );

  t.test(`${config}: a root-owned 0600 file the view shows is readable only by a root shared_uid worker`, async (t) => {
    const run = await supervisor.run(['/bin/sh', '-c', `cat ${ROOT_SECRET} || echo unreadable`]);
    t.equal(run.code, 0, run.stderr);
    if (sharedRoot) {
      t.match(run.stdout, 'root-secret', 'uid 0 keeps the owner access, as the warning says');
      const status = await check(supervisor);
      t.match(status.rootServer?.warning, /able to read a root-owned 0600 file/);
    } else t.match(run.stdout, 'unreadable');
  });

  t.test(`${config}: kernel-wide controls in /proc are read-only, also to a uid 0 worker`, async (t) => {
    // The same value written back: harmless should the cover fail, but a write all the same.
    const run = await supervisor.run([
      '/bin/sh',
      '-c',
      [
        'for knob in kernel/core_pattern kernel/printk_ratelimit vm/overcommit_memory; do',
        '  value=$(cat /proc/sys/$knob)',
        '  (printf "%s\\n" "$value" > /proc/sys/$knob) 2>/dev/null && echo "WROTE $knob"',
        'done',
        'for file in /proc/sysrq-trigger /proc/irq/default_smp_affinity; do',
        '  [ -e $file ] && [ -w $file ] && echo "WRITABLE $file"',
        'done',
        'echo checked',
      ].join('\n'),
    ]);
    t.equal(run.code, 0, run.stderr);
    t.match(run.stdout, 'checked');
    t.notMatch(run.stdout, /WROTE|WRITABLE/);
  });

  t.test(`${config}: /tmp and /dev/shm are the turn's own`, async (t) => {
    const mine = `turnhost-esc-turn-${process.pid}`;
    const run = await supervisor.run([
      '/bin/sh',
      '-c',
      `cat ${HOST_TMP} ${HOST_SHM} 2>/dev/null; echo mine > /tmp/${mine} && echo mine > /dev/shm/${mine} && echo "wrote own"; echo "TMPDIR=$TMPDIR"`,
    ]);
    t.equal(run.code, 0, run.stderr);
    t.notMatch(run.stdout, /host-tmp|host-shm/);
    t.match(run.stdout, 'wrote own');
    t.match(run.stdout, 'TMPDIR=/tmp');
    t.notOk(fs.existsSync(`/tmp/${mine}`));
    t.notOk(fs.existsSync(`/dev/shm/${mine}`));
  });

  t.test(`${config}: the worker and the turn's init are out of the command's reach`, async (t) => {
    const run = await supervisor.run([
      '/bin/sh',
      '-c',
      [
        'for pid in $PPID 1; do',
        '  (exec 3<>/proc/$pid/mem) 2>/dev/null && echo "OPENED mem $pid"',
        '  (exec 3</proc/$pid/mem) 2>/dev/null && echo "OPENED mem-read $pid"',
        '  cat /proc/$pid/environ >/dev/null 2>&1 && echo "READ environ $pid"',
        '  ls /proc/$pid/fd >/dev/null 2>&1 && echo "LISTED fd $pid"',
        '  for fd in 0 1 2 3 4 5 6 7 8 9; do',
        '    readlink /proc/$pid/fd/$fd >/dev/null 2>&1 && echo "FOLLOWED fd $pid/$fd"',
        '    (exec 9</proc/$pid/fd/$fd) 2>/dev/null && echo "OPENED fd $pid/$fd"',
        '  done',
        'done',
        'echo "parent $PPID"',
      ].join('\n'),
    ]);
    t.equal(run.code, 0, run.stderr);
    t.match(run.stdout, /^parent 2$/m, "the worker is pid 2 of the turn's namespace");
    t.notMatch(run.stdout, /OPENED|READ|FOLLOWED/);
    // A non-dumpable process's /proc files belong to root: uid 0 lists its fd numbers as their
    // owner (never their targets or contents: those need ptrace access). No other worker can.
    if (sharedRoot) t.match(run.stdout, /LISTED fd 2/, 'a root shared_uid worker lists the fd numbers, as documented');
    else t.notMatch(run.stdout, /LISTED/);
  });

  t.test(`${config}: host processes of the worker's uid are invisible and unsignalable`, async (t) => {
    const hostUid = config === 'separate_uid' ? SEPARATE_RANGE.first : supervisor.uid;
    const sleeper = spawn('setpriv', [`--reuid=${hostUid}`, `--regid=${hostUid}`, '--clear-groups', 'sleep', '300'], {
      stdio: 'ignore',
    });
    t.teardown(() => sleeper.kill('SIGKILL'));
    const pid = sleeper.pid!;
    const run = await supervisor.run([
      '/bin/sh',
      '-c',
      `id -u; [ -e /proc/${pid} ] && echo "SEES ${pid}"; kill -0 ${pid} 2>/dev/null && echo "SIGNALS ${pid}"; ls /proc | grep -c '^[0-9]'`,
    ]);
    t.equal(run.code, 0, run.stderr);
    t.notMatch(run.stdout, /SEES|SIGNALS/);
    const [uid, processes] = run.stdout.trim().split('\n').map(Number);
    t.ok(processes! <= 6, `only the turn's own processes are listed (${processes})`);
    if (config === 'separate_uid') t.not(uid, hostUid, 'a uid with a live process is never leased');
    t.equal(sleeper.exitCode, null, 'the host process lives on');
  });

  t.test(`${config}: world-connectable host sockets in /run, /var/tmp and /tmp are unreachable`, async (t) => {
    const sockets = ['/run', '/var/tmp', '/tmp'].map((dir) => path.join(dir, `turnhost-esc-${process.pid}.sock`));
    const servers = await Promise.all(
      sockets.map(
        (socketPath) =>
          new Promise<net.Server>((resolve) => {
            fs.rmSync(socketPath, { force: true });
            const server = net.createServer((socket) => socket.end('host-daemon\n'));
            server.listen(socketPath, () => {
              fs.chmodSync(socketPath, 0o777);
              resolve(server);
            });
          }),
      ),
    );
    t.teardown(() => servers.forEach((server) => server.close()));
    const connect = `for (const p of ${JSON.stringify(sockets)}) require('net').connect(p).on('data', (d) => console.log('reached ' + p + ' ' + d)).on('error', (e) => console.log('refused ' + p + ' ' + e.code))`;
    const run = await supervisor.run([NODE, '-e', connect]);
    t.equal(run.code, 0, run.stderr);
    for (const socketPath of sockets) t.match(run.stdout, `refused ${socketPath} ENOENT`);
    t.notMatch(run.stdout, /host-daemon/);
  });

  t.test(`${config}: filling the turn's temp stops at tmp_size, off the host's /run`, async (t) => {
    // Other test files running beside this one make and remove their own `turnhost-*` fixture
    // directories in /run; the turn's temp would appear as anything else.
    const hostRun = (): string[] =>
      fs
        .readdirSync('/run')
        .filter((name) => !name.startsWith('turnhost-'))
        .sort();
    const before = hostRun();
    const turnId = `fill-${config.replace(/[^a-z]/g, '')}-${process.pid}`;
    const run = await supervisor.run(
      ['/bin/sh', '-c', 'head -c 40000000 /dev/zero > "$TMPDIR/fill"; echo "rc $?"; wc -c < "$TMPDIR/fill"'],
      { turnId },
    );
    t.equal(run.code, 0, run.stderr);
    const [rc, size] = run.stdout.trim().split('\n');
    t.not(rc, 'rc 0', 'the write fails');
    t.ok(Number(size) <= TMP_SIZE, `at most tmp_size written (${size})`);
    t.same(hostRun(), before, "nothing new on the host's /run");
    const events = await supervisor.cli(['events', '--turn', turnId, '--kind', 'turn_temp_purge', '--json']);
    const page = JSON.parse(events.stdout) as { events: Array<{ payload: { bytes: number; outcome: string } }> };
    const purge = page.events[0];
    t.equal(purge?.payload.outcome, 'purged');
    t.ok(
      (purge?.payload.bytes ?? 0) >= TMP_SIZE / 2,
      `the receipt counts what the turn left (${purge?.payload.bytes})`,
    );
  });

  t.test(`${config}: check claims what the attacks found`, async (t) => {
    const status = await check(supervisor);
    t.match(status.ordinary, { available: true });
    t.match(status.governed, { available: true });
    t.equal(status.identity, config === 'separate_uid' ? 'separate_uid' : 'shared_uid');
    t.same(
      status.limits.enforced.find((entry) => entry.limit === 'tmp_size'),
      { limit: 'tmp_size', source: 'tmpfs', value: TMP_SIZE },
    );
    if (config === 'separate_uid') {
      t.ok(status.workerUid !== undefined && status.workerUid >= SEPARATE_RANGE.first, 'the probed worker uid');
      t.match(status.rootServer?.warning, /separate uid/);
    } else {
      t.equal(status.workerUid, supervisor.uid);
      t.match(status.limits.absent.find((entry) => entry.limit === 'processes')?.reason, /uid 0|shared_uid/);
      if (sharedRoot) t.match(status.rootServer?.warning, /workers run as uid 0 with no capabilities and no_new_privs/);
      else t.equal(status.rootServer, undefined, 'a non-root supervisor gets no root warning');
    }
  });
}
