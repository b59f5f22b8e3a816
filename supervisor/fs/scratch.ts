/**
 * Shared scratch area with a byte cap. A prune measures the area through held directory fds
 * (nothing followed), and when it is above the cap removes the oldest unpinned regular
 * files until it is under, recording one `scratch_overage` event. Pinned files are never
 * removed; when pinned files alone exceed the cap the area stays over it and says so.
 */
import type { Logger } from '../../core/log.js';
import { CodedError, fail, ok, type Result } from '../../core/result.js';
import type { EventSink } from '../../core/events.js';
import { closeQuietly, openDirBeneath } from './dirs.js';
import { closeRoot, openRoot, type FsRefusal, type Identity } from './guard.js';
import { cName, fileType, lstatat, sameIdentity, unlinkat } from './sys.js';
import { relativeName, walkTree, WalkErrors, type TreeEntry } from './tree.js';

export interface ScratchPruneOptions {
  /** Absolute path of the scratch area (its last component is not followed). */
  dir: string;
  capBytes: number;
  /** Relative path (as listed, `/`-separated) → true to keep it. A throwing callback pins. */
  isPinned(rel: string): boolean;
  sink: EventSink;
  logger: Logger;
}

/** The `scratch_overage` event payload. */
interface ScratchOveragePayload {
  bytes: number;
  pinnedFiles: number;
  pinnedBytes: number;
  overageBytes: number;
}

export interface ScratchPruneResult extends ScratchOveragePayload {
  files: number;
  removedFiles: number;
  removedBytes: number;
  remainingBytes: number;
  underCap: boolean;
  /** Where the `scratch_overage` event went; `not_needed` when the area was within its cap. */
  event: 'not_needed' | 'database' | 'fallback' | 'failed';
  errors: string[];
  errorCount: number;
}

interface ScratchFile extends Identity {
  components: Buffer[];
  rel: string;
  size: number;
  mtimeMs: number;
  pinned: boolean;
}

export function pruneScratch(options: ScratchPruneOptions): Result<ScratchPruneResult, FsRefusal> {
  if (!Number.isSafeInteger(options.capBytes) || options.capBytes < 0) {
    return fail('invalid_option', 'capBytes must be a non-negative integer');
  }
  const root = openRoot(options.dir);
  if (!root.ok) return root;
  try {
    const errors = new WalkErrors();
    const files = listScratchFiles(root.fd, options, errors);
    return ok(pruneListed(root.fd, files, options, errors));
  } finally {
    closeRoot(root);
  }
}

function pruneListed(
  rootFd: number,
  files: ScratchFile[],
  options: ScratchPruneOptions,
  errors: WalkErrors,
): ScratchPruneResult {
  const bytes = sum(files);
  const pinned = files.filter((f) => f.pinned);
  const overage: ScratchOveragePayload = {
    bytes,
    pinnedFiles: pinned.length,
    pinnedBytes: sum(pinned),
    overageBytes: Math.max(0, bytes - options.capBytes),
  };
  let remainingBytes = bytes;
  let removedFiles = 0;
  if (overage.overageBytes > 0) {
    for (const file of oldestFirst(files.filter((f) => !f.pinned))) {
      if (remainingBytes <= options.capBytes) break;
      if (removeScratchFile(rootFd, file, errors)) {
        remainingBytes -= file.size;
        removedFiles++;
      }
    }
  }
  const event = overage.overageBytes > 0 ? recordOverage(overage, options) : 'not_needed';
  const underCap = remainingBytes <= options.capBytes;
  if (!underCap)
    options.logger.warn('scratch area stays above its cap', { ...overage, remainingBytes, capBytes: options.capBytes });
  return {
    ...overage,
    files: files.length,
    removedFiles,
    removedBytes: bytes - remainingBytes,
    remainingBytes,
    underCap,
    event,
    errors: errors.recorded,
    errorCount: errors.count,
  };
}

function sum(files: ScratchFile[]): number {
  return files.reduce((total, f) => total + f.size, 0);
}

function oldestFirst(files: ScratchFile[]): ScratchFile[] {
  return [...files].sort((a, b) => a.mtimeMs - b.mtimeMs || (a.rel < b.rel ? -1 : a.rel > b.rel ? 1 : 0));
}

