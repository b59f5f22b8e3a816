/**
 * What a workspace turn needs beyond the ordinary mode: a usable workspaces root, with an
 * identity helper that helper's consent to lease workspaces there (a `workspace_root` line of
 * its config naming the same directory), and a workspace turn's view built for real (a hidden
 * path above the workspace or the worker's program must not break it). Without this an
 * operator sees `ordinary` available while every workspace is refused at creation or every
 * workspace turn at launch.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { Result } from '../../core/result.js';
import type { TurnhostConfig } from '../config/types.js';
import type { HelperViewEntry } from '../identity/helper-view.js';
import { hiddenHostPaths } from '../view/descriptor.js';
import { helperConfigPath, helperConfigValues, keptViewPaths } from './kept-paths.js';
import type { ModeAvailability, ProbeTrigger, WorkspaceCapStatus } from './types.js';
import type { HelperViewProbe } from './view.js';

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
  const helperConfig = helperConfigPath(config);
  const leasable = helperConfigValues(helperConfig, 'workspace_root');
  if ('unreadable' in leasable)
    return `the identity helper config ${helperConfig} cannot be read to find a workspace_root line for ${usable.realPath}: ${leasable.unreadable}`;
  if (!leasable.values.includes(usable.realPath)) {
    const named = leasable.values.length === 0 ? 'none' : leasable.values.join(', ');
    return `the identity helper config ${helperConfig} has no workspace_root line for ${usable.realPath} (workspaces.root; it names ${named}): the helper would refuse every workspace lease`;
  }
  return undefined;
}

/** How the probes build a workspace turn's view: the program that builds the turns' views. */
export interface WorkspaceViewRunner {
  run: HelperViewProbe;
  /** The separate uid to build it for (absent: shared mode, the supervisor's own). */
  workerUid?: number;
}

/**
 * A workspace turn's view, built as a turn's is: the workspace a directory inside the
 * workspaces root (hidden above it, as the data directory or `/root` may be), every hidden path
 * of the turns, the governed profile. The workspace must be writable, every kept `view_path`
 * readable and a sibling entry of the workspace hidden; a view that cannot be built names the
 * helper's reason (e.g. a mount it refused).
 */
async function workspaceViewRequirement(
  config: TurnhostConfig,
  realRoot: string,
  runner: WorkspaceViewRunner | undefined,
): Promise<string | undefined> {
  if (runner === undefined) return "a workspace turn's view is unverified: no view probe can run here";
  const kept = keptViewPaths(config);
  if ('requirement' in kept) return kept.requirement;
  let base: string;
  try {
    base = fs.mkdtempSync(path.join(realRoot, '.turnhost-view-probe-'));
  } catch (error) {
    return `a workspace turn's view could not be verified: ${(error as Error).message}`;
  }
  try {
    const workspace = path.join(base, 'workspace');
    fs.mkdirSync(workspace);
    fs.chmodSync(base, 0o711);
    fs.chmodSync(workspace, 0o777); // a refused write can only come from the view
    const sibling = path.join(base, 'host-only');
    fs.writeFileSync(sibling, 'sentinel\n', { mode: 0o644 });
    const checks: Array<{ path: string; what: string; holds: (entry: HelperViewEntry) => boolean }> = [
      { path: workspace, what: 'the workspace must be writable', holds: (e) => e.write },
      { path: sibling, what: 'a sibling of the workspace must stay hidden', holds: (e) => !e.exists },
      ...kept.paths.map((file) => ({
        path: file,
        what: 'a kept path (view_path) must stay visible',
        holds: (e: HelperViewEntry) => e.exists && e.read && e.empty !== true,
      })),
    ];
    const answer = await runner.run({
      ...(runner.workerUid === undefined ? {} : { uid: runner.workerUid }),
      profile: 'governed',
      workspace,
      protect: [],
      hide: hiddenHostPaths(config),
      paths: checks.map((check) => check.path),
    });
    if (!answer.ok) return `a workspace turn's view cannot be built: ${answer.detail}`;
    const broken = checks.find((check, index) => {
      const entry = answer.entries[index];
      return entry === undefined || entry.path !== check.path || !check.holds(entry);
    });
    return broken === undefined ? undefined : `a workspace turn's view does not hold: ${broken.what} (${broken.path})`;
  } catch (error) {
    return `a workspace turn's view could not be verified: ${(error as Error).message}`;
  } finally {
    fs.rmSync(base, { recursive: true, force: true });
  }
}

