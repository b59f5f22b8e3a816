// VM tier, second file: turns under real cgroup v2 limits in the delegated subtree, run through
// the supervisor's HTTP API with the setuid helper (separate worker uids). Each check proves one
// limit or cleanup guarantee of the turn cgroups; the last one kills the supervisor on purpose.
import fs from 'node:fs';
import { check, comment, expect, finish } from './tap.mjs';
import {
  SERVICE,
  SERVICE_CGROUP,
  api,
  cgroupProcs,
  createTurn,
  getTurn,
  processesOfUid,
  serviceMainPid,
  sh,
  turnEvents,
  WaitAborted,
  waitFor,
  waitForSupervisor,
  waitForTurnState,
} from './client.mjs';

// Bounds for waits: the guest runs about 24x slower than the host (TCG).
const TURN_SECONDS = 240;
const uniqueId = (name) => `vm-${name}-${Date.now().toString(36)}`;

/**
 * The turn's leaf as its worker_launch event names it: named after the turn, or after the
 * prepared worker the turn claimed.
 */
async function turnLeaf(turnId) {
  const launch = (await turnEvents(turnId)).find((event) => event.kind === 'worker_launch');
  return launch?.payload?.cgroup ?? '';
}

const leafGone = (leaf) => leaf !== '' && !fs.existsSync(leaf);

const journalTail = () => sh(`journalctl -u ${SERVICE} --no-pager -n 12 -o cat | cut -c1-300`);

function summary(turn) {
  return { state: turn.state, workerUid: turn.workerUid, identity: turn.identity, result: turn.result };
}

/** A refused or failed launch proves nothing about limits: it fails the check with its detail. */
function expectLaunched(turn) {
  const status = turn.result?.status;
  expect(
    status !== 'launch_refused' && status !== 'internal_error',
    `the turn did not run: ${status}: ${turn.result?.detail}`,
    summary(turn),
  );
}

async function runToEnd(request) {
  const created = await createTurn({ turnId: uniqueId(request.name), timeoutSeconds: 180, ...request.turn });
  const turn = await waitForTurnState(created.id, 'finished', TURN_SECONDS);
  comment(`${request.name} turn: ${JSON.stringify(summary(turn))}`);
  expectLaunched(turn);
  return turn;
}

/** Waits until the turn runs and `ps` shows `count` processes of its worker uid matching `pattern`. */
async function waitForWorkerProcesses(turnId, pattern, count) {
  return waitFor(`${count} '${pattern}' processes of turn ${turnId}`, TURN_SECONDS, async () => {
    const turn = await getTurn(turnId);
    if (turn.state === 'finished') throw new WaitAborted(`turn ${turnId} ended early: ${JSON.stringify(turn.result)}`);
    if (turn.workerUid === null) return undefined;
    const matching = processesOfUid(turn.workerUid).filter((line) => line.includes(pattern));
    return matching.length >= count ? turn : undefined;
  });
}

async function expectNoProcessesLeft(uid, what) {
  const left = await waitFor(`no process of uid ${uid} (${what})`, 15, () =>
    processesOfUid(uid).length === 0 ? true : undefined,
  ).catch(() => processesOfUid(uid));
  expect(left === true, `processes of worker uid ${uid} survived ${what}`, { processes: left });
}

await waitForSupervisor();

await check(
  'a memory hog under memory=64M is OOM-killed: status oom_killed, memory_oom, worker_exit event',
  async () => {
    const turn = await runToEnd({
      name: 'memory',
      turn: { argv: ['/bin/dd', 'if=/dev/zero', 'of=/dev/null', 'bs=512M', 'count=1'], limits: { memory: '64M' } },
    });
    expect(turn.identity === 'separate_uid', `identity ${turn.identity}`, summary(turn));
    expect(turn.result.status === 'oom_killed', `status ${turn.result.status}`, summary(turn));
    expect(turn.result.limitHits.includes('memory_oom'), 'limitHits lacks memory_oom', summary(turn));
    const events = await turnEvents(turn.id);
    const exit = events.find((event) => event.kind === 'worker_exit');
    expect(exit?.payload?.status === 'oom_killed', 'no worker_exit event saying oom_killed', {
      kinds: events.map((e) => e.kind),
      exit,
    });
    const leaf = await turnLeaf(turn.id);
    expect(leafGone(leaf), 'the turn leaf was not removed', { leaf });
  },
);

await check('a fork bomb under pids=64 is held at pids.max (pids_max) and dies with its turn', async () => {
  const turn = await runToEnd({
    name: 'pids',
    turn: {
      argv: ['/bin/sh', '-c', 'bomb() { bomb | bomb & }; bomb; sleep 20'],
      limits: { pids: 64 },
      timeoutSeconds: 120,
    },
  });
  expect(turn.result.limitHits.includes('pids_max'), 'limitHits lacks pids_max', summary(turn));
  expect(turn.result.usage.pidsPeak === null || turn.result.usage.pidsPeak <= 64, 'pids.peak above 64', summary(turn));
  await expectNoProcessesLeft(turn.workerUid, 'the fork bomb turn');
});

