/**
 * Each case is a published egress-proxy bypass; each proves the bypass fails here.
 * Origins run on 127.0.0.1 only; names that resolve elsewhere are never dialled (the
 * loopback case runs first and stops the test if the proxy would dial what it resolved).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import crypto from 'node:crypto';
import net from 'node:net';
import t from 'tap';
import type { Resolver } from '../../proxy/dialer.js';
import {
  exchange,
  forwardRequest,
  openTunnel,
  ORIGIN_NAME,
  readAll,
  startHarness,
  startHashOrigin,
  startHttpOrigin,
  type Origin,
} from '../integration/proxy/fixtures/harness.js';

const LOOPBACK_RANGE = ['127.0.0.0/8'];

/** Answers every name with 127.0.0.1 and remembers which names were asked. */
function recordingResolver(answers: Record<string, string[]> = {}): { resolver: Resolver; asked: string[] } {
  const asked: string[] = [];
  return {
    asked,
    resolver: async (name) => {
      asked.push(name);
      return answers[name] ?? ['127.0.0.1'];
    },
  };
}

let origin: Origin;
t.before(async () => {
  origin = await startHttpOrigin();
});
t.teardown(() => origin.close());

const LOOPBACK_IPV4_SPELLINGS = [
  '127.0.0.1',
  '127.1',
  '127.0.1',
  '0x7f.1',
  '0x7F.0.0.1',
  '0177.0.0.1',
  '0177.1',
  '2130706433',
  '0x7f000001',
  '0x7f.0x0.0x0.0x1',
  '127.0.0.1.',
  '[::ffff:127.0.0.1]',
  '[::ffff:7f00:1]',
  '[::FFFF:7F00:0001]',
];
const LOOPBACK_IPV6_SPELLINGS = ['[::1]', '[0:0:0:0:0:0:0:1]', '[::0:1]'];

t.test('every spelling of a loopback address is refused without an operator range', async (t) => {
  const p = origin.port;
  const h = await startHarness({
    egress: { allowlist: [`127.0.0.1:${p}`, `[::1]:${p}`, `localhost:${p}`] },
    resolver: recordingResolver({ localhost: ['127.0.0.1', '::1'] }).resolver,
  });
  t.teardown(() => h.close());
  for (const spelling of [...LOOPBACK_IPV4_SPELLINGS, ...LOOPBACK_IPV6_SPELLINGS, 'localhost', 'LocalHost.']) {
    const forward = await exchange({ path: h.socketPath }, forwardRequest(`${spelling}:${p}`));
    t.equal(forward.headers['x-turnhost-denial'], 'denied_address_class', `forward ${spelling}`);
    const tunnel = await openTunnel({ path: h.socketPath }, `${spelling}:${p}`);
    t.equal(tunnel.response.headers['x-turnhost-denial'], 'denied_address_class', `CONNECT ${spelling}`);
    tunnel.socket.destroy();
  }
  t.equal(origin.connections, 0, 'the origin saw no connection');
  t.ok((await h.events('egress_denial')).every((e) => e.payload.reason === 'denied_address_class'));
});

t.test(
  'control: with 127.0.0.0/8 allowed, the same IPv4 spellings reach the origin (they are canonicalised)',
  async (t) => {
    const p = origin.port;
    const h = await startHarness({ egress: { allowlist: [`127.0.0.1:${p}`], allowAddressRanges: LOOPBACK_RANGE } });
    t.teardown(() => h.close());
    for (const spelling of LOOPBACK_IPV4_SPELLINGS) {
      const forward = await exchange({ path: h.socketPath }, forwardRequest(`${spelling}:${p}`));
      t.equal(forward.status, 200, spelling);
    }
  },
);

