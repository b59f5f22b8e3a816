/**
 * Soak: TURNS turns through the API of a real `turnhost serve` (default configuration but for
 * the uid range and the workspace: prepared workers on, the derived `turns.maxConcurrent`),
 * CONCURRENCY at a time, each a short shell command with output to its exit record; then what
 * they left behind (turn cgroup leaves, mounts, the supervisor's fds, held uid locks,
 * processes of the turns) and the supervisor's resident memory (VmRSS) growth from after the
 * warm-up to the end; goal <= 10%. The RSS series is printed at every tenth of the run.
 * Run as root, after `npx tsc -p tsconfig.json && make -C identity-helper all`:
 *   npx tsx bench/soak.ts [turns=1000] [concurrency=4] [identity: separate_uid|shared_uid] [warm-up=50]
 * A turn that does not end `ok` is counted and shown, and the soak goes on. Exit status 1 when
 * a turn failed, anything was left or the goal was missed.
 */
import fs from 'node:fs';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { BenchServer, describeLeftovers, identityChoices, MiB, percentile } from './served-turns.js';

const TURNS = Number(process.argv[2] ?? 1000);
const CONCURRENCY = Number(process.argv[3] ?? 4);
const IDENTITIES = identityChoices(process.argv[4], 'separate_uid');
if (IDENTITIES.length !== 1) throw new Error('identity: one mode, not both');
const IDENTITY = IDENTITIES[0]!;
const WARMUP = Number(process.argv[5] ?? 50);
for (const [name, value] of [
  ['turns', TURNS],
  ['concurrency', CONCURRENCY],
  ['warm-up', WARMUP],
] as const)
  if (!Number.isInteger(value) || value < 1) throw new Error(`${name}: expected a positive integer`);
/** Worker uids 3_294_000 and up (no test file uses 3_29x_xxx). */
const UID_RANGE = { first: 3_294_000, count: 16 };
const RSS_GROWTH_GOAL = 0.1;

function rssOf(pid: number): number {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  return 1024 * Number(/^VmRSS:\s+([0-9]+) kB/m.exec(status)?.[1] ?? NaN);
}

/** The turns' latencies, and every turn that did not end `ok` (the soak goes on: it counts them). */
async function runTurns(
  server: BenchServer,
  count: number,
  onDone?: (done: number) => void,
): Promise<{ latencies: number[]; failures: string[] }> {
  const latencies: number[] = [];
  const failures: string[] = [];
  let next = 0;
  let done = 0;
  const lane = async (): Promise<void> => {
    while (next < count) {
      const index = next++;
      const start = performance.now();
      try {
        await server.runToExit(['/bin/sh', '-c', `echo soak ${index}; echo err >&2`]);
        latencies.push(performance.now() - start);
      } catch (error) {
        failures.push((error as Error).message);
      }
      onDone?.(++done);
    }
  };
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, count) }, lane));
  return { latencies, failures };
}

function reportFailures(when: string, failures: string[]): void {
  if (failures.length === 0) return;
  console.log(
    `${failures.length} turn(s) of the ${when} did not end ok; the first: ${failures.slice(0, 3).join(' | ')}`,
  );
}

async function main(): Promise<void> {
  if (process.geteuid?.() !== 0)
    throw new Error('run as root: the supervisor needs the helper, cgroups and namespaces');
  console.log(
    `soak: ${TURNS} turns, ${CONCURRENCY} at a time, after ${WARMUP} warm-up; ${IDENTITY}; ${os.cpus().length} cpus, load ${os.loadavg()[0]!.toFixed(2)}`,
  );
  const server = await BenchServer.start({
    name: 'bench-soak',
    identity: IDENTITY,
    uidRange: UID_RANGE,
    turns: { preparedWorkers: 1 },
  });
  let failed = false;
  try {
    const capacity = (await server.status()).runtime.concurrency as { maxConcurrent: number; reason: string };
    console.log(`status: ${capacity.reason}`);
    if (capacity.maxConcurrent < CONCURRENCY) throw new Error(`concurrency ${CONCURRENCY} exceeds the capacity`);
    reportFailures('warm-up', (await runTurns(server, WARMUP)).failures);
    await server.poolSettled();
    await server.takeBaseline();
    const rssBefore = rssOf(server.pid);
    const series: string[] = [];
    const tenth = Math.max(1, Math.floor(TURNS / 10));
    const start = performance.now();
    const { latencies, failures } = await runTurns(server, TURNS, (done) => {
      if (done % tenth === 0) series.push(`${done}: ${(rssOf(server.pid) / MiB).toFixed(1)}`);
    });
    const seconds = (performance.now() - start) / 1000;
    await server.poolSettled();
    const left = await server.leftovers();
    const rssAfter = rssOf(server.pid);
    const growth = (rssAfter - rssBefore) / rssBefore;
    console.log(
      `${TURNS} turns in ${seconds.toFixed(1)} s (${(TURNS / seconds).toFixed(1)}/s); POST to exit record p50 ` +
        `${percentile(latencies, 0.5).toFixed(1)} ms, p95 ${percentile(latencies, 0.95).toFixed(1)} ms`,
    );
    console.log(`supervisor RSS MiB by turns done: ${series.join(', ')}`);
    console.log(
      `supervisor RSS ${(rssBefore / MiB).toFixed(1)} -> ${(rssAfter / MiB).toFixed(1)} MiB: ` +
        `${(100 * growth).toFixed(1)}%; goal <= ${100 * RSS_GROWTH_GOAL}%: ${growth <= RSS_GROWTH_GOAL ? 'met' : 'NOT met'}`,
    );
    console.log(`left after ${TURNS} turns: ${describeLeftovers(left)}`);
    console.log(`turns that did not end ok: ${failures.length} of ${TURNS}`);
    reportFailures('soak', failures);
    const leaked =
      left.cgroupLeaves + left.mounts.length + Math.max(0, left.supervisorFds) + left.uidLocksHeld + left.processes;
    failed = leaked > 0 || growth > RSS_GROWTH_GOAL || failures.length > 0;
  } finally {
    await server.stop();
  }
  if (failed) process.exitCode = 1;
}

await main();
