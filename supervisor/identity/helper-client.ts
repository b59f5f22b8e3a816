/**
 * Client of the identity helper (identity-helper/, protocol in docs/identity-helper-protocol.md).
 * `encodeDescriptor` refuses everything the helper would refuse on syntax, naming the field;
 * the helper stays the authority on policy (uid range, cgroup roots, caller group).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import type net from 'node:net';
import { CodedError, fail, ok, type Fail, type Result } from '../../core/result.js';

export const DESCRIPTOR_PROTOCOL_VERSION = 2;
export const DESCRIPTOR_LIMITS = {
  maxBytes: 65536,
  maxLineBytes: 4095,
  maxCgroups: 8,
  maxEnv: 256,
  maxPaths: 64,
  maxProtect: 64,
  maxHide: 32,
  minTmpSize: 1 << 20,
  maxTmpSize: 2 ** 40,
  maxHostname: 64,
  maxId: 4294967294,
  maxRlimitExclusive: 10n ** 18n,
} as const;

export type HelperOp = 'probe' | 'launch' | 'view' | 'kill' | 'lease' | 'release' | 'usage';
export type HelperRlimitName = 'nproc' | 'data' | 'fsize' | 'nofile';
export type HelperProfile = 'governed' | 'strict';
export type HelperProtectMode = 'read_only' | 'mask_file' | 'mask_directory';

/** A protected path inside the workspace (docs/filesystem-view.md). */
export interface HelperProtectRule {
  mode: HelperProtectMode;
  /** Relative to the workspace: no leading "/", no empty, "." or ".." components. */
  path: string;
}

export interface HelperDescriptor {
  op: HelperOp;
  uid?: number;
  gid?: number;
  cgroups?: string[];
  rlimits?: Partial<Record<HelperRlimitName, number | bigint>>;
  hostname?: string;
  cwd?: string;
  /** The worker's whole environment: it gets exactly these variables. */
  env?: Record<string, string>;
  paths?: string[];
  profile?: HelperProfile;
  /** The view's workspace root: writable in governed, read-only in strict. */
  workspace?: string;
  /** Bytes of the view's own /tmp (also at /var/tmp) and /dev/shm tmpfs each. */
  tmpSize?: number;
  /** Host paths the view never shows (absolute): an empty mask where the view has them. */
  hide?: string[];
  /** launch: `uid` is where the helper's search for a free uid of the range starts. */
  uidSearch?: boolean;
  protect?: HelperProtectRule[];
  /**
   * A workspace lease id ([A-Za-z0-9_-], 1-64): lease/release/usage name it; a launch with it
   * runs as the uid leased to it (shared with the other turns on that workspace).
   */
  lease?: string;
}

export type HelperLaunchDescriptor = Omit<HelperDescriptor, 'op' | 'paths'> & {
  cwd: string;
  profile: HelperProfile;
  workspace: string;
};

export interface HelperLocation {
  path: string;
  /** Passed as `--config PATH`; the helper honours it only for a real-uid-0 caller, or in shared mode. */
  configPath: string | null;
  /** Shared mode (`--shared`): workers keep the caller's own uid; the helper lends no privilege. */
  shared?: boolean;
}

/** Exit codes of the helper, by stable reason. */
export const HELPER_EXIT_CODES = {
  usage: 64,
  descriptor_malformed: 65,
  descriptor_unknown: 66,
  caller_not_permitted: 67,
  uid_out_of_range: 68,
  cgroup_refused: 69,
  config_invalid: 70,
  namespace_failed: 71,
  identity_drop_failed: 72,
  exec_failed: 73,
  rlimit_refused: 74,
  probe_mismatch: 75,
  internal: 76,
  cwd_unusable: 77,
  view_refused: 78,
  uid_in_use: 80,
  lease_refused: 81,
  workspace_busy: 82,
} as const;

