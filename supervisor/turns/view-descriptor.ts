/**
 * The masked worker view: what the turn manager tells the identity helper about the
 * worker's filesystem view. The workspace is the configured workspace root the turn's cwd
 * lies beneath (the longest one); the protected paths are the `fs.protectedPaths` rules
 * configured for exactly that root. Decisions: docs/filesystem-view.md.
 */
import fs from 'node:fs';
import path from 'node:path';
import { fail, ok, type Result } from '../../core/result.js';
import type { TurnhostConfig } from '../config/types.js';
import { DESCRIPTOR_LIMITS, isCanonicalRelativePath, type HelperProtectRule } from '../identity/helper-client.js';

function contains(root: string, dir: string): boolean {
  const rel = path.relative(root, dir);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/** The view's workspace and protect rules for a turn whose cwd is `cwd` (absolute). */
export function turnViewKeys(
  config: TurnhostConfig,
  cwd: string,
): Result<{ workspace: string; protect: HelperProtectRule[] }> {
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
  return ok({ workspace, protect });
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
