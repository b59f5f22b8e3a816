/**
 * What a workspace turn needs beyond the ordinary mode: a usable workspaces root and, with an
 * identity helper, that helper's consent to lease workspaces there (a `workspace_root` line of
 * its config naming the same directory). Without this an operator sees `ordinary` available
 * while every workspace is refused at creation or every workspace turn at launch.
 */
import fs from 'node:fs';
import type { TurnhostConfig } from '../config/types.js';
import type { ModeAvailability, ProbeTrigger, WorkspaceCapStatus } from './types.js';

/** The packaged helper's compiled-in config (identity-helper/Makefile, HELPER_CONFIG_PATH). */
const PACKAGED_HELPER_CONFIG = '/etc/turnhost/identity-helper.conf';

/** The directories a helper config lets the helper lease workspaces in (its `workspace_root` lines). */
function helperWorkspaceRoots(configPath: string): { roots: string[] } | { unreadable: string } {
  let text: string;
  try {
    text = fs.readFileSync(configPath, 'utf8');
  } catch (error) {
    return { unreadable: (error as Error).message };
  }
  const roots: string[] = [];
  for (const line of text.split('\n')) {
    const match = /^\s*workspace_root\s+(\S+)\s*$/.exec(line);
    if (match?.[1] !== undefined) roots.push(match[1]);
  }
  return { roots };
}

/** Why the workspaces root cannot hold workspaces, or its real path when it can. */
function rootRequirement(root: string): { requirement: string } | { realPath: string } {
  let stat: fs.Stats;
  try {
    stat = fs.lstatSync(root);
  } catch (error) {
    return { requirement: `the workspaces root ${root} (workspaces.root) is missing: ${(error as Error).message}` };
  }
  if (!stat.isDirectory())
    return {
      requirement: `the workspaces root ${root} (workspaces.root) is not a directory (a symbolic link is refused)`,
    };
  try {
    // The supervisor creates, enters and removes each workspace's entry in it.
    fs.accessSync(root, fs.constants.W_OK | fs.constants.X_OK);
  } catch {
    return { requirement: `the workspaces root ${root} (workspaces.root) is not writable by the supervisor` };
  }
  return { realPath: fs.realpathSync(root) };
}

/** The first missing requirement of workspace turns, given the ordinary mode's availability. */
function firstMissing(config: TurnhostConfig, root: string, ordinary: ModeAvailability): string | undefined {
  if (!ordinary.available)
    return `workspace turns run in mode ordinary, which is unavailable: ${ordinary.requirement ?? 'no requirement named'}`;
  const usable = rootRequirement(root);
  if ('requirement' in usable) return usable.requirement;
  if (config.identityHelper.path === null) return undefined;
  const helperConfig = config.identityHelper.configPath ?? PACKAGED_HELPER_CONFIG;
  const leasable = helperWorkspaceRoots(helperConfig);
  if ('unreadable' in leasable)
    return `the identity helper config ${helperConfig} cannot be read to find a workspace_root line for ${usable.realPath}: ${leasable.unreadable}`;
  if (!leasable.roots.includes(usable.realPath)) {
    const named = leasable.roots.length === 0 ? 'none' : leasable.roots.join(', ');
    return `the identity helper config ${helperConfig} has no workspace_root line for ${usable.realPath} (workspaces.root; it names ${named}): the helper would refuse every workspace lease`;
  }
  return undefined;
}

/** Absent when workspaces are not configured (workspaces.root null): there is nothing to run. */
export function probeWorkspaceTurns(
  config: TurnhostConfig,
  ordinary: ModeAvailability,
  trigger: ProbeTrigger,
): ModeAvailability | undefined {
  const root = config.workspaces.root;
  if (root === null) return undefined;
  const requirement = firstMissing(config, root, ordinary);
  const checkedAt = new Date().toISOString();
  return requirement === undefined
    ? { available: true, checkedAt, trigger }
    : { available: false, checkedAt, trigger, requirement };
}

/** Where the helper runs mke2fs (identity-helper/src/workspace-image.c): fixed, never PATH. */
const MKE2FS_PATHS = ['/usr/sbin/mke2fs', '/sbin/mke2fs'];

/** Why a non-root shared_uid supervisor's workspaces are not bounded (docs/workspaces.md). */
export const NON_ROOT_SHARED_CAP =
  'a workspace filesystem needs root to attach a loop device and mount it: run the supervisor as root or with the identity helper (separate_uid); here workspaces.maxBytes is only measured at turn start and on host writes';

/** The first facility a workspace image needs that this host lacks. */
function imageRequirement(): string | undefined {
  try {
    if (!fs.statSync('/dev/loop-control').isCharacterDevice()) return '/dev/loop-control is not a character device';
  } catch (error) {
    return `a workspace filesystem needs loop devices: /dev/loop-control: ${(error as Error).message}`;
  }
  if (!MKE2FS_PATHS.some((file) => fs.existsSync(file)))
    return `a workspace filesystem needs mke2fs at ${MKE2FS_PATHS.join(' or ')} (Debian: e2fsprogs)`;
  return undefined;
}

/**
 * Whether the byte and inode cap of new workspaces is a real bound here: each workspace its own
 * ext4 image (the helper, or a root supervisor's shared launcher, mounts it), or only measured
 * (a non-root shared_uid supervisor), or off (workspaces.maxBytes null). Never claims a bound
 * it has no means for. Absent when workspaces are not configured.
 */
export function probeWorkspaceCap(config: TurnhostConfig): WorkspaceCapStatus | undefined {
  if (config.workspaces.root === null) return undefined;
  const { maxBytes, maxFiles } = config.workspaces;
  if (maxBytes === null)
    return {
      enforced: false,
      mechanism: 'none',
      maxBytes,
      maxFiles,
      requirement: 'workspaces.maxBytes is not set: workspaces are plain directories with no byte or inode cap',
    };
  const canMount = config.identityHelper.path !== null || process.geteuid?.() === 0;
  if (!canMount)
    return { enforced: false, mechanism: 'measured', maxBytes, maxFiles, requirement: NON_ROOT_SHARED_CAP };
  const missing = imageRequirement();
  return missing === undefined
    ? { enforced: true, mechanism: 'image', maxBytes, maxFiles }
    : { enforced: false, mechanism: 'measured', maxBytes, maxFiles, requirement: missing };
}