function listScratchFiles(rootFd: number, options: ScratchPruneOptions, errors: WalkErrors): ScratchFile[] {
  const files: ScratchFile[] = [];
  walkTree(
    rootFd,
    {
      entry: (entry) => {
        if (fileType(entry.stat.mode) === 'file') files.push(toScratchFile(entry, options));
      },
    },
    errors,
  );
  return files;
}

function toScratchFile(entry: TreeEntry, options: ScratchPruneOptions): ScratchFile {
  const rel = relativeName(entry.components);
  return {
    components: entry.components,
    rel,
    size: entry.stat.size,
    mtimeMs: entry.stat.mtimeMs,
    dev: entry.stat.dev,
    ino: entry.stat.ino,
    pinned: pinnedSafely(options, rel),
  };
}

function pinnedSafely(options: ScratchPruneOptions, rel: string): boolean {
  try {
    return options.isPinned(rel);
  } catch (err) {
    options.logger.warn('isPinned threw; keeping the file', { path: rel, error: String(err) });
    return true;
  }
}

/**
 * Re-walks to the file's parent without following anything and unlinks the name only if it
 * still names the inode that was measured.
 */
function removeScratchFile(rootFd: number, file: ScratchFile, errors: WalkErrors): boolean {
  const held: number[] = [];
  try {
    let parentFd = rootFd;
    for (const component of file.components.slice(0, -1)) {
      const opened = openDirBeneath(parentFd, cName(component));
      if (!opened.ok) {
        errors.add(file.components, opened.detail);
        return false;
      }
      held.push(opened.fd);
      parentFd = opened.fd;
    }
    const name = cName(file.components[file.components.length - 1]!);
    const st = lstatat(parentFd, name);
    if (!st.ok || !sameIdentity(st.stat, file)) {
      errors.add(file.components, 'changed since it was measured; not removed');
      return false;
    }
    const removed = unlinkat(parentFd, name, 0);
    if (!removed.ok) errors.add(file.components, removed.detail);
    return removed.ok;
  } finally {
    for (const fd of held) closeQuietly(fd);
  }
}

function recordOverage(payload: ScratchOveragePayload, options: ScratchPruneOptions): ScratchPruneResult['event'] {
  try {
    const appended = options.sink.append({
      sessionId: null,
      turnId: null,
      kind: 'scratch_overage',
      actor: 'server',
      model: null,
      profile: null,
      payload: { ...payload },
    });
    if (appended.ok) return appended.stored;
    options.logger.error('scratch_overage event refused', { reason: appended.reason, detail: appended.detail });
  } catch (err) {
    options.logger.error('scratch_overage event write threw', { error: String(err) });
  }
  return 'failed';
}

/** Files whose name ends in this suffix are pinned by the daemon's pruner. */
const PINNED_SUFFIX = '.pin';

/** The daemon's pinning rule: a file whose last path component ends in `.pin` is never pruned. */
export function isPinnedScratchName(rel: string): boolean {
  return rel.endsWith(PINNED_SUFFIX);
}

export interface ScratchPrunerOptions extends ScratchPruneOptions {
  intervalSeconds: number;
}

/** Prunes now and then every `intervalSeconds`; returns the stop function. */
export function startScratchPruner(options: ScratchPrunerOptions): () => void {
  if (!Number.isFinite(options.intervalSeconds) || options.intervalSeconds <= 0) {
    throw new CodedError('invalid_option', 'intervalSeconds must be a positive number');
  }
  const run = (): void => {
    const result = pruneScratch(options);
    if (!result.ok) {
      options.logger.error('scratch prune refused', { reason: result.reason, detail: result.detail });
    } else if (result.removedFiles > 0 || result.errorCount > 0) {
      options.logger.info('scratch pruned', {
        removedFiles: result.removedFiles,
        removedBytes: result.removedBytes,
        remainingBytes: result.remainingBytes,
        errorCount: result.errorCount,
      });
    }
  };
  const first = setImmediate(run);
  const timer = setInterval(run, options.intervalSeconds * 1000);
  timer.unref();
  return () => {
    clearImmediate(first);
    clearInterval(timer);
  };
}
