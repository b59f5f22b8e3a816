// VM tier, last file: the turn-cgroup benchmark on cgroup v2 (a figure, not a timed assertion): the
// compiled bench/turn-cgroup.js launches a trivial command bare and inside a fresh turn cgroup
// (create, join, kill, stats, remove), in a transient scope with Delegate=yes, and prints the
// ratio measured in the same run. The check asserts only that nothing is left behind.
import { check, comment, expect, finish } from './tap.mjs';
import { sh } from './client.mjs';

const TURNS = 30;

await check(`cgroup v2 turn overhead over ${TURNS} turns: no leaf, process or fd left behind`, () => {
  const output = sh(
    `systemd-run --scope --quiet -p Delegate=yes /usr/local/bin/node /turnhost/dist/bench/turn-cgroup.js ${TURNS}`,
  );
  for (const line of output.trim().split('\n')) comment(line);
  expect(/backend cgroup_v2/.test(output), 'the bench did not use cgroup v2', { output });
  expect(/cleanup: 0 leaves left/.test(output), 'turn leaves were left behind', { output });
  const fds = /fds (\d+) -> (\d+)/.exec(output);
  expect(fds !== null && fds[1] === fds[2], 'fds leaked', { output });
});

finish();