t.test('an allowed name that resolves to an internal address is refused after resolution', async (t) => {
  const p = origin.port;
  const { resolver, asked } = recordingResolver({
    'loop.example.test': ['127.0.0.1'],
    'metadata.example.test': ['169.254.169.254'],
    'private.example.test': ['10.0.0.1'],
    'cgnat.example.test': ['100.64.0.1'],
    'ula.example.test': ['fd00::1'],
    'aws-v6-metadata.example.test': ['fd00:ec2::254'],
    'nat64.example.test': ['64:ff9b::a9fe:a9fe'],
    'mapped.example.test': ['::ffff:169.254.169.254'],
    'mixed.example.test': ['127.0.0.1', '10.0.0.1'],
    'scoped.example.test': ['fe80::1%lo'],
  });
  const h = await startHarness({ egress: { allowlist: [`*.example.test:${p}`] }, resolver });
  t.teardown(() => h.close());
  const before = origin.connections;
  const loop = await exchange({ path: h.socketPath }, forwardRequest(`loop.example.test:${p}`));
  t.equal(loop.headers['x-turnhost-denial'], 'denied_address_class', 'loopback after resolution');
  if (origin.connections !== before || loop.status !== 403) {
    t.fail('the proxy dialled a resolved loopback address; not trying non-loopback answers');
    return;
  }
  for (const name of ['metadata', 'private', 'cgnat', 'ula', 'aws-v6-metadata', 'nat64', 'mapped', 'scoped']) {
    const forward = await exchange({ path: h.socketPath }, forwardRequest(`${name}.example.test:${p}`));
    t.equal(forward.headers['x-turnhost-denial'], 'denied_address_class', `forward ${name}`);
    const tunnel = await openTunnel({ path: h.socketPath }, `${name}.example.test:${p}`);
    t.equal(tunnel.response.headers['x-turnhost-denial'], 'denied_address_class', `CONNECT ${name}`);
  }
  const h2 = await startHarness({
    egress: { allowlist: [`*.example.test:${p}`], allowAddressRanges: LOOPBACK_RANGE },
    resolver,
  });
  t.teardown(() => h2.close());
  const mixed = await exchange({ path: h2.socketPath }, forwardRequest(`mixed.example.test:${p}`));
  t.equal(mixed.headers['x-turnhost-denial'], 'denied_address_class', 'one internal answer refuses the whole name');
  t.equal(origin.connections, before);
  t.ok(asked.includes('metadata.example.test'), 'the proxy resolved the names itself');
});

t.test('NUL, CR/LF and zone-id hosts are refused before matching and before resolution', async (t) => {
  const p = origin.port;
  const { resolver, asked } = recordingResolver();
  const h = await startHarness({
    egress: { allowlist: [`*.example.test:${p}`, `[fe80::1]:${p}`], allowAddressRanges: LOOPBACK_RANGE },
    resolver,
  });
  t.teardown(() => h.close());
  const before = origin.connections;
  const attempts: Array<[string, string]> = [
    ['forward raw NUL', `GET http://evil.test\0.origin.example.test:${p}/ HTTP/1.1\r\nConnection: close\r\n\r\n`],
    ['forward %00', forwardRequest(`evil.test%00.origin.example.test:${p}`)],
    ['forward %0d%0a', forwardRequest(`evil.test%0d%0a.origin.example.test:${p}`)],
    ['forward zone id', forwardRequest(`[fe80::1%25lo]:${p}`)],
    ['forward userinfo', forwardRequest(`origin.example.test:x@evil.test:${p}`)],
    ['CONNECT raw NUL', `CONNECT evil.test\0.origin.example.test:${p} HTTP/1.1\r\n\r\n`],
    ['CONNECT raw CR', `CONNECT evil.test\r.origin.example.test:${p} HTTP/1.1\r\n\r\n`],
    ['CONNECT raw LF', `CONNECT evil.test\n.origin.example.test:${p} HTTP/1.1\r\n\r\n`],
    ['CONNECT zone id', `CONNECT [fe80::1%lo]:${p} HTTP/1.1\r\n\r\n`],
    ['CONNECT encoded zone id', `CONNECT [fe80::1%25lo]:${p} HTTP/1.1\r\n\r\n`],
    ['CONNECT NUL in port', `CONNECT a.example.test:${p}\0 HTTP/1.1\r\n\r\n`],
    ['CONNECT over-long label', `CONNECT ${'a'.repeat(64)}.example.test:${p} HTTP/1.1\r\n\r\n`],
    ['CONNECT over-long name', `CONNECT ${'abcdefgh.'.repeat(29)}example.test:${p} HTTP/1.1\r\n\r\n`],
  ];
  for (const [label, request] of attempts) {
    const response = await exchange({ path: h.socketPath }, request);
    t.ok(response.status === 400 || response.status === 403, `${label}: refused (${response.status})`);
    t.ok(
      ['invalid_host', 'invalid_port', 'invalid_request'].includes(response.headers['x-turnhost-denial'] ?? ''),
      `${label}: ${response.headers['x-turnhost-denial']}`,
    );
  }
  t.same(asked, [], 'nothing was resolved');
  t.equal(origin.connections, before, 'nothing was dialled');
  t.notOk(
    (await h.events('egress_denial')).some((e) => e.payload.reason === 'not_allowlisted'),
    'refused by validation, not by matching',
  );
});

