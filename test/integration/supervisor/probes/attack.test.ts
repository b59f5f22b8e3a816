/**
 * The attack battery with every protection absent: the "turn" runs the battery as a plain child
 * of this (root) process, outside any sandbox, with the probe's real fixtures and controls. Each
 * case whose control succeeds must then report broken, so no case holds by being unable to
 * fail, and the status mapping must make the mode unavailable, naming the first broken case.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { createMemoryLogger } from '../../../../core/log.js';
import { ok } from '../../../../core/result.js';
import { defaultConfig } from '../../../../supervisor/config/load.js';
import { applyAttestation, runAttackBattery, type AttackHost } from '../../../../supervisor/probes/attack.js';
import { ATTACK_CASES } from '../../../../supervisor/probes/attack-results.js';
import type { WorkerHostStatus } from '../../../../supervisor/probes/types.js';
import { REPO_ROOT } from '../../../support/turn-harness.js';

const BATTERY = path.join(REPO_ROOT, 'attack/build/attack-battery');

/** Outside the sandbox these stay as they are for a stated reason; every other case is broken. */
const NOT_BROKEN_OUTSIDE: Record<string, { result: 'held' | 'skipped'; why: RegExp }> = {
  // The test runs as root, which has no supplementary groups here.
  'identity.groups': { result: 'held', why: /groups=0/ },
  // Withheld by the probe: no workspaces configured, so neither the other workspace nor the byte cap can be attacked.
  'workspaces.other_workspace': { result: 'skipped', why: /workspaces are not configured/ },
  'workspaces.byte_cap': { result: 'skipped', why: /workspaces are not configured/ },
};

/** A turn with no boundary at all: the battery as this process's child, in the given cwd. */
const unsandboxed: AttackHost = {
  runTurn: (request) =>
    new Promise((resolve) => {
      const cwd = 'cwd' in request.place ? request.place.cwd : '/';
      execFile(request.argv[0]!, request.argv.slice(1), { cwd, maxBuffer: 1024 * 1024 }, (error, stdout, stderr) =>
        resolve(ok({ stdout, stderr, status: error ? 'nonzero_exit' : 'ok', endedByMemory: false })),
      );
    }),
};

const base = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-attack-outside-'));
t.teardown(() => fs.rmSync(base, { recursive: true, force: true }));
const config = defaultConfig({ installed: false, cwd: base });
config.dataDir = path.join(base, 'data');
fs.mkdirSync(config.dataDir);
fs.writeFileSync(path.join(config.dataDir, 'api-token'), 'a-token-of-sixteen-chars\n', { mode: 0o600 });
const workspaceRoot = path.join(base, 'workspace');
fs.mkdirSync(workspaceRoot);
fs.writeFileSync(path.join(workspaceRoot, '.env'), 'API_KEY=secret\n');
config.turns.workspaceRoots = [workspaceRoot];
config.fs.protectedPaths = [{ root: workspaceRoot, path: '.env', mode: 'mask_file', reason: 'secrets' }];

const status: WorkerHostStatus = {
  ordinary: { available: true, checkedAt: new Date().toISOString(), trigger: 'check' },
  identity: 'separate_uid',
  limits: {
    enforced: [
      { limit: 'pids', source: 'cgroup', value: 128 },
      { limit: 'memory', source: 'cgroup', value: 256 * 1024 * 1024 },
      { limit: 'tmp_size', source: 'tmpfs', value: 4 * 1024 * 1024 },
    ],
    absent: [],
  },
  governed: {
    available: true,
    hostExecution: 'worker',
    profile: 'governed',
    protectedPaths: [],
    egress: { active: true, detail: '' },
  },
  boundary: {} as WorkerHostStatus['boundary'],
};

