/**
 * The descriptor the identity helper reads on fd 3 (docs/identity-helper-protocol.md), the
 * counterpart of identity-helper/src/descriptor.c. `encodeDescriptor` refuses everything the
 * helper would refuse on syntax, naming the field; the helper stays the authority on policy
 * (uid range, cgroup roots, caller group).
 */
import { CodedError } from '../../core/result.js';
import { imageKeyLines, leaseKeyLines } from './helper-lease-keys.js';
import { CONTROL_CHARS, isCanonicalAbsolutePath, isCanonicalRelativePath } from './helper-paths.js';

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

type HelperOp =
  'probe' | 'launch' | 'view' | 'kill' | 'lease' | 'release' | 'usage' | 'mkdir' | 'image' | 'image_probe';
export type HelperRlimitName = 'nproc' | 'data' | 'fsize' | 'nofile';
export type HelperProfile = 'governed' | 'strict';
type HelperProtectMode = 'read_only' | 'mask_file' | 'mask_directory';

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
  /** A workspace lease id: lease/release/usage name it; a launch with it runs as the lease's uid. */
  lease?: string;
  /** Whose the lease is: this supervisor instance (helper-owner.ts); another's is refused. */
  owner?: string;
  /** lease: an owner-less record (an older release's) takes `owner` when `uid` is its uid. */
  adopt?: boolean;
  /** mkdir: the directory, relative to the workspace, to make with its parents. */
  dir?: string;
  /** image: the size of a new workspace image (absent: re-attach an existing one only). */
  maxBytes?: number;
  /** image: the inodes of a new workspace image for files and directories. */
  maxFiles?: number;
}

export type HelperLaunchDescriptor = Omit<HelperDescriptor, 'op' | 'paths'> & {
  cwd: string;
  profile: HelperProfile;
  workspace: string;
};

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

const LEASE_KEYS: ReadonlySet<string> = new Set(['lease', 'owner', 'workspace']);
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
      'owner',
    ]),
    required: ['cwd', 'profile', 'workspace'],
  },
  view: {
    allowed: new Set(['uid', 'paths', 'profile', 'workspace', 'tmpSize', 'protect', 'hide']),
    required: ['profile', 'paths'],
  },
  kill: { allowed: new Set(['uid']), required: ['uid'] },
  lease: {
    allowed: new Set(['uid', 'uidSearch', 'lease', 'owner', 'adopt', 'workspace']),
    required: ['uid', 'lease', 'owner', 'workspace'],
  },
  release: { allowed: LEASE_KEYS, required: [...LEASE_KEYS] },
  usage: { allowed: LEASE_KEYS, required: [...LEASE_KEYS] },
  mkdir: { allowed: new Set([...LEASE_KEYS, 'dir']), required: [...LEASE_KEYS, 'dir'] },
  image: { allowed: new Set([...LEASE_KEYS, 'maxBytes', 'maxFiles']), required: [...LEASE_KEYS] },
  image_probe: { allowed: new Set(['workspace']), required: ['workspace'] },
};

const RLIMIT_NAMES: readonly HelperRlimitName[] = ['nproc', 'data', 'fsize', 'nofile'];
const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,254}$/;
const HOSTNAME = /^[A-Za-z0-9.][A-Za-z0-9.-]{0,63}$/;

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

function checkPath(field: string, value: unknown): string {
  if (typeof value !== 'string' || !isCanonicalAbsolutePath(value)) {
    refuse(field, 'must be a canonical absolute path (no empty, "." or ".." components)');
  }
  checkText(field, value);
  return value;
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
  if (rules === undefined) refuse('op', 'must be probe, launch, view, kill, lease, release, usage, mkdir or image');
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
  lines.push(...leaseKeyLines(d, refuse));
  lines.push(...imageKeyLines(d, refuse));
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