t.test('*.example.test reaches neither example.test nor evilexample.test', async (t) => {
  const p = origin.port;
  const h = await startHarness({
    egress: { allowlist: [`*.example.test:${p}`], allowAddressRanges: LOOPBACK_RANGE },
    resolver: recordingResolver().resolver,
  });
  t.teardown(() => h.close());
  t.equal(
    (await exchange({ path: h.socketPath }, forwardRequest(`a.example.test:${p}`))).status,
    200,
    'a proper subdomain is allowed',
  );
  for (const host of ['example.test', 'evilexample.test', 'example.test.evil.test', 'EXAMPLE.test.']) {
    const forward = await exchange({ path: h.socketPath }, forwardRequest(`${host}:${p}`));
    t.equal(forward.headers['x-turnhost-denial'], 'not_allowlisted', host);
  }
});

t.test('an empty allowlist gives no network, even with an operator range', async (t) => {
  const p = origin.port;
  const h = await startHarness({
    egress: { allowlist: [], allowAddressRanges: LOOPBACK_RANGE },
    resolver: recordingResolver().resolver,
  });
  t.teardown(() => h.close());
  const before = origin.connections;
  for (const host of [`127.0.0.1:${p}`, `${ORIGIN_NAME}:${p}`]) {
    t.equal(
      (await exchange({ path: h.socketPath }, forwardRequest(host))).headers['x-turnhost-denial'],
      'not_allowlisted',
    );
    t.equal((await openTunnel({ path: h.socketPath }, host)).response.headers['x-turnhost-denial'], 'not_allowlisted');
  }
  t.equal(origin.connections, before);
});

t.test('a Host header that disagrees with the request target is refused', async (t) => {
  const p = origin.port;
  const h = await startHarness({ egress: { allowlist: [`${ORIGIN_NAME}:${p}`], allowAddressRanges: LOOPBACK_RANGE } });
  t.teardown(() => h.close());
  const before = origin.connections;
  const mismatch = await exchange(
    { path: h.socketPath },
    `GET http://${ORIGIN_NAME}:${p}/ HTTP/1.1\r\nHost: internal.example.test\r\nConnection: close\r\n\r\n`,
  );
  t.equal(mismatch.headers['x-turnhost-denial'], 'host_mismatch');
  const duplicate = await exchange(
    { path: h.socketPath },
    `GET http://${ORIGIN_NAME}:${p}/ HTTP/1.1\r\nHost: ${ORIGIN_NAME}:${p}\r\nHost: internal.example.test\r\nConnection: close\r\n\r\n`,
  );
  t.ok(
    duplicate.status === 400 || duplicate.headers['x-turnhost-denial'] === 'host_mismatch',
    'duplicate Host refused',
  );
  const connectMismatch = await exchange(
    { path: h.socketPath },
    `CONNECT ${ORIGIN_NAME}:${p} HTTP/1.1\r\nHost: internal.example.test:443\r\n\r\n`,
  );
  t.equal(connectMismatch.headers['x-turnhost-denial'], 'host_mismatch');
  t.equal(origin.connections, before);
});

t.test(
  'after CONNECT the tunnel is opaque: a CONNECT or request inside it is relayed as bytes, not obeyed',
  async (t) => {
    const hashOrigin = await startHashOrigin();
    t.teardown(() => hashOrigin.close());
    const { resolver, asked } = recordingResolver();
    const h = await startHarness({
      egress: { allowlist: [`${ORIGIN_NAME}:${hashOrigin.port}`], allowAddressRanges: LOOPBACK_RANGE },
      resolver,
    });
    t.teardown(() => h.close());
    const inner = `CONNECT denied.example.test:443 HTTP/1.1\r\n\r\nGET http://denied.example.test/ HTTP/1.1\r\n\r\n`;
    const { response, socket } = await openTunnel({ path: h.socketPath }, `${ORIGIN_NAME}:${hashOrigin.port}`);
    t.equal(response.status, 200);
    const answer = readAll(socket);
    socket.end(inner);
    const expected = crypto.createHash('sha256').update(inner).digest('hex');
    t.equal(
      (await answer).toString(),
      `${Buffer.byteLength(inner)} ${expected}`,
      'the origin received the inner bytes verbatim',
    );
    // Bytes pipelined right behind the CONNECT head are tunnel bytes too.
    const client = net.connect({ path: h.socketPath, allowHalfOpen: true });
    const pipelined = readAll(client);
    client.end(`CONNECT ${ORIGIN_NAME}:${hashOrigin.port} HTTP/1.1\r\n\r\n${inner}`);
    t.equal(
      (await pipelined).toString(),
      `HTTP/1.1 200 Connection Established\r\n\r\n${Buffer.byteLength(inner)} ${expected}`,
    );
    t.same([...new Set(asked)], [ORIGIN_NAME], 'denied.example.test was never resolved');
    t.equal((await h.events('egress_denial')).length, 0);
  },
);

