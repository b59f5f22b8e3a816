/**
 * The attack probe: the boundary proven on this host by attacking it. The battery
 * (attack/build/attack-battery, a static C program) runs as the command of a real turn in each
 * available mode, through the normal launch path, with the live configuration and small limits
 * of its own; the same program runs outside the sandbox as this process's child for the
 * controls. `attack-results.ts` pairs the two; a broken case makes its mode unavailable, naming
 * the case (`applyAttestation`). The probes sit below the turn manager, so the launch is a
 * callback the daemon wires (`AttackHost`).
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import type { EventInput } from '../../core/events.js';
import type { Logger } from '../../core/log.js';
import type { WorkerMode } from '../../core/modes.js';
import { fail, ok, type Result } from '../../core/result.js';
import type { TurnhostConfig } from '../config/types.js';
import { packageRoot } from '../software.js';
import { supervisorStatePaths } from '../view/descriptor.js';
import { AttackFixtures } from './attack-fixtures.js';
import { attackRequirement, countCases, pairCases, parseBatteryOutput, type AttackTurnEnd } from './attack-results.js';
import type { AttestedCase, BoundaryAttestation, WorkerHostStatus } from './types.js';

/** The limits of the attack turn: small enough that the limit cases hit them quickly. */
const ATTACK_LIMITS = { pids: 64, memory: 256 * 1024 * 1024 } as const;
/** What the worker and the battery need besides a full /tmp under the turn's memory limit. */
const TMP_MEMORY_MARGIN = 128 * 1024 * 1024;
const ATTACK_TIMEOUT_SECONDS = 60;
const CONTROL_TIMEOUT_MS = 60_000;
const CONTROL_MAX_BUFFER = 1024 * 1024;
/** Refused by the proxy whatever the allowlist says when no denylist entry names a host. */
const FALLBACK_DENIED_HOST = 'turnhost-attack.invalid';

function defaultBatteryPath(): string {
  return path.join(packageRoot(), 'attack/build/attack-battery');
}

export interface AttackTurnRequest {
  mode: WorkerMode;
  argv: string[];
  /** A plain turn's absolute cwd, or the workspace the turn runs in. */
  place: { cwd: string } | { workspace: string };
  /** Lowered for the attack turn: the limit cases hit them quickly (tmp_size is the configuration's own). */
  limits: { pids: number; memory: number };
  timeoutSeconds: number;
}

export interface AttackTurnRun extends AttackTurnEnd {
  stdout: string;
  stderr: string;
  detail?: string;
}

export interface AttackWorkspace {
  id: string;
  /** The workspace's directory on the host. */
  dir: string;
}

/** What the daemon lends the probe: the turn manager's launch, and workspaces when configured. */
export interface AttackHost {
  runTurn(request: AttackTurnRequest): Promise<Result<AttackTurnRun>>;
  workspaces?: {
    create(): Promise<Result<AttackWorkspace>>;
    remove(id: string): Promise<void>;
  };
}

export interface AttackOptions {
  config: TurnhostConfig;
  logger: Logger;
  /** The status the attack is tied to: its available modes are attacked, its identity reported. */
  status: WorkerHostStatus;
  host: AttackHost;
  /** The supervisor's own TCP ports, which no turn may reach. */
  ownPorts: readonly number[];
  batteryPath?: string;
  /** The verified worker uid range (separate_uid), for the uid case. */
  uidRange?: { first: number; count: number };
}

export type AttackFailure = 'battery_missing' | 'invalid_battery_output' | 'attack_failed';

/** Where the turn runs and what it may read of another workspace. */
interface AttackPlace {
  place: AttackTurnRequest['place'];
  /** A directory the turn sees (its workspace or cwd): the setuid copy goes there. */
  dir: string;
  otherWorkspaceFile?: string;
  cleanup: () => Promise<void>;
}

/** Facts the supervisor withholds on purpose, each with the reason the case is skipped. */
type Withheld = Map<string, string>;

function uidArguments(options: AttackOptions): string[] {
  const { status, uidRange } = options;
  if (status.identity === 'separate_uid' && uidRange !== undefined)
    return [`uid-first=${uidRange.first}`, `uid-count=${uidRange.count}`];
  if (status.identity === 'shared_uid' && status.workerUid !== undefined)
    return [`uid-first=${status.workerUid}`, 'uid-count=1'];
  return [];
}

