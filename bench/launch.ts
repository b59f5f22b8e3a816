/**
 * Launch latency of one `/bin/true` turn through the full turnhost pipeline (per-turn probe,
 * limits, egress proxy, turn cgroup, identity helper, namespaces, seccomp, Node worker) next
 * to plain spawn, setpriv + unshare -n and bubblewrap, all measured in the same run and printed
 * as p50/p95/mean with ratios. The pipeline is timed three ways: claiming a prepared worker
 * (the default; the bench waits, untimed, until the pool refilled after the previous turn),
 * back to back with no such wait, and with prepared workers off (`turns.preparedWorkers: 0`). A second table times each phase of the pipeline on its own,
 * through the same functions the launch sequence calls, to show where the time goes.
 * Run as root, after `npx tsc -p tsconfig.json && make -C identity-helper all`:
 *   npx tsx bench/launch.ts [rounds, default 40] [warm-up, default 5]
 * With BENCH_CLI_CONFIG=<turnhost.json> and BENCH_CLI_SERVER=<http://host:port | unix:/path>
 * of a running `turnhost serve` (e.g. set up by dist/supervisor/dev-setup.js), the comparison
 * also times `turnhost run -- /bin/true` end to end and the CLI's own start (`--help`).
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { discoverCgroupLayout } from '../cgroup/discover.js';
import { createTurnCgroup, listTurnCgroups, prepareCgroupSubtree, removeCgroupSubtree } from '../cgroup/turn-cgroup.js';
import { createMemoryLogger } from '../core/log.js';
import { buildTurnPolicy } from '../proxy/policy.js';
import { startTurnProxy } from '../proxy/server.js';
import { closeChannelEnd, openListenerChannel } from '../supervisor/turns/listener-channel.js';
import { kernelRelay } from '../proxy/relay/kernel-relay.js';
import { closeRoot, openRoot } from '../supervisor/fs/guard.js';
import { runHelperProbe } from '../supervisor/identity/helper-probe.js';
import { measureTurnTmp } from '../supervisor/turns/turn-tmp.js';
import { probeMode } from '../supervisor/probes/index.js';
import { probeLandlock, probeNetworkNamespaces, probeSeccomp } from '../supervisor/probes/facilities.js';
import { encodeMessage, type LaunchMessage } from '../supervisor/turns/worker-protocol.js';
import type { TurnhostConfig } from '../supervisor/config/types.js';
import type { EventStore } from '../supervisor/events/types.js';
import type { TurnManager } from '../supervisor/turns/types.js';

const ITERATIONS = Number(process.argv[2] ?? 40);
const WARMUP = Number(process.argv[3] ?? 5);
/** A uid outside every test file's range (the harness derives ranges from the slot). */
const HARNESS_SLOT = 90;
const COLD_HARNESS_SLOT = 91;
const PLAIN_UID = 3_190_500;

/** The part of test/support/turn-harness.ts this bench uses. */
interface TurnHarness {
  turns: TurnManager;
  events: EventStore;
  config: TurnhostConfig;
  workspace: string;
  uidRange: { first: number; count: number };
  close(): Promise<void>;
}
interface HarnessModule {
  createTurnHarness: (options: { slot: number; configure?: (config: TurnhostConfig) => void }) => Promise<TurnHarness>;
  WORKER_ENTRY: string;
}

/**
 * Loaded by a computed specifier so tsc keeps test code out of the build (dist is packaged);
 * the bench runs under tsx, which loads the TypeScript source.
 */
const HARNESS_MODULE = ['..', 'test', 'support', 'turn-harness.js'].join('/');
const { createTurnHarness, WORKER_ENTRY } = (await import(HARNESS_MODULE)) as HarnessModule;
const PREPARED_WORKERS_MODULE = ['..', 'test', 'support', 'prepared-workers.js'].join('/');
const { workerUidProcesses: workerProcesses } = (await import(PREPARED_WORKERS_MODULE)) as {
  workerUidProcesses: (harness: Pick<TurnHarness, 'uidRange'>) => Array<{ pid: number; uid: number }>;
};