export type HelperRefusalReason = keyof typeof HELPER_EXIT_CODES;
export type HelperFailureReason =
  | HelperRefusalReason
  | 'descriptor_invalid'
  | 'helper_unrunnable'
  | 'helper_signaled'
  | 'helper_exit_unknown'
  | 'helper_output_invalid';

/** Thrown by `encodeDescriptor`: `field` names the descriptor key at fault. */
export class HelperDescriptorError extends CodedError {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super('descriptor_invalid', `${field}: ${message}`);
    this.name = 'HelperDescriptorError';
  }
}

const OP_KEYS: Record<HelperOp, { allowed: ReadonlySet<string>; required: readonly string[] }> = {
  probe: { allowed: new Set(['uid']), required: [] },
  launch: {
    allowed: new Set([
      'uid',
      'gid',
      'cgroups',
      'rlimits',
      'hostname',
      'cwd',
      'env',
      'profile',
      'workspace',
      'tmpSize',
      'protect',
      'hide',
      'uidSearch',
      'lease',
    ]),
    required: ['cwd', 'profile', 'workspace'],
  },
  view: {
    allowed: new Set(['uid', 'paths', 'profile', 'workspace', 'tmpSize', 'protect', 'hide']),
    required: ['profile', 'paths'],
  },
  kill: { allowed: new Set(['uid']), required: ['uid'] },
  lease: { allowed: new Set(['uid', 'uidSearch', 'lease', 'workspace']), required: ['uid', 'lease', 'workspace'] },
  release: { allowed: new Set(['lease', 'workspace']), required: ['lease', 'workspace'] },
  usage: { allowed: new Set(['lease', 'workspace']), required: ['lease', 'workspace'] },
};

/** A workspace lease id, as the helper accepts it. */
export const LEASE_ID = /^[A-Za-z0-9_-]{1,64}$/;

const RLIMIT_NAMES: readonly HelperRlimitName[] = ['nproc', 'data', 'fsize', 'nofile'];
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,254}$/;
const HOSTNAME = /^[A-Za-z0-9.][A-Za-z0-9.-]{0,63}$/;
const CONTROL_CHARS = /[\u0000-\u001f\u007f]/;

function refuse(field: string, message: string): never {
  throw new HelperDescriptorError(field, message);
}

function checkText(field: string, value: string): void {
  if (CONTROL_CHARS.test(value)) refuse(field, 'contains a control character');
}

function checkId(field: string, value: unknown): number {
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 0 || value > DESCRIPTOR_LIMITS.maxId) {
    refuse(field, `must be an integer from 0 to ${DESCRIPTOR_LIMITS.maxId}`);
  }
  return value;
}

export function isCanonicalAbsolutePath(path: string): boolean {
  if (!path.startsWith('/') || Buffer.byteLength(path) >= 4096) return false;
  if (path === '/') return true;
  return path
    .slice(1)
    .split('/')
    .every((component) => component !== '' && component !== '.' && component !== '..');
}

function checkPath(field: string, value: unknown): string {
  if (typeof value !== 'string' || !isCanonicalAbsolutePath(value)) {
    refuse(field, 'must be a canonical absolute path (no empty, "." or ".." components)');
  }
  checkText(field, value);
  return value;
}

/** Canonical and relative: what the helper accepts as a protected path. */
export function isCanonicalRelativePath(path: string): boolean {
  return path !== '' && !path.startsWith('/') && isCanonicalAbsolutePath(`/${path}`);
}

const PROTECT_MODES: readonly HelperProtectMode[] = ['read_only', 'mask_file', 'mask_directory'];

