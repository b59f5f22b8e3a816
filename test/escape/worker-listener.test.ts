/**
 * The turn proxy serves a listening socket the worker hands it over the listener channel, with
 * no peer check on its connections: that is safe only because the socket is a TCP listener on
 * 127.0.0.1 in a network namespace other than the supervisor's. Each case sends the supervisor
 * something else under the worker's name and proves it is refused, with what came closed.
 * The "worker" is a process in a network namespace of its own, as a real worker is.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import t, { type Test } from 'tap';
import {
  closeChannelEnd,
  openListenerChannel,
  receiveWorkerListener,
  type ListenerChannel,
} from '../../supervisor/turns/listener-channel.js';
import { ORIGIN_NAME, startHarness, startHttpOrigin } from '../integration/proxy/fixtures/harness.js';
import { createTurnHarness, NATIVE_BUILD, REPO_ROOT, runTurn, WORKER_PROGRAM } from '../support/turn-harness.js';
import { LISTENER_HANDOVER_PAYLOAD } from '../../supervisor/turns/worker-protocol.js';

const DIST = path.join(REPO_ROOT, 'dist');
/** What the holder sends on each channel, in order (channel i is its fd 4 + i). */
const CASES = [
  'genuine',
  'inherited',
  'anyAddress',
  'connected',
  'udp',
  'unix',
  'file',
  'wrongPayload',
  'noFd',
] as const;
type Case = (typeof CASES)[number];

const HOLDER = (socketPath: string): string => `
  import net from 'node:net';
  import dgram from 'node:dgram';
  import fs from 'node:fs';
  const LISTENER_HANDOVER_PAYLOAD = Buffer.from(${JSON.stringify(LISTENER_HANDOVER_PAYLOAD.toString())});
  const { sendFd } = await import(${JSON.stringify(path.join(DIST, 'core/scm-rights.js'))});
  const fdOf = (handle) => handle._handle.fd;
  const listen = (server, ...args) => new Promise((resolve) => server.listen(...args, resolve));
  // What the worker hands over: a TCP socket listening on 127.0.0.1.
  const genuineServer = net.createServer();
  await listen(genuineServer, 0, '127.0.0.1');
  const genuine = { fd: fdOf(genuineServer), port: genuineServer.address().port };
  const anyAddress = net.createServer();
  await listen(anyAddress, 0, '0.0.0.0');
  const unix = net.createServer();
  await listen(unix, ${JSON.stringify(socketPath)});
  const udp = dgram.createSocket('udp4');
  await new Promise((resolve) => udp.bind(0, '127.0.0.1', resolve));
  const peer = net.createServer();
  await listen(peer, 0, '127.0.0.1');
  const connected = net.connect(peer.address().port, '127.0.0.1');
  await new Promise((resolve) => connected.on('connect', resolve));
  const send = {
    genuine: (ch) => sendFd(ch, genuine.fd, LISTENER_HANDOVER_PAYLOAD),
    inherited: (ch) => sendFd(ch, 3, LISTENER_HANDOVER_PAYLOAD),
    anyAddress: (ch) => sendFd(ch, fdOf(anyAddress), LISTENER_HANDOVER_PAYLOAD),
    connected: (ch) => sendFd(ch, fdOf(connected), LISTENER_HANDOVER_PAYLOAD),
    udp: (ch) => sendFd(ch, fdOf(udp), LISTENER_HANDOVER_PAYLOAD),
    unix: (ch) => sendFd(ch, fdOf(unix), LISTENER_HANDOVER_PAYLOAD),
    file: (ch) => sendFd(ch, fs.openSync('/dev/null', 'r'), LISTENER_HANDOVER_PAYLOAD),
    wrongPayload: (ch) => sendFd(ch, genuine.fd, Buffer.from('not-a-listener')),
    noFd: (ch) => (fs.writeSync(ch, LISTENER_HANDOVER_PAYLOAD), { ok: true }),
  };
  ${JSON.stringify(CASES)}.forEach((name, i) => {
    const sent = send[name](4 + i);
    if (!sent.ok) throw new Error(name + ': ' + sent.detail);
  });
  // As the worker does at launch: from now on only the supervisor's copy listens.
  genuineServer.close();
  process.stdout.write(JSON.stringify({ port: genuine.port }) + '\\n');
  process.stdin.resume();
  process.stdin.on('end', () => process.exit(0));
`;

