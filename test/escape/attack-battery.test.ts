/**
 * The attack battery (attack/, supervisor/probes/attack.ts) against real turns: every case
 * holds in separate_uid and in shared_uid under a root supervisor, through the turn manager's
 * own launch path, with a second workspace for the cross-workspace case and the supervisor's
 * own port registered as one no turn may reach. The controls run outside the sandbox, so a
 * held case is one whose attack works where the protection is absent.
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import t, { type Test } from 'tap';
import { createTurnHarness, type HarnessOptions, type TurnHarness } from '../support/turn-harness.js';
import { OwnListeners } from '../../proxy/self-connection.js';
import { runWorkerHostProbes } from '../../supervisor/probes/index.js';
import { ATTACK_CASES } from '../../supervisor/probes/attack-results.js';
import { runAttackBattery } from '../../supervisor/probes/attack.js';
import { TurnManagerAttackHost } from '../../supervisor/http/attack-host.js';
import type { BoundaryAttestation } from '../../supervisor/probes/types.js';

// Uid range 3_203_000 (slot 103); each configuration's harness is closed before the next starts.
const SLOT = 103;

/** Cases this host cannot attest, with the reason each must name. */
const SKIPPED_HERE: Record<string, RegExp> = {
  'workspaces.byte_cap': /no workspace byte cap/,
};

async function supervisorPort(t: Test): Promise<number> {
  const server = net.createServer((socket) => socket.end('supervisor\n'));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.teardown(() => server.close());
  return (server.address() as net.AddressInfo).port;
}

async function attack(
  t: Test,
  options: Omit<HarnessOptions, 'slot'>,
): Promise<{ harness: TurnHarness; attested: BoundaryAttestation; port: number }> {
  const port = await supervisorPort(t);
  const ownListeners = new OwnListeners();
  ownListeners.add({ host: '127.0.0.1', port });
  const harness = await createTurnHarness({
    slot: SLOT,
    workspaces: {},
    ownListeners,
    configure: (config) => {
      // A protected path the view masks: the battery reads it empty inside, with content outside.
      const root = config.turns.workspaceRoots[0]!;
      fs.writeFileSync(path.join(root, '.env'), 'API_KEY=secret\n');
      config.fs.protectedPaths = [{ root, path: '.env', mode: 'mask_file', reason: 'secrets' }];
      // Both modes are attacked: restricted turns run in the strict view.
      config.modes.restricted.enabled = true;
    },
    ...options,
  });
  t.teardown(() => harness.close());
  const status = await runWorkerHostProbes(harness.probeContext, 'check');
  t.equal(status.ordinary?.available, true, `ordinary available before the attack: ${status.ordinary?.requirement}`);
  t.equal(
    status.restricted?.available,
    true,
    `restricted available before the attack: ${status.restricted?.requirement}`,
  );
  const attested = await runAttackBattery({
    config: harness.config,
    logger: harness.probeContext.logger,
    status,
    host: new TurnManagerAttackHost(harness.turns, harness.workspaces),
    ownPorts: [port],
    ...(options.separateUid === false ? {} : { uidRange: harness.uidRange }),
  });
  if (!attested.ok) throw new Error(`${attested.reason}: ${attested.detail}`);
  return { harness, attested, port };
}

function expectEveryCaseHeld(t: Test, attested: BoundaryAttestation): void {
  for (const mode of ['ordinary', 'restricted'])
    t.same(
      attested.cases.filter((c) => c.mode === mode).map((c) => c.case),
      [...ATTACK_CASES],
      `${mode}: every case reported once, in order`,
    );
  for (const attestedCase of attested.cases) {
    const skipped = SKIPPED_HERE[attestedCase.case];
    if (skipped !== undefined) {
      t.equal(attestedCase.result, 'skipped', `${attestedCase.mode} ${attestedCase.case}`);
      t.match(attestedCase.reason, skipped, `${attestedCase.case} names why`);
    } else t.equal(attestedCase.result, 'held', `${attestedCase.mode} ${attestedCase.case}: ${attestedCase.reason}`);
  }
  t.equal(attested.counts.broken, 0, 'nothing broken');
}

t.test('separate_uid, root supervisor: every case held', async (t) => {
  const { attested } = await attack(t, { separateUid: true });
  t.equal(attested.identity, 'separate_uid');
  expectEveryCaseHeld(t, attested);
  const byName = new Map(attested.cases.map((c) => [c.case, c]));
  t.match(byName.get('seccomp.ptrace')?.reason, /EPERM/, 'the evidence is the errno');
  t.match(byName.get('seccomp.i386_entry')?.reason, /signal 31/, 'the foreign ABI is killed (SIGSYS)');
  t.match(byName.get('network.denied_host')?.reason, /status 403 reason \w+/, "the proxy's refusal, with its reason");
  t.match(byName.get('limits.memory')?.reason, /memory limit ended the turn|signal 9|ENOMEM/);
});

t.test('shared_uid, root supervisor: every case held', async (t) => {
  const { attested } = await attack(t, { separateUid: false });
  t.equal(attested.identity, 'shared_uid');
  expectEveryCaseHeld(t, attested);
});