t.test('secret markers in headers, query strings and bodies appear in no event and no log line', async (t) => {
  const hashOrigin = await startHashOrigin();
  t.teardown(() => hashOrigin.close());
  const p = origin.port;
  const h = await startHarness({
    egress: {
      allowlist: [`${ORIGIN_NAME}:${p}`, `${ORIGIN_NAME}:${hashOrigin.port}`],
      allowAddressRanges: LOOPBACK_RANGE,
    },
  });
  t.teardown(() => h.close());
  const secretHeaders =
    'Authorization: Bearer SECRET-MARKER-AUTH\r\nCookie: s=SECRET-MARKER-COOKIE\r\nX-Api-Key: SECRET-MARKER-KEY\r\n';
  const allowed = await exchange(
    { path: h.socketPath },
    forwardRequest(
      `${ORIGIN_NAME}:${p}`,
      '/p?token=SECRET-MARKER-QUERY#SECRET-MARKER-FRAGMENT',
      secretHeaders,
      'SECRET-MARKER-BODY',
    ),
  );
  t.equal(allowed.status, 200);
  await exchange(
    { path: h.socketPath },
    forwardRequest(`denied.example.test:${p}`, '/p?token=SECRET-MARKER-QUERY2', secretHeaders, 'SECRET-MARKER-BODY2'),
  );
  await exchange(
    { path: h.socketPath },
    forwardRequest(`user:SECRET-MARKER-USERINFO@${ORIGIN_NAME}:${p}`, '/?SECRET-MARKER-Q3'),
  );
  await exchange(
    { path: h.socketPath },
    `GET http://${ORIGIN_NAME}:${p}/?SECRET-MARKER-Q4 HTTP/1.1\r\nHost: other.test\r\n${secretHeaders}Connection: close\r\n\r\n`,
  );
  await exchange(
    { path: h.socketPath },
    `GET http://${ORIGIN_NAME}:${p}/?SECRET-MARKER-Q5 HTTP/1.1\r\nHost: ${ORIGIN_NAME}:${p}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`,
  );
  await exchange(
    { path: h.socketPath },
    `GET http://${ORIGIN_NAME}:${p}/?SECRET-MARKER-Q6 HTTP/1.1\r\nBad Header SECRET-MARKER-MALFORMED\r\n\r\n`,
  );
  const { socket } = await openTunnel({ path: h.socketPath }, `${ORIGIN_NAME}:${hashOrigin.port}`);
  const answer = readAll(socket);
  socket.end('SECRET-MARKER-TUNNEL');
  await answer;
  await new Promise((r) => setTimeout(r, 50));
  const events = await h.events();
  t.ok(events.length >= 6, `events were recorded (${events.length})`);
  t.ok(h.logLines.length > 0, 'log lines were written');
  t.notMatch(JSON.stringify(events), /SECRET-MARKER/, 'no secret in any event');
  t.notMatch(h.logLines.join('\n'), /SECRET-MARKER/, 'no secret in any log line');
  const fallback = `${h.dir}/events.fallback.log`;
  if (fs.existsSync(fallback)) t.notMatch(fs.readFileSync(fallback, 'utf8'), /SECRET-MARKER/);
  t.match(events.find((e) => e.kind === 'egress_connection' && e.payload.method === 'GET')?.payload, { path: '/p' });
});

