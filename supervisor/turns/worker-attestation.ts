/**
 * The per-turn check of the live worker process, made when a turn claims it and before the
 * launch message is sent: the supervisor reads the worker's credentials, namespaces and cgroup
 * membership from /proc and the turn leaf itself, so nothing the worker says is trusted. A
 * prepared worker booted earlier is used only if this check passes now (docs/probes.md).
 *
 * /proc/<pid>/status, /proc/<pid>/net/dev and cgroup.procs are readable by any uid, so a
 * non-root supervisor attests a worker of another uid just as well.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fail, ok, type Result } from '../../core/result.js';
import type { IdentityMode } from '../../core/modes.js';

export interface AttestationExpectation {
  pid: number;
  identity: IdentityMode;
  /** The worker uid the launch asked for (separate_uid) or the supervisor's own (shared_uid). */
  uid: number;
  /** separate_uid only: the worker gid. */
  gid: number;
  /** The turn cgroup leaves the worker must be in (one per v1 hierarchy, one for v2). */
  cgroupPaths: readonly string[];
  /** Default /proc; tests point it at constructed trees. */
  procRoot?: string;
}

type AttestationResult = Result<{}, 'worker_attestation_failed'>;

const refused = (detail: string): AttestationResult =>
  fail('worker_attestation_failed', `worker attestation: ${detail}`);

/** The `Name:\tvalue` lines of /proc/<pid>/status. */
export function parseStatusFields(text: string): Map<string, string> {
  const fields = new Map<string, string>();
  for (const line of text.split('\n')) {
    const colon = line.indexOf(':');
    if (colon > 0) fields.set(line.slice(0, colon), line.slice(colon + 1).trim());
  }
  return fields;
}

function expectField(
  fields: Map<string, string>,
  name: string,
  accepts: (value: string) => boolean,
  wanted: string,
): string | null {
  const value = fields.get(name);
  if (value === undefined) return `${name} is missing from the worker's status`;
  return accepts(value) ? null : `${name} is "${value}", expected ${wanted}`;
}

const allIds =
  (expected: number) =>
  (value: string): boolean => {
    const ids = value.split(/\s+/);
    return ids.length === 4 && ids.every((id) => id === String(expected));
  };
const isZeroMask = (value: string): boolean => /^0+$/.test(value);

/** What every worker must show, and what separate_uid adds: its own identity, no groups, no capabilities. */
export function checkStatusFields(
  fields: Map<string, string>,
  expect: Pick<AttestationExpectation, 'identity' | 'uid' | 'gid'>,
): string | null {
  const checks: Array<[string, (value: string) => boolean, string]> = [
    ['Uid', allIds(expect.uid), `${expect.uid} for real, effective, saved and fs uid`],
    ['NoNewPrivs', (v) => v === '1', '1'],
    ['Seccomp', (v) => v === '2', '2 (filter mode)'],
  ];
  if (expect.identity === 'separate_uid') {
    checks.push(
      ['Gid', allIds(expect.gid), `${expect.gid} for real, effective, saved and fs gid`],
      ['Groups', (v) => v === '', 'no supplementary groups'],
      ['CapEff', isZeroMask, 'no effective capabilities'],
      ['CapBnd', isZeroMask, 'an empty bounding set'],
    );
  }
  for (const [name, accepts, wanted] of checks) {
    const problem = expectField(fields, name, accepts, wanted);
    if (problem !== null) return problem;
  }
  return null;
}

/** Interface names from /proc/<pid>/net/dev (two header lines, then `name: counters`). */
export function netDevInterfaces(text: string): string[] {
  return text
    .split('\n')
    .slice(2)
    .map((line) => line.split(':')[0]?.trim() ?? '')
    .filter((name) => name !== '');
}

function readText(file: string): Result<{ text: string }, 'worker_attestation_failed'> {
  try {
    return ok({ text: fs.readFileSync(file, 'utf8') });
  } catch (error) {
    return fail('worker_attestation_failed', `worker attestation: cannot read ${file}: ${(error as Error).message}`);
  }
}

function checkCgroupMembership(pid: number, cgroupPaths: readonly string[]): AttestationResult {
  if (cgroupPaths.length === 0) return refused('the turn has no cgroup leaf');
  for (const leaf of cgroupPaths) {
    const procs = readText(path.join(leaf, 'cgroup.procs'));
    if (!procs.ok) return fail(procs.reason, procs.detail);
    if (!procs.text.split('\n').includes(String(pid))) return refused(`pid ${pid} is not in ${leaf}`);
  }
  return ok({});
}

export function attestWorker(expect: AttestationExpectation): AttestationResult {
  const procDir = path.join(expect.procRoot ?? '/proc', String(expect.pid));
  const status = readText(path.join(procDir, 'status'));
  if (!status.ok) return fail(status.reason, status.detail);
  const problem = checkStatusFields(parseStatusFields(status.text), expect);
  if (problem !== null) return refused(problem);
  const netDev = readText(path.join(procDir, 'net', 'dev'));
  if (!netDev.ok) return fail(netDev.reason, netDev.detail);
  const interfaces = netDevInterfaces(netDev.text);
  if (interfaces.length !== 1 || interfaces[0] !== 'lo')
    return refused(`the worker's network namespace has ${interfaces.join(', ') || 'no interfaces'}, expected only lo`);
  return checkCgroupMembership(expect.pid, expect.cgroupPaths);
}
