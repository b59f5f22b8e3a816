import t from 'tap';
import path from 'node:path';
import { createTurnHarness, runTurn, NATIVE_BUILD } from '../../../support/turn-harness.js';

const harness = await createTurnHarness({ slot: 1 });
t.teardown(() => harness.close());

t.test('a turn runs as a separate uid and reports its exit', async (t) => {
  const run = await runTurn(harness, { argv: ['/bin/sh', '-c', 'id -u; echo out; echo err >&2; exit 3'] });
  t.equal(run.result.status, 'nonzero_exit', run.result.detail ?? run.stderr);
  t.equal(run.result.exitCode, 3);
  const uid = Number(run.stdout.split('\n')[0]);
  t.ok(uid >= harness.uidRange.first && uid < harness.uidRange.first + harness.uidRange.count, `uid ${uid} in range`);
  t.match(run.stdout, /out/);
  t.match(run.stderr, /err/);
  t.equal(run.record.identity, 'separate_uid');
  t.equal(run.record.workerUid, uid);
});

/** `key rest` lines of report-self, grouped by key. */
function reportLines(stdout: string): Map<string, string[]> {
  const lines = new Map<string, string[]>();
  for (const line of stdout.split('\n')) {
    const space = line.indexOf(' ');
    if (space <= 0) continue;
    const key = line.slice(0, space);
    lines.set(key, [...(lines.get(key) ?? []), line.slice(space + 1)]);
  }
  return lines;
}

t.test('inside the command: the boundary holds', async (t) => {
  const run = await runTurn(harness, { argv: [path.join(NATIVE_BUILD, 'report-self')] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  const report = reportLines(run.stdout);
  const uid = run.record.workerUid;
  t.ok(
    uid !== null && uid >= harness.uidRange.first && uid < harness.uidRange.first + harness.uidRange.count,
    `worker uid ${uid} is in the helper's range`,
  );
  t.same(report.get('uid'), [`${uid} ${uid} ${uid}`], 'real, effective and saved uid are the worker uid');
  t.same(report.get('gid'), [`${uid} ${uid} ${uid}`], 'real, effective and saved gid are the worker gid');
  t.same(report.get('groups'), ['0'], 'no supplementary groups');
  const status = new Map((report.get('status') ?? []).map((line) => line.split(' ') as [string, string]));
  for (const cap of ['CapPrm', 'CapEff', 'CapBnd', 'CapAmb'])
    t.equal(status.get(cap), '0000000000000000', `${cap} is empty`);
  t.equal(status.get('NoNewPrivs'), '1', 'no_new_privs is set');
  t.equal(status.get('Seccomp'), '2', 'a seccomp filter is installed');
  t.same(report.get('fd'), ['0', '1', '2'], 'only stdio is open');
  t.same(report.get('netdev'), ['lo up'], 'the network namespace has only lo');
  t.same(report.get('hostname'), ['turnhost'], 'its own hostname');
  t.same(report.get('cwd'), [harness.workspace]);
  const leaves = (report.get('cgroup') ?? []).filter((line) => /:(pids|memory)[,:]/.test(line));
  // The turn's cgroup namespace is rooted at its leaf (a prepared worker's: the leaf made for
  // that worker), which the view shows at /sys/fs/cgroup/<hierarchy> holding the command.
  t.ok(
    leaves.length > 0 && leaves.every((line) => line.endsWith(':/')),
    `the pids and memory cgroups are the cgroup namespace's root: ${leaves.join(' ')}`,
  );
  const pid = report.get('pid')?.[0];
  for (const hierarchy of ['pids', 'memory'])
    t.ok(report.get('leaf-proc')?.includes(`${hierarchy} ${pid}`), `the command is in the turn's ${hierarchy} leaf`);
});
