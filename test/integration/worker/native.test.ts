/**
 * The native worker (worker/build/turnhost-worker-asan, build with `make -C worker asan`)
 * spawned the way the identity helper leaves it: directly, fd 3 = a socket, fd 4 = the
 * listener channel, as an unused uid; the test sends the supervisor's compiled seccomp program
 * first, as the supervisor does.
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { receiveFd } from '../../../core/scm-rights.js';
import { boundInet4 } from '../../../core/inet4.js';
import {
  seccompMessage,
  startWorker as startNativeWorker,
  WORKER_ASAN,
  type Worker,
} from '../../support/native-worker.js';

const WORKER_UID = 65000;
const PATH_ENV = '/usr/local/bin:/usr/bin:/bin';

/** As an unused uid. */
function startWorker(
  launch: object | null,
  extraStdio: (number | 'pipe')[] = [],
  fd4?: number | 'none',
  seccomp: object | null = seccompMessage(),
): Worker {
  return startNativeWorker(launch, extraStdio, fd4, seccomp, { uid: WORKER_UID });
}

function launchOf(argv: string[], extra: Record<string, unknown> = {}): object {
  return { type: 'launch', v: 1, argv, cwd: '/', env: { PATH: PATH_ENV }, tty: null, egress: false, ...extra };
}

/** Resolves once `predicate` holds for the worker's output. */
function outputMatches(worker: Worker, pattern: RegExp): Promise<void> {
  return new Promise((resolve) => {
    const check = (): void => {
      if (pattern.test(worker.stdout())) resolve();
      else worker.child.stdout?.once('data', check);
    };
    check();
  });
}

t.before(() => {
  if (!fs.existsSync(WORKER_ASAN)) throw new Error(`${WORKER_ASAN} is missing: run make -C worker asan`);
});

t.test('pipes mode: output, exit code, rusage, exact env, only fds 0-2, seccomp', async (t) => {
  const script = 'env; ls -m /proc/$$/fd; grep -E "^(Seccomp|NoNewPrivs|Uid):" /proc/self/status; exit 3';
  const w = startWorker(launchOf(['/bin/sh', '-c', script], { env: { PATH: PATH_ENV, TURN_VAR: 'v1' } }));
  const started = await w.next('started');
  t.equal(started.type === 'started' && started.pid > 0, true);
  const exit = await w.next('exit');
  t.equal(await w.done, 0, 'worker exits 0 after reporting');
  if (exit.type !== 'exit') throw new Error('no exit');
  t.equal(exit.exitCode, 3);
  t.equal(exit.signal, null);
  t.ok(exit.rusage.maxRssKiB > 0, "rusage reports the child's max RSS");
  const lines = w.stdout().split('\n');
  // sh adds PWD itself; nothing else may appear besides what the launch carried.
  t.same(lines.filter((l) => /^[A-Za-z_][A-Za-z0-9_]*=/.test(l)).sort(), ['PATH=' + PATH_ENV, 'PWD=/', 'TURN_VAR=v1']);
  t.match(w.stdout(), /^0, 1, 2\r?$/m, 'the command holds only fds 0-2');
  t.match(w.stdout(), /^Seccomp:\s+2$/m);
  t.match(w.stdout(), /^NoNewPrivs:\s+1$/m);
  t.match(w.stdout(), new RegExp(`^Uid:\\s+${WORKER_UID}\\s`, 'm'));
});

t.test('pipes mode: env reaches the command exactly', async (t) => {
  const w = startWorker(launchOf(['env'], { env: { PATH: PATH_ENV, ONLY: 'this' } }));
  await w.next('exit');
  await w.done;
  t.equal(w.stdout(), `PATH=${PATH_ENV}\nONLY=this\n`);
});

t.test('pty mode: output, resize, and the size given at launch', async (t) => {
  // The command polls its own size, so the test does not depend on message timing.
  const script = 'stty size; while [ "$(stty size)" = "27 91" ]; do sleep 0.05; done; stty size; exit 5';
  const w = startWorker(launchOf(['/bin/sh', '-c', script], { tty: { cols: 91, rows: 27 } }));
  await w.next('started');
  await outputMatches(w, /27 91/);
  w.send({ type: 'resize', cols: 120, rows: 40 });
  const exit = await w.next('exit');
  await w.done;
  t.match(w.stdout(), /27 91[\s\S]*40 120/);
  t.equal(exit.type === 'exit' && exit.exitCode, 5);
});

