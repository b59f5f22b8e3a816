/**
 * Host writes into a turn's tree: the supervisor writes a file beneath the turn's workspace or
 * its turn temp through the fs guard, and records what happened. Events name the path relative
 * to its root (as the caller gave it), never a host path. See docs/fs-guard.md ("Host writes").
 */
import { fail, type Result } from '../../core/result.js';
import type { WorkerProfile } from '../../core/modes.js';
import type { EventSink } from '../../core/events.js';
import { writeFile, type FsRefusal, type RootHandle, type WriteReceipt } from './guard.js';
import { serverTurnEvent } from '../../core/events.js';

export type HostWriteTarget = 'workspace' | 'temp';

/** The roots a running turn exposes to host writes; `temp` is null when the turn has none. */
export interface HostWriteRoots {
  workspace: RootHandle;
  temp: RootHandle | null;
}

/** Who the write belongs to, for the event envelope. */
export interface HostWriteTurn {
  sessionId: string;
  turnId: string;
  profile: WorkerProfile | null;
  model: string | null;
}

export interface HostWriteOptions {
  roots: HostWriteRoots;
  target: HostWriteTarget;
  rel: string;
  mode: 'create' | 'replace';
  expectedSha256?: string;
  data: Buffer;
  maxBytes: number;
  sink: EventSink;
  turn: HostWriteTurn;
}

/** Events carry at most this many characters of a refused path (a refused path can be any string). */
const MAX_EVENT_PATH_CHARS = 1024;

export function hostWrite(options: HostWriteOptions): Result<WriteReceipt, FsRefusal> {
  const root = options.target === 'temp' ? options.roots.temp : options.roots.workspace;
  const written: Result<WriteReceipt, FsRefusal> = root
    ? writeFile(root, options.rel, options.data, {
        mode: options.mode,
        maxBytes: options.maxBytes,
        ...(options.expectedSha256 === undefined ? {} : { expectedSha256: options.expectedSha256 }),
      })
    : fail('not_found', 'this turn has no temp directory');
  if (written.ok) {
    const { bytes, sha256, replaced } = written;
    options.sink.append(serverTurnEvent(options.turn, 'host_write', { path: options.rel, bytes, sha256, replaced }));
  } else {
    recordHostWriteRefusal(options.sink, options.turn, options.rel, written.reason);
  }
  return written;
}

/** Also used by the HTTP route for refusals decided before the guard runs (a body above the cap). */
export function recordHostWriteRefusal(sink: EventSink, turn: HostWriteTurn, rel: string, reason: FsRefusal): void {
  sink.append(serverTurnEvent(turn, 'host_write_refused', { path: rel.slice(0, MAX_EVENT_PATH_CHARS), reason }));
}
