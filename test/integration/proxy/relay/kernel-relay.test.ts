/**
 * The kernel relay on real loopback connections: two connections, one end of each handed to
 * the relay, bytes written at one far end must arrive at the other.
 */
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import t from 'tap';
import { ByteBudget } from '../../../../proxy/relay/byte-budget.js';
import { kernelRelay, type KernelRelay } from '../../../../proxy/relay/kernel-relay.js';
import { borrowFd, detachSocket } from '../../../../proxy/relay/socket-handoff.js';
import { adoptedPair, connection } from './fixtures/connection.js';

/** Everything `socket` receives until its peer's EOF (or a reset). */
function received(socket: net.Socket): Promise<Buffer> {
  const chunks: Buffer[] = [];
  socket.on('data', (chunk: Buffer) => chunks.push(chunk));
  return new Promise((resolve) => {
    socket.once('end', () => resolve(Buffer.concat(chunks)));
    socket.once('close', () => resolve(Buffer.concat(chunks)));
  });
}

async function readyRelay(): Promise<KernelRelay> {
  const relay = kernelRelay();
  const state = await relay.settled();
  if (state !== 'ready') throw new Error(`the kernel relay is ${state}`);
  return relay;
}

const openFds = (): number => fs.readdirSync('/proc/self/fd').length;
const sha256 = (bytes: Buffer): string => crypto.createHash('sha256').update(bytes).digest('hex');

t.test('relays both ways, initial bytes first, half-close passed on, counts exclude initial bytes', async (t) => {
  const relay = await readyRelay();
  const { a, b, tunnel } = await adoptedPair(relay, { initial: [Buffer.from('to-a:'), Buffer.from('to-b:')] });
  t.ok(a.near.destroyed && b.near.destroyed, 'Node no longer holds the adopted sockets');
  // Past 4 MiB the direction turns bulk and copies through the relay's buffer: both ways of moving it.
  const up = crypto.randomBytes(8 * 1024 * 1024);
  const atB = received(b.far);
  const atA = received(a.far);
  a.far.end(up);
  const gotAtB = await atB;
  t.equal(gotAtB.subarray(0, 5).toString(), 'to-b:');
  t.equal(sha256(gotAtB.subarray(5)), sha256(up), 'the upload arrives byte-exact after the initial bytes');
  // a's EOF reached b; b still answers, then closes: a sees the answer, then EOF.
  b.far.end('answer');
  t.equal((await atA).toString(), 'to-a:answer');
  const end = await tunnel.ended;
  t.same(end, { outcome: 'ok', failedSide: null, detail: '', bytes: [up.length, 6], eofFrom: [true, true] });
});

t.test('the budget ends a tunnel before a byte past it is delivered', async (t) => {
  const relay = await readyRelay();
  const budget = new ByteBudget(1000);
  budget.charge(200);
  const { a, b, tunnel } = await adoptedPair(relay, { budget });
  const atB = received(b.far);
  a.far.write(Buffer.alloc(64 * 1024, 1));
  const end = await tunnel.ended;
  t.equal(end.outcome, 'cap_exceeded');
  t.ok((await atB).length <= 800, 'at most the 800 bytes left in the budget arrived');
  t.ok(budget.usedBytes() > 1000, 'the budget shows the excess attempt');
});

t.test('an idle tunnel ends idle_timeout; an aborted one ends aborted; both peers see the close', async (t) => {
  const relay = await readyRelay();
  const idle = await adoptedPair(relay, { idleTimeoutMs: 100 });
  const cut = await adoptedPair(relay);
  const closedPeers = [idle.a, idle.b, cut.a, cut.b].map((c) => received(c.far));
  t.equal((await idle.tunnel.ended).outcome, 'idle_timeout');
  cut.tunnel.abort();
  t.match(await cut.tunnel.ended, { outcome: 'aborted', eofFrom: [false, false] });
  await Promise.all(closedPeers);
});

t.test("a socket with bytes buffered in Node is not adoptable, and both sockets stay Node's", async (t) => {
  const relay = await readyRelay();
  const a = await connection();
  const b = await connection();
  // As if Node had read bytes the relay would then never see.
  a.near.unshift(Buffer.from('early'));
  const before = relay.report();
  const refused = relay.adopt(a.near, b.near);
  t.match(refused, { ok: false, reason: 'not_adoptable' });
  t.equal(relay.report().refused.not_adoptable, before.refused.not_adoptable + 1, 'the report counts the refusal');
  t.equal(relay.report().adopted, before.adopted, 'and no adoption');
  t.notOk(a.near.destroyed || b.near.destroyed, 'neither socket was touched');
  b.near.write('still usable');
  t.equal((await new Promise<Buffer>((resolve) => b.far.once('data', resolve))).toString(), 'still usable');
  for (const socket of [a.near, a.far, b.near, b.far]) socket.destroy();
});

t.test('a reset on one side ends the tunnel side_failed naming that side', async (t) => {
  const relay = await readyRelay();
  const { a, b, tunnel } = await adoptedPair(relay);
  b.far.resetAndDestroy();
  a.far.write(Buffer.alloc(256 * 1024));
  t.match(await tunnel.ended, { outcome: 'side_failed', failedSide: 1 });
  a.far.destroy();
});

