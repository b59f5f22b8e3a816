/**
 * Placement facts over a real turn manager (both identity modes): `GET /api/ready` reports the
 * room left and answers 503 `host_full` when every slot is taken and 503 `draining` in drain
 * mode; `POST /api/drain` refuses new turns with a stable code while a running turn ends as it
 * would, and each change is a `host_drain` event. Every answer is checked against the API document.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { createMemoryLogger } from '../../../../core/log.js';
import { assertContract } from '../../../support/api-contract.js';
import { fakeStatus, testApp } from '../../../support/app-server.js';
import { stopTapInjectingIntoChildren } from '../../../support/no-tap-inject.js';
import { createTurnHarness, type TurnHarness } from '../../../support/turn-harness.js';
import type { TurnResult } from '../../../../supervisor/turns/types.js';

stopTapInjectingIntoChildren();

const TOKEN = 'placement-test-token-0123456789ab';

interface Answer {
  status: number;
  json: any;
}

async function serve(harness: TurnHarness): Promise<{ port: number; close: () => Promise<void> }> {
  const { logger } = createMemoryLogger('debug');
  const app = testApp({
    config: harness.config,
    logger,
    store: harness.events,
    turns: harness.turns,
    workspaces: harness.workspaces,
    latestStatus: () => fakeStatus('boot'),
    token: TOKEN,
  });
  const server = http.createServer(app);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

function request(port: number, method: string, urlPath: string, body?: unknown, token: string | null = TOKEN) {
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  return new Promise<Answer>((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method,
        path: urlPath,
        headers: {
          ...(token === null ? {} : { authorization: `Bearer ${token}` }),
          ...(payload ? { 'content-type': 'application/json', 'content-length': String(payload.length) } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          try {
            assertContract(method, urlPath, res.statusCode ?? 0, res.headers, text);
          } catch (error) {
            return reject(error instanceof Error ? error : new Error(String(error)));
          }
          resolve({ status: res.statusCode ?? 0, json: text === '' ? null : JSON.parse(text) });
        });
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

/** The turn's end, as the manager reports it once its command exits. */
function ended(harness: TurnHarness, id: string): Promise<TurnResult | undefined> {
  return harness.turns.wait(id);
}

for (const separateUid of [true, false]) {
  const mode = separateUid ? 'separate_uid' : 'shared_uid';
  t.test(`${mode}: capacity, host_full, drain refuses new turns while a running one ends`, async (t) => {
    const harness = await createTurnHarness({
      slot: 101,
      separateUid,
      uidCount: 8,
      configure: (config) => {
        config.turns.maxConcurrent = 1;
      },
    });
    const { port, close } = await serve(harness);
    t.teardown(async () => {
      await close();
      await harness.close();
    });
    const newTurn = (turnId: string) =>
      request(port, 'POST', '/api/turns', {
        sessionId: 'placement',
        turnId,
        mode: 'ordinary',
        argv: ['cat'],
        cwd: harness.workspace,
      });

    const idle = await request(port, 'GET', '/api/ready', undefined, null);
    t.equal(idle.status, 200, 'ready with no token');
    t.same(idle.json.capacity, { turnsRunning: 0, maxTurns: 1, freeSlots: 1, workspacesHeld: 0, draining: false });

    // One turn that runs until its input ends fills the only slot.
    const first = await newTurn('placement-first');
    t.equal(first.status, 201, JSON.stringify(first.json));
    const full = await request(port, 'GET', '/api/ready', undefined, null);
    t.equal(full.status, 503);
    t.equal(full.json.code, 'host_full');
    t.match(full.json.requirement, /a free turn slot: 1 of 1 are running/);
    const status = await request(port, 'GET', '/api/status');
    t.same(status.json.runtime.capacity, {
      turnsRunning: 1,
      maxTurns: 1,
      freeSlots: 0,
      workspacesHeld: 0,
      draining: false,
    });

    // Drain: tokened like every change; a bad body names its field.
    t.equal((await request(port, 'POST', '/api/drain', { draining: true }, null)).status, 401);
    const bad = await request(port, 'POST', '/api/drain', { draining: 'yes' });
    t.equal(bad.status, 400);
    t.equal(bad.json.field, 'draining');
    const unknown = await request(port, 'POST', '/api/drain', { draining: true, now: 1 });
    t.equal(unknown.status, 400);
    t.equal(unknown.json.field, 'now');
    t.notOk(harness.turns.load().draining, 'a refused body changed nothing');

    const on = await request(port, 'POST', '/api/drain', { draining: true });
    t.equal(on.status, 200);
    t.same(on.json, {
      draining: true,
      changed: true,
      capacity: { turnsRunning: 1, maxTurns: 1, freeSlots: 0, workspacesHeld: 0, draining: true },
    });
    t.equal((await request(port, 'POST', '/api/drain', { draining: true })).json.changed, false, 'already');
    const drainingReady = await request(port, 'GET', '/api/ready', undefined, null);
    t.equal(drainingReady.status, 503);
    t.equal(drainingReady.json.code, 'draining', 'drain is named before a full host');

    // The running turn ends as it would: its input ends, cat exits 0.
    const attached = harness.turns.attach(first.json.turn.id);
    if (!attached.ok) throw new Error(attached.detail);
    attached.attachment.endInput();
    const result = await ended(harness, first.json.turn.id);
    t.equal(result?.exitCode, 0, 'the running turn ended normally while draining');

    // A free slot, but draining: still refused, with the stable code and its requirement.
    const refused = await newTurn('placement-refused');
    t.equal(refused.status, 503);
    t.equal(refused.json.code, 'draining');
    t.equal(refused.json.requirement, 'the host is not draining');
    t.equal(harness.turns.get('placement-refused'), undefined, 'no record of a refused turn');
    const emptyDraining = await request(port, 'GET', '/api/ready', undefined, null);
    t.equal(emptyDraining.json.code, 'draining');

    const off = await request(port, 'POST', '/api/drain', { draining: false });
    t.same(off.json.capacity, { turnsRunning: 0, maxTurns: 1, freeSlots: 1, workspacesHeld: 0, draining: false });
    t.equal((await request(port, 'GET', '/api/ready', undefined, null)).status, 200, 'ready again');
    const again = await newTurn('placement-again');
    t.equal(again.status, 201, 'new turns are taken again');
    const attachedAgain = harness.turns.attach(again.json.turn.id);
    if (attachedAgain.ok) attachedAgain.attachment.endInput();
    await ended(harness, again.json.turn.id);

    const page = harness.events.query({ kind: 'host_drain', limit: 10 });
    if (!page.ok) throw new Error(page.detail);
    const drains = page.events.map((event) => ({ ...event.payload, actor: event.actor, sessionId: event.sessionId }));
    t.same(
      drains,
      [
        { draining: true, source: 'api', turnsRunning: 1, actor: 'operator', sessionId: null },
        { draining: false, source: 'api', turnsRunning: 0, actor: 'operator', sessionId: null },
      ],
      'one event per change, none for a repeat',
    );
  });
}
