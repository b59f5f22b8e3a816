/**
 * The compiled worker (dist/worker/main.js, build with `npx tsc -p tsconfig.json`) spawned
 * the way shared_uid mode does it: directly, fd 3 = a socket, as an unused uid.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { listOpenFds, markCloseOnExec } from '../../../worker/fds.js';
import { LineDecoder, parseWorkerMessage, type WorkerMessage } from '../../../worker/protocol.js';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
const workerEntry = path.join(root, 'dist/worker/main.js');
const WORKER_UID = 65000;
const PATH_ENV = '/usr/local/bin:/usr/bin:/bin';

// Supervisor hygiene: whatever this test process inherited must not reach the worker.
const inherited = listOpenFds();
if (inherited.ok) for (const { fd } of inherited.fds) if (fd > 2) markCloseOnExec(fd);

interface Worker {
  child: ChildProcess;
  messages: WorkerMessage[];
  stdout: () => string;
  next: (type: WorkerMessage['type']) => Promise<WorkerMessage>;
  send: (message: object) => void;
  done: Promise<number | null>;
}

function startWorker(launch: object | null, extraStdio: (number | 'pipe')[] = []): Worker {
  // `env -i` gives the worker the empty environment the helper gives it, and drops the
  // NODE_OPTIONS tap's process tracking injects into every spawn.
  const child = spawn('/usr/bin/env', ['-i', process.execPath, workerEntry], {
    stdio: ['pipe', 'pipe', 'pipe', 'pipe', ...extraStdio],
    uid: WORKER_UID,
    gid: WORKER_UID,
    cwd: '/',
    env: {},
  });
  const messages: WorkerMessage[] = [];
  const waiters: (() => void)[] = [];
  let out = '';
  child.stdout?.on('data', (d: Buffer) => (out += d.toString()));
  child.stderr?.on('data', (d: Buffer) => (out += d.toString()));
  const control = child.stdio[3] as net.Socket;
  const decoder = new LineDecoder();
  control.on('data', (chunk: Buffer) => {
    const framed = decoder.push(chunk);
    if (!framed.ok) throw new Error(framed.detail);
    for (const line of framed.lines) {
      const parsed = parseWorkerMessage(line);
      if (!parsed.ok) throw new Error(`${parsed.reason}: ${parsed.detail}`);
      messages.push(parsed.message);
    }
    for (const wake of waiters.splice(0)) wake();
  });
  const send = (message: object): void => void control.write(JSON.stringify(message) + '\n');
  if (launch) send(launch);
  const next = (type: WorkerMessage['type']): Promise<WorkerMessage> =>
    new Promise((resolve, reject) => {
      const check = (): void => {
        const found = messages.find((m) => m.type === type);
        if (found) return resolve(found);
        if (child.exitCode !== null && control.readableEnded) return reject(new Error(`worker exited without ${type}: ${JSON.stringify(messages)} ${out}`));
        waiters.push(check);
      };
      check();
    });
  const done = new Promise<number | null>((resolve) => child.on('close', (code) => {
    for (const wake of waiters.splice(0)) wake();
    resolve(code);
  }));
  return { child, messages, stdout: () => out, next, send, done };
}

function launchOf(argv: string[], extra: Record<string, unknown> = {}): object {
  return { type: 'launch', v: 1, argv, cwd: '/', env: { PATH: PATH_ENV }, tty: null, egress: null, ...extra };
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
  if (!fs.existsSync(workerEntry)) throw new Error(`${workerEntry} is missing: run npx tsc -p tsconfig.json`);
});

t.test('pipes mode: output, exit code, rusage, exact env, only fds 0-2, seccomp', async (t) => {
  const script = 'env; ls /proc/$$/fd | tr "\\n" " "; echo; grep -E "^(Seccomp|NoNewPrivs|Uid):" /proc/self/status; exit 3';
  const w = startWorker(launchOf(['/bin/sh', '-c', script], { env: { PATH: PATH_ENV, TURN_VAR: 'v1' } }));
  const started = await w.next('started');
  t.equal(started.type === 'started' && started.pid > 0, true);
  const exit = await w.next('exit');
  t.equal(await w.done, 0, 'worker exits 0 after reporting');
  if (exit.type !== 'exit') throw new Error('no exit');
  t.equal(exit.exitCode, 3);
  t.equal(exit.signal, null);
  t.ok(exit.rusage.maxRssKiB > 0, 'rusage reports the child\'s max RSS');
  t.equal(exit.bridgeRelay, null, 'a launch without egress reports no bridge relay');
  const lines = w.stdout().split('\n');
  // sh adds PWD itself; nothing else may appear besides what the launch carried.
  t.same(lines.filter((l) => /^[A-Za-z_][A-Za-z0-9_]*=/.test(l)).sort(), ['PATH=' + PATH_ENV, 'PWD=/', 'TURN_VAR=v1']);
  t.match(w.stdout(), /^0 1 2 $/m, 'the command holds only fds 0-2');
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
  const w = startWorker(launchOf(['/bin/sh', '-c', 'read line; echo "got:$line"; ls /proc/$$/fd | tr "\\n" " "'], { tty: { cols: 80, rows: 24 } }));
  await w.next('started');
  w.child.stdin?.write('typed\n');
  const exit = await w.next('exit');
  await w.done;
  t.match(w.stdout(), /got:typed/);
  t.match(w.stdout(), /^0 1 2 $/m, 'the command holds only fds 0-2');
  t.equal(exit.type === 'exit' && exit.exitCode, 0);
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
  t.match(error.type === 'error' && error.detail, /4 -> \//);
  t.notOk(w.messages.some((m) => m.type === 'started'));
  t.notMatch(w.stdout(), /should not run/);
});

t.test('refusals before the command starts carry a stable code', async (t) => {
  const cases: [object, string][] = [
    [{ ...launchOf(['/bin/true']), v: 2 }, 'protocol_invalid'],
    [{ type: 'resize', cols: 1, rows: 1 }, 'protocol_invalid'],
    [launchOf(['/nonexistent/turnhost-cmd']), 'spawn_failed'],
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

t.test('egress: proxy variables point at a bridge to the turn socket', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-worker-egress-'));
  fs.chmodSync(dir, 0o755);
  const socketPath = path.join(dir, 'proxy.sock');
  const server = net.createServer((c) => c.once('data', (d) => c.end(`proxy saw ${d.toString().trim()}\n`)));
  await new Promise<void>((r) => server.listen(socketPath, r));
  fs.chmodSync(socketPath, 0o777);
  t.teardown(() => {
    server.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const client = [
    'const u = new URL(process.env.HTTPS_PROXY);',
    'console.log(process.env.http_proxy === process.env.HTTPS_PROXY, process.env.NO_PROXY);',
    'const s = require("net").connect(Number(u.port), u.hostname, () => s.write("hello\\n"));',
    's.pipe(process.stdout);',
  ].join('');
  const w = startWorker(launchOf([process.execPath, '-e', client], { egress: { socketPath } }));
  const exit = await w.next('exit');
  await w.done;
  t.equal(exit.type === 'exit' && exit.exitCode, 0, w.stdout());
  t.match(w.stdout(), /^true localhost,127\.0\.0\.1$/m);
  t.match(w.stdout(), /^proxy saw hello$/m);
});

t.test('a malformed control message is refused with a notice; the command keeps running', async (t) => {
  const w = startWorker(launchOf(['/bin/sleep', '1000']));
  await w.next('started');
  w.send({ type: 'signal', signal: 'SIGSYS' });
  const notice = await w.next('error');
  t.equal(notice.type === 'error' && notice.code, 'protocol_invalid');
  t.match(notice.type === 'error' && notice.detail, /signal\.signal/);
  t.notOk(w.messages.some((m) => m.type === 'exit'), 'still running');
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