interface Figures {
  p50: number;
  p95: number;
  mean: number;
}

function percentile(sorted: number[], q: number): number {
  const index = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[index] ?? NaN;
}

function summarize(samples: number[]): Figures {
  const sorted = [...samples].sort((a, b) => a - b);
  const mean = samples.reduce((sum, v) => sum + v, 0) / samples.length;
  return { p50: percentile(sorted, 0.5), p95: percentile(sorted, 0.95), mean };
}

interface Case {
  label: string;
  body: () => Promise<unknown>;
  /** Runs untimed before each timed body. */
  settle?: () => Promise<void>;
}

/**
 * Round robin: one iteration of every case per round, so load from other work on the machine
 * falls on all cases alike and the ratios stay honest.
 */
async function measureInterleaved(cases: Case[]): Promise<Map<string, Figures>> {
  for (let i = 0; i < WARMUP; i++) for (const c of cases) await c.body();
  const samples = new Map<string, number[]>(cases.map((c) => [c.label, []]));
  for (let i = 0; i < ITERATIONS; i++) {
    for (const c of cases) {
      await c.settle?.();
      const start = performance.now();
      await c.body();
      samples.get(c.label)?.push(performance.now() - start);
    }
  }
  return new Map([...samples].map(([label, values]) => [label, summarize(values)]));
}

/** Runs a program to its exit; a nonzero exit aborts the bench (a broken case measures nothing). */
function runToExit(file: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { stdio: 'ignore' });
    child.on('error', reject);
    child.on('close', (code, signal) =>
      code === 0 ? resolve() : reject(new Error(`${file} ${args.join(' ')}: exit ${code ?? signal}`)),
    );
  });
}

function hasProgram(name: string): boolean {
  return ['/usr/bin', '/bin', '/usr/sbin', '/sbin'].some((dir) => fs.existsSync(path.join(dir, name)));
}

/** One turn through the real manager; records in `startup` the time until `create` resolved (the worker reported `started`). */
async function pipelineTurn(harness: TurnHarness, startup?: number[]): Promise<void> {
  const start = performance.now();
  const created = await harness.turns.create({
    sessionId: 'session-bench',
    mode: 'ordinary',
    cwd: harness.workspace,
    argv: ['/bin/true'],
  });
  if (!created.ok) throw new Error(`turn refused: ${created.reason}: ${created.detail}`);
  startup?.push(performance.now() - start);
  const result = await harness.turns.wait(created.turn.id);
  if (result?.status !== 'ok') throw new Error(`turn ended ${result?.status}: ${result?.detail ?? ''}`);
}

/**
 * The worker alone, as root without the helper: node startup, module load, seccomp, command,
 * exit report. The turn manager has already marked this process's inherited fds close-on-exec,
 * which the worker's fd check requires.
 */
function workerAlone(workspace: string): Promise<void> {
  const launch: LaunchMessage = {
    type: 'launch',
    v: 1,
    argv: ['/bin/true'],
    cwd: workspace,
    env: { PATH: '/usr/bin:/bin' },
    tty: null,
    egress: false,
  };
  const encoded = encodeMessage(launch);
  if (!encoded.ok) throw new Error(encoded.detail);
  // The worker requires its listener channel at fd 4 and sends its listener there; nobody takes it here.
  const channel = openListenerChannel();
  if (!channel.ok) throw new Error(channel.detail);
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [WORKER_ENTRY], {
      stdio: ['ignore', 'ignore', 'pipe', 'pipe', channel.workerFd],
      cwd: workspace,
      env: {},
    });
    closeChannelEnd(channel.workerFd);
    child.on('close', () => closeChannelEnd(channel.supervisorFd));
    const protocol = child.stdio[3] as net.Socket;
    protocol.on('error', () => undefined);
    protocol.write(encoded.line);
    let stderr = '';
    child.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
    child.on('close', (code) => (code === 0 ? resolve() : reject(new Error(`worker exit ${code}: ${stderr}`))));
  });
}

