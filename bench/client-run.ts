/**
 * The typed client's `run()` against what it replaces: createTurn, then attach, drain the output
 * and read the result. Both run `/bin/true` as a turn of a real `turnhost serve` on its unix
 * socket (shared_uid, root; cgroup, namespaces, seccomp, egress proxy), interleaved round by round, next to
 * a plain `spawn('/bin/true')` measured in the same run; p50/p95 and ratios.
 * Run as root after `make build-ts build-native`: npx tsx bench/client-run.ts [ROUNDS=40]
 */
import { spawn } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { createClient } from '../client/index.js';
import { startSupervisor } from '../test/support/served-supervisor.js';

const ROUNDS = Number(process.argv[2] ?? 40);
const WARM_UP = 3;

const served = await startSupervisor({ name: 'bench-client-run' });
const client = createClient({ server: `unix:${served.serverSocket}`, token: served.token });
const request = { mode: 'ordinary' as const, argv: ['/bin/true'], cwd: served.workspace };

async function viaRun(): Promise<void> {
  const ran = await client.run(request.argv, { cwd: request.cwd, sessionId: 'bench-run' });
  if (ran.exitCode !== 0) throw new Error(`run(): exit ${ran.exitCode}`);
}

async function viaCreateAndAttach(): Promise<void> {
  const turn = await client.createTurn({ ...request, sessionId: 'bench-attach' });
  const attached = await client.attachTurn(turn.id);
  for await (const _ of attached.output);
  const result = await attached.result;
  if (result?.exitCode !== 0) throw new Error(`createTurn + attach: ${JSON.stringify(result)}`);
}

function plainSpawn(): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('/bin/true', { stdio: 'ignore' });
    child.on('error', reject);
    child.on('close', () => resolve());
  });
}

const cases: Array<[string, () => Promise<void>]> = [
  ["spawn('/bin/true') (baseline)", plainSpawn],
  ['createTurn + attach + result', viaCreateAndAttach],
  ['run() (create with wait, output)', viaRun],
];
const samples = new Map<string, number[]>(cases.map(([label]) => [label, []]));
for (let round = 0; round < WARM_UP + ROUNDS; round++) {
  for (const [label, once] of cases) {
    const started = performance.now();
    await once();
    if (round >= WARM_UP) samples.get(label)!.push(performance.now() - started);
  }
}

function percentile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

const base = samples.get(cases[0]![0])!;
const attach = samples.get(cases[1]![0])!;
console.log(`rounds ${ROUNDS} (after ${WARM_UP} warm-up), interleaved; ms`);
for (const [label] of cases) {
  const values = samples.get(label)!;
  const p50 = percentile(values, 0.5);
  const p95 = percentile(values, 0.95);
  console.log(
    `${label.padEnd(36)} p50 ${p50.toFixed(1).padStart(7)}  p95 ${p95.toFixed(1).padStart(7)}` +
      `  x spawn ${(p50 / percentile(base, 0.5)).toFixed(1).padStart(6)}` +
      `  x create+attach ${(p50 / percentile(attach, 0.5)).toFixed(2)}`,
  );
}
await served.stop();
