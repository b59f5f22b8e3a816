/**
 * Density: N concurrent turns of `sleep` through the API of a real `turnhost serve`, against N
 * bubblewrap sandboxes (`bwrap --unshare-all --ro-bind / / sleep`) in the same run, for each N:
 * - memory: the resident memory (PSS from /proc/<pid>/smaps_rollup, and RSS) of every process
 *   of the turns but the command itself (the helper's monitor and init, the worker, ...), per
 *   turn, by process name, against bubblewrap's own processes per sandbox (all but the sleep);
 *   goal <= 4 MiB per turn;
 * - the time from the first POST until all N turns have started (every POST answered, which it
 *   is once the turn's command runs), against the time until all N bubblewrap sleeps exist;
 * - once every turn was cancelled and ended: the leak check (turn cgroup leaves, mounts, the
 *   supervisor's fds, held uid locks, processes of the turns).
 * The supervisor is sized for N: `turns.maxConcurrent` N (its status shows it), a separate_uid
 * worker uid range of N+8 uids, per-turn limits small enough for N at once, no prepared workers.
 * Run as root, after `npx tsc -p tsconfig.json && make -C identity-helper all`:
 *   npx tsx bench/density.ts [N list, default 20,100; e.g. 20,100,1000] [identity: separate_uid|shared_uid|both]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import {
  BenchServer,
  BWRAP_ARGS,
  descendants,
  describeLeftovers,
  hasProgram,
  identityChoices,
  listProcesses,
  memoryOf,
  MiB,
  type IdentityChoice,
  type Memory,
  type ProcessFacts,
} from './served-turns.js';

const SIZES = (process.argv[2] ?? '20,100').split(',').map(Number);
if (SIZES.some((n) => !Number.isInteger(n) || n < 1 || n > 1000))
  throw new Error('N list: expected comma-separated integers from 1 to 1000');
const IDENTITIES = identityChoices(process.argv[3], 'separate_uid');
/** Worker uids 3_293_000-3_293_999 (no test file uses 3_29x_xxx), room for N = 1000 and a few more. */
const UID_BASE = 3_293_000;
const MEMORY_GOAL = 4 * MiB;
/** The command every turn and sandbox runs; long enough to outlast the measurement. */
const COMMAND = ['sleep', '3600'];

interface Sample {
  label: string;
  n: number;
  memory: Memory;
  processes: number;
  byName: Map<string, Memory & { count: number }>;
  startedMs: number;
}

function byName(processes: ProcessFacts[]): Map<string, Memory & { count: number }> {
  const names = new Map<string, Memory & { count: number }>();
  for (const p of processes) {
    const memory = memoryOf([p.pid]);
    const entry = names.get(p.comm) ?? { rss: 0, pss: 0, count: 0 };
    names.set(p.comm, { rss: entry.rss + memory.rss, pss: entry.pss + memory.pss, count: entry.count + 1 });
  }
  return names;
}

function notTheCommand(p: ProcessFacts): boolean {
  return p.comm !== COMMAND[0];
}

async function densityOfTurnhost(identity: IdentityChoice, n: number): Promise<Sample> {
  const server = await BenchServer.start({
    name: `bench-density-${identity === 'separate_uid' ? 's' : 'h'}${n}`,
    identity,
    uidRange: { first: UID_BASE, count: Math.min(1000, n + 8) },
    limits: { memory: '256M', pids: 64, cpu: 1, open_files: 256, tmp_size: '4M' },
    turns: { maxConcurrent: n, preparedWorkers: 0 },
  });
  try {
    await server.runToExit(['/bin/true']);
    await server.takeBaseline();
    const capacity = (await server.status()).runtime.concurrency as { maxConcurrent: number; reason: string };
    console.log(`  status: ${capacity.reason}`);
    if (capacity.maxConcurrent < n) throw new Error(`the supervisor admits ${capacity.maxConcurrent} turns, not ${n}`);
    const start = performance.now();
    const turns = await Promise.all(
      Array.from({ length: n }, (_, i) => server.createTurn(COMMAND, { sessionId: `density-${i % 16}`, fresh: true })),
    ).catch((error: unknown) => {
      throw new Error(`${(error as Error).message}\nthe supervisor's log ends:\n${server.logTail()}`);
    });
    const startedMs = performance.now() - start;
    const all = listProcesses();
    const processes = server.turnProcesses(all).filter(notTheCommand);
    const commands = server.turnProcesses(all).filter((p) => !notTheCommand(p)).length;
    if (commands !== n) console.log(`  warning: ${commands} sleep processes for ${n} turns`);
    const sample: Sample = {
      label: `turnhost ${identity}`,
      n,
      memory: memoryOf(processes.map((p) => p.pid)),
      processes: processes.length,
      byName: byName(processes),
      startedMs,
    };
    await Promise.all(turns.map((turn) => server.cancel(turn.id)));
    console.log(`  after all ${n} ended: ${describeLeftovers(await server.leftovers())}`);
    return sample;
  } finally {
    await server.stop();
  }
}

