/**
 * Egress through a real worker: the command runs as the worker uid in a loopback-only network
 * namespace, reaches the proxy only through the worker's egress listener there (served by the
 * turn proxy), and has no other route out. The origin listens on 127.0.0.1 of the root
 * namespace, allowed by address range.
 */
import t from 'tap';
import { createTurnHarness, runTurn } from '../../support/turn-harness.js';
import { startHttpOrigin } from '../proxy/fixtures/harness.js';

const origin = await startHttpOrigin();
const target = `127.0.0.1:${origin.port}`;
const harness = await createTurnHarness({
  slot: 55,
  configure: (config) => {
    config.egress.allowlist = [target];
    config.egress.allowAddressRanges = ['127.0.0.0/8'];
  },
});
t.teardown(async () => {
  await harness.close();
  await origin.close();
});

/** NO_PROXY names 127.0.0.1, so the command drops it to send the origin's address via the proxy. */
const VIA_PROXY = 'unset NO_PROXY no_proxy;';

t.test('HTTP forward and CONNECT from the command reach the origin through the proxy', async (t) => {
  const before = origin.connections;
  const script = [
    VIA_PROXY,
    `curl -sS -m 10 "http://${target}/forward?secret=SECRET-MARKER-QUERY"; echo;`,
    `curl -sS -m 10 -p "http://${target}/tunnel"; echo;`,
  ].join(' ');
  const run = await runTurn(harness, { argv: ['/bin/sh', '-c', script] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  t.match(run.stdout, /origin:GET \/forward\?secret=SECRET-MARKER-QUERY/);
  t.match(run.stdout, /origin:GET \/tunnel/);
  t.equal(origin.connections - before, 2);
  const page = harness.events.query({ turn: run.id, kind: 'egress_connection' });
  if (!page.ok) throw new Error(page.detail);
  t.same(
    page.events.map((e) => [e.payload.method, e.payload.path, e.payload.outcome]),
    [
      ['GET', '/forward', 'ok'],
      [null, null, 'ok'],
    ],
  );
  t.notMatch(JSON.stringify(page.events), /SECRET-MARKER/);
});

t.test('a 64 MiB upload from the command through CONNECT arrives byte-exact', async (t) => {
  const spliced = harness.turns.egressRelay()?.adopted ?? 0;
  // The blob lives in the turn's workspace; sha256sum prints the digest the origin must report.
  const script = [
    VIA_PROXY,
    'head -c 67108864 /dev/urandom > upload.bin && sha256sum upload.bin &&',
    `curl -sS -m 120 -p --data-binary @upload.bin "http://${target}/upload"; echo; rm -f upload.bin`,
  ].join(' ');
  const run = await runTurn(harness, { argv: ['/bin/sh', '-c', script] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  const local = /^([0-9a-f]{64})\s+upload\.bin$/m.exec(run.stdout)?.[1];
  t.ok(local, 'the command hashed its upload');
  t.match(run.stdout, new RegExp(`origin:POST /upload host=${target} body=67108864 sha256=${local}`));
  const page = harness.events.query({ turn: run.id, kind: 'egress_connection' });
  const event = page.ok ? page.events[0] : undefined;
  t.match(event?.payload, { method: null, outcome: 'ok' });
  t.ok(Number(event?.payload.bytesUp) > 67108864, 'bytesUp counts the upload and the request head');
  t.match(harness.turns.egressRelay(), { state: 'ready', adopted: spliced + 1 }, 'the supervisor spliced the tunnel');
});

t.test(
  'a 64 MiB plain-HTTP upload from the command goes through the kernel relay and arrives byte-exact',
  async (t) => {
    const relayed = harness.turns.egressRelay()?.adopted ?? 0;
    const script = [
      VIA_PROXY,
      'head -c 67108864 /dev/urandom > upload.bin && sha256sum upload.bin &&',
      `curl -sS -m 120 -T upload.bin "http://${target}/forward-upload"; echo; rm -f upload.bin`,
    ].join(' ');
    const run = await runTurn(harness, { argv: ['/bin/sh', '-c', script] });
    t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
    const local = /^([0-9a-f]{64})\s+upload\.bin$/m.exec(run.stdout)?.[1];
    t.ok(local, 'the command hashed its upload');
    t.match(run.stdout, new RegExp(`origin:PUT /forward-upload host=${target} body=67108864 sha256=${local}`));
    const page = harness.events.query({ turn: run.id, kind: 'egress_connection' });
    const event = page.ok ? page.events[0] : undefined;
    t.match(event?.payload, { method: 'PUT', path: '/forward-upload', outcome: 'ok' });
    t.ok(Number(event?.payload.bytesUp) > 67108864, 'bytesUp counts the upload and the request head');
    t.equal(harness.turns.egressRelay()?.adopted, relayed + 1, 'the supervisor relayed the body in the kernel');
  },
);

t.test('several URLs of one host in one curl share one upstream connection; each request has its event', async (t) => {
  const before = origin.connections;
  const run = await runTurn(harness, {
    argv: [
      '/bin/sh',
      '-c',
      `${VIA_PROXY} curl -sS -m 10 "http://${target}/a" "http://${target}/b" "http://${target}/c"; echo`,
    ],
  });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  t.match(run.stdout, /origin:GET \/a .*origin:GET \/b .*origin:GET \/c /s);
  t.equal(origin.connections - before, 1, 'the proxy reused its upstream connection');
  const page = harness.events.query({ turn: run.id, kind: 'egress_connection' });
  if (!page.ok) throw new Error(page.detail);
  t.same(
    page.events.map((e) => [e.payload.path, e.payload.outcome]),
    [
      ['/a', 'ok'],
      ['/b', 'ok'],
      ['/c', 'ok'],
    ],
  );
});

t.test('a denied host gets 403 with the reason and an egress_denial event', async (t) => {
  const run = await runTurn(harness, {
    argv: ['/bin/sh', '-c', 'curl -sS -m 10 -D - -o /dev/null http://denied.example.test/'],
  });
  t.match(run.stdout, /HTTP\/1\.1 403/);
  t.match(run.stdout, /X-Turnhost-Denial: not_allowlisted/i);
  const page = harness.events.query({ turn: run.id, kind: 'egress_denial' });
  t.match(page.ok && page.events[0]?.payload, { host: 'denied.example.test', port: 80, reason: 'not_allowlisted' });
});

t.test("another turn's command cannot reach this turn's egress listener", async (t) => {
  const created = await harness.turns.create({
    sessionId: 'session-test',
    mode: 'ordinary',
    cwd: harness.workspace,
    argv: ['/bin/sh', '-c', 'echo "proxy=$HTTP_PROXY"; exec sleep 60'],
  });
  if (!created.ok) throw new Error(created.detail);
  const holder = created.turn.id;
  const attached = harness.turns.attach(holder);
  if (!attached.ok) throw new Error(attached.detail);
  const port = await new Promise<string>((resolve) => {
    let out = '';
    attached.attachment.onEvent((event) => {
      if (event.type !== 'output') return;
      out += event.data.toString();
      const found = /proxy=http:\/\/127\.0\.0\.1:(\d+)/.exec(out);
      if (found) resolve(found[1]!);
    });
  });
  t.teardown(async () => {
    harness.turns.cancel(holder);
    await harness.turns.wait(holder);
  });
  const before = origin.connections;
  // The other turn's own listener could have drawn the same port number in its own namespace: then it reaches its own proxy.
  const script = [
    `if [ "$HTTP_PROXY" = "http://127.0.0.1:${port}" ]; then echo same-port; exit 0; fi;`,
    `${VIA_PROXY} curl -sS -m 5 -x "http://127.0.0.1:${port}" "http://${target}/other-turn"; echo "exit=$?"`,
  ].join(' ');
  const other = await runTurn(harness, { argv: ['/bin/sh', '-c', script] });
  if (/same-port/.test(other.stdout)) t.pass('the ports coincided; the namespaces still kept the turns apart');
  else t.match(other.stdout, /exit=7/, "nothing listens on that port in the other turn's namespace");
  t.equal(origin.connections, before, 'the origin saw nothing');
  const holderEvents = harness.events.query({ turn: holder, kind: 'egress_connection' });
  t.same(holderEvents.ok && holderEvents.events, [], "the holding turn's proxy served nothing");
});

t.test('a direct connection that bypasses the proxy fails', async (t) => {
  const before = origin.connections;
  const run = await runTurn(harness, {
    argv: ['/bin/sh', '-c', `curl -sS -m 5 --noproxy '*' "http://${target}/direct"; echo "exit=$?"`],
  });
  t.match(run.stdout, /exit=(7|28)/, 'curl could not connect');
  t.equal(origin.connections, before, 'the origin saw nothing');
});
