/**
 * Deletes that failed half way, retried without a restart. A workspace left `deleting` (a turn's
 * process still held its uid, a file held its image busy, the helper was briefly unavailable)
 * is tried again after a delay that doubles from `firstDelayMs` up to `maxDelayMs` and stays
 * there: a bounded backoff that never gives up, because a half-deleted workspace holds disk,
 * a uid and perhaps a loop device until it goes. Each failed attempt is reported to `failed`
 * (the service records a `workspace_delete_failed` event); the attempt that succeeds records
 * the ordinary `workspace_deleted` receipt.
 */
import type { Result } from '../../core/result.js';

export interface DeleteRetryOptions {
  firstDelayMs: number;
  maxDelayMs: number;
}

const DEFAULT_DELETE_RETRY: DeleteRetryOptions = { firstDelayMs: 2_000, maxDelayMs: 5 * 60_000 };

/** What one attempt answers: done (deleted, or nothing left to delete), or failed with why. */
export type DeleteAttempt = (id: string) => Promise<Result>;

export class DeleteRetries {
  private readonly pending = new Map<string, { attempt: number; timer: NodeJS.Timeout }>();
  private closed = false;

  constructor(
    private readonly attempt: DeleteAttempt,
    private readonly failed: (id: string, attempt: number, detail: string, retryInMs: number) => void,
    private readonly options: DeleteRetryOptions = DEFAULT_DELETE_RETRY,
  ) {}

  /** The delay before attempt `n` (1: the first retry). */
  delayBefore(n: number): number {
    return Math.min(this.options.maxDelayMs, this.options.firstDelayMs * 2 ** Math.min(n - 1, 30));
  }

  /** A delete of `id` failed (attempt 0: the client's own, or boot's); the next is scheduled. */
  schedule(id: string, failedAttempt: number, detail: string): void {
    if (this.closed) return;
    const next = failedAttempt + 1;
    const delay = this.delayBefore(next);
    this.failed(id, failedAttempt, detail, delay);
    this.cancel(id);
    // Unref'd: a pending retry never keeps the supervisor alive; close() ends them all.
    const timer = setTimeout(() => void this.run(id, next), delay).unref();
    this.pending.set(id, { attempt: next, timer });
  }

  /** A delete of `id` succeeded some other way (a client's retry): no more attempts. */
  cancel(id: string): void {
    const entry = this.pending.get(id);
    if (entry) clearTimeout(entry.timer);
    this.pending.delete(id);
  }

  close(): void {
    this.closed = true;
    for (const id of [...this.pending.keys()]) this.cancel(id);
  }

  private async run(id: string, attempt: number): Promise<void> {
    this.pending.delete(id);
    if (this.closed) return;
    let outcome: Result;
    try {
      outcome = await this.attempt(id);
    } catch (error) {
      outcome = { ok: false, reason: 'internal_error', detail: (error as Error).message };
    }
    if (!outcome.ok) this.schedule(id, attempt, outcome.detail);
  }
}
