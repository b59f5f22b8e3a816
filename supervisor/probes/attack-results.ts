/**
 * The attack battery's output (attack/src/main.c), read strictly: one JSON object per line with
 * exactly `case`, `result` (or `control`) and `evidence`, every case of ATTACK_CASES once (the
 * case that may end the turn also once as `pending`), nothing else. Anything else is the
 * battery's failure, never a held case. A case is the pair of its attack inside the turn and
 * its control outside: a control that did not succeed makes the case `skipped` with the
 * control's evidence as the reason, so a case cannot pass by being broken itself.
 */
import { fail, ok, type Result } from '../../core/result.js';
import type { WorkerMode } from '../../core/modes.js';
import type { AttackResult, AttestedCase } from './types.js';

/** Every case the battery runs, in its order (docs/probes.md, "Attack battery"). */
export const ATTACK_CASES = [
  'identity.uid',
  'identity.groups',
  'identity.capabilities',
  'identity.no_new_privs',
  'identity.setuid',
  'seccomp.ptrace',
  'seccomp.mount',
  'seccomp.fsopen',
  'seccomp.open_tree',
  'seccomp.unshare_user',
  'seccomp.clone_newnet',
  'seccomp.keyctl',
  'seccomp.bpf',
  'seccomp.io_uring_setup',
  'seccomp.tiocsti',
  'seccomp.tiocsti_high',
  'seccomp.x32_entry',
  'seccomp.i386_entry',
  'view.host_write',
  'view.hidden_state',
  'view.tmp_private',
  'view.shm_private',
  'view.hidepid',
  'view.protected',
  'view.sys_read_only',
  'processes.host_invisible',
  'processes.signal_host',
  'processes.worker_memory',
  'network.only_lo',
  'network.host_loopback_tcp',
  'network.host_unix_socket',
  'network.host_abstract_socket',
  'network.denied_host',
  'network.supervisor_ports',
  'limits.pids',
  'limits.tmp_size',
  'workspaces.other_workspace',
  'workspaces.byte_cap',
  'limits.memory',
] as const;

/** The case whose attempt may end the whole turn (the cgroup's OOM group kill). */
const ENDS_TURN = 'limits.memory';

type Verdict = 'held' | 'broken' | 'skipped';
type ControlVerdict = 'ok' | 'failed' | 'skipped';

interface Line<V> {
  value: V;
  evidence: string;
}

export type BatteryLines<V> = Map<string, Line<V>>;

const RESULT_VALUES: readonly string[] = ['held', 'broken', 'skipped'];
const CONTROL_VALUES: readonly string[] = ['ok', 'failed', 'skipped'];
const KNOWN = new Set<string>(ATTACK_CASES);

function parseLine(
  text: string,
  key: 'result' | 'control',
): Result<{ name: string; value: string; evidence: string }, 'invalid_battery_output'> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return fail('invalid_battery_output', 'not JSON');
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    return fail('invalid_battery_output', 'not a JSON object');
  const record = parsed as Record<string, unknown>;
  const keys = Object.keys(record).sort();
  const expected = ['case', 'evidence', key].sort();
  if (keys.join(',') !== expected.join(','))
    return fail('invalid_battery_output', `keys ${keys.join(',')}, expected ${expected.join(',')}`);
  const { case: name, evidence } = record;
  const value = record[key];
  if (typeof name !== 'string' || typeof evidence !== 'string' || typeof value !== 'string')
    return fail('invalid_battery_output', 'case, evidence and verdict must be strings');
  if (!KNOWN.has(name)) return fail('invalid_battery_output', `unknown case ${JSON.stringify(name)}`);
  return ok({ name, value, evidence });
}

/**
 * The lines of one run. `attack` output may end early (the turn killed for memory): a case
 * without a line is then absent from the map and `pairCases` decides; `control` output must be
 * whole.
 */