function existingHiddenState(config: TurnhostConfig): string[] {
  return supervisorStatePaths(config)
    .filter((entry) => fs.existsSync(entry))
    .slice(0, 8);
}

function protectedArguments(config: TurnhostConfig): string[] {
  for (const rule of config.fs.protectedPaths) {
    const full = path.join(rule.root, rule.path);
    if (fs.existsSync(full)) return [`protected=${full}`, `protected-mode=${rule.mode}`];
  }
  return [];
}

function deniedHost(config: TurnhostConfig): string {
  const plain = config.egress.denylist.find((entry) => /^[a-z0-9.-]+$/i.test(entry) && !entry.startsWith('*'));
  return plain ?? FALLBACK_DENIED_HOST;
}

/**
 * The attack turn's limits: ATTACK_LIMITS, raised past a full /tmp (its pages are charged to
 * the turn's memory, so a smaller limit would end the turn in the tmp_size case), and lowered
 * to what the configuration enforces (a turn may only lower a limit).
 */
function attackLimits(status: WorkerHostStatus): AttackTurnRequest['limits'] {
  const enforced = (name: string): number | undefined =>
    status.limits.enforced.find((entry) => entry.limit === name)?.value;
  const tmpSize = enforced('tmp_size') ?? 0;
  const limits: AttackTurnRequest['limits'] = {
    pids: ATTACK_LIMITS.pids,
    memory: Math.max(ATTACK_LIMITS.memory, tmpSize + TMP_MEMORY_MARGIN),
  };
  for (const name of ['pids', 'memory'] as const) limits[name] = Math.min(limits[name], enforced(name) ?? Infinity);
  return limits;
}

/** The limit cases get their limit only where status says it is enforced. */
function limitArguments(status: WorkerHostStatus, withheld: Withheld): string[] {
  const args: string[] = [];
  const tmpSize = status.limits.enforced.find((entry) => entry.limit === 'tmp_size')?.value;
  const limits = { ...attackLimits(status), ...(tmpSize === undefined ? {} : { tmp_size: tmpSize }) };
  const names = [
    ['pids', 'pids', 'limits.pids'],
    ['memory', 'memory', 'limits.memory'],
    ['tmp_size', 'tmp-size', 'limits.tmp_size'],
  ] as const;
  for (const [limit, key, name] of names) {
    const absent = status.limits.absent.find((entry) => entry.limit === limit);
    const value = limit === 'tmp_size' ? limits.tmp_size : limits[limit];
    const tmpBoundByMemory = limit === 'tmp_size' && value !== undefined && value + TMP_MEMORY_MARGIN > limits.memory;
    if (absent !== undefined) withheld.set(name, `status reports the ${limit} limit absent: ${absent.reason}`);
    else if (tmpBoundByMemory)
      withheld.set(
        name,
        `tmp_size (${value} bytes) is not below the memory limit (${limits.memory} bytes): memory bounds /tmp first`,
      );
    else if (value === undefined) withheld.set(name, `status reports no ${limit} limit`);
    else args.push(`${key}=${value}`);
  }
  return args;
}

