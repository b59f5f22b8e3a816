/**
 * Host reads and writes of a workspace's files, through the fs guard (docs/fs-guard.md): the
 * path is resolved beneath the workspace's directory, held open for the whole operation, and
 * never followed out of it by a link.
 */
import { fail, type Result } from '../../core/result.js';
import { closeRoot, openRoot, readFile, writeFile, type ReadReceipt, type WriteReceipt } from '../fs/guard.js';
import type { WorkspaceFileFailure } from './types.js';

/** A file of the tree at `dir`, at most `maxBytes` long. */
export function readTreeFile(dir: string, rel: string, maxBytes: number): Result<ReadReceipt, WorkspaceFileFailure> {
  const root = openRoot(dir);
  if (!root.ok) return fail('workspaces_unavailable', root.detail);
  try {
    return readFile(root, rel, maxBytes);
  } finally {
    closeRoot(root);
  }
}

/**
 * Writes a file of the tree at `dir`. 0666 inside a 02770 workspace: the directory admits only
 * the workspace's uid and the supervisor's group, and the workspace's turns (its uid) must be
 * able to change the file.
 */
export function writeTreeFile(
  dir: string,
  rel: string,
  data: Buffer,
  options: { mode: 'create' | 'replace'; maxBytes: number },
): Result<WriteReceipt, WorkspaceFileFailure> {
  const root = openRoot(dir);
  if (!root.ok) return fail('workspaces_unavailable', root.detail);
  try {
    return writeFile(root, rel, data, { ...options, fileMode: 0o666 });
  } finally {
    closeRoot(root);
  }
}