export function parseBatteryOutput<K extends 'result' | 'control'>(
  output: string,
  key: K,
): Result<
  { lines: BatteryLines<K extends 'result' ? Verdict | 'pending' : ControlVerdict> },
  'invalid_battery_output'
> {
  type V = K extends 'result' ? Verdict | 'pending' : ControlVerdict;
  const lines: BatteryLines<V> = new Map();
  const allowed = key === 'result' ? RESULT_VALUES : CONTROL_VALUES;
  const texts = output.split('\n');
  if (texts.at(-1) === '') texts.pop();
  for (const [index, text] of texts.entries()) {
    const line = parseLine(text, key);
    if (!line.ok) return fail(line.reason, `battery ${key} line ${index + 1}: ${line.detail}`);
    const { name, value, evidence } = line;
    const pending = key === 'result' && name === ENDS_TURN && value === 'pending' && !lines.has(name);
    if (!pending && !allowed.includes(value))
      return fail(
        'invalid_battery_output',
        `battery ${key} line ${index + 1}: ${name}: verdict ${JSON.stringify(value)}`,
      );
    const previous = lines.get(name);
    if (previous !== undefined && !(previous.value === 'pending' && !pending))
      return fail('invalid_battery_output', `battery ${key} line ${index + 1}: ${name} reported twice`);
    lines.set(name, { value: value as V, evidence });
  }
  if (key === 'control')
    for (const name of ATTACK_CASES)
      if (!lines.has(name)) return fail('invalid_battery_output', `battery control: no line for ${name}`);
  return ok({ lines });
}

/** How the attack turn ended, for the case that may end it. */
export interface AttackTurnEnd {
  status: string;
  /** The turn's cgroup OOM-killed it (status oom_killed, or a memory_oom limit hit). */
  endedByMemory: boolean;
}

function attackVerdict(
  name: string,
  line: Line<Verdict | 'pending'> | undefined,
  end: AttackTurnEnd,
): { result: AttackResult; reason: string } {
  if (line === undefined)
    return { result: 'broken', reason: `the battery printed no result for ${name} (turn ${end.status})` };
  if (line.value !== 'pending') return { result: line.value, reason: line.evidence };
  if (end.endedByMemory)
    return { result: 'held', reason: 'the memory limit ended the turn (OOM kill) before the allocation completed' };
  return { result: 'broken', reason: `the turn ended (${end.status}) before ${name} reported` };
}

/** Every case of one mode's run: the attack's verdict, unless its control did not succeed. */
export function pairCases(
  attack: BatteryLines<Verdict | 'pending'>,
  control: BatteryLines<ControlVerdict>,
  end: AttackTurnEnd,
  mode: WorkerMode,
  checkedAt: string,
): AttestedCase[] {
  return ATTACK_CASES.map((name) => {
    const controlLine = control.get(name)!;
    if (controlLine.value !== 'ok') {
      const why = controlLine.value === 'failed' ? 'the control failed outside the sandbox' : 'no control';
      return { case: name, mode, result: 'skipped', reason: `${why}: ${controlLine.evidence}`, checkedAt };
    }
    const { result, reason } = attackVerdict(name, attack.get(name), end);
    return { case: name, mode, result, reason, checkedAt };
  });
}

export interface AttackCounts {
  held: number;
  broken: number;
  skipped: number;
}

export function countCases(cases: readonly AttestedCase[]): AttackCounts {
  const counts: AttackCounts = { held: 0, broken: 0, skipped: 0 };
  for (const attested of cases) counts[attested.result] += 1;
  return counts;
}

/** The requirement a broken case puts on its mode: the first broken case, named, with its evidence. */
export function attackRequirement(cases: readonly AttestedCase[], mode: WorkerMode): string | undefined {
  const broken = cases.find((attested) => attested.mode === mode && attested.result === 'broken');
  if (broken === undefined) return undefined;
  return `the boundary attack case ${broken.case} must hold (turnhost check --attack): it was broken: ${broken.reason}`;
}