await check('a CPU spinner under cpu=0.2 is throttled (cpu_throttled)', async () => {
  const turn = await runToEnd({
    name: 'cpu',
    turn: { argv: ['/usr/bin/timeout', '10', '/bin/sh', '-c', 'while :; do :; done'], limits: { cpu: 0.2 } },
  });
  expect(turn.result.exitCode === 124, 'the spinner did not run until timeout(1) stopped it (exit 124)', summary(turn));
  expect(turn.result.limitHits.includes('cpu_throttled'), 'limitHits lacks cpu_throttled', summary(turn));
});

await check('cancel kills a detached background process (setsid) with the turn', async () => {
  const created = await createTurn({
    turnId: uniqueId('cancel'),
    argv: ['/bin/sh', '-c', 'setsid sleep 1000 & sleep 1001'],
    timeoutSeconds: 600,
  });
  const running = await waitForWorkerProcesses(created.id, 'sleep 100', 2);
  const leaf = await turnLeaf(created.id);
  comment(`cancel turn leaf: ${leaf} procs ${JSON.stringify(cgroupProcs(leaf))}`);
  const cancelled = await api('POST', `/api/turns/${created.id}/cancel`);
  expect(cancelled.status === 200, `cancel answered ${cancelled.status}`, { body: cancelled.body });
  const turn = await waitForTurnState(created.id, 'finished', TURN_SECONDS);
  comment(`cancel turn: ${JSON.stringify(summary(turn))}`);
  expect(turn.result?.status === 'cancelled', `status ${turn.result?.status}`, summary(turn));
  await expectNoProcessesLeft(running.workerUid, 'cancel');
  expect(leafGone(leaf), 'the turn leaf was not removed', { leaf });
});

await check(
  'the next turn like the last one claims its prepared worker, attested by the non-root supervisor under cgroup v2',
  async () => {
    const first = await runToEnd({ name: 'warm-first', turn: { argv: ['/bin/true'] } });
    // The pool prepares the next worker once a turn has ended; a turn that comes while it is
    // still starting waits for it.
    const second = await runToEnd({ name: 'warm-second', turn: { argv: ['/bin/true'] } });
    expect(second.result.status === 'ok', `status ${second.result.status}`, summary(second));
    const leaf = await turnLeaf(second.id);
    expect(/\/prepared_[A-Za-z0-9_-]+$/.test(leaf), 'the second turn did not run in a prepared worker', {
      leaf,
      journal: journalTail(),
    });
    expect(second.workerUid !== first.workerUid, 'the prepared worker has a uid of its own', {
      first: first.workerUid,
      second: second.workerUid,
    });
    await expectNoProcessesLeft(second.workerUid, 'the claiming turn');
    expect(leafGone(leaf), 'the prepared leaf was not removed with its turn', { leaf });
  },
);

await check(
  'kill -9 of the supervisor mid-turn: the turn dies with it; the restart marks it interrupted, no leaf left',
  async () => {
    const created = await createTurn({
      turnId: uniqueId('crash'),
      argv: ['/bin/sh', '-c', 'setsid sleep 1000 & sleep 1001'],
      timeoutSeconds: 600,
    });
    const running = await waitForWorkerProcesses(created.id, 'sleep 100', 2);
    const leaf = await turnLeaf(created.id);
    expect(leaf !== '' && fs.existsSync(leaf), 'no leaf cgroup for the running turn', {
      leaf,
      tree: sh(`find ${SERVICE_CGROUP} -type d`),
    });
    const pid = serviceMainPid();
    sh(`kill -9 ${pid}`);
    await waitFor(`${SERVICE} to notice its main process died`, 60, () =>
      serviceMainPid() !== pid ? true : undefined,
    );
    // The worker ends when its protocol fd closes, its init with it, and the kernel kills the
    // rest of the turn's pid namespace: the setsid sleep included.
    await expectNoProcessesLeft(running.workerUid, 'the supervisor crash (before any restart)');
    comment(`after kill -9: leaf ${leaf} procs ${JSON.stringify(cgroupProcs(leaf))}`);
    const restarted = sh(`systemctl restart ${SERVICE} 2>&1; echo "exit $?"`);
    expect(restarted.trim().endsWith('exit 0'), 'systemctl restart failed', { restarted, journal: journalTail() });
    await waitForSupervisor(240).catch((error) => expect(false, error.message, { journal: journalTail() }));
    const turn = await waitFor(`turn ${created.id} to be marked finished after the restart`, 60, async () => {
      const current = await getTurn(created.id);
      return current.state === 'finished' ? current : undefined;
    });
    comment(`crashed turn: ${JSON.stringify(summary(turn))}`);
    expect(turn.result?.status === 'interrupted', `status ${turn.result?.status}`, summary(turn));
    // systemd trims the unit's empty cgroups when it stops, so the restart usually finds no leaf
    // to reap; one it finds is reaped and recorded as worker_recovered.
    const events = await turnEvents(created.id);
    const recovered = events.find((event) => event.kind === 'worker_recovered');
    comment(recovered ? `worker_recovered: ${JSON.stringify(recovered.payload)}` : 'no leaf was left to recover');
    expect(leafGone(leaf), 'the stale leaf is still there', { leaf, procs: cgroupProcs(leaf) });
  },
);

finish();