interface Holder {
  child: ChildProcess;
  port: number;
  channels: Map<Case, ListenerChannel>;
}

/**
 * A process in a loopback-only network namespace of its own that has sent one thing per case.
 * Its fd 3 is a listener on 127.0.0.1 of the test's own namespace, inherited across unshare.
 */
async function startHolder(t: Test): Promise<Holder> {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-listener-'));
  const inherited = net.createServer();
  await new Promise<void>((resolve) => inherited.listen(0, '127.0.0.1', resolve));
  const inheritedFd = (inherited as unknown as { _handle: { fd: number } })._handle.fd;
  const channels = new Map<Case, ListenerChannel>();
  for (const name of CASES) {
    const channel = openListenerChannel();
    if (!channel.ok) throw new Error(channel.detail);
    channels.set(name, channel);
  }
  const workerEnds = [...channels.values()].map((channel) => channel.workerFd);
  const child = spawn(
    'unshare',
    [
      '--net',
      '--',
      '/bin/sh',
      '-c',
      'ip link set lo up && exec "$0" --no-deprecation --input-type=module -e "$1"',
      process.execPath,
      HOLDER(path.join(dir, 'unix.sock')),
    ],
    {
      stdio: ['pipe', 'pipe', 'inherit', inheritedFd, ...workerEnds],
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
    },
  );
  for (const fd of workerEnds) closeChannelEnd(fd);
  t.teardown(async () => {
    child.stdin?.end();
    if (child.exitCode === null) await new Promise((resolve) => child.once('exit', resolve));
    for (const channel of channels.values()) closeChannelEnd(channel.supervisorFd);
    inherited.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const line = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('\n')) resolve(out.split('\n')[0]!);
    });
    child.once('exit', (code) => reject(new Error(`the holder exited (${code}) before reporting`)));
  });
  return { child, port: (JSON.parse(line) as { port: number }).port, channels };
}

function openFds(): number {
  return fs.readdirSync('/proc/self/fd').length;
}

/** curl from inside the holder's namespace through its listener; resolves with curl's output and exit code. */
async function curlInNamespace(holder: Holder, url: string): Promise<string> {
  const args = [
    `--net=/proc/${holder.child.pid}/ns/net`,
    'curl',
    '-sS',
    '-m',
    '10',
    '-x',
    `http://127.0.0.1:${holder.port}`,
    url,
  ];
  try {
    return (await promisify(execFile)('nsenter', args)).stdout;
  } catch (error) {
    return `exit=${(error as { code?: number }).code}`;
  }
}

