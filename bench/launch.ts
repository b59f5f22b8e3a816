/**
 * Launch latency of one `/bin/true` turn through the API of a real `turnhost serve`: POST
 * /api/turns?wait to the answer that carries the exit record, next to plain spawn, setpriv +
 * unshare -n and bubblewrap (`--unshare-all --ro-bind / /`), all interleaved round by round in
 * one run; p50/p95/mean and the ratios to bubblewrap's p50 and p95 from the same run, with the
 * goals printed beside them. Each identity mode (separate_uid through the identity helper,
 * shared_uid) is timed three ways:
 *   cold          a supervisor with `turns.preparedWorkers: 0`: every turn starts its own worker;
 *   back to back  the timed turn is posted the moment the previous one's answer arrived (what
 *                 a busy host sees): the pool's next worker is usually still booting;
 *   prepared      the bench waits, untimed, until the pool holds a ready worker of the same key
 *                 (mode, cwd, limits, view) and the turn claims it.
 * Then where the time went, step by step, from the supervisor's own marks
 * (TURNHOST_BENCH_LAUNCH_PHASES, supervisor/observe/launch-phases.ts); then a second table
 * times parts of the pipeline alone through the functions the launch calls; then the leak
 * check of every supervisor.
 * Run as root, after `npx tsc -p tsconfig.json && make -C identity-helper all`:
 *   npx tsx bench/launch.ts [rounds=40] [warm-up=5] [identity: both|separate_uid|shared_uid]
 * With BENCH_CLI_CONFIG=<turnhost.json> and BENCH_CLI_SERVER=<http://host:port | unix:/path>
 * of a running `turnhost serve` (e.g. set up by dist/supervisor/dev-setup.js), the comparison
 * also times `turnhost run -- /bin/true` end to end and the CLI's own start (`--help`).
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { discoverCgroupLayout } from '../cgroup/discover.js';
import { createTurnCgroup, prepareCgroupSubtree, removeCgroupSubtree } from '../cgroup/turn-cgroup.js';
import { createMemoryLogger } from '../core/log.js';
import { buildTurnPolicy } from '../proxy/policy.js';
import { startTurnProxy } from '../proxy/server.js';
import { kernelRelay } from '../proxy/relay/kernel-relay.js';
import { closeRoot, openRoot } from '../supervisor/fs/guard.js';
import { runHelperProbe } from '../supervisor/identity/helper-probe.js';
import { measureTurnTmp } from '../supervisor/turns/turn-tmp.js';
import { probeMode } from '../supervisor/probes/index.js';
import { probeLandlock, probeNetworkNamespaces, probeSeccomp } from '../supervisor/probes/facilities.js';
import { LAUNCH_PHASES_ENV, type LaunchPhaseLine } from '../supervisor/observe/launch-phases.js';
import type { TurnhostConfig } from '../supervisor/config/types.js';
import type { EventStore } from '../supervisor/events/types.js';
import {
  BenchServer,
  BWRAP_ARGS,
  hasProgram,
  identityChoices,
  percentile,
  runToExit,
  type IdentityChoice,
  describeLeftovers,
} from './served-turns.js';

const ITERATIONS = Number(process.argv[2] ?? 40);
const WARMUP = Number(process.argv[3] ?? 5);
const IDENTITIES = identityChoices(process.argv[4], 'both');
if (!Number.isInteger(ITERATIONS) || ITERATIONS < 1) throw new Error('rounds: expected a positive integer');
if (!Number.isInteger(WARMUP) || WARMUP < 0) throw new Error('warm-up: expected a non-negative integer');
/** The in-process harness of the phases-alone table (test/support/turn-harness.ts slots). */
const HARNESS_SLOT = 90;
const PLAIN_UID = 3_190_500;
/** The API supervisors' worker uid ranges: 3_292_000-3_292_999 (no test file uses 3_29x_xxx). */
const API_UID_BASE = 3_292_000;
const GOALS: Record<LaunchWay, number> = { cold: 3, 'back to back': 3, prepared: 2 };

type LaunchWay = 'cold' | 'back to back' | 'prepared';

/** The part of test/support/turn-harness.ts this bench uses. */
interface TurnHarness {
  events: EventStore;
  config: TurnhostConfig;
  workspace: string;
  close(): Promise<void>;
}
interface HarnessModule {
  createTurnHarness: (options: { slot: number; configure?: (config: TurnhostConfig) => void }) => Promise<TurnHarness>;
}

/**
 * Loaded by a computed specifier so tsc keeps test code out of the build (dist is packaged);
 * the bench runs under tsx, which loads the TypeScript source.
 */
