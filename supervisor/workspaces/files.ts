/**
 * Host reads and writes of a workspace's files, through the fs guard (docs/fs-guard.md): the
 * path is resolved beneath the workspace's directory, held open for the whole operation, and
 * never followed out of it by a link.
 *
 * Directories the host makes in a workspace belong to the workspace's turns: in separate_uid the
 * identity helper makes them as root, owned by the leased uid (a non-root supervisor could not
 * chown them); in shared_uid the turns run as the supervisor's uid (or one its user namespace
 * maps to it), so the supervisor makes them itself. Either way 02770, group the supervisor's.
 */
import { fail, ok, type Result } from '../../core/result.js';
import {
  listDirectory,
  makeDirectory,
  removeEntry,
  statEntry,
  type DirectoryEntry,
  type RemoveReceipt,
} from '../fs/guard-entries.js';
import {
  closeRoot,
  openRoot,
  readFile,
  writeFile,
  type ReadReceipt,
  type RootHandle,
  type WriteReceipt,
} from '../fs/guard.js';
import type { HelperLocation } from '../identity/helper-process.js';
import { runHelperMakeDirectory } from '../identity/helper-workspace-tree.js';
import type { WorkspaceRecord } from './store.js';
import type { WorkspaceFailure, WorkspaceFileFailure } from './types.js';

/** Mode of every directory the host makes in a workspace: the uid's and the supervisor group's. */
const WORKSPACE_DIR_MODE = 0o2770;

/** What a path names: a directory's listing or a file's bytes. */
export type TreeRead = { kind: 'directory'; entries: DirectoryEntry[] } | ({ kind: 'file' } & ReadReceipt);

function withRoot<T extends object>(
  dir: string,
  use: (root: RootHandle) => Result<T, WorkspaceFileFailure>,
): Result<T, WorkspaceFileFailure> {
  const root = openRoot(dir);
  if (!root.ok) return fail('workspaces_unavailable', root.detail);
  try {
    return use(root);
  } finally {
    closeRoot(root);
  }
}

/** `''` and `.` name the workspace itself. */
export function isTop(rel: string): boolean {
  return rel === '' || rel === '.';
}

/** The directory `rel` names, listed, or the file it names, at most `maxBytes` long. */
export function readTreeEntry(dir: string, rel: string, maxBytes: number): Result<TreeRead, WorkspaceFileFailure> {
  return withRoot<TreeRead>(dir, (root) => {
    if (!isTop(rel)) {
      const stat = statEntry(root, rel);
      if (!stat.ok) return stat;
      // A link or special file goes to readFile, which refuses it as the guard always does.
      if (stat.entry.type !== 'directory') {
        const read = readFile(root, rel, maxBytes);
        return read.ok ? ok({ kind: 'file' as const, ...read }) : read;
      }
    }
    // Listed through the no-follow walk: a directory swapped for a link since the stat is refused.
    const listed = listDirectory(root, rel);
    return listed.ok ? ok({ kind: 'directory' as const, entries: listed.entries }) : listed;
  });
}

/**
 * Writes a file of the tree at `dir`. 0666 inside a 02770 workspace: the directory admits only
 * the workspace's uid and the supervisor's group, and the workspace's turns (its uid) must be
 * able to change the file (0777 when `executable`: an archive's executable entry). `parents:
 * 'existing'` when the helper has made them already.
 */
export function writeTreeFile(
  dir: string,
  rel: string,
  data: Buffer,
  options: { mode: 'create' | 'replace'; maxBytes: number; parents: 'create' | 'existing'; executable?: boolean },
): Result<WriteReceipt, WorkspaceFileFailure> {
  const { executable, ...write } = options;
  return withRoot(dir, (root) =>
    writeFile(root, rel, data, {
      ...write,
      fileMode: executable === true ? 0o777 : 0o666,
      dirMode: WORKSPACE_DIR_MODE,
    }),
  );
}

/** Removes a file, a link (not its target), an empty directory or, `recursive`, a tree. */
export function removeTreeEntry(
  dir: string,
  rel: string,
  recursive: boolean,
): Result<RemoveReceipt, WorkspaceFileFailure> {
  return withRoot(dir, (root) => removeEntry(root, rel, { recursive }));
}

/**
 * Makes `rel` and its missing parents owned as the workspace's turns need (see the top of this
 * file). Answers how many directories were made (0: it existed).
 */
export async function makeTreeDirectory(
  record: WorkspaceRecord,
  rel: string,
  helper: HelperLocation | null,
): Promise<Result<{ made: number }, WorkspaceFileFailure>> {
  if (record.identity === 'shared_uid')
    return withRoot(record.path, (root) => makeDirectory(root, rel, WORKSPACE_DIR_MODE));
  if (!helper)
    return fail('workspaces_unavailable', 'the workspace has a leased uid but no identity helper is configured');
  const made = await runHelperMakeDirectory(helper, { lease: record.id, workspace: record.path, dir: rel });
  if (made.ok) return made;
  // The helper's refusal names the component: a link or a file in the way is the caller's.
  if (made.reason === 'lease_refused' && / is (a symlink|a special file)/.test(made.detail))
    return fail('alias_denied', made.detail);
  if (made.reason === 'lease_refused' && / is not a directory/.test(made.detail))
    return fail('not_a_directory', made.detail);
  const failure: WorkspaceFailure = made.reason === 'workspace_busy' ? 'workspace_busy' : 'workspaces_unavailable';
  return fail(failure, `mkdir: the identity helper refused (${made.reason}): ${made.detail}`);
}
