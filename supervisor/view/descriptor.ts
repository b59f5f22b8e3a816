/**
 * The masked worker view: what the turn manager tells the identity helper about the worker's
 * filesystem view, the same in both identity modes. The workspace is the configured workspace
 * root the turn's cwd lies beneath (the longest one); the protected paths are the
 * `fs.protectedPaths` rules configured for exactly that root; the hidden paths are the
 * supervisor's own state and the host's secrets. Decisions: docs/filesystem-view.md.
 *
 * The probes check the same hidden paths and supervisor state the lifecycle sends, so both
 * read them here: what the status reports and what a worker gets cannot drift apart.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fail, ok, type Result } from '../../core/result.js';
import type { TurnhostConfig } from '../config/types.js';
import { DESCRIPTOR_LIMITS, type HelperProtectRule } from '../identity/helper-descriptor.js';
import { isCanonicalRelativePath } from '../identity/helper-paths.js';
import { tokenFilePath } from '../config/token-path.js';

/**
 * Host files no worker reads, whatever uid it runs as: the password and group shadows, sudo's
 * rules, root's home, the host's ssh keys and the installed configuration directory (its
 * turnhost.json may hold the API token). Under a root supervisor without a helper the worker is
 * uid 0, and uid 0 may read what root owns even without capabilities.
 */
const HOST_SECRETS: readonly string[] = [
  '/etc/shadow',
  '/etc/shadow-',
  '/etc/gshadow',
  '/etc/gshadow-',
  '/etc/sudoers',
  '/etc/sudoers.d',
  '/root',
  '/etc/ssl/private',
  '/etc/turnhost',
];

/** The path with every existing component's symlinks resolved (the helper refuses a link on the way). */
function resolveExisting(file: string): string {
  const missing: string[] = [];
  let current = path.resolve(file);
  for (;;) {
    try {
      return path.join(fs.realpathSync(current), ...missing);
    } catch {
      const parent = path.dirname(current);
      if (parent === current) return path.resolve(file);
      missing.unshift(path.basename(current));
      current = parent;
    }
  }
}

function hostSshKeys(): string[] {
  try {
    return fs
      .readdirSync('/etc/ssh')
      .filter((name) => /^ssh_host_.*_key$/.test(name))
      .map((name) => path.join('/etc/ssh', name));
  } catch {
    return [];
  }
}

/** The supervisor's own state a worker must never see or change: data directory, token, helper config. */
export function supervisorStatePaths(config: TurnhostConfig): string[] {
  return [config.dataDir, tokenFilePath(config.dataDir), config.identityHelper.configPath].filter(
    (entry): entry is string => entry !== null,
  );
}

/**
 * What the view never shows: the supervisor's data directory (database, token, fallback log),
 * a token file or helper config kept elsewhere, and the host's secrets. At most
 * DESCRIPTOR_LIMITS.maxHide entries; the supervisor's own state comes first.
 */
export function hiddenHostPaths(config: TurnhostConfig): string[] {
  // The workspaces root: a turn on a workspace sees its own workspace inside it and nothing else
  // (the helper gives a hidden path above the workspace a nested mask instead), any other turn
  // sees none of it. In shared_uid mode this is all that keeps workspaces apart.
  const workspacesRoot = config.workspaces.root === null ? [] : [config.workspaces.root];
  const hidden = [...supervisorStatePaths(config), ...workspacesRoot, ...HOST_SECRETS, ...hostSshKeys()]
    .map(resolveExisting)
    .filter((entry) => entry !== '/');
  return [...new Set(hidden)].slice(0, DESCRIPTOR_LIMITS.maxHide);
}

function contains(root: string, dir: string): boolean {
  const rel = path.relative(root, dir);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

export interface TurnView {
  workspace: string;
  protect: HelperProtectRule[];
  hide: string[];
}

/**
 * The view's workspace, protect rules and hidden paths for a turn whose cwd is `cwd` (absolute);
 * a turn on a workspace (supervisor/workspaces/) passes its directory, the view's workspace.
 */
export function turnViewKeys(config: TurnhostConfig, cwd: string, workspaceDir?: string): Result<TurnView> {
  if (workspaceDir !== undefined) {
    if (!contains(workspaceDir, cwd)) return fail('workspace_unconfigured', `cwd ${cwd} lies outside its workspace`);
    return ok({ workspace: workspaceDir, protect: [], hide: hiddenHostPaths(config) });
  }
  const roots = config.turns.workspaceRoots.map((root) => path.resolve(root)).filter((root) => contains(root, cwd));
  const workspace = roots.sort((a, b) => b.length - a.length)[0];
  if (workspace === undefined)
    return fail('workspace_unconfigured', `cwd ${cwd} lies beneath no turns.workspaceRoots entry`);
  const protect: HelperProtectRule[] = [];
  for (const [index, rule] of config.fs.protectedPaths.entries()) {
    if (path.resolve(rule.root) !== workspace) continue;
    const relative = rule.path.replace(/\/+$/, '');
    if (!isCanonicalRelativePath(relative))
      return fail(
        'protected_path_invalid',
        `fs.protectedPaths[${index}].path ${JSON.stringify(rule.path)} is not a canonical relative path`,
      );
    protect.push({ mode: rule.mode, path: relative });
  }
  if (protect.length > DESCRIPTOR_LIMITS.maxProtect)
    return fail(
      'protected_path_invalid',
      `more than ${DESCRIPTOR_LIMITS.maxProtect} fs.protectedPaths rules for ${workspace}`,
    );
  return ok({ workspace, protect, hide: hiddenHostPaths(config) });
}

function entryIdentity(file: string): string {
  try {
    const st = fs.lstatSync(file);
    return `${st.dev}:${st.ino}:${st.mode & fs.constants.S_IFMT}`;
  } catch (error) {
    return `absent:${(error as NodeJS.ErrnoException).code ?? 'unknown'}`;
  }
}

/**
 * What the helper's view depends on in the host tree: the identity (device, inode, kind) of
 * the workspace root and of every path component down to each protected path, never following
 * a link. The helper resolves all of them when it builds the view; a prepared worker's view is
 * current only while this fingerprint is unchanged (a protected path created, replaced by a
 * link or renamed away since would be unmasked or masked in the wrong place).
 */
export function viewFingerprint(view: { workspace: string; protect: readonly HelperProtectRule[] }): string {
  const entries = new Set<string>([view.workspace]);
  for (const rule of view.protect) {
    let current = view.workspace;
    for (const component of rule.path.split('/')) {
      current = path.join(current, component);
      entries.add(current);
    }
  }
  return [...entries].map((entry) => `${entry}=${entryIdentity(entry)}`).join('\n');
}
