/**
 * Attacks on the worker's filesystem view from inside real turns (helper, namespaces, seccomp,
 * worker): each case runs the attack as the turn command and proves it fails. The protected
 * paths come from `fs.protectedPaths` like in production. Decisions: docs/filesystem-view.md.
 */
import t from 'tap';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { createTurnHarness, runTurn } from '../support/turn-harness.js';

const harness = await createTurnHarness({
  slot: 61,
  configure: (config) => {
    const root = config.turns.workspaceRoots[0]!;
    config.modes.restricted.enabled = true;
    config.fs.protectedPaths = [
      { root, path: '.env', mode: 'mask_file', reason: 'secrets' },
      { root, path: 'keys', mode: 'mask_directory', reason: 'signing keys' },
      { root, path: 'ci.yml', mode: 'read_only', reason: 'pipeline definition' },
      { root, path: 'config/deploy/token', mode: 'mask_file', reason: 'deploy token' },
    ];
  },
});
const outside = path.join(path.dirname(harness.workspace), 'outside.txt');
const varTmpProbe = `/var/tmp/turnhost-masked-view-${process.pid}`;
t.teardown(async () => {
  fs.rmSync(varTmpProbe, { force: true });
  await harness.close();
});

function worldWritable(file: string, content: string): void {
  fs.writeFileSync(file, content);
  fs.chmodSync(file, 0o666);
}

/** World-writable sentinels: whatever refuses a write below is the view, not file modes. */
function plantSentinels(): void {
  for (const name of ['.env', 'keys', 'ci.yml', 'data', 'config', 'config-old', 'deploy-old'])
    fs.rmSync(path.join(harness.workspace, name), { recursive: true, force: true });
  worldWritable(path.join(harness.workspace, '.env'), 'TOKEN=sentinel-secret\n');
  fs.mkdirSync(path.join(harness.workspace, 'keys'), { mode: 0o777 });
  fs.chmodSync(path.join(harness.workspace, 'keys'), 0o777);
  worldWritable(path.join(harness.workspace, 'keys/id_ed25519'), 'sentinel-key\n');
  worldWritable(path.join(harness.workspace, 'ci.yml'), 'steps: []\n');
  fs.mkdirSync(path.join(harness.workspace, 'config/deploy'), { recursive: true });
  for (const sub of ['config', 'config/deploy']) fs.chmodSync(path.join(harness.workspace, sub), 0o777);
  worldWritable(path.join(harness.workspace, 'config/deploy/token'), 'deploy-sentinel\n');
  worldWritable(outside, 'outside-sentinel\n');
}
plantSentinels();

const TRY_WRITE =
  'w() { if (echo probe >> "$1") 2>/dev/null; then echo "write $1 yes"; else echo "write $1 no"; fi; }; ';

t.test("host paths outside the workspace are read-only; /var/tmp and /dev/shm are the turn's own", async (t) => {
  const run = await runTurn(harness, {
    argv: [
      '/bin/sh',
      '-c',
      `${TRY_WRITE} w /etc/turnhost-escape; w /usr/turnhost-escape; w ${varTmpProbe}; w /dev/shm/turnhost-escape`,
    ],
  });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  for (const target of ['/etc/turnhost-escape', '/usr/turnhost-escape'])
    t.match(run.stdout, `write ${target} no`, `${target} refused`);
  for (const target of [varTmpProbe, '/dev/shm/turnhost-escape'])
    t.match(run.stdout, `write ${target} yes`, `${target} is in the turn's own tmpfs`);
  t.notOk(fs.existsSync(varTmpProbe), "nothing landed in the host's world-writable /var/tmp");
  t.notOk(fs.existsSync('/dev/shm/turnhost-escape'), "nothing landed in the host's /dev/shm");
});

t.test('the workspace and the turn temp are writable (control)', async (t) => {
  const run = await runTurn(harness, {
    argv: ['/bin/sh', '-c', `${TRY_WRITE} w ${harness.workspace}/data; w "$TMPDIR/scratch"; w /tmp/scratch`],
  });
  t.match(run.stdout, `write ${harness.workspace}/data yes`);
  t.match(run.stdout, /write \S+\/scratch yes\n/);
  t.match(run.stdout, 'write /tmp/scratch yes');
  t.ok(fs.existsSync(path.join(harness.workspace, 'data')));
});

t.test('a masked file reads empty and cannot be written or removed', async (t) => {
  const run = await runTurn(harness, {
    argv: [
      '/bin/sh',
      '-c',
      `${TRY_WRITE} echo "[$(cat .env)]"; w .env; rm -f .env 2>/dev/null || echo "remove refused"; mv .env moved 2>/dev/null || echo "rename refused"`,
    ],
  });
  t.match(run.stdout, '[]\n', 'reads as empty');
  t.match(run.stdout, 'write .env no');
  t.match(run.stdout, 'remove refused');
  t.match(run.stdout, 'rename refused');
  t.equal(fs.readFileSync(path.join(harness.workspace, '.env'), 'utf8'), 'TOKEN=sentinel-secret\n');
});

t.test('a masked directory is empty and cannot be filled', async (t) => {
  const run = await runTurn(harness, {
    argv: [
      '/bin/sh',
      '-c',
      `${TRY_WRITE} echo "[$(ls -A keys)]"; w keys/new; cat keys/id_ed25519 2>/dev/null || echo "key unreadable"`,
    ],
  });
  t.match(run.stdout, '[]\n');
  t.match(run.stdout, 'write keys/new no');
  t.match(run.stdout, 'key unreadable');
});

