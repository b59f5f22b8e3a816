/**
 * Where one launch's time goes, for the launch bench (bench/launch.ts) only: with
 * TURNHOST_BENCH_LAUNCH_PHASES naming a file in the supervisor's environment, each worker's
 * life appends one JSON line there, the wall-clock time (epoch ms, sub-ms) of each step it
 * passed, so the bench can line them up with the times it took on its side of the API.
 * Unset (always, outside the bench), a clock records nothing and costs one property read.
 * Nothing reads the file back and no decision depends on it: a write that fails is dropped.
 */
import fs from 'node:fs';
import { performance } from 'node:perf_hooks';

export const LAUNCH_PHASES_ENV = 'TURNHOST_BENCH_LAUNCH_PHASES';

/** One worker's marks, as the bench reads them. */
export interface LaunchPhaseLine {
  worker: string;
  turnId: string | null;
  marks: Array<[step: string, epochMs: number]>;
}

export class LaunchPhaseClock {
  private readonly marks: Array<[string, number]> = [];

  constructor(
    private readonly file: string | null,
    private readonly worker: string,
  ) {}

  mark(step: string): void {
    if (this.file !== null) this.marks.push([step, performance.timeOrigin + performance.now()]);
  }

  /** Appends the marks, naming the turn the worker served (null: none claimed it). */
  write(turnId: string | null): void {
    if (this.file === null) return;
    const line: LaunchPhaseLine = { worker: this.worker, turnId, marks: this.marks };
    try {
      fs.appendFileSync(this.file, `${JSON.stringify(line)}\n`);
    } catch {
      // A bench aid: the launch it measures must not depend on it.
    }
  }
}

/** The file is read once, at the supervisor's start: the flag belongs to the bench's own run. */
const phaseFile = process.env[LAUNCH_PHASES_ENV] || null;

export function launchPhaseClock(worker: string): LaunchPhaseClock {
  return new LaunchPhaseClock(phaseFile, worker);
}
