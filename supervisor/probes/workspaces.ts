/**
 * What a workspace turn needs beyond the ordinary mode: a usable workspaces root and, with an
 * identity helper, that helper's consent to lease workspaces there (a `workspace_root` line of
 * its config naming the same directory). Without this an operator sees `ordinary` available
 * while every workspace is refused at creation or every workspace turn at launch.
 */
import fs from 'node:fs';
import type { TurnhostConfig } from '../config/types.js';
import type { ModeAvailability, ProbeTrigger } from './types.js';

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
