import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import t, { type Test } from 'tap';
import { openEgressListener } from '../../support/egress-listener.js';
import {
  RELAY_MODES,
  relayFor,
  exchange,
  forwardRequest,
  openTunnel,
  ORIGIN_NAME,
  readAll,
  startHarness,
  startHashOrigin,
  startHttpOrigin,
  startSilentOrigin,
  type HarnessOptions,
  type Origin,
} from './fixtures/harness.js';
import { until } from '../../support/until.js';

const LOOPBACK = { allowAddressRanges: ['127.0.0.0/8'] };

t.test('HTTP forward reaches the origin and records egress_connection without the query', async (t) => {
  const origin = await startHttpOrigin();
  const h = await startHarness({ egress: { ...LOOPBACK, allowlist: [`${ORIGIN_NAME}:${origin.port}`] } });
  t.teardown(async () => {
    await h.close();
    await origin.close();
  });
  const authority = `${ORIGIN_NAME}:${origin.port}`;
  const response = await exchange({ path: h.socketPath }, forwardRequest(authority, '/some/path?q=1'));
  t.equal(response.status, 200);
  t.equal(
    response.body,
    `origin:GET /some/path?q=1 host=${authority} body=0`,
    'origin-form path, query and Host reach the origin',
  );
  const [event] = await h.events('egress_connection');
  t.ok(event);
  t.match(event!.payload, {
    host: ORIGIN_NAME,
    port: origin.port,
    method: 'GET',
    path: '/some/path',
    outcome: 'ok',
    scope: 'tool',
    inference: false,
  });
  t.ok((event!.payload.bytesUp as number) > 0 && (event!.payload.bytesDown as number) > 0, 'bytes both ways');
  t.equal(event!.actor, 'server');
  t.equal(event!.sessionId, 'session-proxy');
  t.equal(event!.profile, 'governed');
  t.equal(event!.model, 'test-model');
});

/** An origin and a proxy that allows it, both closed when `t` ends. */
async function originBehindProxy(t: Test, startOrigin: () => Promise<Origin>, options: HarnessOptions) {
  const origin = await startOrigin();
  const authority = `${ORIGIN_NAME}:${origin.port}`;
  const h = await startHarness({ ...options, egress: { ...LOOPBACK, allowlist: [authority] } });
  t.teardown(async () => {
    await h.close();
    await origin.close();
  });
  return { origin, authority, h };
}

