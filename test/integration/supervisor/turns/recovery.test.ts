/**
 * Crash recovery: a supervisor killed with SIGKILL mid-turn leaves a turn cgroup behind (here a
 * prepared worker the turn had claimed, its leaf named after the worker) and an idle prepared
 * worker's. The turn itself does not outlive its supervisor: its worker loses its protocol fd
 * and ends, and with it the turn's pid namespace and everything in it, a process in a session
 * of its own included. The next start removes both leaves, records `worker_recovered` for each
 * (the claimed one bound to its turn, the idle one to none), marks the turn interrupted, and
 * records the purge of the temp the turn had written to (`turn_temp_purge`, `recovered`).
 * Output files under the data directory that no turn record names are removed; the
 * interrupted turn's are kept.
 */
import t from 'tap';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { createTurnHarness, harnessUidRange } from '../../../support/turn-harness.js';
import { stopTapInjectingIntoChildren } from '../../../support/no-tap-inject.js';
import { liveProcesses, processesOfUid } from '../../../support/processes.js';
import { until } from '../../../support/until.js';

stopTapInjectingIntoChildren();
const SLOT = 7;
const stateDir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-recovery-'));

const child = spawn(
  process.execPath,
  ['--import', 'tsx', path.join(import.meta.dirname, 'fixtures/crashing-supervisor.ts'), stateDir, String(SLOT)],
  {
    stdio: ['ignore', 'pipe', 'inherit'],
  },
);
const startedLine = await new Promise<string>((resolve, reject) => {
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => {
    out += chunk.toString();
    if (out.includes('\n')) resolve(out.trim());
  });
  child.on('exit', (code) => reject(new Error(`the first supervisor exited ${code} before starting its turn`)));
});
const [, turnId, uidText] = startedLine.split(' ');
const workerUid = Number(uidText);

t.test('the turn runs, then its supervisor dies with SIGKILL', async (t) => {
  t.equal(turnId, 'turn-crash');
  t.ok(processesOfUid(workerUid).length >= 3, "the turn's init, its worker and the detached sleep are alive");
  child.kill('SIGKILL');
  await new Promise((resolve) => child.once('exit', resolve));
  // The worker ends when its protocol fd closes; its init then ends and the kernel kills what is
  // left in the pid namespace, the sleep in a session of its own included.
  t.ok(await until(() => processesOfUid(workerUid).length === 0), 'nothing of the turn outlives its supervisor');
  // The idle prepared worker ends itself once it sees its protocol fd close; the restart below
  // must come after that, or it finds the worker still exiting and kills it.
  const range = harnessUidRange(SLOT);
  const othersOfRange = () =>
    liveProcesses().filter((p) => p.uid !== workerUid && p.uid >= range.first && p.uid < range.first + range.count);
  t.ok(
    await until(() => othersOfRange().length === 0),
    'the idle prepared worker exits by itself when its supervisor dies',
  );
});

t.test('the next start reaps the leaf, records worker_recovered and marks the turn interrupted', async (t) => {
  // Output files no turn record names (as a crash between a delete's steps leaves them).
  const outputRoot = path.join(stateDir, 'data', 'output');
  fs.mkdirSync(path.join(outputRoot, 'turn-orphan'), { recursive: true });
  fs.writeFileSync(path.join(outputRoot, 'turn-orphan', 'stdout'), 'left behind');
  const restarted = await createTurnHarness({ slot: SLOT, stateDir });
  t.teardown(() => restarted.close());
  t.notOk(fs.existsSync(path.join(outputRoot, 'turn-orphan')), 'output without a turn record is removed at boot');
  t.ok(fs.existsSync(path.join(outputRoot, 'turn-crash')), "the interrupted turn's output is kept");
  t.same(processesOfUid(workerUid), [], 'no process of the turn survives the restart');
  const page = restarted.events.query({ turn: 'turn-crash', kind: 'worker_recovered' });
  if (!page.ok) throw new Error(page.detail);
  t.equal(page.events.length, 1);
  const event = page.events[0]!;
  t.equal(event.sessionId, 'session-crash');
  t.equal(typeof event.payload.killedProcesses, 'number', 'what the reap found is counted');
  t.match(
    event.payload.cgroup,
    /\/prepared_[A-Za-z0-9_-]+$/,
    "the turn ran in a prepared worker: the leaf is the worker's",
  );
  const record = restarted.turns.get('turn-crash');
  t.equal(record?.state, 'finished');
  t.equal(record?.result?.status, 'interrupted');
  for (const dir of event.payload.paths as string[]) t.notOk(fs.existsSync(dir), `${dir} is removed`);

  // The temp the turn wrote to went with its processes; the receipt says so, without counts.
  const purge = restarted.events.query({ turn: 'turn-crash', kind: 'turn_temp_purge' });
  if (!purge.ok) throw new Error(purge.detail);
  t.equal(purge.events.length, 1, 'one temp receipt for the interrupted turn');
  t.match(purge.events[0], {
    sessionId: 'session-crash',
    schemaVersion: 2,
    payload: { outcome: 'recovered', bytes: 0, inodes: 0 },
  });

  const all = restarted.events.query({ kind: 'worker_recovered' });
  if (!all.ok) throw new Error(all.detail);
  const idle = all.events.filter((e) => e.turnId === null);
  t.equal(idle.length, 1, 'the idle prepared worker is recovered bound to no turn');
  t.match(idle[0]?.payload.cgroup, /\/prepared_[A-Za-z0-9_-]+$/);
  // An idle worker ends itself when its protocol fd closes with the supervisor: nothing to kill.
  t.equal(idle[0]?.payload.killedProcesses, 0, 'its worker had already exited');
});
