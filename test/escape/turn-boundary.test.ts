/**
 * Attacks from inside a real turn (helper, namespaces, seccomp, worker, cgroup): each case runs
 * the attack as the turn command and proves it fails.
 */
import t from 'tap';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { createTurnHarness, runTurn, NATIVE_BUILD } from '../support/turn-harness.js';
import { processesOfUid } from '../support/processes.js';

const harness = await createTurnHarness({ slot: 2 });
t.teardown(() => harness.close());

function field(report: string, key: string): string | undefined {
  return report
    .split('\n')
    .find((line) => line.startsWith(`${key} `))
    ?.slice(key.length + 1);
}

t.test('the command runs with no privilege, no capability and the seccomp filter', async (t) => {
  const run = await runTurn(harness, { argv: [path.join(NATIVE_BUILD, 'report-self')] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  const [ruid, euid, suid] = (field(run.stdout, 'uid') ?? '').split(' ').map(Number);
  t.ok(ruid! >= harness.uidRange.first && ruid! < harness.uidRange.first + harness.uidRange.count, 'uid in the range');
  t.not(ruid, process.getuid!(), 'uid differs from the supervisor');
  t.equal(euid, ruid);
  t.equal(suid, ruid);
  t.equal(field(run.stdout, 'groups'), '0', 'no supplementary groups');
  t.equal(field(run.stdout, 'status NoNewPrivs'), '1');
  t.equal(field(run.stdout, 'status CapEff'), '0000000000000000');
  t.equal(field(run.stdout, 'status CapBnd'), '0000000000000000');
  t.equal(field(run.stdout, 'status Seccomp'), '2');
  const fds = run.stdout
    .split('\n')
    .filter((l) => l.startsWith('fd '))
    .map((l) => l.slice(3));
  t.same(fds, ['0', '1', '2'], 'only fds 0-2 reach the command');
  const devs = run.stdout.split('\n').filter((l) => l.startsWith('netdev '));
  t.same(devs, ['netdev lo up'], 'only lo in the network namespace');
});

t.test('host loopback TCP is unreachable from the command', async (t) => {
  const server = net.createServer((socket) => socket.end('host-secret\n'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  const port = (server.address() as net.AddressInfo).port;
  const run = await runTurn(harness, {
    argv: ['/bin/bash', '-c', `exec 3<>/dev/tcp/127.0.0.1/${port} && cat <&3`],
  });
  t.equal(run.result.status, 'nonzero_exit', 'the connection fails');
  t.notMatch(run.stdout, /host-secret/);
});

t.test("caller variables reach the command; the supervisor's own environment does not", async (t) => {
  // The supervisor runs in this process: a variable of its own must not reach a turn.
  process.env['TURNHOST_TEST_SERVER_SECRET'] = 'server-secret';
  process.env['SERVER_ONLY_VARIABLE'] = 'server-only';
  t.teardown(() => {
    delete process.env['TURNHOST_TEST_SERVER_SECRET'];
    delete process.env['SERVER_ONLY_VARIABLE'];
  });
  const run = await runTurn(harness, {
    argv: ['/usr/bin/env'],
    env: { LANG: 'C', AWS_SECRET_ACCESS_KEY: 'caller-value', 'my.var': 'dotted' },
  });
  t.equal(run.result.status, 'ok');
  const seen = new Map(
    run.stdout
      .trim()
      .split('\n')
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
  );
  t.equal(seen.get('LANG'), 'C');
  t.equal(seen.get('AWS_SECRET_ACCESS_KEY'), 'caller-value', 'a name the caller gives arrives');
  t.equal(seen.get('my.var'), 'dotted', 'so does a name no shell could set');
  t.equal(seen.get('NODE_USE_ENV_PROXY'), '1');
  t.equal(seen.get('TMPDIR'), '/tmp');
  t.notOk(seen.has('SERVER_ONLY_VARIABLE'), "the supervisor's own variables stay out");
  t.notMatch(run.stdout, /server-secret|server-only/);
});

t.test('names the boundary owns are refused before any worker runs', async (t) => {
  for (const name of ['LD_PRELOAD', 'LD_LIBRARY_PATH', 'https_proxy', 'TMPDIR', 'NODE_USE_ENV_PROXY', 'TURNHOST_X']) {
    const created = await harness.turns.create({
      sessionId: 's-reserved',
      mode: 'ordinary',
      cwd: harness.workspace,
      argv: ['/usr/bin/env'],
      env: { [name]: '/tmp/evil.so' },
    });
    t.equal(created.ok, false, name);
    if (!created.ok) {
      t.equal(created.reason, 'invalid_request');
      t.equal(created.field, `env.${name}`);
    }
  }
  t.same(harness.turns.list({ sessionId: 's-reserved' }), [], 'no turn was recorded');
});

t.test('a setuid-root binary does not elevate the command', async (t) => {
  const copy = path.join(harness.workspace, 'report-self-setuid');
  fs.copyFileSync(path.join(NATIVE_BUILD, 'report-self'), copy);
  fs.chownSync(copy, 0, 0);
  fs.chmodSync(copy, 0o4755);
  t.teardown(() => fs.rmSync(copy, { force: true }));
  const run = await runTurn(harness, { argv: [copy] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  const [, euid] = (field(run.stdout, 'uid') ?? '').split(' ').map(Number);
  t.not(euid, 0, 'effective uid stays the worker uid');
  t.equal(field(run.stdout, 'status CapEff'), '0000000000000000');
});

t.test('denied syscalls fail with EPERM inside a real turn', async (t) => {
  const probes = [
    'ptrace',
    'mount',
    'unshare',
    'setns',
    'bpf',
    'keyctl',
    'ioctl_tiocsti_high',
    'clone_newuser',
    'socket_packet',
  ];
  const script = probes.map((name) => `${path.join(NATIVE_BUILD, 'try-syscall')} ${name}`).join('; ');
  const run = await runTurn(harness, { argv: ['/bin/sh', '-c', script] });
  for (const name of probes) t.match(run.stdout, new RegExp(`^${name} errno=1$`, 'm'), `${name} → EPERM`);
});

t.test('concurrent turns get different uids; cancel leaves no process of the worker uid', async (t) => {
  const long = await harness.turns.create({
    sessionId: 's-cancel',
    mode: 'ordinary',
    cwd: harness.workspace,
    argv: ['/bin/sh', '-c', 'setsid sleep 1000 & sleep 1000'],
  });
  if (!long.ok) throw new Error(long.detail);
  const other = await runTurn(harness, { argv: ['/usr/bin/id', '-u'] });
  const longUid = long.turn.workerUid!;
  t.not(Number(other.stdout.trim()), longUid, 'a concurrent turn has its own uid');
  t.ok(processesOfUid(longUid).length > 0, 'the long turn is running');
  const cancelled = harness.turns.cancel(long.turn.id);
  t.ok(cancelled.ok);
  const result = await harness.turns.wait(long.turn.id);
  t.equal(result?.status, 'cancelled');
  t.same(processesOfUid(longUid), [], 'no process of the worker uid survives, including the detached one');
});

t.test('a background process dies with the turn', async (t) => {
  const run = await runTurn(harness, { argv: ['/bin/sh', '-c', 'setsid sleep 1000 >/dev/null 2>&1 & echo started'] });
  t.equal(run.result.status, 'ok');
  t.same(processesOfUid(run.record.workerUid!), []);
});

t.test('timeout kills the whole turn', async (t) => {
  const run = await runTurn(harness, { argv: ['/bin/sh', '-c', 'sleep 1000 & sleep 1000'], timeoutSeconds: 1 });
  t.equal(run.result.status, 'timeout');
  t.same(processesOfUid(run.record.workerUid!), []);
});

t.test('an unavailable boundary refuses the turn, creates no worker and records the refusal', async (t) => {
  const refusing = await createTurnHarness({
    slot: 3,
    configure: (config) => {
      // A helper under world-writable /tmp never qualifies.
      config.identityHelper = { path: '/tmp/not-a-qualified-helper', configPath: null };
    },
  });
  t.teardown(() => refusing.close());
  const created = await refusing.turns.create({
    sessionId: 's-refused',
    mode: 'ordinary',
    cwd: refusing.workspace,
    argv: ['/bin/true'],
    turnId: 'refused-turn',
  });
  t.equal(created.ok, false);
  if (created.ok) return;
  t.equal(created.reason, 'worker_host_unsupported');
  t.match(created.detail, /identity helper/);
  const page = refusing.events.query({ turn: 'refused-turn' });
  if (!page.ok) throw new Error(page.detail);
  t.same(
    page.events.map((e) => e.kind),
    ['worker_host_refusal'],
  );
  t.equal(page.events[0]!.payload.trigger, 'turn');
  t.equal(refusing.turns.get('refused-turn')?.result?.status, 'launch_refused');
  t.same(processesOfUid(refusing.uidRange.first), [], 'no worker started');
});

t.test('a background process holding the output open does not keep the turn alive', async (t) => {
  const run = await runTurn(harness, {
    argv: ['/bin/sh', '-c', 'sleep 1000 & echo started; exit 0'],
    timeoutSeconds: 120,
  });
  t.equal(run.result.status, 'ok', 'the turn ends when its command exits, not at the timeout');
  t.match(run.stdout, /started/);
  t.same(processesOfUid(run.record.workerUid!), []);
});