/** A body's way: `from.near` detached (the relay reads it), `to.near` borrowed (Node keeps it; the relay writes it). */
async function bodyPair(): Promise<{
  from: Awaited<ReturnType<typeof connection>>;
  to: Awaited<ReturnType<typeof connection>>;
  fds: [number, number];
}> {
  const from = await connection();
  const to = await connection();
  const source = detachSocket(from.near);
  const sink = borrowFd(to.near);
  if (!source.ok || !sink.ok) throw new Error('not adoptable');
  return { from, to, fds: [source.fd, sink.fd] };
}

// 3 MiB goes through the pipes; 9 MiB is a bulk body, copied through the relay's buffer.
for (const size of [3 * 1024 * 1024 + 17, 9 * 1024 * 1024 + 17]) {
  t.test(
    `an exact length (${size} bytes): that many and not one more, no EOF passed on, the kept socket still usable`,
    async (t) => {
      const relay = await readyRelay();
      const { from, to, fds } = await bodyPair();
      const body = crypto.randomBytes(size);
      const adopted = relay.adoptFds(fds, { lengths: [body.length, 0] });
      if (!adopted.ok) throw new Error(adopted.detail);
      from.far.on('error', () => {});
      // Read as it comes: a body larger than the sockets' buffers must not wait for the end.
      const arriving = received(to.far);
      // The next message follows at once, in the same stream: the relay must leave it unread.
      from.far.write(Buffer.concat([body, Buffer.from('NEXT MESSAGE')]));
      const end = await adopted.tunnel.ended;
      t.same(end, { outcome: 'ok', failedSide: null, detail: '', bytes: [body.length, 0], eofFrom: [false, false] });
      t.notOk(to.near.destroyed, 'Node still holds the borrowed socket');
      to.near.end('then Node writes');
      const arrived = await arriving;
      t.equal(arrived.length, body.length + 'then Node writes'.length, 'exactly the body, then what Node wrote after');
      t.equal(sha256(arrived.subarray(0, body.length)), sha256(body), 'byte-exact');
      t.equal(arrived.subarray(body.length).toString(), 'then Node writes', 'no EOF and no extra byte came before it');
      from.far.destroy();
      to.near.destroy();
    },
  );
}

t.test('an EOF before the exact length ends side_failed naming the side that ended early', async (t) => {
  const relay = await readyRelay();
  const { from, to, fds } = await bodyPair();
  const adopted = relay.adoptFds(fds, { lengths: [1000, 0] });
  if (!adopted.ok) throw new Error(adopted.detail);
  from.far.end(Buffer.alloc(990, 1));
  t.match(await adopted.tunnel.ended, { outcome: 'side_failed', failedSide: 0, bytes: [990, 0] });
  to.near.destroy();
  to.far.destroy();
});

t.test('an exact length under a budget: the cap ends it before a byte past the budget', async (t) => {
  const relay = await readyRelay();
  const { from, to, fds } = await bodyPair();
  const budget = new ByteBudget(4096);
  const atTo = received(to.far);
  const adopted = relay.adoptFds(fds, { lengths: [1 << 20, 0], budget });
  if (!adopted.ok) throw new Error(adopted.detail);
  from.far.on('error', () => {});
  from.far.write(Buffer.alloc(1 << 20, 2));
  t.equal((await adopted.tunnel.ended).outcome, 'cap_exceeded');
  to.near.destroy();
  t.ok((await atTo).length <= 4096, 'no byte past the budget arrived');
  from.far.destroy();
});

t.test('a socket with unwritten bytes in Node is not lent to the relay', async (t) => {
  const { near, far } = await connection();
  near.cork();
  near.write('pending');
  t.match(borrowFd(near), { ok: false, reason: 'not_adoptable' });
  near.destroy();
  far.destroy();
});

t.test('stop() ends open tunnels aborted; the next kernelRelay() is a new thread', async (t) => {
  const relay = await readyRelay();
  const { tunnel } = await adoptedPair(relay);
  await relay.stop();
  t.equal((await tunnel.ended).outcome, 'aborted');
  t.equal(relay.state(), 'stopped');
  const late = await connection();
  t.match(relay.adopt(late.near, late.far), { ok: false, reason: 'relay_not_ready' });
  t.match(relay.report(), { state: 'stopped', failure: null, open: 0, refused: { relay_not_ready: 1 } });
  late.near.destroy();
  late.far.destroy();
  const fdsWithoutRelay = openFds();
  const next = await readyRelay();
  t.not(next, relay);
  await next.stop();
  t.equal(openFds(), fdsWithoutRelay, 'a stopped relay leaves no fd behind');
});

t.test('process.exit() with tunnels open does not wait on the relay thread', async (t) => {
  const script = path.join(path.dirname(fileURLToPath(import.meta.url)), 'fixtures', 'exit-with-tunnel.ts');
  // A hang is this test's failure: the bound kills the child, which then exits by SIGKILL.
  const child = spawn(process.execPath, ['--import', 'tsx', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
    timeout: 20_000,
    killSignal: 'SIGKILL',
  });
  let output = '';
  child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
  const code = await new Promise((resolve) => child.once('exit', resolve));
  t.equal(output.trim(), 'tunnel open');
  t.equal(code, 7, 'the exit code process.exit() asked for');
});