t.test('pty mode: input from the worker stdin reaches the command', async (t) => {
  const w = startWorker(
    launchOf(['/bin/sh', '-c', 'read line; echo "got:$line"; ls -m /proc/$$/fd'], { tty: { cols: 80, rows: 24 } }),
  );
  await w.next('started');
  w.child.stdin?.write('typed\n');
  const exit = await w.next('exit');
  await w.done;
  t.match(w.stdout(), /got:typed/);
  t.match(w.stdout(), /^0, 1, 2\r?$/m, 'the command holds only fds 0-2');
  t.equal(exit.type === 'exit' && exit.exitCode, 0);
});

/** The kernel state letter of `pid` (Z: a zombie nobody has reaped yet), or null once it is gone. */
function processState(pid: number): string | null {
  try {
    return /^\d+ \(.*\) (\S)/.exec(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'))?.[1] ?? null;
  } catch {
    return null;
  }
}

/** Resolves when `condition` holds, checking every few milliseconds (what is awaited has no event to wait on). */
async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 5));
}

t.test('pty mode: output still in the pty when the command exits is all delivered', async (t) => {
  // libuv ends a stream when epoll reports POLLHUP after a read that did not fill its buffer;
  // a pty master reads at most 4 KiB at a time and reports POLLHUP as soon as the command is
  // gone, so output the worker had not read yet was cut off. The worker is stopped while the
  // command writes 8000 bytes (a pty holds 12-17 KiB: 8 KiB of buffers and 4 KiB in the line discipline) and exits: the whole output is then
  // still in the pty.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-pty-drain-'));
  fs.chmodSync(dir, 0o755);
  const go = path.join(dir, 'go');
  const script = `while [ ! -e ${go} ]; do sleep 0.01; done; head -c 8000 /dev/zero | tr '\\0' x; exit 0`;
  const w = startWorker(launchOf(['/bin/sh', '-c', script], { tty: { cols: 80, rows: 24 } }));
  const started = await w.next('started');
  if (started.type !== 'started') throw new Error('not started');
  process.kill(w.child.pid!, 'SIGSTOP');
  fs.writeFileSync(go, '');
  await until(() => processState(started.pid) === 'Z');
  process.kill(w.child.pid!, 'SIGCONT');
  const exit = await w.next('exit');
  await w.done;
  fs.rmSync(dir, { recursive: true, force: true });
  t.equal(exit.type === 'exit' && exit.exitCode, 0);
  t.equal((w.stdout().match(/x/g) ?? []).length, 8000, 'every byte the command wrote');
});

t.test('pty mode: a forwarded signal kills the command and exit reports it', async (t) => {
  const w = startWorker(launchOf(['/bin/sleep', '1000'], { tty: { cols: 80, rows: 24 } }));
  await w.next('started');
  w.send({ type: 'signal', signal: 'SIGTERM' });
  const exit = await w.next('exit');
  await w.done;
  t.same(exit.type === 'exit' && [exit.exitCode, exit.signal], [null, 'SIGTERM']);
});

t.test('pipes mode: a forwarded signal reaches the whole process group', async (t) => {
  const w = startWorker(launchOf(['/bin/sh', '-c', '/bin/sleep 1000; echo survived']));
  await w.next('started');
  w.send({ type: 'signal', signal: 'SIGKILL' });
  const exit = await w.next('exit');
  await w.done;
  t.same(exit.type === 'exit' && [exit.exitCode, exit.signal], [null, 'SIGKILL']);
  t.notMatch(w.stdout(), /survived/);
});