const HARNESS_MODULE = ['..', 'test', 'support', 'turn-harness.js'].join('/');

interface Figures {
  p50: number;
  p95: number;
  mean: number;
}

function summarize(samples: number[]): Figures {
  const mean = samples.reduce((sum, v) => sum + v, 0) / samples.length;
  return { p50: percentile(samples, 0.5), p95: percentile(samples, 0.95), mean };
}

/** The wall clock the supervisor's marks use too (epoch ms, sub-ms). */
function wallNow(): number {
  return performance.timeOrigin + performance.now();
}

interface Case {
  label: string;
  /** Resolving to `NOT_A_SAMPLE` (a turn that failed, counted apart) keeps its time out. */
  body: () => Promise<unknown>;
  /** Runs untimed before each timed body. */
  settle?: () => Promise<void>;
}

const NOT_A_SAMPLE = Symbol('not a sample');

/**
 * Round robin: one iteration of every case per round, so load from other work on the machine
 * falls on all cases alike and the ratios stay honest.
 */
async function measureInterleaved(cases: Case[], warmedUp?: () => void): Promise<Map<string, Figures>> {
  for (let i = 0; i < WARMUP; i++)
    for (const c of cases) {
      await c.settle?.();
      await c.body();
    }
  warmedUp?.();
  const samples = new Map<string, number[]>(cases.map((c) => [c.label, []]));
  for (let i = 0; i < ITERATIONS; i++) {
    for (const c of cases) {
      await c.settle?.();
      const start = performance.now();
      const outcome = await c.body();
      if (outcome !== NOT_A_SAMPLE) samples.get(c.label)?.push(performance.now() - start);
    }
  }
  return new Map([...samples].map(([label, values]) => [label, summarize(values)]));
}

/** One API case: its server, and the POST and answer times of every timed turn, by turn id. */
interface ApiCase {
  label: string;
  identity: IdentityChoice;
  way: LaunchWay;
  server: BenchServer;
  phaseFile: string;
  posts: Map<string, { sent: number; answered: number }>;
  /** Turns that did not end ok: counted and shown, not timed. */
  failures: string[];
}

async function timedTurn(apiCase: ApiCase): Promise<typeof NOT_A_SAMPLE | undefined> {
  const sent = wallNow();
  try {
    const turn = await apiCase.server.runToExit(['/bin/true']);
    apiCase.posts.set(turn.id, { sent, answered: wallNow() });
    return undefined;
  } catch (error) {
    apiCase.failures.push((error as Error).message);
    return NOT_A_SAMPLE;
  }
}