/** Runs a forward request from a child process with the given uid; prints the status line or the error code. */
function requestAs(uid: number, socketPath: string, authority: string): Promise<string> {
  const script = `
    const net = require('node:net');
    const s = net.connect({ path: ${JSON.stringify(socketPath)} });
    let out = '';
    s.on('data', (c) => { out += c; });
    s.on('error', (e) => { process.stdout.write('error ' + e.code); process.exit(0); });
    s.on('close', () => { process.stdout.write(out.split('\\r\\n').filter((l) => /^HTTP|^X-Turnhost/i.test(l)).join('|')); });
    s.write('GET http://${authority}/ HTTP/1.1\\r\\nHost: ${authority}\\r\\nConnection: close\\r\\n\\r\\n');
  `;
  return new Promise((resolve, reject) => {
    // Through env -i, so the test runner's hooks do not follow the child into another uid.
    const child = spawn('/usr/bin/env', ['-i', process.execPath, '-e', script], {
      uid,
      gid: uid,
      stdio: ['ignore', 'pipe', 'inherit'],
      cwd: '/',
    });
    let out = '';
    child.stdout.on('data', (c: Buffer) => (out += c.toString()));
    child.on('error', reject);
    child.on('close', () => resolve(out));
  });
}

t.test("another uid cannot use this turn's proxy", async (t) => {
  const p = origin.port;
  const workerUid = 65534;
  const otherUid = 65533;
  const authority = `${ORIGIN_NAME}:${p}`;
  const h = await startHarness({
    allowedPeerUid: workerUid,
    egress: { allowlist: [authority], allowAddressRanges: LOOPBACK_RANGE },
  });
  t.teardown(() => h.close());
  const stat = fs.statSync(h.socketPath);
  t.equal(stat.mode & 0o777, 0o600, 'socket mode 0600');
  t.equal(stat.uid, workerUid, 'socket owned by the worker uid');

  t.match(await requestAs(workerUid, h.socketPath, authority), /^HTTP\/1\.1 200/, 'the worker uid is served');
  t.match(await requestAs(otherUid, h.socketPath, authority), /error EACCES/, 'another uid cannot even connect');

  const before = origin.connections;
  // The file mode is the first wall; the peer check holds even when the mode is wrong.
  fs.chmodSync(h.socketPath, 0o666);
  t.match(
    await requestAs(otherUid, h.socketPath, authority),
    /403.*X-Turnhost-Denial: peer_refused/i,
    'another uid is refused by SO_PEERCRED',
  );
  const rootAnswer = await exchange({ path: h.socketPath }, forwardRequest(authority));
  t.equal(rootAnswer.headers['x-turnhost-denial'], 'peer_refused', 'root is not the worker either');
  t.equal(origin.connections, before, 'refused peers reached nothing');
  t.equal((await h.events('egress_denial')).filter((e) => e.payload.reason === 'peer_refused').length, 2);
});

t.test('a non-root-style start (peer-cred-only socket, mode 0666) still refuses another uid and root', async (t) => {
  const p = origin.port;
  const workerUid = 65534;
  const otherUid = 65533;
  const authority = `${ORIGIN_NAME}:${p}`;
  const h = await startHarness({
    allowedPeerUid: workerUid,
    socketOwnership: 'peer-cred-only',
    egress: { allowlist: [authority], allowAddressRanges: LOOPBACK_RANGE },
  });
  t.teardown(() => h.close());
  const stat = fs.statSync(h.socketPath);
  t.equal(stat.mode & 0o777, 0o666, 'socket mode 0666: no chown was needed');
  t.equal(stat.uid, process.getuid!(), 'socket still owned by the supervisor');
  const before = origin.connections;
  t.match(
    await requestAs(otherUid, h.socketPath, authority),
    /403.*X-Turnhost-Denial: peer_refused/i,
    'another uid is refused by SO_PEERCRED',
  );
  const rootAnswer = await exchange({ path: h.socketPath }, forwardRequest(authority));
  t.equal(rootAnswer.headers['x-turnhost-denial'], 'peer_refused', 'root is not the worker either');
  t.equal(origin.connections, before, 'refused peers reached nothing');
  t.match(await requestAs(workerUid, h.socketPath, authority), /^HTTP\/1\.1 200/, 'the worker uid is served');
});

