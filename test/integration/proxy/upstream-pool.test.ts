/**
 * Forward requests reuse idle upstream connections of their own turn and authority
 * (proxy/upstream-pool.ts), each request keeps its own event, and nothing pooled outlives its
 * welcome: a server's close, the idle time, the connection cap, the turn's end.
 */
import t, { type Test } from 'tap';
import {
  exchange,
  forwardRequest,
  mapResolver,
  openTunnel,
  ORIGIN_NAME,
  readAll,
  startHarness,
  startHashOrigin,
  startHttpOrigin,
  startTcpOrigin,
  type HarnessOptions,
  type Origin,
} from './fixtures/harness.js';
import { until } from '../../support/until.js';

const LOOPBACK = { allowAddressRanges: ['127.0.0.0/8'] };
const OTHER_NAME = 'other.example.test';

async function harnessFor(t: Test, origin: Origin, options: HarnessOptions = {}) {
  const authority = `${ORIGIN_NAME}:${origin.port}`;
  const h = await startHarness({
    ...options,
    egress: { ...LOOPBACK, allowlist: [authority, `${OTHER_NAME}:${origin.port}`], ...options.egress },
  });
  t.teardown(async () => {
    await h.close();
    await origin.close();
  });
  return { h, authority };
}

/**
 * A keep-alive origin that answers `ok` to the first request of each connection and, to a
 * later one, closes without a word (`drop` 'close': FIN; 'reset': RST): what a server does
 * when it dropped an idle connection just as the proxy reused it. `open` counts its
 * connections still open.
 */
async function startOneShotOrigin(drop: 'close' | 'reset' = 'close'): Promise<Origin & { open: () => number }> {
  let open = 0;
  const origin = await startTcpOrigin((socket) => {
    open++;
    socket.once('close', () => open--);
    // The origin server is half-open capable; a proxy's close must close this side too.
    socket.on('end', () => socket.end());
    let requests = 0;
    let buffered = '';
    socket.on('data', (chunk: Buffer) => {
      buffered += chunk.toString('latin1');
      while (buffered.includes('\r\n\r\n')) {
        buffered = buffered.slice(buffered.indexOf('\r\n\r\n') + 4);
        requests++;
        if (requests > 1) {
          if (drop === 'reset') socket.resetAndDestroy();
          else socket.destroy();
          return;
        }
        socket.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok');
      }
    });
  });
  return Object.assign(origin, { open: () => open });
}

t.test(
  'forward requests to one authority share one upstream connection; each keeps its own event and counts',
  async (t) => {
    const origin = await startHttpOrigin();
    const { h, authority } = await harnessFor(t, origin);
    const first = await exchange({ path: h.socketPath }, forwardRequest(authority, '/one'));
    const second = await exchange({ path: h.socketPath }, forwardRequest(authority, '/two'));
    t.equal(first.status, 200);
    t.equal(second.status, 200);
    t.match(second.body, /origin:GET \/two/);
    t.equal(origin.connections, 1, 'one upstream connection served both');
    t.equal(h.proxy.stats().pooledConnections, 1, 'and waits in the pool');
    const events = await h.eventsOnceStored('egress_connection', 2);
    t.same(
      events.map((e) => [e.payload.path, e.payload.outcome]),
      [
        ['/one', 'ok'],
        ['/two', 'ok'],
      ],
    );
    const [one, two] = events.map((e) => e.payload as { bytesUp: number; bytesDown: number });
    t.ok(one!.bytesDown > 0 && two!.bytesDown > 0, 'each request counts its own answer');
    t.equal(one!.bytesDown, two!.bytesDown, 'the same answer size: the second does not include the first');
  },
);

t.test('a request with a body, or a method that cannot be sent twice, gets a fresh connection', async (t) => {
  const origin = await startHttpOrigin();
  const { h, authority } = await harnessFor(t, origin);
  t.equal((await exchange({ path: h.socketPath }, forwardRequest(authority, '/warm'))).status, 200);
  t.equal(origin.connections, 1);
  const post = `POST http://${authority}/submit HTTP/1.1\r\nHost: ${authority}\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbody`;
  const posted = await exchange({ path: h.socketPath }, post);
  t.match(posted.body, /origin:POST \/submit host=\S+ body=4/);
  t.equal(origin.connections, 2, 'the POST did not take the pooled connection');
  const deleted = await exchange(
    { path: h.socketPath },
    `DELETE http://${authority}/x HTTP/1.1\r\nHost: ${authority}\r\nConnection: close\r\n\r\n`,
  );
  t.equal(deleted.status, 200);
  t.equal(origin.connections, 3, 'nor did the DELETE');
});