/** The CLI against a running server, when the environment names one. */
function cliCases(cwd: string): Case[] {
  const config = process.env.BENCH_CLI_CONFIG;
  const server = process.env.BENCH_CLI_SERVER;
  if (!config || !server) return [];
  const cli = path.join(path.dirname(WORKER_ENTRY), '../supervisor/cli/main.js');
  return [
    { label: 'turnhost --help (CLI start only)', body: () => runToExit(process.execPath, [cli, '--help']) },
    {
      label: 'turnhost run -- /bin/true (CLI + server)',
      body: () =>
        runToExit(process.execPath, [
          cli,
          'run',
          '--config',
          config,
          '--server',
          server,
          '--cwd',
          cwd,
          '--',
          '/bin/true',
        ]),
    },
  ];
}

function figuresRow(label: string, f: Figures, tail: string): string {
  return `${label.padEnd(46)} ${f.p50.toFixed(1).padStart(7)} ${f.p95.toFixed(1).padStart(7)} ${f.mean.toFixed(1).padStart(7)} ${tail}`;
}

function ratio(f: Figures, base: Figures | undefined): string {
  return (base ? `${(f.p50 / base.p50).toFixed(2)}x` : '-').padStart(8);
}

/**
 * Until no prepared worker is starting any more (at most 5 s): a worker booting in the
 * background would slow whichever case runs next. Run untimed before every case.
 */