function protectLines(rules: unknown): string[] {
  if (!Array.isArray(rules) || rules.length > DESCRIPTOR_LIMITS.maxProtect) {
    refuse('protect', `must be a list of at most ${DESCRIPTOR_LIMITS.maxProtect} rules`);
  }
  return rules.map((rule: Partial<HelperProtectRule>, index) => {
    const field = `protect[${index}]`;
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- the descriptor is checked whatever its type says
    if (!PROTECT_MODES.includes(rule?.mode as HelperProtectMode))
      refuse(`${field}.mode`, 'must be read_only, mask_file or mask_directory');
    if (typeof rule.path !== 'string' || !isCanonicalRelativePath(rule.path)) {
      refuse(`${field}.path`, 'must be relative to the workspace, with no empty, "." or ".." components');
    }
    checkText(`${field}.path`, rule.path);
    return `protect ${rule.mode} ${rule.path}`;
  });
}

function viewPathLine(key: string, value: unknown): string {
  const checked = checkPath(key, value);
  if (checked === '/') refuse(key, 'must not be /');
  return `${key} ${checked}`;
}

function hideLines(paths: unknown): string[] {
  if (!Array.isArray(paths) || paths.length > DESCRIPTOR_LIMITS.maxHide) {
    refuse('hide', `must be a list of at most ${DESCRIPTOR_LIMITS.maxHide} paths`);
  }
  return paths.map((path, index) => viewPathLine(`hide[${index}]`, path).replace(/^hide\[\d+\]/, 'hide'));
}

function tmpSizeLine(size: unknown): string {
  const { minTmpSize, maxTmpSize } = DESCRIPTOR_LIMITS;
  if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < minTmpSize || size > maxTmpSize) {
    refuse('tmpSize', `must be a whole number of bytes from ${minTmpSize} to ${maxTmpSize}`);
  }
  return `tmp_size ${size}`;
}

function checkPathList(field: string, values: unknown, max: number): string[] {
  if (!Array.isArray(values) || values.length > max) refuse(field, `must be a list of at most ${max} paths`);
  return values.map((value, index) => checkPath(`${field}[${index}]`, value));
}

function rlimitLines(rlimits: HelperDescriptor['rlimits']): string[] {
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- the descriptor is checked whatever its type says
  if (typeof rlimits !== 'object' || rlimits === null) refuse('rlimits', 'must be an object');
  return Object.entries(rlimits).map(([name, value]) => {
    if (!RLIMIT_NAMES.includes(name as HelperRlimitName))
      refuse(`rlimits.${name}`, 'unknown rlimit (nproc, data, fsize, nofile)');
    const isInteger = typeof value === 'bigint' || (typeof value === 'number' && Number.isSafeInteger(value));
    if (!isInteger || BigInt(value) < 0n || BigInt(value) >= DESCRIPTOR_LIMITS.maxRlimitExclusive) {
      refuse(`rlimits.${name}`, 'must be a non-negative integer below 10^18');
    }
    return `rlimit ${name} ${BigInt(value).toString()}`;
  });
}

function envLines(env: HelperDescriptor['env']): string[] {
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- the descriptor is checked whatever its type says
  if (typeof env !== 'object' || env === null) refuse('env', 'must be an object');
  const entries = Object.entries(env);
  if (entries.length > DESCRIPTOR_LIMITS.maxEnv) refuse('env', `at most ${DESCRIPTOR_LIMITS.maxEnv} variables`);
  return entries.map(([name, value]) => {
    if (!ENV_NAME.test(name)) refuse(`env.${name}`, 'name must match [A-Za-z_][A-Za-z0-9_]* (at most 255)');
    if (typeof value !== 'string') refuse(`env.${name}`, 'value must be a string');
    checkText(`env.${name}`, value);
    return `env ${name}=${value}`;
  });
}

function checkOpKeys(d: HelperDescriptor): void {
  const rules = OP_KEYS[d.op];
  // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- the descriptor is checked whatever its type says
  if (rules === undefined) refuse('op', 'must be probe, launch, view, kill, lease, release or usage');
  for (const [key, value] of Object.entries(d)) {
    if (key !== 'op' && value !== undefined && !rules.allowed.has(key)) refuse(key, `not valid for op ${d.op}`);
  }
  for (const key of rules.required) {
    if ((d as unknown as Record<string, unknown>)[key] === undefined) refuse(key, `required for op ${d.op}`);
  }
}