function batteryArguments(
  options: AttackOptions,
  fixtures: AttackFixtures,
  where: AttackPlace,
  withheld: Withheld,
): string[] {
  const { config } = options;
  const battery = options.batteryPath ?? defaultBatteryPath();
  const setuid = fixtures.setuidCopy(battery, where.dir);
  if (setuid === undefined) withheld.set('identity.setuid', 'only a root supervisor can make a setuid-root copy');
  if (where.otherWorkspaceFile === undefined)
    withheld.set('workspaces.other_workspace', 'workspaces are not configured (workspaces.root is null)');
  if (options.ownPorts.length === 0)
    withheld.set('network.supervisor_ports', 'the supervisor has no TCP listener (listen.tcp is null)');
  const protectedArgs = protectedArguments(config);
  if (protectedArgs.length === 0) withheld.set('view.protected', 'no protected path (fs.protectedPaths) exists');
  return [
    ...uidArguments(options),
    'write-target=/etc/passwd',
    ...existingHiddenState(config).map((entry) => `hidden=${entry}`),
    `host-tmp=${fixtures.hostTmpFile}`,
    ...(fixtures.hostShmFile === undefined ? [] : [`host-shm=${fixtures.hostShmFile}`]),
    ...protectedArgs,
    `host-pid=${process.pid}`,
    `tcp-port=${fixtures.tcpPort}`,
    `unix-path=${fixtures.unixPath}`,
    `abstract-name=${fixtures.abstractName}`,
    `denied-host=${deniedHost(config)}`,
    ...options.ownPorts.slice(0, 8).map((port) => `own-port=${port}`),
    ...(setuid === undefined ? [] : [`setuid-probe=${setuid}`]),
    ...limitArguments(options.status, withheld),
    `tmp-dir=${fixtures.dir}`,
    ...(where.otherWorkspaceFile === undefined ? [] : [`other-workspace=${where.otherWorkspaceFile}`]),
    ...workspaceCapArguments(options, where, withheld),
  ];
}

/**
 * The byte cap is attacked by filling the attack turn's workspace past it (and, as the control,
 * the same amount outside), so only a bounded cap small enough to fill in a check is attacked.
 */
const ATTACK_CAP_FILL_MAX_BYTES = 256 * 1024 * 1024;

function workspaceCapArguments(options: AttackOptions, where: AttackPlace, withheld: Withheld): string[] {
  const cap = options.status.workspaceCap;
  const maxBytes = cap?.maxBytes ?? null;
  let reason: string | undefined;
  if (where.otherWorkspaceFile === undefined) reason = 'workspaces are not configured (workspaces.root is null)';
  else if (cap === undefined || maxBytes === null) reason = 'no workspace byte cap is configured (workspaces.maxBytes)';
  else if (!cap.enforced)
    reason = `this host enforces no workspace byte cap during a turn: ${cap.requirement ?? cap.mechanism}`;
  else if (maxBytes > ATTACK_CAP_FILL_MAX_BYTES)
    reason = `the cap (${maxBytes} bytes) is larger than a check fills (${ATTACK_CAP_FILL_MAX_BYTES} bytes)`;
  if (reason !== undefined || maxBytes === null) {
    withheld.set('workspaces.byte_cap', reason ?? 'no workspace byte cap');
    return [];
  }
  return [`workspace-cap=${maxBytes}`];
}

/** The controls: the same battery, outside the sandbox, as this process's child. */
function runControls(battery: string, args: string[]): Promise<Result<{ stdout: string }, 'attack_failed'>> {
  return new Promise((resolve) => {
    execFile(
      battery,
      ['control', ...args],
      { timeout: CONTROL_TIMEOUT_MS, maxBuffer: CONTROL_MAX_BUFFER, env: {} },
      (error, stdout, stderr) => {
        if (error) resolve(fail('attack_failed', `the battery's controls failed: ${error.message} ${stderr}`.trim()));
        else resolve(ok({ stdout }));
      },
    );
  });
}

/** A workspace turn with a second workspace to aim at when workspaces exist, else a plain cwd. */
async function attackPlace(options: AttackOptions, fixtures: AttackFixtures): Promise<Result<AttackPlace>> {
  const spaces = options.host.workspaces;
  if (spaces === undefined) {
    const root = options.config.turns.workspaceRoots[0];
    if (root === undefined)
      return fail('attack_failed', 'no workspace root (turns.workspaceRoots) to run the attack in');
    const dir = fixtures.plainCwd(root);
    return ok({ place: { cwd: dir }, dir, cleanup: () => Promise.resolve() });
  }
  const own = await spaces.create();
  if (!own.ok) return own;
  const other = await spaces.create();
  if (!other.ok) {
    await spaces.remove(own.id);
    return other;
  }
  const otherWorkspaceFile = path.join(other.dir, 'attack-secret');
  fs.writeFileSync(otherWorkspaceFile, 'another workspace\n', { mode: 0o644 });
  return ok({
    place: { workspace: own.id },
    dir: own.dir,
    otherWorkspaceFile,
    cleanup: async () => {
      await spaces.remove(own.id);
      await spaces.remove(other.id);
    },
  });
}