t.test('a leaked directory fd makes the worker refuse before reading the launch', async (t) => {
  const dir = fs.openSync(os.tmpdir(), fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
  const w = startWorker(launchOf(['/bin/echo', 'should not run']), [dir]);
  fs.closeSync(dir);
  const error = await w.next('error');
  t.equal(await w.done, 1);
  t.equal(error.type === 'error' && error.code, 'unexpected_fds');
  t.match(error.type === 'error' && error.detail, /5 -> \//);
  t.notOk(w.messages.some((m) => m.type === 'started'));
  t.notMatch(w.stdout(), /should not run/);
});

t.test('fd 4 must be the listener channel: missing or not a socket, the worker refuses', async (t) => {
  const missing = startWorker(launchOf(['/bin/echo', 'should not run']), [], 'none');
  const noChannel = await missing.next('error');
  t.equal(await missing.done, 1);
  t.match(noChannel, { code: 'unexpected_fds', detail: /listener channel fd 4 is not open/ });
  const dir = fs.openSync(os.tmpdir(), fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
  const directory = startWorker(launchOf(['/bin/echo', 'should not run']), [], dir);
  fs.closeSync(dir);
  const notSocket = await directory.next('error');
  t.equal(await directory.done, 1);
  t.match(notSocket, { code: 'unexpected_fds', detail: /4 -> \// });
  t.notMatch(missing.stdout() + directory.stdout(), /should not run/);
});

t.test('a command that cannot start exits as a shell says: 127 not found, 126 not executable', async (t) => {
  const notExecutable = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-spawn-')), 'data.txt');
  fs.chmodSync(path.dirname(notExecutable), 0o755);
  fs.writeFileSync(notExecutable, 'not a program\n', { mode: 0o644 });
  t.teardown(() => fs.rmSync(path.dirname(notExecutable), { recursive: true, force: true }));
  const cases: Array<[string[], number, string]> = [
    [['/nonexistent/turnhost-cmd'], 127, 'not_found'],
    [['turnhost-no-such-command'], 127, 'not_found'],
    [[notExecutable], 126, 'not_executable'],
    [['/tmp'], 126, 'not_executable'],
  ];
  for (const [argv, exitCode, spawnError] of cases) {
    const w = startWorker(launchOf(argv));
    const exit = await w.next('exit');
    t.equal(await w.done, 0, argv.join(' '));
    t.match(exit, { type: 'exit', exitCode, signal: null, spawnError, detail: /./ }, argv.join(' '));
  }
});

t.test('refusals before the command starts carry a stable code', async (t) => {
  const cases: [object, string][] = [
    [{ ...launchOf(['/bin/true']), v: 2 }, 'protocol_invalid'],
    [{ type: 'resize', cols: 1, rows: 1 }, 'protocol_invalid'],
    [launchOf(['/bin/true'], { cwd: '/nonexistent-turnhost-dir' }), 'spawn_failed'],
  ];
  for (const [launch, code] of cases) {
    const w = startWorker(launch);
    const error = await w.next('error');
    t.equal(await w.done, 1);
    t.equal(error.type === 'error' && error.code, code, JSON.stringify(launch).slice(0, 80));
  }
  const closed = startWorker(null);
  (closed.child.stdio[3] as net.Socket).end();
  const error = await closed.next('error');
  t.equal(error.type === 'error' && error.code, 'protocol_closed');
});

/**
 * The listener the worker sent before `ready`, taken as it arrives (this worker shares the
 * test's network namespace, so the supervisor's check would refuse it: that check has its own
 * test, test/escape/worker-listener.test.ts).
 */
async function readyListener(w: Worker): Promise<{ fd: number; port: number }> {
  await w.next('ready');
  const received = receiveFd(w.channel);
  if (!received.ok) throw new Error(received.detail);
  const bound = boundInet4(received.fd);
  if (!bound.ok) throw new Error(bound.detail);
  return { fd: received.fd, port: bound.port };
}

t.test('egress: the worker hands over its listener before ready; the proxy variables point at it', async (t) => {
  const w = startWorker(null);
  const listener = await readyListener(w);
  const server = net.createServer((c) => c.once('data', (d) => c.end(`proxy saw ${d.toString().trim()}\n`)));
  await new Promise<void>((r) => server.listen({ fd: listener.fd }, r));
  t.teardown(() => server.close());
  const client = [
    'const u = new URL(process.env.HTTPS_PROXY);',
    'console.log(process.env.http_proxy === process.env.HTTPS_PROXY, process.env.NO_PROXY, u.hostname, u.port);',
    'const s = require("net").connect(Number(u.port), u.hostname, () => s.write("hello\\n"));',
    's.pipe(process.stdout);',
  ].join('');
  w.send(launchOf([process.execPath, '-e', client], { egress: true }));
  const exit = await w.next('exit');
  await w.done;
  t.equal(exit.type === 'exit' && exit.exitCode, 0, w.stdout());
  t.match(w.stdout(), new RegExp(`^true localhost,127\\.0\\.0\\.1 127\\.0\\.0\\.1 ${listener.port}$`, 'm'));
  t.match(w.stdout(), /^proxy saw hello$/m);
});

t.test(
  'egress: without egress the worker closes its listener before the command starts, and sets no proxy variables',
  async (t) => {
    const w = startWorker(null);
    const listener = await readyListener(w);
    // Nobody serves it: the supervisor's copy is dropped, as for a turn without egress.
    fs.closeSync(listener.fd);
    const client = [
      'console.log("proxy variable", process.env.HTTP_PROXY ?? "none");',
      `require("net").connect(${listener.port}, "127.0.0.1").on("connect", () => console.log("connected")).on("error", (e) => console.log(e.code));`,
    ].join('');
    w.send(launchOf([process.execPath, '-e', client]));
    await w.next('exit');
    await w.done;
    t.match(w.stdout(), /^proxy variable none$/m);
    t.match(w.stdout(), /^ECONNREFUSED$/m, 'nothing listens on the port any more');
  },
);

t.test('a malformed control message is refused with a notice; the command keeps running', async (t) => {
  const w = startWorker(launchOf(['/bin/sleep', '1000']));
  await w.next('started');
  w.send({ type: 'signal', signal: 'SIGSYS' });
  const notice = await w.next('error');
  t.equal(notice.type === 'error' && notice.code, 'protocol_invalid');
  t.match(notice.type === 'error' && notice.detail, /signal\.signal/);
  t.notOk(
    w.messages.some((m) => m.type === 'exit'),
    'still running',
  );
  w.send({ type: 'signal', signal: 'SIGKILL' });
  const exit = await w.next('exit');
  await w.done;
  t.equal(exit.type === 'exit' && exit.signal, 'SIGKILL');
});

t.test('the supervisor closing fd 3 kills the command', async (t) => {
  const w = startWorker(launchOf(['/bin/sleep', '1000']));
  await w.next('started');
  (w.child.stdio[3] as net.Socket).end();
  const exit = await w.next('exit');
  t.equal(await w.done, 0);
  t.equal(exit.type === 'exit' && exit.signal, 'SIGKILL');
});

/** A sock_filter program as base64: [code, jt, jf, k] per instruction. */
function program(instructions: [number, number, number, number][]): string {
  const bytes = Buffer.alloc(instructions.length * 8);
  instructions.forEach(([code, jt, jf, k], i) => {
    bytes.writeUInt16LE(code, i * 8);
    bytes.writeUInt8(jt, i * 8 + 2);
    bytes.writeUInt8(jf, i * 8 + 3);
    bytes.writeUInt32LE(k, i * 8 + 4);
  });
  return bytes.toString('base64');
}
const RET_ALLOW: [number, number, number, number] = [0x06, 0, 0, 0x7fff0000];
const LOAD_NR: [number, number, number, number] = [0x20, 0, 0, 0];

t.test('the seccomp message comes first and the worker checks the program before it installs it', async (t) => {
  const cases: [object | null, string, RegExp][] = [
    [null, 'protocol_invalid', /first message must be seccomp/],
    [{ type: 'seccomp', program: 'not base64!' }, 'protocol_invalid', /seccomp\.program/],
    [{ type: 'seccomp', program: '' }, 'seccomp_failed', /not 1\.\.4096 sock_filter entries/],
    [{ type: 'seccomp', program: Buffer.alloc(12).toString('base64') }, 'seccomp_failed', /12 bytes/],
    [{ type: 'seccomp', program: Buffer.alloc(4097 * 8).toString('base64') }, 'seccomp_failed', /4096/],
    [{ type: 'seccomp', program: program([RET_ALLOW, LOAD_NR]) }, 'seccomp_failed', /not a RET/],
    [{ type: 'seccomp', program: program([[0x15, 5, 0, 1], RET_ALLOW]) }, 'seccomp_failed', /jumps past/],
    [{ type: 'seccomp', program: program([RET_ALLOW]), extra: 1 }, 'protocol_invalid', /seccomp\.extra: unknown field/],
  ];
  for (const [seccomp, code, detail] of cases) {
    // Without a seccomp message, the launch is the first message.
    const w = startWorker(seccomp === null ? launchOf(['/bin/echo', 'should not run']) : null, [], undefined, seccomp);
    const error = await w.next('error');
    t.equal(await w.done, 1);
    t.match(error, { type: 'error', code, detail }, seccomp === null ? 'none' : JSON.stringify(seccomp).slice(0, 80));
    t.notOk(
      w.messages.some((m) => m.type === 'ready'),
      'no ready without the filter',
    );
  }
  const closed = startWorker(null, [], undefined, null);
  (closed.child.stdio[3] as net.Socket).end();
  const error = await closed.next('error');
  t.match(error, { code: 'protocol_closed', detail: /before the seccomp message/ });
});

t.test('the filter the worker installs is the one the supervisor sent', async (t) => {
  // A program that allows everything: the command still reports Seccomp 2 (a filter is in
  // place) but ptrace, denied by the default policy, is no longer refused by it.
  const w = startWorker(
    launchOf(['/bin/sh', '-c', 'grep -E "^(Seccomp|NoNewPrivs):" /proc/self/status']),
    [],
    undefined,
    { type: 'seccomp', program: program([RET_ALLOW]) },
  );
  const exit = await w.next('exit');
  await w.done;
  t.equal(exit.type === 'exit' && exit.exitCode, 0);
  t.match(w.stdout(), /^Seccomp:\s+2$/m);
  t.match(w.stdout(), /^NoNewPrivs:\s+1$/m);
});

t.test('the worker is not dumpable: its /proc files belong to root, not to the worker uid', async (t) => {
  const w = startWorker(null);
  await w.next('ready');
  const status = fs.readFileSync(`/proc/${w.child.pid}/status`, 'utf8');
  t.match(status, new RegExp(`^Uid:\\s+${WORKER_UID}\\s`, 'm'));
  t.equal(fs.statSync(`/proc/${w.child.pid}/mem`).uid, 0, '/proc/<worker>/mem is root-owned');
  (w.child.stdio[3] as net.Socket).end();
  await w.done;
});

t.test('strings with every JSON escape and surrogate pairs reach the command as UTF-8', async (t) => {
  const text = 'tab\there "quoted" back\\slash é 😀 \u0001';
  // JSON.stringify escapes the control characters; \ud83d\ude00 is written out by hand.
  const launch = JSON.stringify(launchOf(['/usr/bin/printf', '%s|%s', text, 'x'])).replace('😀', '\\ud83d\\ude00');
  const w = startWorker(null);
  await w.next('ready');
  (w.child.stdio[3] as net.Socket).write(launch + '\n');
  const exit = await w.next('exit');
  await w.done;
  t.equal(exit.type === 'exit' && exit.exitCode, 0);
  t.equal(w.stdout(), `${text}|x`);
});

t.test('pty mode: the end of stdin reaches the command as the end of input, after all input', async (t) => {
  const w = startWorker(launchOf(['/bin/sh', '-c', 'cat; echo "TERM=$TERM"; exit 4'], { tty: { cols: 80, rows: 24 } }));
  await w.next('started');
  w.child.stdin?.end('first line\nno newline');
  const exit = await w.next('exit');
  await w.done;
  t.equal(exit.type === 'exit' && exit.exitCode, 4);
  t.match(w.stdout(), /first line\r\n[\s\S]*no newline/);
  t.match(w.stdout(), /TERM=xterm\r?$/m, 'a pty gets TERM=xterm by default');
});

t.test('SIGTERM to the worker itself is passed on to the command group', async (t) => {
  const w = startWorker(launchOf(['/bin/sleep', '1000']));
  await w.next('started');
  process.kill(w.child.pid!, 'SIGTERM');
  const exit = await w.next('exit');
  t.equal(await w.done, 0);
  t.same(exit.type === 'exit' && [exit.exitCode, exit.signal], [null, 'SIGTERM']);
});

t.test('a second launch and a bad JSON line after the start are notices, not fatal', async (t) => {
  const w = startWorker(launchOf(['/bin/sleep', '1000']));
  await w.next('started');
  w.send(launchOf(['/bin/true']));
  (w.child.stdio[3] as net.Socket).write('{"type":"resize","cols":1,"rows":1,"cols":2}\n');
  await until(() => w.messages.filter((m) => m.type === 'error').length === 2);
  const notices = w.messages.filter((m) => m.type === 'error');
  t.match(notices, [
    { code: 'protocol_invalid', detail: /launch was already received/ },
    { code: 'protocol_invalid', detail: /invalid_json: .*duplicate member name/ },
  ]);
  w.send({ type: 'signal', signal: 'SIGKILL' });
  const exit = await w.next('exit');
  await w.done;
  t.equal(exit.type === 'exit' && exit.signal, 'SIGKILL');
});