function descriptorLines(d: HelperDescriptor): string[] {
  checkOpKeys(d);
  const lines = [`turnhost-descriptor ${DESCRIPTOR_PROTOCOL_VERSION}`, `op ${d.op}`];
  if (d.uid !== undefined) lines.push(`uid ${checkId('uid', d.uid)}`);
  if (d.gid !== undefined) lines.push(`gid ${checkId('gid', d.gid)}`);
  if (d.op === 'launch' && d.gid !== d.uid) refuse('gid', 'must equal uid');
  if (d.uidSearch === true) {
    if (d.uid === undefined) refuse('uidSearch', 'needs the uid the search starts at');
    lines.push('uid_search yes');
  }
  for (const cgroup of checkPathList('cgroups', d.cgroups ?? [], DESCRIPTOR_LIMITS.maxCgroups))
    lines.push(`cgroup ${cgroup}`);
  if (d.rlimits !== undefined) lines.push(...rlimitLines(d.rlimits));
  if (d.hostname !== undefined) {
    if (typeof d.hostname !== 'string' || !HOSTNAME.test(d.hostname))
      refuse('hostname', '1-64 of [A-Za-z0-9.-], not starting with "-"');
    lines.push(`hostname ${d.hostname}`);
  }
  if (d.cwd !== undefined) lines.push(`cwd ${checkPath('cwd', d.cwd)}`);
  if (d.env !== undefined) lines.push(...envLines(d.env));
  if (d.profile !== undefined) {
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-condition -- the descriptor is checked whatever its type says
    if (d.profile !== 'governed' && d.profile !== 'strict') refuse('profile', 'must be governed or strict');
    lines.push(`profile ${d.profile}`);
  }
  if (d.workspace !== undefined) lines.push(viewPathLine('workspace', d.workspace));
  if (d.lease !== undefined) {
    if (typeof d.lease !== 'string' || !LEASE_ID.test(d.lease)) refuse('lease', '1-64 of [A-Za-z0-9_-]');
    if (d.op === 'launch' && d.uidSearch === true) refuse('uidSearch', 'a leased launch runs as its lease uid');
    lines.push(`lease ${d.lease}`);
  }
  if (d.tmpSize !== undefined) lines.push(tmpSizeLine(d.tmpSize));
  if (d.protect !== undefined) lines.push(...protectLines(d.protect));
  if (d.hide !== undefined) lines.push(...hideLines(d.hide));
  if ((d.protect !== undefined || d.hide !== undefined || d.tmpSize !== undefined) && d.workspace === undefined)
    refuse('workspace', 'required with protect, hide or tmpSize');
  if (d.paths !== undefined) {
    const paths = checkPathList('paths', d.paths, DESCRIPTOR_LIMITS.maxPaths);
    if (paths.length === 0) refuse('paths', 'at least one path');
    lines.push(...paths.map((path) => `path ${path}`));
  }
  lines.push('end');
  return lines;
}

/** The descriptor's bytes; throws HelperDescriptorError naming the field the helper would refuse. */
export function encodeDescriptor(d: HelperDescriptor): Buffer {
  const lines = descriptorLines(d);
  for (const line of lines) {
    if (Buffer.byteLength(line) > DESCRIPTOR_LIMITS.maxLineBytes) {
      refuse(line.slice(0, line.indexOf(' ')), `line longer than ${DESCRIPTOR_LIMITS.maxLineBytes} bytes`);
    }
  }
  const bytes = Buffer.from(lines.join('\n') + '\n', 'utf8');
  if (bytes.length > DESCRIPTOR_LIMITS.maxBytes)
    refuse('descriptor', `larger than ${DESCRIPTOR_LIMITS.maxBytes} bytes`);
  return bytes;
}