/** The CLI against a running server, when the environment names one. */
function cliCases(cwd: string): Case[] {
  const config = process.env.BENCH_CLI_CONFIG;
  const server = process.env.BENCH_CLI_SERVER;
  if (!config || !server) return [];
  const cli = path.join(path.dirname(new URL(import.meta.url).pathname), '..', 'dist', 'supervisor', 'cli', 'main.js');
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

function times(value: number, base: number | undefined): string {
  return (base ? `${(value / base).toFixed(2)}x` : '-').padStart(8);
}

async function startApiServers(): Promise<ApiCase[]> {
  const cases: ApiCase[] = [];
  let index = 0;
  for (const identity of IDENTITIES) {
    for (const [pool, ways] of [
      [0, ['cold']],
      [1, ['back to back', 'prepared']],
    ] as Array<[number, LaunchWay[]]>) {
      const phaseFile = path.join(os.tmpdir(), `turnhost-bench-phases-${process.pid}-${index}.jsonl`);
      const server = await BenchServer.start({
        name: `bench-launch-${index}`,
        identity,
        uidRange: { first: API_UID_BASE + 100 * index, count: 16 },
        turns: { preparedWorkers: pool },
        env: { [LAUNCH_PHASES_ENV]: phaseFile },
      });
      index++;
      for (const way of ways)
        cases.push({
          label: `turnhost API, ${identity}, ${way}`,
          identity,
          way,
          server,
          phaseFile,
          posts: new Map(),
          failures: [],
        });
    }
  }
  return cases;
}

/** The comparison: plain spawn, setpriv + unshare, bwrap and the API cases, interleaved. */
async function compareLaunchers(apiCases: ApiCase[]): Promise<void> {
  const withBwrap = hasProgram('bwrap');
  if (!withBwrap) console.log('bwrap not installed (apt-get install -y bubblewrap): its ratios are empty');
  const servers = [...new Set(apiCases.map((c) => c.server))];
  const settleAll = async (): Promise<void> => {
    for (const server of servers) await server.poolSettled();
  };
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
      ? [{ label: 'bwrap --unshare-all --ro-bind / /', body: () => runToExit('bwrap', [...BWRAP_ARGS, '/bin/true']) }]
      : []),
    ...apiCases.map((apiCase): Case => ({
      label: apiCase.label,
      body: () => timedTurn(apiCase),
      // The previous turn of the same key just ended: its pool is booting the next worker.
      ...(apiCase.way === 'back to back'
        ? {
            settle: async () => {
              await timedTurn({ ...apiCase, posts: new Map() });
            },
          }
        : {}),
    })),
    ...cliCases(apiCases[0]?.server.workspace ?? '/'),
  ];
  // Before every case: no worker booting in the background, which would slow whichever case runs next.
  const settled = cases.map((c) => ({
    ...c,
    settle: async () => {
      await settleAll();
      await c.settle?.();
    },
  }));
  const figures = await measureInterleaved(settled, () =>
    apiCases.forEach((c) => {
      c.posts.clear();
      c.failures.splice(0);
    }),
  );
  const plain = figures.get('spawn /bin/true');
  const bwrap = figures.get('bwrap --unshare-all --ro-bind / /');
  console.log(
    `\n${'case'.padEnd(46)} ${'p50'.padStart(7)} ${'p95'.padStart(7)} ${'mean'.padStart(7)} ${'/spawn'.padStart(8)} ${'p50/bwrap'.padStart(9)} ${'p95/bwrap'.padStart(9)}  goal`,
  );
  for (const [label, f] of figures) {
    const apiCase = apiCases.find((c) => c.label === label);
    if (apiCase && apiCase.posts.size === 0) {
      console.log(`${label.padEnd(46)} no turn ended ok`);
      continue;
    }
    const goal = apiCase ? GOALS[apiCase.way] : undefined;
    const verdict =
      goal === undefined || bwrap === undefined
        ? ''
        : `  <= ${goal}x: p50 ${f.p50 / bwrap.p50 <= goal ? 'met' : 'NOT met'}, p95 ${f.p95 / bwrap.p95 <= goal ? 'met' : 'NOT met'}`;
    console.log(
      figuresRow(
        label,
        f,
        `${times(f.p50, plain?.p50)} ${times(f.p50, bwrap?.p50).padStart(9)} ${times(f.p95, bwrap?.p95).padStart(9)}${verdict}`,
      ),
    );
  }
  for (const apiCase of apiCases.filter((c) => c.failures.length > 0))
    console.log(
      `${apiCase.label}: ${apiCase.failures.length} turn(s) did not end ok (not timed); the first: ${apiCase.failures[0]}`,
    );
}

/** The supervisor's marks of each step of a worker's life (supervisor/turns/lifecycle.ts), in order. */
const STEPS: Array<[mark: string, label: string]> = [
  ['begin', 'launch begins (worker asked for)'],
  ['probed', '1 probe of the mode (identity, helper)'],
  ['acquired', '2 lease: uid hint, cgroup leaf, view keys, channel'],
  ['spawned', '3 helper exec (spawn)'],
  ['ready', '4 helper: view build + worker boot to ready'],
  ['proxied', '5 runtime dir + egress proxy'],
  ['claimed', '6 claimed by the turn'],
  ['bound', '7-8 claim checks, attestation, bind'],
  ['launched', '9-10 serve listener, launch message'],
  ['started', '11 launch to started'],
  ['exited', '12 command runs, exit report, drain'],
  ['disposed', '13 dispose (cgroup, proxy, uid, view)'],
  ['recorded', '14 exit to record (result, events)'],
];

/**
 * Where the time of each API case went: per step, the median of its duration (from the mark
 * before it in time) and of its moment relative to the POST; a negative moment happened
 * before the request (a prepared worker's boot).
 */