async function poolSettled(harness: TurnHarness): Promise<void> {
  for (let waited = 0; waited < 5000 && harness.turns.preparedWorkers().starting > 0; waited += 5) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

const PREPARED_LABEL = 'turnhost pipeline, prepared worker';

/** The comparison: plain spawn, setpriv + unshare, bwrap and the full pipeline. */
async function compareLaunchers(harness: TurnHarness, cold: TurnHarness): Promise<Figures | undefined> {
  const withBwrap = hasProgram('bwrap');
  if (!withBwrap) console.log('bwrap not installed (apt-get install -y bubblewrap): its column is empty');
  const startup: number[] = [];
  const cases: Case[] = [
    { label: 'spawn /bin/true', body: () => runToExit('/bin/true', []) },
    // setpriv first drops every capability, after which unshare -n is refused; the privileged
    // order (namespace first, then the identity switch) is the one the helper uses too.
    {
      label: 'unshare -n setpriv --reuid (no_new_privs)',
      body: () =>
        runToExit('unshare', [
          '-n',
          'setpriv',
          `--reuid=${PLAIN_UID}`,
          `--regid=${PLAIN_UID}`,
          '--clear-groups',
          '--no-new-privs',
          '/bin/true',
        ]),
    },
    ...(withBwrap
      ? [
          {
            label: 'bwrap --unshare-all --ro-bind / /',
            body: () => runToExit('bwrap', ['--unshare-all', '--die-with-parent', '--ro-bind', '/', '/', '/bin/true']),
          },
        ]
      : []),
    { label: PREPARED_LABEL, body: () => pipelineTurn(harness, startup) },
    // The timed turn arrives the moment the previous one ended: its worker is still starting.
    {
      label: 'turnhost pipeline, back to back',
      body: () => pipelineTurn(harness),
      settle: () => pipelineTurn(harness),
    },
    { label: 'turnhost pipeline, preparedWorkers 0', body: () => pipelineTurn(cold) },
    ...cliCases(harness.workspace),
  ];
  const settled = cases.map((c) => ({
    ...c,
    settle: async () => {
      await poolSettled(harness);
      await c.settle?.();
    },
  }));
  const figures = await measureInterleaved(settled);
  const plain = figures.get('spawn /bin/true');
  const bwrap = figures.get('bwrap --unshare-all --ro-bind / /');
  const full = figures.get(PREPARED_LABEL);
  const rows = [...figures].flatMap(([label, f]): Array<[string, Figures]> =>
    f === full
      ? [
          [label, f],
          ['  of which create (until worker `started`)', summarize(startup.slice(WARMUP))],
        ]
      : [[label, f]],
  );
  console.log(
    `\n${'case'.padEnd(46)} ${'p50'.padStart(7)} ${'p95'.padStart(7)} ${'mean'.padStart(7)} ${'/spawn'.padStart(8)} ${'/bwrap'.padStart(8)}`,
  );
  for (const [label, f] of rows) console.log(figuresRow(label, f, `${ratio(f, plain)} ${ratio(f, bwrap)}`));
  if (bwrap && full) {
    const times = full.p50 / bwrap.p50;
    console.log(
      `goal full pipeline p50 <= 3x bwrap (prepared worker): ${times.toFixed(2)}x, ${times <= 3 ? 'met' : 'NOT met'}`,
    );
  }
  return full;
}

/** Each phase of the launch sequence alone, through the functions the turn lifecycle calls. */
async function timePhases(harness: TurnHarness, full: Figures | undefined): Promise<void> {
  const { config } = harness;
  const helperPath = config.identityHelper.path;
  if (helperPath === null) throw new Error('the harness configured no identity helper');
  const helper = { path: helperPath, configPath: config.identityHelper.configPath };
  const { logger } = createMemoryLogger('error');
  const probeContext = { config, logger, env: {}, helperProbe: () => runHelperProbe(helper) };
  const policy = buildTurnPolicy(config.egress, { mode: 'ordinary' });
  if (!policy.ok) throw new Error(policy.detail);
  const scratch = fs.mkdtempSync('/run/turnhost-bench-launch-');
  fs.chmodSync(scratch, 0o711);
  const subtree = prepareCgroupSubtree(discoverCgroupLayout(config.probeRoots), {
    name: `thbench-launch-${process.pid}`,
  });
  if (!subtree.ok) throw new Error(subtree.detail);
  const limits = { memory: 512 * 1024 * 1024, pids: 128, cpu: 1 };
  const joinLeaf = createTurnCgroup(subtree.subtree, 'bench-join', limits);
  if (!joinLeaf.ok) throw new Error(joinLeaf.detail);
  const joinEvery = joinLeaf.cgroup.paths.map((dir) => `echo $$ > '${dir}/cgroup.procs'`).join('; ');
  let n = 0;
  const cases: Case[] = [
    { label: 'probeMode (whole per-turn probe)', body: () => probeMode(probeContext, 'ordinary', 'turn') },
    { label: '  probe: unshare --net true', body: () => probeNetworkNamespaces(true) },
    { label: '  probe: helper probe (exec + receipt)', body: () => runHelperProbe(helper) },
    {
      label: '  probe: seccomp actions, landlock, cgroups',
      body: async () => [probeSeccomp('/proc'), probeLandlock(), discoverCgroupLayout(config.probeRoots)],
    },
    {
      label: 'egress proxy start + close',
      body: async () => {
        const proxy = await startTurnProxy({
          socketPath: path.join(scratch, `p${n++}.sock`),
          allowedPeerUid: PLAIN_UID,
          policy: policy.policy,
          caps: { maxConnections: 8, maxBytes: 1 << 20, idleTimeoutMs: 1000 },
          sink: harness.events,
          turn: { sessionId: 'session-bench', turnId: 'turn-bench', profile: 'governed', model: null },
          logger,
        });
        if (!proxy.ok) throw new Error(proxy.detail);
        await proxy.close();
      },
    },
    {
      label: 'turn cgroup create + kill + stats + remove',
      body: async () => {
        const leaf = createTurnCgroup(subtree.subtree, `bench-${n++}`, limits);
        if (!leaf.ok) throw new Error(leaf.detail);
        leaf.cgroup.kill();
        leaf.cgroup.stats();
        const removed = leaf.cgroup.remove();
        if (!removed.ok) throw new Error(removed.detail);
      },
    },
    { label: 'sh -c "exec true" (baseline for the join)', body: () => runToExit('sh', ['-c', 'exec true']) },
    {
      label: `sh joining ${joinLeaf.cgroup.paths.length} turn leaves, exec true`,
      body: () => runToExit('sh', ['-c', `${joinEvery}; exec true`]),
    },
    {
      label: 'workspace root open + turn tmp measure',
      body: async () => {
        const workspace = openRoot(harness.workspace);
        if (!workspace.ok) throw new Error(workspace.detail);
        // /dev/shm stands in for the turn's tmpfs: the measure is one statfs of a held fd.
        const tmp = fs.openSync('/dev/shm', fs.constants.O_RDONLY | fs.constants.O_DIRECTORY);
        measureTurnTmp(tmp);
        fs.closeSync(tmp);
        closeRoot(workspace);
      },
    },
    { label: 'node -e 0', body: () => runToExit(process.execPath, ['-e', '0']) },
    { label: 'node -e "require(\'koffi\')"', body: () => runToExit(process.execPath, ['-e', "require('koffi')"]) },
    { label: 'worker alone (node, modules, seccomp, command)', body: () => workerAlone(harness.workspace) },
  ];
  try {
    const figures = await measureInterleaved(cases);
    console.log('\nphases, each timed alone through the functions the launch sequence calls:');
    console.log(
      `${'phase'.padEnd(46)} ${'p50'.padStart(7)} ${'p95'.padStart(7)} ${'mean'.padStart(7)} ${'/full'.padStart(8)}`,
    );
    for (const [label, f] of figures)
      console.log(figuresRow(label, f, (full ? `${((100 * f.p50) / full.p50).toFixed(0)}%` : '-').padStart(8)));
  } finally {
    joinLeaf.cgroup.kill();
    joinLeaf.cgroup.remove();
    removeCgroupSubtree(subtree.subtree);
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

function openFdCount(): number {
  return fs.readdirSync('/proc/self/fd').length;
}

/**
 * The cleanup check, on the real pipeline: no leaf, worker process or fd left behind
 * but the prepared workers, which are counted apart.
 */
function reportCleanup(harness: TurnHarness, slot: number): void {
  // The harness names its subtree so; preparing it again only opens the existing directories.
  const subtree = prepareCgroupSubtree(discoverCgroupLayout(harness.config.probeRoots), {
    name: `turnhost-test-${slot}-${process.pid}`,
  });
  const leaves = subtree.ok ? listTurnCgroups(subtree.subtree) : [];
  const prepared = leaves.filter((name) => name.startsWith('prepared_')).length;
  const processes = workerProcesses(harness);
  console.log(
    `cleanup (slot ${slot}) after ${ITERATIONS + WARMUP} rounds: ${subtree.ok ? leaves.length - prepared : `unknown (${subtree.detail})`} turn cgroup leaves left, ` +
      `${processes.length} worker-uid processes left (${prepared} prepared worker(s) idle by design)`,
  );
}

async function main(): Promise<void> {
  if (process.geteuid?.() !== 0) throw new Error('run as root: the pipeline needs the helper config and turn cgroups');
  const load = (): string =>
    os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ');
  console.log(
    `launch bench: ${ITERATIONS} rounds after ${WARMUP} warm-up, times in ms; ${os.cpus().length} cpus, load ${load()}`,
  );
  const fdsBefore = openFdCount();
  const harness = await createTurnHarness({ slot: HARNESS_SLOT });
  const cold = await createTurnHarness({
    slot: COLD_HARNESS_SLOT,
    configure: (config) => (config.turns.preparedWorkers = 0),
  });
  try {
    const full = await compareLaunchers(harness, cold);
    reportCleanup(harness, HARNESS_SLOT);
    reportCleanup(cold, COLD_HARNESS_SLOT);
    await timePhases(harness, full);
    console.log(`load average at the end: ${load()} (other work on the machine inflates every row alike)`);
  } finally {
    await harness.close();
    await cold.close();
  }
  // The turns' proxies started this process's kernel relay thread (16 fds, by design for the
  // process's life); stopped here so that the count shows what the turns themselves left.
  await kernelRelay().stop();
  console.log(`fds of this process before the harnesses and after closing them: ${fdsBefore} -> ${openFdCount()}`);
}

await main();
