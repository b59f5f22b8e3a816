/**
 * Observing prepared workers from a test: their processes (by uid in the harness's range) and
 * the pool's counts through the turn manager.
 */
import { liveProcesses, type LiveProcess } from './processes.js';
import type { TurnHarness } from './turn-harness.js';
import { until } from './until.js';

export type WorkerProcess = LiveProcess;

/** Every live process whose real uid lies in the harness's worker uid range. */
export function workerUidProcesses(harness: Pick<TurnHarness, 'uidRange'>): WorkerProcess[] {
  const { first, count } = harness.uidRange;
  return liveProcesses().filter(({ uid }) => uid >= first && uid < first + count);
}

/** The workers among them: each is pid 2 of its turn's pid namespace, beneath the turn's init. */
export function workerProcesses(harness: Pick<TurnHarness, 'uidRange'>): WorkerProcess[] {
  return workerUidProcesses(harness).filter((process) => process.innermostPid === 2);
}

// A bound on a hang, not a timing assertion: a prepared worker is ready within a second or two.
const WAIT_MS = 60_000;

async function waitUntil(condition: () => boolean, what: string): Promise<void> {
  if (!(await until(condition, WAIT_MS))) throw new Error(`gave up waiting until ${what}`);
}

/**
 * Waits until exactly one worker is prepared and ready (and, with `replacing`, it is not that
 * uid's: the pool replaces workers after the turn that triggered it ended), and answers its process.
 */
export async function preparedWorker(harness: TurnHarness, replacing?: number): Promise<WorkerProcess> {
  let found: WorkerProcess | undefined;
  await waitUntil(() => {
    const counts = harness.turns.preparedWorkers();
    const processes = workerProcesses(harness);
    found = processes.length === 1 && counts.ready === 1 && counts.starting === 0 ? processes[0] : undefined;
    return found !== undefined && found.uid !== replacing;
  }, 'one prepared worker is ready');
  return found as WorkerProcess;
}

/** Waits until the pool is empty and no worker process is left. */
export async function noPreparedWorker(harness: TurnHarness): Promise<void> {
  await waitUntil(() => {
    const counts = harness.turns.preparedWorkers();
    return counts.ready === 0 && counts.starting === 0 && workerUidProcesses(harness).length === 0;
  }, 'no prepared worker is left');
}
