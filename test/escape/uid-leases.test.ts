/**
 * Two supervisors, one helper and one worker uid range (as every development setup had): the
 * helper's per-uid lease means no two live turns ever share a uid, whichever supervisor
 * started them, and a turn that finds every uid of the range leased is refused, never doubled up.
 */
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import {
  setUpHelper,
  startSupervisor,
  stopSupervisors,
  supervisorBase,
  type CliResult,
} from '../support/served-supervisor.js';
import { stopTapInjectingIntoChildren } from '../support/no-tap-inject.js';
import { until } from '../support/until.js';

stopTapInjectingIntoChildren();

const RANGE = { first: 3_186_000, count: 4 };
const helper = setUpHelper([supervisorBase('lease-a').dataDir, supervisorBase('lease-b').dataDir], RANGE);
t.teardown(() => helper.remove());
const a = await startSupervisor({ name: 'lease-a', helper });
const b = await startSupervisor({ name: 'lease-b', helper });
t.teardown(() => stopSupervisors([a, b]));

t.test('concurrent turns of two supervisors on one range never share a uid', async (t) => {
  const release = (dir: string): string => path.join(dir, 'release');
  // Each turn records its uid in its workspace and waits until the test lets it go.
  const hold = (n: number): string[] => [
    '/bin/sh',
    '-c',
    `id -u > .started-${n} && mv .started-${n} started-${n}; while [ ! -e release ]; do sleep 0.05; done`,
  ];
  const runs: Array<Promise<CliResult>> = [];
  for (const [n, supervisor] of [a, a, b, b].entries()) runs.push(supervisor.run(hold(n)));
  const started = (): string[] =>
    [a.workspace, b.workspace].flatMap((dir) =>
      fs
        .readdirSync(dir)
        .filter((name) => name.startsWith('started-'))
        .map((name) => path.join(dir, name)),
    );
  t.ok(await until(() => started().length === 4, 60_000), 'four turns run at once');
  const uids = started().map((file) => Number(fs.readFileSync(file, 'utf8').trim()));
  t.equal(new Set(uids).size, 4, `four distinct uids: ${uids.join(', ')}`);
  for (const uid of uids) t.ok(uid >= RANGE.first && uid < RANGE.first + RANGE.count, `${uid} in the range`);

  const fifth = await b.run(['/bin/true']);
  t.equal(fifth.code, 6, 'a fifth turn is refused (exit 6) while every uid is leased');
  t.match(fifth.stderr, /uid/, fifth.stderr);

  fs.writeFileSync(release(a.workspace), '');
  fs.writeFileSync(release(b.workspace), '');
  for (const run of await Promise.all(runs)) t.equal(run.code, 0, run.stderr);

  const after = await b.run(['/bin/sh', '-c', 'id -u']);
  t.equal(after.code, 0, 'once the leases are released, a turn runs again');
});
