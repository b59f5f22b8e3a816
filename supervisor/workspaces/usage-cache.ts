/**
 * Workspace measurements, reused between changes. A walk of a large tree costs a helper process
 * and seconds of disk; the API shows usage on every GET and the turns check it at start and end.
 * A measurement is kept until something may have changed the tree: a host write or a delete
 * invalidates it, and one taken while a turn runs on the workspace (which may write at any time)
 * is never kept. Concurrent callers share the one in flight.
 */
import type { Result } from '../../core/result.js';
import type { WorkspaceFailure, WorkspaceMeasure } from './types.js';

type Measured = Result<WorkspaceMeasure, WorkspaceFailure>;

interface Entry {
  /** Bumped by every invalidation: a measurement that began before one is not kept. */
  generation: number;
  kept: Measured | null;
  inFlight: Promise<Measured> | null;
}

export class UsageCache {
  private readonly entries = new Map<string, Entry>();

  /** The kept measurement, the one in flight, or a new one from `measure`. */
  measure(id: string, turnRuns: () => boolean, measure: () => Promise<Measured>): Promise<Measured> {
    // A running turn (every turn measures at its start and its end) may have changed the tree
    // since anything was kept.
    if (turnRuns()) this.invalidate(id);
    const entry = this.entryOf(id);
    if (entry.kept) return Promise.resolve(entry.kept);
    if (entry.inFlight) return entry.inFlight;
    const generation = entry.generation;
    const running = measure().then((measured) => {
      if (entry.inFlight === running) entry.inFlight = null;
      const unchanged = this.entries.get(id) === entry && entry.generation === generation && !turnRuns();
      if (measured.ok && unchanged) entry.kept = measured;
      return measured;
    });
    entry.inFlight = running;
    return running;
  }

  /** The tree may have changed: the next caller measures again. */
  invalidate(id: string): void {
    const entry = this.entryOf(id);
    entry.generation++;
    entry.kept = null;
    entry.inFlight = null;
  }

  /** The workspace is gone. */
  forget(id: string): void {
    this.invalidate(id);
    this.entries.delete(id);
  }

  private entryOf(id: string): Entry {
    let entry = this.entries.get(id);
    if (!entry) {
      entry = { generation: 0, kept: null, inFlight: null };
      this.entries.set(id, entry);
    }
    return entry;
  }
}