const REASON_BY_EXIT_CODE = new Map<number, HelperRefusalReason>(
  Object.entries(HELPER_EXIT_CODES).map(([reason, code]) => [code, reason as HelperRefusalReason]),
);

/**
 * The typed refusal for a helper that exited with `exitCode` and printed `stderr`, or null
 * when the exit code is not one of the helper's (e.g. the worker's own exit after launch).
 */
export function parseHelperRefusal(exitCode: number | null, stderr: string): Fail<HelperFailureReason> | null {
  const reason = exitCode === null ? undefined : REASON_BY_EXIT_CODE.get(exitCode);
  if (reason === undefined) return null;
  const line = stderr.split('\n').find((candidate) => candidate.startsWith('identity-helper: '));
  return fail(reason, line?.slice('identity-helper: '.length) ?? `identity helper exited ${exitCode}`);
}

function helperArgs(helper: HelperLocation): string[] {
  const config = helper.configPath === null ? [] : ['--config', helper.configPath];
  return helper.shared === true ? ['--shared', ...config] : config;
}

function protocolSocket(child: ChildProcess): net.Socket {
  return child.stdio[3] as net.Socket;
}

const MAX_OUTPUT_BYTES = 1 << 20;

interface HelperRun {
  exitCode: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
}

function collect(stream: NodeJS.ReadableStream | null, sink: Buffer[]): void {
  let size = 0;
  stream?.on('data', (chunk: Buffer) => {
    size += chunk.length;
    if (size <= MAX_OUTPUT_BYTES) sink.push(chunk);
  });
}

/** Runs one short-lived helper operation (probe, view, kill) to completion. */
function runHelperOnce(helper: HelperLocation, descriptor: Buffer): Promise<Result<HelperRun, HelperFailureReason>> {
  return new Promise((resolve) => {
    const child = spawn(helper.path, helperArgs(helper), { stdio: ['ignore', 'pipe', 'pipe', 'pipe'], env: {} });
    const stdout: Buffer[] = [];
    const stderr: Buffer[] = [];
    collect(child.stdout, stdout);
    collect(child.stderr, stderr);
    child.on('error', (error) => resolve(fail('helper_unrunnable', `${helper.path}: ${error.message}`)));
    const socket = protocolSocket(child);
    socket.on('error', () => undefined); // the helper may exit before reading: its exit code tells why
    socket.end(descriptor);
    child.on('close', (exitCode, signal) =>
      resolve(
        ok({
          exitCode,
          signal,
          stdout: Buffer.concat(stdout).toString('utf8'),
          stderr: Buffer.concat(stderr).toString('utf8'),
        }),
      ),
    );
  });
}

function outcomeFailure(run: HelperRun): Fail<HelperFailureReason> | null {
  if (run.signal !== null) return fail('helper_signaled', `identity helper killed by ${run.signal}`);
  if (run.exitCode === 0) return null;
  return (
    parseHelperRefusal(run.exitCode, run.stderr) ??
    fail('helper_exit_unknown', `identity helper exited ${run.exitCode}`)
  );
}

/** `key value` lines (value = rest of the line); the first occurrence of a key wins. */
export function parseReceipt(stdout: string): Record<string, string> {
  const receipt: Record<string, string> = {};
  for (const line of stdout.split('\n')) {
    const space = line.indexOf(' ');
    if (space <= 0) continue;
    const key = line.slice(0, space);
    receipt[key] ??= line.slice(space + 1);
  }
  return receipt;
}

async function runOperation(
  helper: HelperLocation,
  descriptor: HelperDescriptor,
): Promise<Result<{ stdout: string }, HelperFailureReason>> {
  let bytes: Buffer;
  try {
    bytes = encodeDescriptor(descriptor);
  } catch (error) {
    if (error instanceof HelperDescriptorError) return fail('descriptor_invalid', error.message);
    throw error;
  }
  const run = await runHelperOnce(helper, bytes);
  if (!run.ok) return run;
  return outcomeFailure(run) ?? ok({ stdout: run.stdout });
}

