/**
 * `turnhost check --attack` against a real `turnhost serve` in each configuration the
 * supervisor allows (separate_uid, shared_uid under a root and under a non-root supervisor),
 * with workspaces: every case of the battery holds, the answer (checked against the OpenAPI
 * document by the contract proxy) carries the attestation, status keeps it, and one
 * `boundary_attested` event records the counts.
 */
import t from 'tap';
import {
  setUpHelper,
  startSupervisor,
  stopSupervisors,
  supervisorBase,
  type ServedSupervisor,
} from '../support/served-supervisor.js';
import { stopTapInjectingIntoChildren } from '../support/no-tap-inject.js';
import { ATTACK_CASES } from '../../supervisor/probes/attack-results.js';
import type { WorkerHostStatus } from '../../supervisor/probes/types.js';

stopTapInjectingIntoChildren();

// Worker uids 3_203_100.., the non-root supervisor 3_203_900: this file's range.
const SEPARATE_RANGE = { first: 3_203_100, count: 8 };
const NON_ROOT_UID = 3_203_900;

type ConfigName = 'separate_uid' | 'shared_uid, root supervisor' | 'shared_uid, non-root supervisor';

/** Cases a configuration cannot attest, with the reason each must name. */
const EVERY_CONFIG: Record<string, RegExp> = {
  'workspaces.byte_cap': /no workspace byte cap/,
  // These supervisors listen on a unix socket only, and configure no protected path.
  'network.supervisor_ports': /no TCP listener/,
  'view.protected': /no protected path/,
};
const SKIPPED: Record<ConfigName, Record<string, RegExp>> = {
  separate_uid: EVERY_CONFIG,
  'shared_uid, root supervisor': EVERY_CONFIG,
  'shared_uid, non-root supervisor': {
    ...EVERY_CONFIG,
    'identity.setuid': /only a root supervisor can make a setuid-root copy/,
  },
};

const helper = setUpHelper([supervisorBase('attack-separate').dataDir], SEPARATE_RANGE, {
  roots: [supervisorBase('attack-separate').workspacesRoot],
});
t.teardown(() => helper.remove());
const supervisors: Array<[ConfigName, ServedSupervisor]> = [
  ['separate_uid', await startSupervisor({ name: 'attack-separate', helper, workspaces: true })],
  [
    'shared_uid, root supervisor',
    // This one also attacks at boot (probes.attackAtBoot): status carries the attestation at once.
    await startSupervisor({ name: 'attack-shared-root', workspaces: true, probes: { attackAtBoot: true } }),
  ],
  [
    'shared_uid, non-root supervisor',
    await startSupervisor({ name: 'attack-shared-user', uid: NON_ROOT_UID, workspaces: true }),
  ],
];
t.teardown(() => stopSupervisors(supervisors.map(([, supervisor]) => supervisor)));

t.test('probes.attackAtBoot: the attestation is in status before any check', async (t) => {
  const supervisor = supervisors[1]![1];
  const status = await supervisor.cli(['status', '--json']);
  const workerHost = (JSON.parse(status.stdout) as { runtime: { workerHost: WorkerHostStatus } }).runtime.workerHost;
  t.equal(workerHost.attested?.cases.length, ATTACK_CASES.length);
  t.equal(workerHost.attested?.counts.broken, 0);
  const events = await supervisor.cli(['events', '--kind', 'boundary_attested', '--json']);
  const page = JSON.parse(events.stdout) as { events: Array<{ payload: { trigger: string } }> };
  t.same(
    page.events.map((event) => event.payload.trigger),
    ['boot'],
    'one run, at boot',
  );
  const other = await supervisors[0]![1].cli(['status', '--json']);
  t.equal(
    (JSON.parse(other.stdout) as { runtime: { workerHost: WorkerHostStatus } }).runtime.workerHost.attested,
    undefined,
    'off by default: no attestation before a check',
  );
});

for (const [config, supervisor] of supervisors) {
  t.test(`${config}: check --attack reports every case held`, async (t) => {
    const run = await supervisor.cli(['check', '--attack', '--json']);
    t.equal(run.code, 0, `exit 0 (stderr: ${run.stderr})`);
    const answer = JSON.parse(run.stdout) as WorkerHostStatus;
    t.equal(answer.ordinary?.available, true, answer.ordinary?.requirement ?? 'ordinary available');
    const attested = answer.attested!;
    t.ok(attested, 'the answer carries the attestation');
    t.same(
      attested.cases.map((c) => c.case),
      [...ATTACK_CASES],
      'every case, once, in ordinary mode',
    );
    for (const attestedCase of attested.cases) {
      const skipped = SKIPPED[config][attestedCase.case];
      if (skipped !== undefined) {
        t.equal(attestedCase.result, 'skipped', attestedCase.case);
        t.match(attestedCase.reason, skipped, `${attestedCase.case} names why`);
      } else t.equal(attestedCase.result, 'held', `${attestedCase.case}: ${attestedCase.reason}`);
    }
    t.equal(attested.counts.broken, 0);

    const table = await supervisor.cli(['check', '--attack']);
    t.equal(table.code, 0, table.stderr);
    t.match(table.stdout, /^ordinary\s+seccomp\.ptrace\s+held\s+EPERM$/m, 'the table names each case');
    t.match(table.stdout, /attack battery at .*: \d+ held, 0 broken, \d+ skipped/);

    const status = await supervisor.cli(['status', '--json']);
    const kept = (JSON.parse(status.stdout) as { runtime: { workerHost: WorkerHostStatus } }).runtime.workerHost;
    t.equal(kept.attested?.cases.length, ATTACK_CASES.length, 'status keeps the last attestation');
    t.equal(kept.attested?.counts.broken, 0);

    const events = await supervisor.cli(['events', '--kind', 'boundary_attested', '--json']);
    const page = JSON.parse(events.stdout) as {
      events: Array<{ payload: { held: number; broken: number; brokenCases: string[]; trigger: string } }>;
    };
    const checks = page.events.filter((event) => event.payload.trigger === 'check');
    t.equal(checks.length, 2, 'one event per run');
    t.same(checks[0]?.payload.brokenCases, []);
    t.equal(checks[0]?.payload.held, attested.counts.held);
  });
}
