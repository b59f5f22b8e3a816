/**
 * HostPool against real supervisor HTTP servers (the app over a real event store; each host's
 * turn load is set by the test): a new session goes to a ready host with the most free slots,
 * never to a draining, full, unready or unreachable one; a placed session stays on its host.
 */
import t from 'tap';
import { createClient, HostPool, NoHostReadyError } from '../../../client/index.js';
import type { TurnLoad, TurnManager } from '../../../supervisor/turns/types.js';
import { fakeStatus, startTestServer, TOKEN, type TestServer } from '../../support/app-server.js';

interface Host {
  server: TestServer;
  load: TurnLoad;
  available: boolean;
}

/** A served host whose load and probe verdict the test sets. */
async function host(t: { teardown(fn: () => Promise<void>): void }, load: Partial<TurnLoad> = {}): Promise<Host> {
  const state: Host = {
    load: { turnsRunning: 0, maxTurns: 4, draining: false, ...load },
    available: true,
    server: undefined as unknown as TestServer,
  };
  // Only what the ready route reads of a turn manager; this test serves no turns.
  const turns = {
    load: () => state.load,
    setDraining: (draining: boolean) => {
      const changed = state.load.draining !== draining;
      state.load = { ...state.load, draining };
      return changed;
    },
  } as unknown as TurnManager;
  state.server = await startTestServer({
    turns,
    probes: async () => {
      const status = fakeStatus('check');
      if (!state.available) status.ordinary = { ...status.ordinary!, available: false, requirement: 'seccomp' };
      return status;
    },
  });
  t.teardown(() => state.server.close());
  return state;
}

const clientOf = (h: Host) =>
  createClient({ target: { kind: 'tcp', host: '127.0.0.1', port: h.server.server.tcp!.port }, token: TOKEN });

t.test('a new session goes to the ready host with the most free slots and stays there', async (t) => {
  const busy = await host(t, { turnsRunning: 3 });
  const idle = await host(t, { turnsRunning: 1 });
  const pool = new HostPool({ busy: clientOf(busy), idle: clientOf(idle) });

  const placed = await pool.place('s1');
  t.equal(placed.host, 'idle');
  t.equal(pool.hostOf('s1'), 'idle');
  t.equal(pool.clientFor('s1'), placed.client);

  // The idle host fills up: a new session goes elsewhere, the placed one stays.
  idle.load = { ...idle.load, turnsRunning: 4 };
  t.equal((await pool.place('s2')).host, 'busy');
  t.equal((await pool.place('s1')).host, 'idle', 'a placed session keeps its host even when it is full');

  // Equal free slots: the fewer turns running wins (a larger host with the same room is busier).
  const big = await host(t, { turnsRunning: 6, maxTurns: 8 });
  const small = await host(t, { turnsRunning: 0, maxTurns: 2 });
  const pair = new HostPool({ big: clientOf(big), small: clientOf(small) });
  t.equal((await pair.place('s3')).host, 'small');
});

t.test('draining, full, unready and unreachable hosts take no new session; each says why', async (t) => {
  const draining = await host(t);
  const full = await host(t, { turnsRunning: 4 });
  const unready = await host(t);
  unready.available = false;
  await unready.server.request('POST', '/api/status/worker-host');
  await clientOf(draining).drain({ draining: true });
  const gone = createClient({ target: { kind: 'unix', path: '/nonexistent/turnhost.sock' }, token: TOKEN });
  const pool = new HostPool({
    draining: clientOf(draining),
    full: clientOf(full),
    unready: clientOf(unready),
    gone,
  });

  const readiness = await pool.readiness();
  t.same(
    readiness.map((h) => [h.host, h.ready ? 'ready' : h.code]),
    [
      ['draining', 'draining'],
      ['full', 'host_full'],
      ['unready', 'not_ready'],
      ['gone', 'unreachable'],
    ],
  );
  const refused = await pool.place('s1').then(
    () => null,
    (error: unknown) => error,
  );
  t.ok(refused instanceof NoHostReadyError, 'no host: a typed error');
  const error = refused as NoHostReadyError;
  t.equal(error.code, 'no_host_ready');
  t.match(error.message, /draining: not ready: the host is not draining/);
  t.match(error.message, /full: not ready: a free turn slot: 4 of 4/);
  t.match(error.message, /unready: not ready: seccomp/);
  t.equal(pool.hostOf('s1'), undefined, 'nothing pinned');

  // The drain ends: that host takes the session.
  await clientOf(draining).drain({ draining: false });
  t.equal((await pool.place('s1')).host, 'draining');
});

t.test('pins: restored from the application, never moved, released after deletion', async (t) => {
  const a = await host(t);
  const b = await host(t, { turnsRunning: 3 });
  const pool = new HostPool(
    new Map([
      ['a', clientOf(a)],
      ['b', clientOf(b)],
    ]),
  );
  pool.pin('old', 'b');
  t.equal((await pool.place('old')).host, 'b', 'a restored pin holds though a has more room');
  t.throws(() => pool.pin('old', 'a'), /pinned to b/);
  t.throws(() => pool.pin('x', 'c'), /host: c is not in this pool/);
  t.throws(() => pool.clientFor('never'), /not placed/);
  pool.release('old');
  t.equal((await pool.place('old')).host, 'a', 'released: placed afresh');
  t.throws(() => new HostPool({}), /at least one host/);
});
