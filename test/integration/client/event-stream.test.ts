/**
 * The client's event stream across a restarting server: a dropped stream is reopened from the
 * last id seen, failed reconnects back off and are retried, and only a first connection, a
 * refusal or an exhausted `maxReconnects` ends it with an error. A TCP relay in front of the real
 * HTTP server plays the restart: it cuts the open connections and then hangs up on the next
 * connection attempts before it forwards again.
 */
import net from 'node:net';
import t, { type Test } from 'tap';
import { createClient, TurnhostApiError, type GovernanceEvent } from '../../../client/index.js';
import { startContractProxy } from '../../support/contract-proxy.js';
import { event, startTestServer, TOKEN, type TestServer } from '../../support/app-server.js';

interface Relay {
  port: number;
  /** Cuts every open connection, then hangs up on the next `attempts` connections. */
  restart(attempts: number): void;
  /** Connections hung up on so far. */
  refused(): number;
  close(): Promise<void>;
}

async function startRelay(upstreamPort: number): Promise<Relay> {
  let refuseNext = 0;
  let refused = 0;
  const open = new Set<net.Socket>();
  const server = net.createServer((client) => {
    if (refuseNext > 0) {
      refuseNext--;
      refused++;
      client.destroy();
      return;
    }
    const upstream = net.connect(upstreamPort, '127.0.0.1');
    open.add(client).add(upstream);
    const end = (): void => {
      client.destroy();
      upstream.destroy();
      open.delete(client);
      open.delete(upstream);
    };
    client.on('error', end).on('close', end);
    upstream.on('error', end).on('close', end);
    client.pipe(upstream).pipe(client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    restart(attempts) {
      refuseNext = attempts;
      for (const socket of open) socket.destroy();
    },
    refused: () => refused,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

async function setUp(t: Test): Promise<{ s: TestServer; relay: Relay }> {
  const s = await startTestServer();
  // Behind the relay, a contract proxy: every answer and message the client gets is checked.
  const checked = await startContractProxy(
    { kind: 'tcp', host: '127.0.0.1', port: s.server.tcp!.port },
    { kind: 'tcp' },
  );
  const relay = await startRelay(checked.target.port);
  t.teardown(async () => {
    await relay.close();
    await checked.close();
    await s.close();
    checked.assertConforming();
  });
  return { s, relay };
}

const appendEvent = (s: TestServer): number => {
  const appended = s.store.append(event('egress_denial', 'stream-session'));
  if (!appended.ok || appended.stored !== 'database') throw new Error('append failed');
  return appended.ids[0]!;
};

t.test('a dropped stream survives failed reconnects and resumes after the last event seen', async (t) => {
  const { s, relay } = await setUp(t);
  const ids = [appendEvent(s), appendEvent(s)];
  const client = createClient({ target: { kind: 'tcp', host: '127.0.0.1', port: relay.port }, token: TOKEN });
  const abort = new AbortController();
  const seen: GovernanceEvent[] = [];
  for await (const streamed of client.streamEvents({ session: 'stream-session', after: 0, signal: abort.signal })) {
    seen.push(streamed);
    if (seen.length === 2) {
      // Two hung-up attempts: a client that gives up after one failed reconnect ends here.
      relay.restart(2);
      ids.push(appendEvent(s));
    }
    if (seen.length === 3) abort.abort();
  }
  t.same(
    seen.map((e) => e.id),
    ids,
    'every event once, in order',
  );
  t.equal(relay.refused(), 2, 'both hung-up reconnects were retried');
});

t.test('maxReconnects bounds the retries: the last failure is thrown', async (t) => {
  const { s, relay } = await setUp(t);
  appendEvent(s);
  const client = createClient({ target: { kind: 'tcp', host: '127.0.0.1', port: relay.port }, token: TOKEN });
  const seen: number[] = [];
  const failure = await (async () => {
    try {
      for await (const streamed of client.streamEvents({ after: 0, maxReconnects: 2 })) {
        seen.push(streamed.id);
        relay.restart(Number.MAX_SAFE_INTEGER);
      }
    } catch (error) {
      return error;
    }
    return null;
  })();
  t.equal(seen.length, 1);
  t.ok(failure instanceof TurnhostApiError, String(failure));
  t.match(failure, { status: 0, code: 'unreachable' });
  t.equal(relay.refused(), 2, 'two reconnects, then the error');
});

t.test('a first connection that fails, or a refusal, is reported at once', async (t) => {
  const { relay } = await setUp(t);
  relay.restart(1);
  const client = createClient({ target: { kind: 'tcp', host: '127.0.0.1', port: relay.port }, token: TOKEN });
  await t.rejects(
    (async () => {
      for await (const _ of client.streamEvents()) break;
    })(),
    { status: 0, code: 'unreachable' },
  );
  t.equal(relay.refused(), 1, 'no retry of a first connection');
  const wrongToken = createClient({ target: { kind: 'tcp', host: '127.0.0.1', port: relay.port }, token: 'wrong' });
  await t.rejects(
    (async () => {
      for await (const _ of wrongToken.streamEvents()) break;
    })(),
    { status: 401, code: 'unauthenticated' },
  );
});

t.test('connections that open and then fail count against maxReconnects too', async (t) => {
  const { s, relay } = await setUp(t);
  // A store that cannot be read: every replay fails, and the server closes the stream with 1011.
  s.store.close();
  const client = createClient({ target: { kind: 'tcp', host: '127.0.0.1', port: relay.port }, token: TOKEN });
  await t.rejects(
    (async () => {
      for await (const _ of client.streamEvents({ after: 0, maxReconnects: 2 })) break;
    })(),
    { status: 0, code: 'unreachable', message: /closed \(1011 replay failed\)/ },
    'the third close ends the stream',
  );
  t.equal(
    s.lines.filter((l) => l.includes('event stream replay failed')).length,
    3,
    'the first connection and two reconnects',
  );
});

t.test('an abort while the handshake is still unanswered ends the stream', async (t) => {
  // A server that accepts connections and never answers.
  const held: net.Socket[] = [];
  let accepted: () => void = () => undefined;
  const connected = new Promise<void>((resolve) => (accepted = resolve));
  const silent = net.createServer((socket) => {
    held.push(socket);
    accepted();
  });
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  t.teardown(() => {
    for (const socket of held) socket.destroy();
    silent.close();
  });
  const client = createClient({
    target: { kind: 'tcp', host: '127.0.0.1', port: (silent.address() as net.AddressInfo).port },
    token: TOKEN,
  });
  const abort = new AbortController();
  const seen: unknown[] = [];
  const ended = (async () => {
    for await (const streamed of client.streamEvents({ signal: abort.signal })) seen.push(streamed);
  })();
  await connected;
  abort.abort();
  await ended;
  t.same(seen, [], 'it ended, quietly, with nothing');
});