t.test(
  'the hand-over: only a TCP listener on 127.0.0.1 of another namespace is taken; everything else is closed again',
  async (t) => {
    const origin = await startHttpOrigin();
    t.teardown(() => origin.close());
    const holder = await startHolder(t);
    const before = openFds();
    const refusal = (name: Case): string => {
      const received = receiveWorkerListener(holder.channels.get(name)!.supervisorFd);
      if (received.ok) {
        fs.closeSync(received.fd);
        return 'accepted';
      }
      t.equal(received.reason, 'listener_refused');
      return received.detail;
    };
    t.match(refusal('inherited'), /supervisor's network namespace/, "a listener of the supervisor's namespace");
    t.match(refusal('anyAddress'), /bound to 0\.0\.0\.0:\d+, not 127\.0\.0\.1/, 'a listener on every address');
    t.match(refusal('connected'), /not listening/, 'a connected TCP socket');
    t.match(refusal('udp'), /not a TCP socket/, 'a UDP socket');
    t.match(refusal('unix'), /not an AF_INET socket/, 'a unix listener');
    t.match(refusal('file'), /not an AF_INET socket/, 'a file');
    t.match(refusal('wrongPayload'), /not a listener hand-over/, 'a message that is not the hand-over');
    t.match(refusal('noFd'), /carries 0 file descriptors/, 'a message without a listener');
    t.equal(openFds(), before, 'every refused fd was closed again');

    const h = await startHarness({
      allowedPeerUid: 65534,
      egress: { allowlist: [`${ORIGIN_NAME}:${origin.port}`], allowAddressRanges: ['127.0.0.0/8'] },
    });
    let closed = false;
    t.teardown(async () => {
      if (!closed) await h.close();
    });
    const received = receiveWorkerListener(holder.channels.get('genuine')!.supervisorFd);
    if (!received.ok) throw new Error(received.detail);
    t.equal(received.port, holder.port, 'the port the worker listens on');
    t.ok((await h.proxy.serveWorkerListener(received.fd)).ok, 'served');
    t.match(
      await h.proxy.serveWorkerListener(fs.openSync('/dev/null', 'r')),
      { ok: false, detail: /already serves a worker listener/ },
      'once per proxy',
    );
    t.match(await h.proxy.serveWorkerListener(987654), { ok: false, detail: /fd 987654\) is not open/ });

    // curl runs as root, not as the allowed peer uid: on this listener the namespace is the check.
    t.match(
      await curlInNamespace(holder, `http://${ORIGIN_NAME}:${origin.port}/from-namespace`),
      /origin:GET \/from-namespace/,
    );
    const [event] = await h.eventsOnceStored('egress_connection');
    t.match(event?.payload, { host: ORIGIN_NAME, path: '/from-namespace', outcome: 'ok' });
    t.match(
      await curlInNamespace(holder, 'http://denied.example.test/'),
      /denied|403|not_allowlisted/i,
      'the policy still decides',
    );

    await h.close();
    closed = true;
    t.equal(
      await curlInNamespace(holder, `http://${ORIGIN_NAME}:${origin.port}/after`),
      'exit=7',
      'the proxy closed the listener with the turn',
    );
  },
);

t.test('a message with two fds is refused and both are closed', async (t) => {
  const channel = openListenerChannel();
  if (!channel.ok) throw new Error(channel.detail);
  const script = 'import socket; s = socket.socket(fileno=3); socket.send_fds(s, [b"egress-listener"], [0, 1])';
  const python = spawn('python3', ['-c', script], { stdio: ['ignore', 'ignore', 'inherit', channel.workerFd] });
  closeChannelEnd(channel.workerFd);
  await new Promise((resolve) => python.once('exit', resolve));
  const before = openFds();
  const received = receiveWorkerListener(channel.supervisorFd);
  closeChannelEnd(channel.supervisorFd);
  t.match(received, { ok: false, detail: /carries 2 file descriptors/ });
  t.equal(openFds(), before - 1, 'only the channel end was closed: both received fds were closed again');
});

t.test(
  'a worker that hands over anything but its listener gets no turn: launch_refused, the command never runs',
  async (t) => {
    const harness = await createTurnHarness({
      slot: 79,
      worker: { exec: path.join(NATIVE_BUILD, 'decoy-listener-worker'), args: [WORKER_PROGRAM] },
    });
    t.teardown(() => harness.close());
    const run = await runTurn(harness, { argv: ['/bin/sh', '-c', 'echo the-command-ran'] });
    t.equal(run.result.status, 'launch_refused');
    t.match(run.result.detail, /the worker's egress listener: not an AF_INET socket/);
    t.notMatch(run.stdout, /the-command-ran/);
    const refusals = harness.events.query({ turn: run.id, kind: 'worker_host_refusal' });
    t.match(refusals.ok && refusals.events[0]?.payload, { requirement: /egress listener/ });
  },
);
