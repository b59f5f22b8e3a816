/**
 * Drain mode on a real `turnhost serve` in every configuration the supervisor allows
 * (separate_uid; shared_uid under a root and under a non-root supervisor), as an operator
 * drives it: SIGUSR2 to the supervisor and `turnhost drain [--off]`. While draining, a turn
 * already running ends as it would, `turnhost run` is refused with the draining code,
 * `GET /api/ready` answers 503 `draining`, `turnhost check` and `status` report it, and each
 * change is a `host_drain` event naming its source.
 */
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { stopTapInjectingIntoChildren } from '../support/no-tap-inject.js';
import { apiRequest } from '../support/served-api.js';
import {
  plainUid,
  setUpHelper,
  startSupervisor,
  stopSupervisors,
  supervisorBase,
  type ServedSupervisor,
} from '../support/served-supervisor.js';

stopTapInjectingIntoChildren();

const SEPARATE_RANGE = { first: 3_201_100, count: 8 };
const NON_ROOT_UID = plainUid(201);

const helper = setUpHelper([supervisorBase('drain-separate').dataDir], SEPARATE_RANGE);
t.teardown(() => helper.remove());
const supervisors: Array<[string, ServedSupervisor]> = [
  ['separate_uid', await startSupervisor({ name: 'drain-separate', helper })],
  ['shared_uid, root supervisor', await startSupervisor({ name: 'drain-shared-root' })],
  ['shared_uid, non-root supervisor', await startSupervisor({ name: 'drain-shared-user', uid: NON_ROOT_UID })],
];
t.teardown(() => stopSupervisors(supervisors.map(([, supervisor]) => supervisor)));

const connection = (s: ServedSupervisor) => ({ target: { kind: 'unix' as const, path: s.socket }, token: s.token });

async function capacity(s: ServedSupervisor): Promise<Record<string, unknown>> {
  const status = await apiRequest(connection(s), 'GET', '/api/status');
  return (status.body as { runtime: { capacity: Record<string, unknown> } }).runtime.capacity;
}

async function drainEvents(s: ServedSupervisor): Promise<unknown[]> {
  const page = await apiRequest(connection(s), 'GET', '/api/governance/events?kind=host_drain');
  return (page.body as { events: Array<{ payload: unknown }> }).events.map((event) => event.payload);
}

for (const [name, s] of supervisors) {
  t.test(`${name}: SIGUSR2 and turnhost drain stop new turns; a running one ends as it would`, async (t) => {
    // A turn that runs until the test creates `go` in its working directory.
    const gate = path.join(s.workspace, 'go');
    fs.rmSync(gate, { force: true });
    const running = s.run(['sh', '-c', 'while [ ! -e go ]; do sleep 0.05; done; echo ended']);
    t.ok(await untilAsync(async () => (await capacity(s))['turnsRunning'] === 1), 'the gated turn is running');

    process.kill(s.pid, 'SIGUSR2');
    t.ok(await untilAsync(async () => (await capacity(s))['draining'] === true), 'SIGUSR2 turned drain mode on');
    const ready = await apiRequest(connection(s), 'GET', '/api/ready');
    t.equal(ready.status, 503);
    t.equal((ready.body as { code: string }).code, 'draining');

    const refused = await s.run(['true']);
    t.equal(refused.code, 6, 'run is refused (exit 6)');
    t.match(refused.stderr, /draining/);

    const check = await s.cli(['check']);
    t.equal(check.code, 0, 'drain is no fault of the host: check stays green');
    t.match(check.stdout, /DRAINING: new turns are refused/);
    t.match(check.stdout, /1 of \d+ turns running, 0 free/);
    const checkJson = JSON.parse((await s.cli(['check', '--json'])).stdout);
    t.equal(checkJson.capacity.draining, true);
    t.match((await s.cli(['status'])).stdout, /DRAINING/);

    fs.writeFileSync(gate, '');
    const ended = await running;
    t.equal(ended.code, 0, 'the running turn ended as it would');
    t.match(ended.stdout, /ended/);

    const again = await s.cli(['drain', '--json']);
    t.equal(again.code, 0);
    t.equal(JSON.parse(again.stdout).changed, false, 'already draining');

    const off = await s.cli(['drain', '--off']);
    t.equal(off.code, 0, off.stderr);
    t.match(off.stdout, /not draining: new turns are taken/);
    t.equal((await apiRequest(connection(s), 'GET', '/api/ready')).status, 200);
    const taken = await s.run(['true']);
    t.equal(taken.code, 0, 'new turns are taken again');

    const on = await s.cli(['drain']);
    t.match(on.stdout, /draining: new turns are refused/);
    t.equal((await s.run(['true'])).code, 6);
    await s.cli(['drain', '--off']);

    t.same(await drainEvents(s), [
      { draining: true, source: 'signal', turnsRunning: 1 },
      { draining: false, source: 'api', turnsRunning: 0 },
      { draining: true, source: 'api', turnsRunning: 0 },
      { draining: false, source: 'api', turnsRunning: 0 },
    ]);
  });
}

/** `until` for an asynchronous check: a bound on a hang, never a timing assertion. */
async function untilAsync(check: () => Promise<boolean>, budgetMs = 30_000): Promise<boolean> {
  const deadline = Date.now() + budgetMs;
  while (!(await check())) {
    if (Date.now() > deadline) return false;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return true;
}