/** Absent when workspaces are not configured (workspaces.root null): there is nothing to run. */
export async function probeWorkspaceTurns(
  config: TurnhostConfig,
  ordinary: ModeAvailability,
  trigger: ProbeTrigger,
  runner: WorkspaceViewRunner | undefined,
): Promise<ModeAvailability | undefined> {
  const root = config.workspaces.root;
  if (root === null) return undefined;
  const requirement =
    firstMissing(config, root, ordinary) ?? (await workspaceViewRequirement(config, fs.realpathSync(root), runner));
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

/** What a workspace filesystem needs, before the probe's own detail of what failed. */
const IMAGE_NEEDS = 'a workspace filesystem needs loop devices and ext4 mounts';

/**
 * Runs the image probe of the program that mounts the workspaces' images (the helper, or a root
 * supervisor's shared launcher) in the workspaces root `realRoot`: ok only once a real image was
 * made, attached, mounted and found to refuse writes past its size
 * (identity-helper/src/workspace-image.c, workspace_image_probe).
 */
export type WorkspaceImageProbe = (realRoot: string) => Promise<Result<object>>;

/** The cheap checks first: a host without these fails the probe anyway, with a vaguer detail. */
function imageRequirement(): string | undefined {
  try {
    if (!fs.statSync('/dev/loop-control').isCharacterDevice())
      return `${IMAGE_NEEDS}: /dev/loop-control is not a character device`;
  } catch (error) {
    return `${IMAGE_NEEDS}: /dev/loop-control: ${(error as Error).message}`;
  }
  if (!MKE2FS_PATHS.some((file) => fs.existsSync(file)))
    return `a workspace filesystem needs mke2fs at ${MKE2FS_PATHS.join(' or ')} (Debian: e2fsprogs)`;
  return undefined;
}

/** Why the workspaces' images are not proven to bound here, or undefined when the probe proved it. */
async function provenRequirement(root: string, probe: WorkspaceImageProbe | undefined): Promise<string | undefined> {
  const missing = imageRequirement();
  if (missing !== undefined) return missing;
  if (probe === undefined)
    return `${IMAGE_NEEDS}: unverified, no image probe can run here (workspaces.maxBytes is only measured)`;
  let realRoot: string;
  try {
    realRoot = fs.realpathSync(root);
  } catch (error) {
    return `${IMAGE_NEEDS}: the workspaces root ${root} (workspaces.root): ${(error as Error).message}`;
  }
  const proved = await probe(realRoot);
  return proved.ok ? undefined : `${IMAGE_NEEDS}: ${proved.detail}`;
}

/**
 * Whether the byte and inode cap of new workspaces is a real bound here: each workspace its own
 * ext4 image (the helper, or a root supervisor's shared launcher, mounts it), or only measured
 * (a non-root shared_uid supervisor, or a host where the image probe failed), or off
 * (workspaces.maxBytes null). Enforced only when the image probe of the program that mounts the
 * images proved a bound here, now: a bound is never claimed from the presence of a device
 * alone. Absent when workspaces are not configured.
 */
export async function probeWorkspaceCap(
  config: TurnhostConfig,
  probe: WorkspaceImageProbe | undefined,
): Promise<WorkspaceCapStatus | undefined> {
  const root = config.workspaces.root;
  if (root === null) return undefined;
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
  const requirement = await provenRequirement(root, probe);
  return requirement === undefined
    ? { enforced: true, mechanism: 'image', maxBytes, maxFiles }
    : { enforced: false, mechanism: 'measured', maxBytes, maxFiles, requirement };
}
