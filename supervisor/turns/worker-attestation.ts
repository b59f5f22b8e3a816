/**
 * The per-turn check of the live worker, made when a turn claims it and before the launch
 * message is sent: the supervisor reads the worker's credentials, namespaces and cgroup
 * membership from /proc and the turn leaf itself, so nothing the worker says is trusted. A
 * prepared worker booted earlier is used only if this check passes now (docs/probes.md).
 *
 * The process the supervisor started is the helper's monitor; beneath it are the turn's init
 * (pid 1 of the turn's pid namespace) and the worker (pid 2). Before the launch message nothing
 * else may be in the turn's cgroup. /proc/<pid>/status, /proc/<pid>/net/dev and cgroup.procs
 * are readable by any uid, so a non-root supervisor attests a worker of another uid just as well.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { IdentityMode } from '../../core/modes.js';
import { fail, ok, type Result } from '../../core/result.js';

export interface AttestationExpectation {
  /** The process this supervisor started: the helper's monitor. */
  monitorPid: number;
  identity: IdentityMode;
  /** The worker uid the helper reported (separate_uid) or the supervisor's own (shared_uid). */
  uid: number;
  gid: number;
  /** The caller's groups stay in a user namespace (the kernel refuses setgroups there). */
  groupsMayStay: boolean;
  /** The turn cgroup leaves the worker must be in (one per v1 hierarchy, one for v2). */
  cgroupPaths: readonly string[];
  /** Default /proc; tests point it at constructed trees. */
  procRoot?: string;
}

type AttestationResult = Result<{ workerPid: number }, 'worker_attestation_failed'>;

const refused = (detail: string): Result<never, 'worker_attestation_failed'> =>
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
/** NSpid lists the pid in every namespace from the reader's down: pid `inner` in a namespace of its own. */
const nestedPid =
  (inner: number) =>
  (value: string): boolean => {
    const pids = value.split(/\s+/);
    return pids.length >= 2 && pids[pids.length - 1] === String(inner);
  };

/**
 * What every worker must show, in both identity modes: its identity, no capability in any
 * set, no_new_privs, the seccomp filter, pid 2 of a pid namespace of its own, and no
 * supplementary groups unless it lives in a user namespace.
 */
export function checkStatusFields(
  fields: Map<string, string>,
  expect: Pick<AttestationExpectation, 'uid' | 'gid' | 'groupsMayStay'>,
): string | null {
  const checks: Array<[string, (value: string) => boolean, string]> = [
    ['Uid', allIds(expect.uid), `${expect.uid} for real, effective, saved and fs uid`],
    ['Gid', allIds(expect.gid), `${expect.gid} for real, effective, saved and fs gid`],
    ['CapEff', isZeroMask, 'no effective capabilities'],
    ['CapPrm', isZeroMask, 'no permitted capabilities'],
    ['CapBnd', isZeroMask, 'an empty bounding set'],
    ['NoNewPrivs', (v) => v === '1', '1'],
    ['Seccomp', (v) => v === '2', '2 (filter mode)'],
    ['NSpid', nestedPid(2), 'pid 2 of a pid namespace of its own'],
  ];
  if (!expect.groupsMayStay) checks.push(['Groups', (v) => v === '', 'no supplementary groups']);
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
    return refused(`cannot read ${file}: ${(error as Error).message}`);
  }
}

function cgroupMembers(leaf: string): Result<{ pids: number[] }, 'worker_attestation_failed'> {
  const procs = readText(path.join(leaf, 'cgroup.procs'));
  if (!procs.ok) return procs;
  return ok({ pids: procs.text.split('\n').filter(Boolean).map(Number) });
}

function statusOf(procRoot: string, pid: number): Result<{ fields: Map<string, string> }, 'worker_attestation_failed'> {
  const status = readText(path.join(procRoot, String(pid), 'status'));
  return status.ok ? ok({ fields: parseStatusFields(status.text) }) : status;
}

/** The children of `pid` (its main thread's), from /proc. */
function childrenOf(procRoot: string, pid: number): Result<{ pids: number[] }, 'worker_attestation_failed'> {
  const children = readText(path.join(procRoot, String(pid), 'task', String(pid), 'children'));
  if (!children.ok) return children;
  return ok({ pids: children.text.split(/\s+/).filter(Boolean).map(Number) });
}

/** The one child of `pid`, or why there is not exactly one. */
function onlyChild(procRoot: string, pid: number, what: string): Result<{ pid: number }, 'worker_attestation_failed'> {
  const children = childrenOf(procRoot, pid);
  if (!children.ok) return children;
  const [child, ...more] = children.pids;
  if (child === undefined || more.length > 0) return refused(`${what} has ${children.pids.length} children, not one`);
  return ok({ pid: child });
}

/**
 * The worker beneath the monitor: the monitor's only child is the turn's init (pid 1 of the
 * namespace), init's only child is the worker; every leaf holds exactly these three.
 */
function findWorker(
  expect: AttestationExpectation,
  procRoot: string,
): Result<{ initPid: number; workerPid: number }, 'worker_attestation_failed'> {
  if (expect.cgroupPaths.length === 0) return refused('the turn has no cgroup leaf');
  const init = onlyChild(procRoot, expect.monitorPid, 'the monitor');
  if (!init.ok) return init;
  const worker = onlyChild(procRoot, init.pid, "the turn's init");
  if (!worker.ok) return worker;
  const expected = [expect.monitorPid, init.pid, worker.pid];
  for (const leaf of expect.cgroupPaths) {
    const members = cgroupMembers(leaf);
    if (!members.ok) return members;
    const missing = expected.find((pid) => !members.pids.includes(pid));
    if (missing !== undefined) return refused(`pid ${missing} is not in ${leaf}`);
    if (members.pids.length !== expected.length) {
      return refused(
        `${leaf} holds ${members.pids.length} processes before the launch, not the monitor, init and worker`,
      );
    }
  }
  return ok({ initPid: init.pid, workerPid: worker.pid });
}

export function attestWorker(expect: AttestationExpectation): AttestationResult {
  const procRoot = expect.procRoot ?? '/proc';
  const found = findWorker(expect, procRoot);
  if (!found.ok) return found;
  const init = statusOf(procRoot, found.initPid);
  if (!init.ok) return init;
  const initProblem =
    expectField(init.fields, 'NSpid', nestedPid(1), 'pid 1 of the turn namespace') ??
    expectField(init.fields, 'Uid', allIds(expect.uid), `${expect.uid} for every uid`) ??
    expectField(init.fields, 'CapEff', isZeroMask, 'no effective capabilities');
  if (initProblem !== null) return refused(`the turn's init: ${initProblem}`);
  const worker = statusOf(procRoot, found.workerPid);
  if (!worker.ok) return worker;
  const problem = checkStatusFields(worker.fields, expect);
  if (problem !== null) return refused(problem);
  const netDev = readText(path.join(procRoot, String(found.workerPid), 'net', 'dev'));
  if (!netDev.ok) return netDev;
  const interfaces = netDevInterfaces(netDev.text);
  if (interfaces.length !== 1 || interfaces[0] !== 'lo')
    return refused(`the worker's network namespace has ${interfaces.join(', ') || 'no interfaces'}, expected only lo`);
  return ok({ workerPid: found.workerPid });
}