function printPhases(apiCases: ApiCase[]): void {
  const lines = new Map<string, Map<string, LaunchPhaseLine>>();
  for (const file of new Set(apiCases.map((c) => c.phaseFile))) {
    const byTurn = new Map<string, LaunchPhaseLine>();
    if (fs.existsSync(file))
      for (const text of fs.readFileSync(file, 'utf8').split('\n'))
        if (text !== '') {
          const line = JSON.parse(text) as LaunchPhaseLine;
          if (line.turnId !== null) byTurn.set(line.turnId, line);
        }
    lines.set(file, byTurn);
  }
  console.log(
    '\nwhere the time goes (supervisor marks; ms, medians over the timed turns; "at" is from the POST, negative = before it):',
  );
  for (const apiCase of apiCases) {
    const durations = new Map<string, number[]>();
    const moments = new Map<string, number[]>();
    const push = (map: Map<string, number[]>, key: string, value: number): void =>
      void map.set(key, [...(map.get(key) ?? []), value]);
    for (const [turnId, post] of apiCase.posts) {
      const line = lines.get(apiCase.phaseFile)?.get(turnId);
      if (line === undefined) continue;
      const marks: Array<[string, number]> = [
        ['POST sent', post.sent],
        ...line.marks,
        ['answer received', post.answered],
      ];
      marks.sort((a, b) => a[1] - b[1]);
      marks.forEach(([step, at], i) => {
        push(moments, step, at - post.sent);
        if (i > 0) push(durations, step, at - marks[i - 1]![1]);
      });
    }
    const matched = [...apiCase.posts.keys()].filter((id) => lines.get(apiCase.phaseFile)?.has(id)).length;
    console.log(`\n${apiCase.label} (${matched} turns with marks)`);
    console.log(`  ${'step'.padEnd(52)} ${'took'.padStart(7)} ${'at'.padStart(8)}`);
    const rows: Array<[string, string]> = [
      ...STEPS,
      ['POST sent', 'POST sent'],
      ['answer received', 'answer with the exit record received'],
    ];
    const ordered = rows
      .filter(([mark]) => moments.has(mark))
      .sort((a, b) => percentile(moments.get(a[0])!, 0.5) - percentile(moments.get(b[0])!, 0.5));
    for (const [mark, label] of ordered) {
      const took = durations.get(mark);
      console.log(
        `  ${label.padEnd(52)} ${(took ? percentile(took, 0.5).toFixed(1) : '-').padStart(7)} ${percentile(moments.get(mark)!, 0.5).toFixed(1).padStart(8)}`,
      );
    }
  }
}

/** Parts of the launch sequence alone, through the functions the turn lifecycle calls. */
async function timePhasesAlone(harness: TurnHarness): Promise<void> {
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
  ];
  try {
    const figures = await measureInterleaved(cases);
    console.log('\nparts, each timed alone through the functions the launch sequence calls:');
    console.log(`${'part'.padEnd(46)} ${'p50'.padStart(7)} ${'p95'.padStart(7)} ${'mean'.padStart(7)}`);
    for (const [label, f] of figures) console.log(figuresRow(label, f, ''));
  } finally {
    joinLeaf.cgroup.kill();
    joinLeaf.cgroup.remove();
    removeCgroupSubtree(subtree.subtree);
    fs.rmSync(scratch, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  if (process.geteuid?.() !== 0)
    throw new Error('run as root: the supervisors need the helper, cgroups and namespaces');
  const load = (): string =>
    os
      .loadavg()
      .map((l) => l.toFixed(2))
      .join(' ');
  console.log(
    `launch bench: ${ITERATIONS} rounds after ${WARMUP} warm-up, times in ms; ${IDENTITIES.join(' and ')}; ` +
      `${os.cpus().length} cpus, load ${load()}`,
  );
  const apiCases = await startApiServers();
  const servers = [...new Set(apiCases.map((c) => c.server))];
  try {
    // One turn each before the baseline: what a first turn sets up for good is not a leak.
    for (const server of servers) await server.runToExit(['/bin/true']);
    for (const server of servers) await server.poolSettled();
    for (const server of servers) await server.takeBaseline();
    await compareLaunchers(apiCases);
    printPhases(apiCases);
    console.log('\ncleanup check, after every timed turn ended:');
    for (const server of servers) {
      await server.poolSettled();
      const ways = apiCases.filter((c) => c.server === server).map((c) => c.way);
      console.log(`  ${server.options.identity}, ${ways.join(' + ')}: ${describeLeftovers(await server.leftovers())}`);
    }
  } finally {
    for (const server of servers) await server.stop();
    for (const file of new Set(apiCases.map((c) => c.phaseFile))) fs.rmSync(file, { force: true });
  }
  const { createTurnHarness } = (await import(HARNESS_MODULE)) as HarnessModule;
  const harness = await createTurnHarness({ slot: HARNESS_SLOT });
  try {
    await timePhasesAlone(harness);
  } finally {
    await harness.close();
  }
  // The harness's proxies started this process's kernel relay thread; stopped before exit.
  await kernelRelay().stop();
  console.log(`\nload average at the end: ${load()} (other work on the machine inflates every row alike)`);
}

await main();