t.test('a read_only protected path cannot be written, truncated or replaced', async (t) => {
  const run = await runTurn(harness, {
    argv: [
      '/bin/sh',
      '-c',
      `${TRY_WRITE} w ci.yml; (: > ci.yml) 2>/dev/null || echo "truncate refused"; rm -f ci.yml 2>/dev/null || echo "remove refused"; cat ci.yml`,
    ],
  });
  t.match(run.stdout, 'write ci.yml no');
  t.match(run.stdout, 'truncate refused');
  t.match(run.stdout, 'remove refused');
  t.match(run.stdout, 'steps: []');
  t.equal(fs.readFileSync(path.join(harness.workspace, 'ci.yml'), 'utf8'), 'steps: []\n');
});

t.test("a host daemon's world-connectable socket in /run cannot be reached", async (t) => {
  const socketPath = `/run/turnhost-masked-view-${process.pid}.sock`;
  const server = net.createServer((socket) => socket.end('host-daemon\n'));
  await new Promise<void>((resolve) => server.listen(socketPath, resolve));
  fs.chmodSync(socketPath, 0o666);
  t.teardown(() => server.close());
  const connect = `require('net').connect(${JSON.stringify(socketPath)}).on('data', (d) => process.stdout.write('reached ' + d)).on('error', (e) => console.log('refused ' + e.code))`;
  const run = await runTurn(harness, { argv: ['/usr/bin/node', '-e', connect] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  t.match(run.stdout, 'refused ENOENT', 'the socket does not exist in the view');
  t.notMatch(run.stdout, /host-daemon/);
});

t.test("other users' processes are invisible in /proc", async (t) => {
  const otherUid = harness.uidRange.first + harness.uidRange.count - 1;
  const sleeper = spawn('setpriv', [`--reuid=${otherUid}`, `--regid=${otherUid}`, '--clear-groups', 'sleep', '300'], {
    stdio: 'ignore',
  });
  t.teardown(() => sleeper.kill('SIGKILL'));
  const run = await runTurn(harness, {
    argv: [
      '/bin/sh',
      '-c',
      `ls /proc | grep -qx ${sleeper.pid} && echo "sleeper listed" || echo "sleeper hidden"; [ -e /proc/1 ] && echo "init visible" || echo "init hidden"; [ -e /proc/${process.pid} ] && echo "supervisor visible" || echo "supervisor hidden"`,
    ],
  });
  t.match(run.stdout, 'sleeper hidden');
  t.match(run.stdout, 'init hidden');
  t.match(run.stdout, 'supervisor hidden');
});

t.test('the strict profile sees no /home, no /etc/shadow and cannot write the workspace', async (t) => {
  const run = await runTurn(harness, {
    mode: 'restricted',
    argv: [
      '/bin/sh',
      '-c',
      `${TRY_WRITE} for p in /home /etc/shadow /root /var; do [ -e $p ] && echo "$p visible" || echo "$p absent"; done; w ${harness.workspace}/strict; w "$TMPDIR/strict"; echo "[$(cat .env)]"`,
    ],
  });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  for (const absent of ['/home', '/etc/shadow', '/root', '/var']) t.match(run.stdout, `${absent} absent`);
  t.match(run.stdout, `write ${harness.workspace}/strict no`);
  t.match(run.stdout, /write \S+\/strict yes\n/, 'turn temp writable');
  t.match(run.stdout, '[]\n', 'masks hold in strict');
});

t.test('a protected path a worker swapped for a symlink never exposes or opens the outside file', async (t) => {
  t.teardown(plantSentinels);
  // A previous turn cannot touch the mounted paths, but it can rename their parent away and
  // leave links behind for the next turn: here the links are planted directly.
  fs.rmSync(path.join(harness.workspace, '.env'));
  fs.symlinkSync(outside, path.join(harness.workspace, '.env'));
  fs.rmSync(path.join(harness.workspace, 'ci.yml'));
  fs.symlinkSync(outside, path.join(harness.workspace, 'ci.yml'));
  const run = await runTurn(harness, { argv: ['/bin/sh', '-c', 'cat .env; echo overwritten > ci.yml'] });
  t.equal(run.result.status, 'launch_refused', 'the turn is refused');
  t.match(run.result.detail, /symbolic link/);
  t.notMatch(run.stdout, /outside-sentinel/);
  t.equal(fs.readFileSync(outside, 'utf8'), 'outside-sentinel\n', 'the outside file is unchanged');
});

t.test('renaming a parent of a protected path away does not unmask it for the next turn', async (t) => {
  t.teardown(plantSentinels);
  const first = await runTurn(harness, {
    argv: [
      '/bin/sh',
      '-c',
      'cat config/deploy/token; for d in config config/deploy; do mv $d $d-old 2>/dev/null && echo "renamed $d" || echo "rename $d refused"; done; mv config/deploy deploy-old 2>/dev/null && echo "moved deploy" || echo "move deploy refused"',
    ],
  });
  t.match(first.stdout, 'rename config refused');
  t.match(first.stdout, 'rename config/deploy refused');
  t.match(first.stdout, 'move deploy refused');
  t.notMatch(first.stdout, /deploy-sentinel/);
  const second = await runTurn(harness, {
    argv: ['/bin/sh', '-c', 'cat config/deploy/token config-old/deploy/token deploy-old/token 2>/dev/null; echo done'],
  });
  t.notMatch(second.stdout, /deploy-sentinel/, 'the token stays unreadable');
  t.equal(
    fs.readFileSync(path.join(harness.workspace, 'config/deploy/token'), 'utf8'),
    'deploy-sentinel\n',
    'the host tree is unchanged',
  );
});
