/**
 * A turn must not reach the supervisor through its own proxy: not the API's TCP listener, not
 * the proxy's own listeners, whatever `egress.allowAddressRanges` lifts (on a development host
 * `127.0.0.0/8` often is). Each case runs against the real supervisor API (a daemon started
 * here, on 127.0.0.1 and a unix socket) and names it every way a command could; each has a
 * control that reaches an origin on another port through the same ranges.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { createMemoryLogger } from '../../core/log.js';
import { formatAddress, parseAddress } from '../../proxy/ip-class.js';
import { interfaceAddresses } from '../../proxy/self-connection.js';
import { openEgressListener } from '../support/egress-listener.js';
import {
  exchange,
  forwardRequest,
  mapResolver,
  openTunnel,
  ORIGIN_NAME,
  startHarness,
  startHttpOrigin,
} from '../integration/proxy/fixtures/harness.js';
import { fakeProbes, startTestDaemon } from '../support/app-server.js';
import { createTurnHarness, runTurn } from '../support/turn-harness.js';

const base = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-self-connection-'));
const apiSocket = path.join(base, 'api.sock');
const { logger } = createMemoryLogger('debug');
const daemon = await startTestDaemon({
  env: {},
  overrides: { dataDir: path.join(base, 'data'), listen: '127.0.0.1:0', socket: apiSocket },
  logger,
  runProbes: fakeProbes,
  turns: false,
});
const apiPort = daemon.http.tcp!.port;
const origin = await startHttpOrigin();
t.teardown(async () => {
  await origin.close();
  await daemon.close();
  fs.rmSync(base, { recursive: true, force: true });
});

/** This host's own addresses outside loopback (eth0's here), each reached only if a range lifts it. */
const interfaceSpellings = interfaceAddresses()
  .map(formatAddress)
  .filter((address) => !address.startsWith('127.') && address !== '::1' && !address.startsWith('fe80:'))
  .map((address) =>
    address.includes(':')
      ? { host: `[${address}]`, range: `${address}/128` }
      : { host: address, range: `${address}/32` },
  );

const LOOPBACK_SPELLINGS = [
  '127.0.0.1',
  '127.1',
  '2130706433',
  '[::ffff:127.0.0.1]',
  '127.0.0.2',
  'localhost',
  'api.example.test',
];

t.test('the daemon registers its bound API address for every turn proxy', async (t) => {
  t.same(daemon.ownListeners.ports(), [apiPort], 'the bound port (listen.tcp asked for port 0)');
});

t.test("the supervisor's API is refused on every local spelling, whatever the ranges allow", async (t) => {
  const ranges = ['127.0.0.0/8', '::1/128', '0.0.0.0/8', ...interfaceSpellings.map((s) => s.range)];
  const hosts = [...LOOPBACK_SPELLINGS, '0.0.0.0', '[::1]', ...interfaceSpellings.map((s) => s.host)];
  const h = await startHarness({
    egress: {
      allowlist: [...hosts.map((host) => `${host}:${apiPort}`), `${ORIGIN_NAME}:${origin.port}`],
      allowAddressRanges: ranges,
    },
    resolver: mapResolver({
      localhost: ['127.0.0.1', '::1'],
      'api.example.test': ['127.0.0.1'],
      [ORIGIN_NAME]: ['127.0.0.1'],
    }),
    ownListeners: daemon.ownListeners,
  });
  t.teardown(() => h.close());
  const control = await exchange({ path: h.socketPath }, forwardRequest(`${ORIGIN_NAME}:${origin.port}`));
  t.equal(control.status, 200, 'control: the same ranges reach an origin on another port');
  for (const host of hosts) {
    const authority = `${host}:${apiPort}`;
    const forward = await exchange({ path: h.socketPath }, forwardRequest(authority, '/api/status'));
    t.equal(forward.headers['x-turnhost-denial'], 'self_connection', `forward ${authority}`);
    const tunnel = await openTunnel({ path: h.socketPath }, authority);
    t.equal(tunnel.response.headers['x-turnhost-denial'], 'self_connection', `CONNECT ${authority}`);
    tunnel.socket.destroy();
  }
  const denials = await h.events('egress_denial');
  t.equal(denials.length, hosts.length * 2, 'one egress_denial per attempt');
  t.ok(
    denials.every((e) => e.payload.reason === 'self_connection' && e.payload.port === apiPort),
    'each names self_connection and the port',
  );
  t.equal((await h.events('egress_connection')).length, 1, 'only the control was connected');
});