t.test(
  'a deny entry without a port refuses every port; an allow entry without one allows 80 and 443 only',
  async (t) => {
    const p = origin.port;
    const addition = `${ORIGIN_NAME}:${p}`;
    const egress = { turnAdditionsAllowed: [addition], allowAddressRanges: LOOPBACK_RANGE };
    // Control: the addition reaches the origin while the deny entry names another host.
    const control = await startHarness({
      egress: { ...egress, denylist: ['other.example.test'] },
      additions: [addition],
    });
    t.teardown(() => control.close());
    const reached = await openTunnel({ path: control.socketPath }, addition);
    t.equal(reached.response.status, 200, 'control: the tunnel opens');
    reached.socket.destroy();

    const h = await startHarness({ egress: { ...egress, denylist: [ORIGIN_NAME] }, additions: [addition] });
    t.teardown(() => h.close());
    const before = origin.connections;
    const tunnel = await openTunnel({ path: h.socketPath }, addition);
    t.equal(tunnel.response.headers['x-turnhost-denial'], 'denied_by_rule', `CONNECT ${addition}`);
    tunnel.socket.destroy();
    const forward = await exchange({ path: h.socketPath }, forwardRequest(addition));
    t.equal(forward.headers['x-turnhost-denial'], 'denied_by_rule', `forward ${addition}`);
    t.equal(origin.connections, before, 'the origin saw nothing');

    const portless = await startHarness({ egress: { allowlist: [ORIGIN_NAME], allowAddressRanges: LOOPBACK_RANGE } });
    t.teardown(() => portless.close());
    const notDefault = await openTunnel({ path: portless.socketPath }, addition);
    t.equal(
      notDefault.response.headers['x-turnhost-denial'],
      'not_allowlisted',
      'an allow entry without a port: not this port',
    );
    notDefault.socket.destroy();
    t.equal(origin.connections, before);
  },
);

/** An HTTP origin on a port of at most four digits, so that a leading zero still fits the five-digit syntax. */
async function startShortPortOrigin(): Promise<Origin> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const port = 2000 + crypto.randomInt(7000);
    const candidate = await startHttpOrigin(port).catch(() => null);
    if (candidate) return candidate;
  }
  throw new Error('no free port of four digits');
}

t.test('a port with a leading zero is no port', async (t) => {
  const short = await startShortPortOrigin();
  t.teardown(() => short.close());
  const p = short.port;
  const h = await startHarness({ egress: { allowlist: [`${ORIGIN_NAME}:${p}`], allowAddressRanges: LOOPBACK_RANGE } });
  t.teardown(() => h.close());
  const control = await exchange({ path: h.socketPath }, forwardRequest(`${ORIGIN_NAME}:${p}`));
  t.equal(control.status, 200, 'control: the plain port is served');
  const before = short.connections;
  const tunnel = await openTunnel({ path: h.socketPath }, `${ORIGIN_NAME}:0${p}`);
  t.equal(tunnel.response.headers['x-turnhost-denial'], 'invalid_port', `CONNECT :0${p}`);
  tunnel.socket.destroy();
  const forward = await exchange({ path: h.socketPath }, forwardRequest(`${ORIGIN_NAME}:0${p}`));
  t.equal(forward.headers['x-turnhost-denial'], 'invalid_port', `forward :0${p}`);
  const hostHeader = await exchange(
    { path: h.socketPath },
    `GET http://${ORIGIN_NAME}:${p}/ HTTP/1.1\r\nHost: ${ORIGIN_NAME}:0${p}\r\nConnection: close\r\n\r\n`,
  );
  t.equal(
    hostHeader.headers['x-turnhost-denial'],
    'host_mismatch',
    'a Host header with a leading-zero port names no port',
  );
  t.equal(short.connections, before, 'the origin saw nothing');
});

t.test('a deny entry that is an address refuses the names that resolve to it', async (t) => {
  const p = origin.port;
  const egress = { allowlist: [`${ORIGIN_NAME}:${p}`], allowAddressRanges: LOOPBACK_RANGE };
  const control = await startHarness({ egress: { ...egress, denylist: ['127.0.0.2'] } });
  t.teardown(() => control.close());
  t.equal((await exchange({ path: control.socketPath }, forwardRequest(`${ORIGIN_NAME}:${p}`))).status, 200, 'control');
  const h = await startHarness({ egress: { ...egress, denylist: ['127.0.0.1'] } });
  t.teardown(() => h.close());
  const before = origin.connections;
  const forward = await exchange({ path: h.socketPath }, forwardRequest(`${ORIGIN_NAME}:${p}`));
  t.equal(forward.headers['x-turnhost-denial'], 'denied_by_rule', 'forward to a name resolving to a denied address');
  const tunnel = await openTunnel({ path: h.socketPath }, `${ORIGIN_NAME}:${p}`);
  t.equal(tunnel.response.headers['x-turnhost-denial'], 'denied_by_rule', 'CONNECT to it');
  tunnel.socket.destroy();
  t.equal(origin.connections, before, 'the origin saw nothing');
});