function decimalField(receipt: Record<string, string>, key: string): number | null {
  const text = receipt[key];
  return text !== undefined && /^(0|[1-9][0-9]{0,9})$/.test(text) ? Number(text) : null;
}

/** A count that may pass 2^32 (bytes), still a safe integer. */
function countField(receipt: Record<string, string>, key: string): number | null {
  const text = receipt[key];
  return text !== undefined && /^(0|[1-9][0-9]{0,14})$/.test(text) ? Number(text) : null;
}

/**
 * The receipt checks, repeated here so a wrong helper cannot claim an identity: every id the
 * worker's, no capability in any set, no_new_privs, no supplementary groups (except in a user
 * namespace, where the kernel keeps the caller's).
 */
function probeMismatch(receipt: Record<string, string>, workerUid: number, workerGid: number): string | null {
  for (const key of ['worker_ruid', 'worker_euid', 'worker_suid']) {
    if (decimalField(receipt, key) !== workerUid) return `${key} is not ${workerUid}`;
  }
  for (const key of ['worker_rgid', 'worker_egid', 'worker_sgid']) {
    if (decimalField(receipt, key) !== workerGid) return `${key} is not ${workerGid}`;
  }
  const expected: Record<string, string> = {
    worker_no_new_privs: '1',
    worker_cap_bnd: '0000000000000000',
    worker_cap_eff: '0000000000000000',
    worker_cap_prm: '0000000000000000',
  };
  if (receipt.user_namespace !== 'yes') expected.worker_groups = '0';
  for (const [key, value] of Object.entries(expected)) {
    if (receipt[key] !== value) return `${key} is ${receipt[key] ?? 'missing'}, must be ${value}`;
  }
  const versions = (receipt.protocol_versions ?? '').split(' ');
  if (!versions.includes(String(DESCRIPTOR_PROTOCOL_VERSION)))
    return `helper does not speak protocol ${DESCRIPTOR_PROTOCOL_VERSION}`;
  return null;
}

export interface HelperProbeReceipt {
  workerUid: number;
  uidRange: { first: number; count: number };
  helperVersion: string;
  receipt: Record<string, string>;
}

/**
 * Proves the helper can switch to a worker identity of its range; the only source of a
 * `separate_uid` claim.
 */
export async function runHelperProbe(
  helper: HelperLocation,
  uid?: number,
): Promise<Result<HelperProbeReceipt, HelperFailureReason>> {
  const run = await runOperation(helper, uid === undefined ? { op: 'probe' } : { op: 'probe', uid });
  if (!run.ok) return run;
  const receipt = parseReceipt(run.stdout);
  const workerUid = decimalField(receipt, 'worker_uid');
  const [first, count] = (receipt.uid_range ?? '').split(' ').map(Number);
  const helperVersion = receipt.helper_version;
  if (
    receipt.identity !== 'separate' ||
    workerUid === null ||
    workerUid === 0 ||
    first === undefined ||
    count === undefined ||
    helperVersion === undefined
  ) {
    return fail(
      'helper_output_invalid',
      'probe receipt lacks identity separate, worker_uid, uid_range or helper_version',
    );
  }
  const mismatch = probeMismatch(receipt, workerUid, workerUid);
  if (mismatch !== null) return fail('probe_mismatch', mismatch);
  return ok({ workerUid, uidRange: { first, count }, helperVersion, receipt });
}

export interface SharedProbeReceipt {
  workerUid: number;
  /** The worker lives in a user namespace of its own (any supervisor but root). */
  userNamespace: boolean;
  helperVersion: string;
  receipt: Record<string, string>;
}

/**
 * Proves the shared-mode launcher can give a worker the supervisor's own uid with no
 * capabilities (in a user namespace unless the supervisor is root): the only source of a
 * `shared_uid` claim.
 */