function applyWithheld(cases: AttestedCase[], withheld: Withheld): AttestedCase[] {
  return cases.map((attested) => {
    const reason = withheld.get(attested.case);
    return reason !== undefined && attested.result === 'skipped' ? { ...attested, reason } : attested;
  });
}

async function attackMode(
  options: AttackOptions,
  mode: WorkerMode,
  fixtures: AttackFixtures,
  checkedAt: string,
): Promise<Result<{ cases: AttestedCase[] }, AttackFailure>> {
  const battery = options.batteryPath ?? defaultBatteryPath();
  const where = await attackPlace(options, fixtures);
  if (!where.ok) return fail('attack_failed', where.detail);
  try {
    const withheld: Withheld = new Map();
    const args = batteryArguments(options, fixtures, where, withheld);
    const controls = await runControls(battery, args);
    if (!controls.ok) return controls;
    const run = await options.host.runTurn({
      mode,
      argv: [fixtures.visibleCopy(battery, where.dir), 'attack', ...args],
      place: where.place,
      limits: attackLimits(options.status),
      timeoutSeconds: ATTACK_TIMEOUT_SECONDS,
    });
    if (!run.ok) return fail('attack_failed', `the ${mode} attack turn did not run: ${run.detail}`);
    const attack = parseBatteryOutput(run.stdout, 'result');
    if (!attack.ok)
      return fail(attack.reason, `${attack.detail} (turn ${run.status}; stderr: ${run.stderr.slice(0, 500)})`);
    const control = parseBatteryOutput(controls.stdout, 'control');
    if (!control.ok) return control;
    return ok({ cases: applyWithheld(pairCases(attack.lines, control.lines, run, mode, checkedAt), withheld) });
  } finally {
    await where.cleanup();
  }
}

/** The modes the status offers now: only those are attacked (an unavailable mode runs nothing). */
function availableModes(status: WorkerHostStatus): WorkerMode[] {
  return (['ordinary', 'restricted'] as const).filter((mode) => status[mode]?.available === true);
}

/** Runs the battery in every available mode and answers the attestation. */
export async function runAttackBattery(options: AttackOptions): Promise<Result<BoundaryAttestation, AttackFailure>> {
  const battery = options.batteryPath ?? defaultBatteryPath();
  if (!fs.existsSync(battery))
    return fail('battery_missing', `the attack battery ${battery} is missing (make -C attack)`);
  const checkedAt = new Date().toISOString();
  const fixtures = await AttackFixtures.create();
  try {
    const cases: AttestedCase[] = [];
    for (const mode of availableModes(options.status)) {
      const attacked = await attackMode(options, mode, fixtures, checkedAt);
      if (!attacked.ok) return attacked;
      cases.push(...attacked.cases);
    }
    const counts = countCases(cases);
    options.logger.info('boundary attested', { ...counts });
    return ok({
      checkedAt,
      ...(options.status.identity === undefined ? {} : { identity: options.status.identity }),
      cases,
      counts,
    });
  } finally {
    await fixtures.remove();
  }
}

/** The status with the attestation kept, and each mode with a broken case made unavailable. */
export function applyAttestation(status: WorkerHostStatus, attested: BoundaryAttestation): WorkerHostStatus {
  const next: WorkerHostStatus = { ...status, attested };
  for (const mode of ['ordinary', 'restricted'] as const) {
    const availability = status[mode];
    const requirement = attackRequirement(attested.cases, mode);
    if (availability !== undefined && requirement !== undefined)
      next[mode] = { ...availability, available: false, requirement };
  }
  return next;
}

export type AttackTrigger = 'boot' | 'check' | 'schedule';

/** The `boundary_attested` event of one run: the counts, and the broken cases by name. */
export function attestationEvent(attested: BoundaryAttestation, trigger: AttackTrigger): EventInput {
  const brokenCases = [
    ...new Set(attested.cases.filter((c) => c.result === 'broken').map((c) => `${c.mode}:${c.case}`)),
  ];
  return {
    sessionId: null,
    turnId: null,
    kind: 'boundary_attested',
    actor: 'server',
    model: null,
    profile: null,
    payload: { ...attested.counts, brokenCases, trigger },
  };
}