for (const relay of RELAY_MODES) {
  t.test(`relayed ${relay === 'kernel' ? 'by the kernel relay' : 'in Node'}`, async (t) => {
    t.test('CONNECT reaches the origin; the event has no method and no path and counts the bytes', async (t) => {
      const { origin, h } = await originBehindProxy(t, startHttpOrigin, { relay });
      const { response, socket } = await openTunnel({ path: h.socketPath }, `${ORIGIN_NAME}:${origin.port}`);
      t.equal(response.status, 200);
      const request = `GET /tunnelled HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`;
      socket.write(request);
      const answer = await readAll(socket);
      t.match(answer.toString(), /origin:GET \/tunnelled host=x/);
      socket.destroy();
      t.equal(h.proxy.stats().splicedTunnels, relay === 'kernel' ? 1 : 0, 'the tunnel took the path under test');
      const [event] = await h.eventsOnceStored('egress_connection');
      t.match(event?.payload, {
        host: ORIGIN_NAME,
        port: origin.port,
        method: null,
        path: null,
        outcome: 'ok',
        scope: 'tool',
      });
      t.equal(event?.payload.bytesUp, request.length, 'bytesUp: what reached the origin');
      t.equal(event?.payload.bytesDown, answer.length, 'bytesDown: what came back through the tunnel');
    });

    t.test("through a worker's egress listener: forward and CONNECT both arrive", async (t) => {
      const origin = await startHttpOrigin();
      const h = await startHarness({ relay, egress: { ...LOOPBACK, allowlist: [`${ORIGIN_NAME}:${origin.port}`] } });
      const kernel = await relayFor(relay);
      // A listener of this process's namespace, given to the proxy directly: the hand-over and
      // its namespace check are supervisor/turns/listener-channel.ts's (test/escape/worker-listener.test.ts).
      const listener = openEgressListener();
      if (!listener.ok) throw new Error(listener.detail);
      const served = await h.proxy.serveWorkerListener(listener.fd);
      t.ok(served.ok, 'served');
      let closed = false;
      t.teardown(async () => {
        if (!closed) await h.close();
        await origin.close();
      });
      const adoptedBefore = kernel?.report().adopted ?? 0;
      const authority = `${ORIGIN_NAME}:${origin.port}`;
      const forwarded = await exchange({ port: listener.port }, forwardRequest(authority, '/via-listener'));
      t.equal(forwarded.status, 200);
      t.match(forwarded.body, /origin:GET \/via-listener/);
      const { response, socket } = await openTunnel({ port: listener.port }, authority);
      t.equal(response.status, 200);
      socket.write('GET /listener-tunnel HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
      t.match((await readAll(socket)).toString(), /origin:GET \/listener-tunnel/);
      socket.destroy();
      const denied = await exchange({ port: listener.port }, forwardRequest('elsewhere.example.test:80'));
      t.equal(denied.status, 403, 'the proxy still decides');
      if (kernel)
        t.equal(
          kernel.report().adopted - adoptedBefore,
          1,
          'the proxy spliced the tunnel; forward requests stay in Node',
        );
      await h.close();
      closed = true;
      const after = await new Promise<string>((resolve) => {
        net
          .connect(listener.port, '127.0.0.1')
          .on('connect', () => resolve('connected'))
          .on('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? 'error'));
      });
      t.equal(after, 'ECONNREFUSED', 'the proxy closed the listener with the turn');
    });

    t.test('a 64 MiB upload through CONNECT arrives byte-exact', async (t) => {
      const { origin, h } = await originBehindProxy(t, startHashOrigin, { relay });
      const payload = crypto.randomBytes(64 * 1024 * 1024);
      const expected = crypto.createHash('sha256').update(payload).digest('hex');
      const { response, socket } = await openTunnel({ path: h.socketPath }, `${ORIGIN_NAME}:${origin.port}`);
      t.equal(response.status, 200);
      const answer = readAll(socket);
      socket.end(payload);
      t.equal((await answer).toString(), `${payload.length} ${expected}`);
      const event = (await h.eventsOnceStored('egress_connection'))[0];
      t.equal(event?.payload.bytesUp, payload.length, 'bytesUp counts the upload');
      t.equal(event?.payload.outcome, 'ok');
    });

    t.test('the byte cap ends the tunnel and refuses new connections', async (t) => {
      const { authority, h } = await originBehindProxy(t, startHashOrigin, { relay, caps: { maxBytes: 4096 } });
      const { socket } = await openTunnel({ path: h.socketPath }, authority);
      // The cut-off arrives as EOF, or as a reset when the proxy closed with the client's excess unread.
      socket.on('error', () => {});
      const closed = new Promise((r) => {
        socket.once('end', r);
        socket.once('close', r);
      });
      socket.write(Buffer.alloc(64 * 1024));
      socket.resume();
      await closed;
      const [event] = await h.eventsOnceStored('egress_connection');
      t.equal(event?.payload.outcome, 'cap_exceeded');
      t.ok(Number(event?.payload.bytesUp) <= 4096, 'no byte beyond the cap reached the origin');
      const next = await openTunnel({ path: h.socketPath }, authority);
      t.equal(next.response.headers['x-turnhost-denial'], 'cap_exceeded');
    });

    t.test('an idle tunnel is closed', async (t) => {
      const { authority, h } = await originBehindProxy(t, startHashOrigin, { relay, caps: { idleTimeoutMs: 200 } });
      const { socket } = await openTunnel({ path: h.socketPath }, authority);
      const ended = new Promise((r) => socket.once('end', r));
      socket.resume();
      await ended;
      t.equal((await h.eventsOnceStored('egress_connection'))[0]?.payload.outcome, 'idle_timeout');
    });

    t.test(
      'close() cuts a tunnel in use (turn_ended), leaves ok one whose client had finished, removes the socket',
      async (t) => {
        const { origin, authority, h } = await originBehindProxy(t, startSilentOrigin, { relay });
        const inUse = await openTunnel({ path: h.socketPath }, authority);
        const finished = await openTunnel({ path: h.socketPath }, authority);
        const idleClient = net.connect({ path: h.socketPath });
        await new Promise((r) => idleClient.once('connect', r));
        // Both send a request the origin never answers; only one client also sends its EOF.
        const request = 'GET /held HTTP/1.1\r\nHost: x\r\n\r\n';
        inUse.socket.write(request);
        finished.socket.end(request);
        const receivedBytes = (): number => origin.received.reduce((sum, chunk) => sum + chunk.length, 0);
        t.ok(await until(() => receivedBytes() === 2 * request.length), 'both requests reached the origin');
        const closed = Promise.all(
          [inUse.socket, finished.socket, idleClient].map(
            (s) =>
              new Promise((r) => {
                s.on('error', () => {});
                s.resume();
                s.once('end', r);
              }),
          ),
        );
        await h.proxy.close();
        const stored = h.store.query({ turn: 'turn-proxy', kind: 'egress_connection' });
        const outcomes = stored.ok ? stored.events.map((e) => e.payload.outcome).sort() : [];
        t.same(outcomes, ['ok', 'turn_ended'], 'in the store when close() resolves');
        await closed;
        t.notOk(fs.existsSync(h.socketPath));
      },
    );
  });
}

t.test('a denied host gets 403, a reason header and an egress_denial event; the origin sees nothing', async (t) => {
  const origin = await startHttpOrigin();
  const h = await startHarness({
    egress: {
      ...LOOPBACK,
      allowlist: [`${ORIGIN_NAME}:${origin.port}`],
      denylist: [`blocked.example.test:${origin.port}`],
    },
  });
  t.teardown(async () => {
    await h.close();
    await origin.close();
  });
  const forward = await exchange({ path: h.socketPath }, forwardRequest(`other.example.test:${origin.port}`));
  t.equal(forward.status, 403);
  t.equal(forward.headers['x-turnhost-denial'], 'not_allowlisted');
  const tunnel = await openTunnel({ path: h.socketPath }, `other.example.test:${origin.port}`);
  t.equal(tunnel.response.status, 403);
  t.equal(tunnel.response.headers['x-turnhost-denial'], 'not_allowlisted');
  const wrongPort = await exchange({ path: h.socketPath }, forwardRequest(`${ORIGIN_NAME}:${origin.port + 1}`));
  t.equal(wrongPort.headers['x-turnhost-denial'], 'not_allowlisted', 'an entry with a port allows only that port');
  const denials = await h.events('egress_denial');
  t.equal(denials.length, 3);
  t.match(denials[0]!.payload, { host: 'other.example.test', port: origin.port, reason: 'not_allowlisted' });
  t.equal(origin.connections, 0);
  t.equal((await h.events('egress_connection')).length, 0);
});

t.test('the general proxy tags an allowlisted model host tool, never inference', async (t) => {
  const origin = await startHttpOrigin();
  const inference = `api.inference.test:${origin.port}`;
  const h = await startHarness({
    egress: { ...LOOPBACK, allowlist: [inference] },
    resolver: async () => ['127.0.0.1'],
  });
  t.teardown(async () => {
    await h.close();
    await origin.close();
  });
  t.equal((await exchange({ path: h.socketPath }, forwardRequest(inference))).status, 200);
  t.match((await h.events('egress_connection'))[0]?.payload, { scope: 'tool', inference: false, broker: null });
});

t.test('restricted mode reaches nothing through the general proxy', async (t) => {
  const origin = await startHttpOrigin();
  const inference = `api.inference.test:${origin.port}`;
  const h = await startHarness({
    mode: 'restricted',
    egress: { ...LOOPBACK, allowlist: [`${ORIGIN_NAME}:${origin.port}`, inference] },
    resolver: async () => ['127.0.0.1'],
  });
  t.teardown(async () => {
    await h.close();
    await origin.close();
  });
  for (const host of [inference, `${ORIGIN_NAME}:${origin.port}`]) {
    const refused = await exchange({ path: h.socketPath }, forwardRequest(host));
    t.equal(refused.headers['x-turnhost-denial'], 'not_allowlisted', host);
  }
  t.equal(origin.connections, 0);
});

t.test('200 concurrent connections complete', async (t) => {
  const origin = await startHttpOrigin();
  const h = await startHarness({
    egress: { ...LOOPBACK, allowlist: [`${ORIGIN_NAME}:${origin.port}`], maxConnections: 256 },
  });
  t.teardown(async () => {
    await h.close();
    await origin.close();
  });
  const authority = `${ORIGIN_NAME}:${origin.port}`;
  const responses = await Promise.all(
    Array.from({ length: 200 }, (_, i) => exchange({ path: h.socketPath }, forwardRequest(authority, `/n/${i}`))),
  );
  t.equal(responses.filter((r) => r.status === 200).length, 200);
  t.ok(
    responses.every((r, i) => r.body.includes(`/n/${i} `)),
    'each answer belongs to its request',
  );
  t.equal((await h.events('egress_connection')).length, 200);
});

t.test('caps: concurrent connections', async (t) => {
  const origin = await startHashOrigin();
  const authority = `${ORIGIN_NAME}:${origin.port}`;
  t.teardown(() => origin.close());

  t.test('connections beyond maxConnections are refused', async (t) => {
    const h = await startHarness({ egress: { ...LOOPBACK, allowlist: [authority] }, caps: { maxConnections: 2 } });
    t.teardown(() => h.close());
    const first = await openTunnel({ path: h.socketPath }, authority);
    const second = await openTunnel({ path: h.socketPath }, authority);
    t.equal(first.response.status, 200);
    t.equal(second.response.status, 200);
    const third = await openTunnel({ path: h.socketPath }, authority);
    t.equal(third.response.status, 403);
    t.equal(third.response.headers['x-turnhost-denial'], 'cap_exceeded');
    first.socket.destroy();
    second.socket.destroy();
  });
});

t.test('an HTTP/1.1 forward request without Host gets the proxy refusal and an egress_denial', async (t) => {
  const origin = await startHttpOrigin();
  const authority = `${ORIGIN_NAME}:${origin.port}`;
  const h = await startHarness({ egress: { ...LOOPBACK, allowlist: [authority] } });
  t.teardown(async () => {
    await h.close();
    await origin.close();
  });
  const forward = await exchange(
    { path: h.socketPath },
    `GET http://${authority}/ HTTP/1.1\r\nConnection: close\r\n\r\n`,
  );
  t.equal(forward.status, 400);
  t.equal(forward.headers['x-turnhost-denial'], 'invalid_request', 'forward form');
  t.match(forward.body, /without a Host header/, 'the refusal says why');
  const originForm = await exchange({ path: h.socketPath }, `GET / HTTP/1.1\r\nConnection: close\r\n\r\n`);
  t.equal(originForm.headers['x-turnhost-denial'], 'invalid_request', 'origin form');
  const denials = await h.events('egress_denial');
  t.equal(denials.length, 2, 'each refusal is recorded');
  t.match(denials[0]!.payload, { host: ORIGIN_NAME, port: origin.port, reason: 'invalid_request' });
  // HTTP/1.0 has no Host requirement: the target alone names the host.
  const http10 = await exchange({ path: h.socketPath }, `GET http://${authority}/ HTTP/1.0\r\n\r\n`);
  t.equal(http10.status, 200, 'an HTTP/1.0 request without Host is served');
  t.equal(origin.connections, 1);
  // A CONNECT without Host is served: its target names the host (test/escape/egress.test.ts).
});

t.test('refusals of unsupported forms', async (t) => {
  const origin = await startHttpOrigin();
  const authority = `${ORIGIN_NAME}:${origin.port}`;
  const h = await startHarness({ egress: { ...LOOPBACK, allowlist: [authority] } });
  t.teardown(async () => {
    await h.close();
    await origin.close();
  });
  const https = await exchange(
    { path: h.socketPath },
    `GET https://${authority}/ HTTP/1.1\r\nHost: ${authority}\r\nConnection: close\r\n\r\n`,
  );
  t.equal(https.headers['x-turnhost-denial'], 'unsupported_scheme');
  const originForm = await exchange(
    { path: h.socketPath },
    `GET / HTTP/1.1\r\nHost: ${authority}\r\nConnection: close\r\n\r\n`,
  );
  t.equal(originForm.headers['x-turnhost-denial'], 'invalid_request');
  const upgrade = await exchange(
    { path: h.socketPath },
    `GET http://${authority}/ws HTTP/1.1\r\nHost: ${authority}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n`,
  );
  t.equal(upgrade.headers['x-turnhost-denial'], 'unsupported_upgrade');
  const noPort = await openTunnel({ path: h.socketPath }, ORIGIN_NAME);
  t.equal(noPort.response.headers['x-turnhost-denial'], 'invalid_port');
  t.equal(origin.connections, 0);
});

t.test(
  'an unresolvable name answers 403 resolve_failed; a refused dial answers 502 and records connect_failed',
  async (t) => {
    const closed = net.createServer();
    await new Promise<void>((r) => closed.listen(0, '127.0.0.1', r));
    const deadPort = (closed.address() as net.AddressInfo).port;
    await new Promise((r) => closed.close(r));
    const h = await startHarness({ egress: { ...LOOPBACK, allowlist: [`*.example.test:${deadPort}`] } });
    t.teardown(() => h.close());
    const unresolvable = await exchange({ path: h.socketPath }, forwardRequest(`missing.example.test:${deadPort}`));
    t.equal(unresolvable.status, 403);
    t.equal(unresolvable.headers['x-turnhost-denial'], 'resolve_failed');
    const refused = await exchange({ path: h.socketPath }, forwardRequest(`${ORIGIN_NAME}:${deadPort}`));
    t.equal(refused.status, 502);
    const tunnel = await openTunnel({ path: h.socketPath }, `${ORIGIN_NAME}:${deadPort}`);
    t.equal(tunnel.response.status, 502);
    t.same(
      (await h.events('egress_connection')).map((e) => e.payload.outcome),
      ['connect_failed', 'connect_failed'],
    );
    t.match((await h.events('egress_denial'))[0]?.payload, { host: 'missing.example.test', reason: 'resolve_failed' });
  },
);