export async function runSharedProbe(
  launcher: HelperLocation,
): Promise<Result<SharedProbeReceipt, HelperFailureReason>> {
  const run = await runOperation(launcher, { op: 'probe' });
  if (!run.ok) return run;
  const receipt = parseReceipt(run.stdout);
  const workerUid = decimalField(receipt, 'worker_uid');
  const helperVersion = receipt.helper_version;
  const uid = process.getuid?.() ?? -1;
  const gid = process.getgid?.() ?? -1;
  if (receipt.identity !== 'shared' || workerUid === null || helperVersion === undefined) {
    return fail('helper_output_invalid', 'probe receipt lacks identity shared, worker_uid or helper_version');
  }
  if (workerUid !== uid) return fail('probe_mismatch', `worker_uid is ${workerUid}, not the supervisor's uid ${uid}`);
  const mismatch = probeMismatch(receipt, uid, gid);
  if (mismatch !== null) return fail('probe_mismatch', mismatch);
  return ok({ workerUid, userNamespace: receipt.user_namespace === 'yes', helperVersion, receipt });
}

export interface HelperViewEntry {
  path: string;
  read: boolean;
  write: boolean;
  exists: boolean;
  /** A regular file with no bytes or a directory with no entries; null when the worker cannot tell. */
  empty: boolean | null;
}

export interface HelperViewRequest {
  uid?: number;
  profile: HelperProfile;
  paths: string[];
  /** With a workspace the helper builds the launch view first (profile, protect, hide, tmpSize). */
  workspace?: string;
  protect?: HelperProtectRule[];
  hide?: string[];
  tmpSize?: number;
}

const VIEW_LINE = /^path (\/.*) read (yes|no) write (yes|no) exists (yes|no) empty (yes|no|unknown)$/;

/**
 * What the worker identity can read or write at each path (access(2) as that identity), and
 * whether it exists and is empty; inside the launch view when `workspace` is given.
 */
export async function runHelperView(
  helper: HelperLocation,
  request: HelperViewRequest,
): Promise<Result<{ workerUid: number; viewBuilt: boolean; entries: HelperViewEntry[] }, HelperFailureReason>> {
  const run = await runOperation(helper, { op: 'view', ...request });
  if (!run.ok) return run;
  const receipt = parseReceipt(run.stdout);
  const workerUid = decimalField(receipt, 'worker_uid');
  const entries = run.stdout
    .split('\n')
    .map((line) => VIEW_LINE.exec(line))
    .filter((match): match is RegExpExecArray => match !== null)
    .map((match) => ({
      path: match[1] ?? '',
      read: match[2] === 'yes',
      write: match[3] === 'yes',
      exists: match[4] === 'yes',
      empty: match[5] === 'unknown' ? null : match[5] === 'yes',
    }));
  if (workerUid === null || entries.length !== request.paths.length) {
    return fail('helper_output_invalid', 'view answer does not list every path');
  }
  const viewBuilt = receipt.view === 'built';
  if (viewBuilt !== (request.workspace !== undefined))
    return fail('helper_output_invalid', `view answer says view ${receipt.view ?? 'missing'}`);
  return ok({ workerUid, viewBuilt, entries });
}

export interface WorkspaceLeaseRequest {
  /** The workspace's id, which names its lease. */
  lease: string;
  /** `<workspace_root>/<lease>`: a workspace root of the helper config, then the id. */
  workspace: string;
}

/**
 * Leases a uid of the range to a workspace for its whole life (searching from `uid`), and
 * creates its directory owned by that uid, group the caller's, mode 2770. Asking again for a
 * lease that exists answers its uid (`existing`): a supervisor that crashed between the
 * helper and its own record gets the same workspace back.
 */