t.test('different authorities never share a connection, even at one address and port', async (t) => {
  const origin = await startHttpOrigin();
  const resolver = mapResolver({ [ORIGIN_NAME]: ['127.0.0.1'], [OTHER_NAME]: ['127.0.0.1'] });
  const { h, authority } = await harnessFor(t, origin, { resolver });
  t.equal((await exchange({ path: h.socketPath }, forwardRequest(authority, '/first'))).status, 200);
  const other = await exchange({ path: h.socketPath }, forwardRequest(`${OTHER_NAME}:${origin.port}`, '/second'));
  t.match(other.body, new RegExp(`host=${OTHER_NAME}:${origin.port}`));
  t.equal(origin.connections, 2);
});

for (const drop of ['close', 'reset'] as const) {
  t.test(
    `a reused connection the server dropped (${drop}): the request goes again on a fresh one, with one event`,
    async (t) => {
      const origin = await startOneShotOrigin(drop);
      const { h, authority } = await harnessFor(t, origin);
      t.equal((await exchange({ path: h.socketPath }, forwardRequest(authority, '/first'))).status, 200);
      const second = await exchange({ path: h.socketPath }, forwardRequest(authority, '/second'));
      t.equal(second.status, 200, 'the client never saw the dropped connection');
      t.equal(second.body, 'ok');
      t.equal(origin.connections, 2);
      const events = await h.eventsOnceStored('egress_connection', 2);
      t.same(
        events.map((e) => [e.payload.path, e.payload.outcome]),
        [
          ['/first', 'ok'],
          ['/second', 'ok'],
        ],
      );
      t.equal(events.length, 2, 'the dropped attempt is no event of its own');
      const [first, retried] = events.map((e) => e.payload.bytesDown);
      t.equal(retried, first, 'the retried request counts the answer of its fresh connection');
    },
  );
}

t.test('a pooled connection closes after the idle time, and with the turn', async (t) => {
  const origin = await startOneShotOrigin();
  const { h, authority } = await harnessFor(t, origin, { caps: { idleTimeoutMs: 100 } });
  t.equal((await exchange({ path: h.socketPath }, forwardRequest(authority, '/idle'))).status, 200);
  t.ok(await until(() => origin.open() === 0), 'the idle connection was closed');
  t.equal(h.proxy.stats().pooledConnections, 0);
  t.equal(h.proxy.stats().upstreamConnections, 0, 'and gave its slot back');

  const ended = await startOneShotOrigin();
  const turn = await harnessFor(t, ended);
  t.equal((await exchange({ path: turn.h.socketPath }, forwardRequest(turn.authority, '/pooled'))).status, 200);
  t.equal(ended.open(), 1, 'pooled while the turn runs');
  await turn.h.proxy.close();
  // Right after close(), long before the pool's own idle timer: the turn's end emptied the pool.
  t.equal(turn.h.proxy.stats().pooledConnections, 0, 'the pool is empty once the proxy closed');
  t.ok(await until(() => ended.open() === 0), 'closed with the turn');
});

t.test('an idle pooled connection gives its slot of the cap to a new connection', async (t) => {
  const pooled = await startOneShotOrigin();
  const tunnelled = await startHashOrigin();
  t.teardown(() => tunnelled.close());
  const { h, authority } = await harnessFor(t, pooled, {
    caps: { maxConnections: 1 },
    egress: { allowlist: [`${ORIGIN_NAME}:${pooled.port}`, `${ORIGIN_NAME}:${tunnelled.port}`] },
  });
  t.equal((await exchange({ path: h.socketPath }, forwardRequest(authority, '/first'))).status, 200);
  t.equal(h.proxy.stats().upstreamConnections, 1, 'the pooled connection holds the only slot');
  const { response, socket } = await openTunnel({ path: h.socketPath }, `${ORIGIN_NAME}:${tunnelled.port}`);
  t.equal(response.status, 200, 'the tunnel got the slot');
  const answer = readAll(socket);
  socket.end('four');
  t.equal((await answer).toString().split(' ')[0], '4');
  t.ok(await until(() => pooled.open() === 0), 'the pooled connection was closed for it');
});

t.test("the pool is the turn's own: another proxy to the same origin dials its own connection", async (t) => {
  const origin = await startHttpOrigin();
  const first = await harnessFor(t, origin);
  const second = await startHarness({ egress: { ...LOOPBACK, allowlist: [first.authority] } });
  t.teardown(() => second.close());
  t.equal((await exchange({ path: first.h.socketPath }, forwardRequest(first.authority, '/turn-1'))).status, 200);
  t.equal((await exchange({ path: second.socketPath }, forwardRequest(first.authority, '/turn-2'))).status, 200);
  t.equal(origin.connections, 2);
});
