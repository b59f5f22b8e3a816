/**
 * The supervisor's own state never lies inside a workspace: a worker may write its workspace,
 * so a database, token or helper config beneath one is theirs to change. Checked on every
 * probe, on real paths (symlinks resolved), against every configured workspace root.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { TurnhostConfig } from '../config/types.js';
import { supervisorStatePaths } from '../view/descriptor.js';

function realOrResolved(file: string): string {
  try {
    return fs.realpathSync(file);
  } catch {
    return path.resolve(file);
  }
}

function beneath(root: string, file: string): boolean {
  const relative = path.relative(root, file);
  return relative === '' || (!relative.startsWith('..') && !path.isAbsolute(relative));
}

/** The requirement naming the first piece of the supervisor's state inside a workspace root, or undefined. */
export function supervisorStateInWorkspace(config: TurnhostConfig): string | undefined {
  const roots = config.turns.workspaceRoots.map(realOrResolved);
  for (const file of supervisorStatePaths(config).map(realOrResolved)) {
    const root = roots.find((candidate) => beneath(candidate, file));
    if (root !== undefined) {
      return `the supervisor's own state must lie outside every workspace root: ${file} is beneath ${root} (turns.workspaceRoots); move the data directory (dataDir) or the helper config out of it`;
    }
  }
  return undefined;
}