export async function runHelperLease(
  helper: HelperLocation,
  request: WorkspaceLeaseRequest & { uid: number },
): Promise<Result<{ uid: number; existing: boolean }, HelperFailureReason>> {
  const run = await runOperation(helper, { op: 'lease', uidSearch: true, ...request });
  if (!run.ok) return run;
  const receipt = parseReceipt(run.stdout);
  const uid = decimalField(receipt, 'leased');
  const lease = receipt.lease;
  if (uid === null || (lease !== 'new' && lease !== 'existing'))
    return fail('helper_output_invalid', 'lease answer lacks leased or lease new|existing');
  return ok({ uid, existing: lease === 'existing' });
}

/**
 * Ends a workspace: refused (workspace_busy) while a turn holds its uid or any process of the
 * uid lives; else removes its tree without following a link, then the lease.
 */
export async function runHelperRelease(
  helper: HelperLocation,
  request: WorkspaceLeaseRequest,
): Promise<Result<{ uid: number; removedBytes: number; removedFiles: number }, HelperFailureReason>> {
  const run = await runOperation(helper, { op: 'release', ...request });
  if (!run.ok) return run;
  const receipt = parseReceipt(run.stdout);
  const uid = decimalField(receipt, 'released');
  const removedBytes = countField(receipt, 'removed_bytes');
  const removedFiles = countField(receipt, 'removed_files');
  if (uid === null || removedBytes === null || removedFiles === null)
    return fail('helper_output_invalid', 'release answer lacks released, removed_bytes or removed_files');
  return ok({ uid, removedBytes, removedFiles });
}

/** What a leased workspace holds: allocated bytes and entries that are not directories. */
export async function runHelperUsage(
  helper: HelperLocation,
  request: WorkspaceLeaseRequest,
): Promise<Result<{ bytes: number; files: number }, HelperFailureReason>> {
  const run = await runOperation(helper, { op: 'usage', ...request });
  if (!run.ok) return run;
  const receipt = parseReceipt(run.stdout);
  const bytes = countField(receipt, 'bytes');
  const files = countField(receipt, 'files');
  if (bytes === null || files === null) return fail('helper_output_invalid', 'usage answer lacks bytes or files');
  return ok({ bytes, files });
}

/** SIGKILLs every live process whose real uid is `uid` (best effort; a cgroup kill is exact). */
export async function runHelperKill(
  helper: HelperLocation,
  uid: number,
): Promise<Result<{ workerUid: number; signalled: number }, HelperFailureReason>> {
  const run = await runOperation(helper, { op: 'kill', uid });
  if (!run.ok) return run;
  const receipt = parseReceipt(run.stdout);
  const workerUid = decimalField(receipt, 'worker_uid');
  const signalled = decimalField(receipt, 'killed');
  if (workerUid === null || signalled === null)
    return fail('helper_output_invalid', 'kill answer lacks worker_uid or killed');
  return ok({ workerUid, signalled });
}

/**
 * Starts the helper's launch: the descriptor goes onto fd 3 (a unix socket Node creates for the
 * 'pipe' entry), which stays open in the worker. The returned socket is where the caller
 * writes the worker's launch message next. Throws HelperDescriptorError before spawning.
 * A helper refusal shows as an exit code from HELPER_EXIT_CODES: use parseHelperRefusal.
 */
export function spawnHelperLaunch(
  helper: HelperLocation,
  descriptor: HelperLaunchDescriptor,
  options: { stdio?: 'pipe'; listenerChannelFd?: number } = {},
): { child: ChildProcess; protocol: net.Socket } {
  const bytes = encodeDescriptor({ ...descriptor, op: 'launch' });
  const stdio = options.stdio ?? 'pipe';
  // fd 4, the worker's listener channel (supervisor/turns/listener-channel.ts), when the helper starts the worker.
  const channel = options.listenerChannelFd === undefined ? [] : [options.listenerChannelFd];
  const child = spawn(helper.path, helperArgs(helper), { stdio: [stdio, stdio, stdio, 'pipe', ...channel], env: {} });
  const protocol = protocolSocket(child);
  protocol.write(bytes);
  return { child, protocol };
}