t.test("a unix socket is never a destination: the API's and the proxy's own are unreachable by name", async (t) => {
  const asked: string[] = [];
  const h = await startHarness({
    egress: { allowlist: ['*.example.test'], allowAddressRanges: ['127.0.0.0/8'] },
    resolver: async (name) => {
      asked.push(name);
      return ['127.0.0.1'];
    },
    ownListeners: daemon.ownListeners,
  });
  t.teardown(() => h.close());
  for (const socketPath of [apiSocket, h.socketPath]) {
    const attempts = [
      `CONNECT ${socketPath}:80 HTTP/1.1\r\n\r\n`,
      `CONNECT unix:${socketPath} HTTP/1.1\r\n\r\n`,
      `GET http://unix:${socketPath}:/api/status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`,
      `GET http+unix://${encodeURIComponent(socketPath)}/api/status HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n`,
    ];
    for (const request of attempts) {
      const answer = await exchange({ path: h.socketPath }, request);
      t.ok(
        ['invalid_host', 'invalid_port', 'invalid_request'].includes(answer.headers['x-turnhost-denial'] ?? ''),
        `${request.split('\r\n')[0]}: ${answer.status} ${answer.headers['x-turnhost-denial']}`,
      );
    }
  }
  t.same(asked, [], 'nothing was resolved');
  t.equal((await h.events('egress_connection')).length, 0, 'nothing was connected');
});

t.test('the proxy refuses its own worker listener, which would loop back into itself', async (t) => {
  const listener = openEgressListener();
  if (!listener.ok) throw new Error(listener.detail);
  const authority = `127.0.0.1:${listener.port}`;
  const h = await startHarness({
    egress: { allowlist: [authority, `${ORIGIN_NAME}:${origin.port}`], allowAddressRanges: ['127.0.0.0/8'] },
    ownListeners: daemon.ownListeners,
  });
  t.teardown(() => h.close());
  // Served in this namespace, the listener's address really is the proxy: a dial would loop.
  const served = await h.proxy.serveWorkerListener(listener.fd);
  if (!served.ok) throw new Error(served.detail);
  const through = { port: listener.port };
  t.equal((await exchange(through, forwardRequest(`${ORIGIN_NAME}:${origin.port}`))).status, 200, 'control');
  const forward = await exchange(through, forwardRequest(authority));
  t.equal(forward.headers['x-turnhost-denial'], 'self_connection', `forward ${authority}`);
  const tunnel = await openTunnel({ path: h.socketPath }, authority);
  t.equal(tunnel.response.headers['x-turnhost-denial'], 'self_connection', `CONNECT ${authority}`);
  tunnel.socket.destroy();
  t.equal(h.proxy.stats().upstreamConnections, 1, 'no upstream connection but the control pooled one');
});

t.test("a turn's command cannot reach the supervisor's API through its proxy", async (t) => {
  const api = `127.0.0.1:${apiPort}`;
  const target = `127.0.0.1:${origin.port}`;
  const harness = await createTurnHarness({
    slot: 81,
    ownListeners: daemon.ownListeners,
    configure: (config) => {
      config.egress.allowlist = [api, target];
      config.egress.allowAddressRanges = ['127.0.0.0/8'];
    },
  });
  t.teardown(() => harness.close());
  const script = [
    'unset NO_PROXY no_proxy;',
    `curl -sS -m 10 -o /dev/null -w "origin=%{http_code}\\n" "http://${target}/control";`,
    `curl -sS -m 10 -D - -o /dev/null "http://${api}/api/status";`,
    `curl -sS -m 10 -p -o /dev/null "http://${api}/api/status"; echo "tunnel=$?"`,
  ].join(' ');
  const run = await runTurn(harness, { argv: ['/bin/sh', '-c', script] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  t.match(run.stdout, /origin=200/, 'control: the origin is reached through the same range');
  t.match(run.stdout, /HTTP\/1\.1 403[^]*X-Turnhost-Denial: self_connection/i, 'the forward request is refused');
  t.match(run.stdout, /tunnel=56/, 'the CONNECT is refused (curl: tunnel failed)');
  const page = harness.events.query({ turn: run.id, kind: 'egress_denial' });
  if (!page.ok) throw new Error(page.detail);
  t.same(
    page.events.map((e) => [e.payload.reason, e.payload.port]),
    [
      ['self_connection', apiPort],
      ['self_connection', apiPort],
    ],
  );
  const connections = harness.events.query({ turn: run.id, kind: 'egress_connection' });
  t.same(connections.ok && connections.events.map((e) => e.payload.port), [origin.port], 'only the control connected');
});

t.test('the local-address helpers see this host', async (t) => {
  const loopback = parseAddress('127.0.0.1')!;
  t.ok(
    interfaceAddresses().some((a) => formatAddress(a) === formatAddress(loopback)),
    'lo is listed',
  );
});