t.test('outside the sandbox every case with a working control is broken', async (t) => {
  const { logger } = createMemoryLogger('debug');
  const supervisor = net.createServer((socket) => socket.end('supervisor\n'));
  await new Promise<void>((resolve) => supervisor.listen(0, '127.0.0.1', resolve));
  t.teardown(() => supervisor.close());
  const attested = await runAttackBattery({
    config,
    logger,
    status,
    host: unsandboxed,
    ownPorts: [(supervisor.address() as net.AddressInfo).port],
    batteryPath: BATTERY,
    uidRange: { first: 3_203_000, count: 8 },
  });
  if (!attested.ok) throw new Error(attested.detail);
  t.same(
    attested.cases.map((c) => c.case),
    [...ATTACK_CASES],
  );
  for (const attestedCase of attested.cases) {
    const expected = NOT_BROKEN_OUTSIDE[attestedCase.case];
    if (expected !== undefined) {
      t.equal(attestedCase.result, expected.result, attestedCase.case);
      t.match(attestedCase.reason, expected.why, `${attestedCase.case}: ${attestedCase.reason}`);
    } else if (attestedCase.result === 'skipped')
      // Only a control that could not succeed on this host may skip a case, and it says so.
      t.match(attestedCase.reason, /control failed outside the sandbox|no control/, `${attestedCase.case} skipped`);
    else t.equal(attestedCase.result, 'broken', `${attestedCase.case}: ${attestedCase.reason}`);
  }
  t.ok(attested.counts.broken >= ATTACK_CASES.length - 8, `most cases broken (${JSON.stringify(attested.counts)})`);

  const applied = applyAttestation(status, attested);
  t.equal(applied.ordinary?.available, false, 'the mode is unavailable');
  t.match(applied.ordinary?.requirement, /the boundary attack case identity\.uid must hold .*uid=0/);
  t.equal(applied.attested, attested, 'the attestation is kept in the status');
});

t.test('the sanitizer build runs both modes clean and refuses bad arguments by name', async (t) => {
  const asan = path.join(REPO_ROOT, 'attack/build/attack-battery-asan');
  const run = (args: string[]): Promise<{ code: number; stdout: string; stderr: string }> =>
    new Promise((resolve) =>
      execFile(asan, args, { maxBuffer: 1024 * 1024 }, (error, stdout, stderr) =>
        resolve({ code: error ? ((error as { code?: number }).code ?? -1) : 0, stdout, stderr }),
      ),
    );
  const facts = ['pids=8', 'memory=16777216', 'tmp-size=1048576', `tmp-dir=${base}`, 'hidden=/etc', 'host-pid=1'];
  for (const mode of ['control', 'attack']) {
    const answer = await run([mode, ...facts]);
    t.equal(answer.code, 0, `${mode}: exit 0`);
    t.notMatch(answer.stderr, /Sanitizer|runtime error/, `${mode}: no sanitizer report`);
    t.equal(
      answer.stdout.trim().split('\n').length,
      ATTACK_CASES.length + (mode === 'attack' ? 1 : 0),
      'a line per case',
    );
  }
  for (const bad of ['bogus=1', 'pids=x', 'pids=-1', 'noequals']) {
    const answer = await run(['attack', bad]);
    t.equal(answer.code, 2, bad);
    t.match(answer.stderr, new RegExp(`argument ${bad.split('=')[0]}`), `${bad}: the argument is named`);
    t.equal(answer.stdout, '', `${bad}: no case ran`);
  }
});

t.test('a tmp_size the memory limit reaches first is not attacked, and says why', async (t) => {
  const { logger } = createMemoryLogger('debug');
  const small: WorkerHostStatus = {
    ...status,
    limits: {
      enforced: status.limits.enforced.map((limit) =>
        limit.limit === 'memory' ? { ...limit, value: 64 * 1024 * 1024 } : limit,
      ),
      absent: [],
    },
  };
  const attested = await runAttackBattery({
    config,
    logger,
    status: small,
    host: unsandboxed,
    ownPorts: [],
    batteryPath: BATTERY,
  });
  if (!attested.ok) throw new Error(attested.detail);
  const tmp = attested.cases.find((c) => c.case === 'limits.tmp_size');
  t.equal(tmp?.result, 'skipped');
  t.match(
    tmp?.reason,
    /tmp_size \(4194304 bytes\) is not below the memory limit \(67108864 bytes\): memory bounds \/tmp first/,
  );
});