async function densityOfBwrap(n: number): Promise<Sample> {
  const children: ChildProcess[] = [];
  const start = performance.now();
  for (let i = 0; i < n; i++) children.push(spawn('bwrap', [...BWRAP_ARGS, ...COMMAND], { stdio: 'ignore' }));
  const pids = new Set(children.map((c) => c.pid ?? -1));
  const sandboxProcesses = (): ProcessFacts[] => {
    const all = listProcesses();
    return [...all.filter((p) => pids.has(p.pid)), ...[...pids].flatMap((pid) => descendants(pid, all))];
  };
  for (;;) {
    const sleeping = sandboxProcesses().filter((p) => !notTheCommand(p)).length;
    if (sleeping >= n) break;
    if (children.some((c) => c.exitCode !== null)) throw new Error('a bwrap sandbox exited early');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  const startedMs = performance.now() - start;
  const own = sandboxProcesses().filter(notTheCommand);
  const sample: Sample = {
    label: 'bwrap',
    n,
    memory: memoryOf(own.map((p) => p.pid)),
    processes: own.length,
    byName: byName(own),
    startedMs,
  };
  await Promise.all(
    children.map(
      (child) =>
        new Promise((resolve) => {
          child.once('close', resolve);
          child.kill('SIGKILL');
        }),
    ),
  );
  return sample;
}

function mib(bytes: number): string {
  return `${(bytes / MiB).toFixed(2)} MiB`;
}

function report(samples: Sample[]): void {
  const bwrap = samples.find((s) => s.label === 'bwrap');
  for (const s of samples) {
    const pss = s.memory.pss / s.n;
    const ratio = (mine: number, theirs: number): string => (bwrap ? ` (${(mine / theirs).toFixed(1)}x bwrap)` : '');
    const rss = s.memory.rss / s.n;
    const goal =
      s.label === 'bwrap'
        ? ''
        : `; goal <= 4 MiB per turn: PSS ${pss <= MEMORY_GOAL ? 'met' : 'NOT met'}, RSS ${rss <= MEMORY_GOAL ? 'met' : 'NOT met'}`;
    console.log(
      `  ${s.label.padEnd(22)} per turn: PSS ${mib(pss)}${ratio(pss, (bwrap?.memory.pss ?? 0) / (bwrap?.n ?? 1))}, ` +
        `RSS ${mib(rss)}${ratio(rss, (bwrap?.memory.rss ?? 0) / (bwrap?.n ?? 1))}, ` +
        `${(s.processes / s.n).toFixed(1)} processes${goal}`,
    );
    const names = [...s.byName].sort((a, b) => b[1].pss - a[1].pss);
    console.log(
      `  ${''.padEnd(22)} by process: ${names.map(([name, m]) => `${name} x${(m.count / s.n).toFixed(1)} ${mib(m.pss / s.n)}`).join(', ')}`,
    );
    const startRatio = bwrap ? ` (${(s.startedMs / bwrap.startedMs).toFixed(1)}x bwrap)` : '';
    console.log(`  ${''.padEnd(22)} all ${s.n} started after ${s.startedMs.toFixed(0)} ms${startRatio}`);
  }
}

async function main(): Promise<void> {
  if (process.geteuid?.() !== 0)
    throw new Error('run as root: the supervisor needs the helper, cgroups and namespaces');
  if (!hasProgram('bwrap')) throw new Error('bwrap not installed (apt-get install -y bubblewrap): it is the baseline');
  console.log(
    `density bench: N = ${SIZES.join(', ')} concurrent sleeps; ${IDENTITIES.join(' and ')}; ${os.cpus().length} cpus, ` +
      `${(os.totalmem() / 1024 ** 3).toFixed(1)} GiB, load ${os.loadavg()[0]!.toFixed(2)}`,
  );
  for (const n of SIZES) {
    console.log(`\nN = ${n}`);
    const samples: Sample[] = [await densityOfBwrap(n)];
    for (const identity of IDENTITIES) samples.push(await densityOfTurnhost(identity, n));
    report(samples);
  }
  console.log(`\nload average at the end: ${os.loadavg()[0]!.toFixed(2)}`);
}

await main();
