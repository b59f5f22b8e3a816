/**
 * What a worker holds (uid, temp, cgroup leaf, proxy, listener channel, ...), released in the
 * reverse order it was taken. Every acquisition in the lifecycle defers its release here at
 * once, so a failure at any later step releases exactly what was taken before it.
 */
export class DisposalScope {
  private steps: Array<() => void | Promise<void>> = [];

  defer(step: () => void | Promise<void>): void {
    this.steps.push(step);
  }

  /** Runs every deferred release, newest first; one that throws does not stop the others. */
  async dispose(): Promise<void> {
    const steps = this.steps.reverse();
    this.steps = [];
    for (const step of steps) {
      try {
        await step();
      } catch {
        // Release is best effort per step: the remaining ones must still run.
      }
    }
  }
}
