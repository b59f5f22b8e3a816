/**
 * What the API benches (launch.ts, density.ts, soak.ts) share: a real `turnhost serve` as root,
 * in either identity mode (separate_uid through a root-owned helper copy and its uid range, or
 * shared_uid), driven through its HTTP API on its unix socket; the processes and memory of its
 * turns; and the leak check after they ended (turn cgroup leaves, mounts, the supervisor's fds,
 * held uid locks, processes of the turns). Nothing here names the worker: what runs inside the
 * sandbox is whatever the helper config of test/support/served-supervisor.ts launches.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { discoverCgroupLayout } from '../cgroup/discover.js';
import { turnSubtreeName } from '../supervisor/turns/launch-environment.js';

export type IdentityChoice = 'separate_uid' | 'shared_uid';
export type UidRange = { first: number; count: number };

/** The parts of test/support/served-supervisor.ts the benches use. */
interface HelperSetup {
  path: string;
  configPath: string;
  uidRange: UidRange;
  remove(): void;
}
interface ServedSupportModule {
  setUpHelper: (dataDirs: string[], uidRange: UidRange) => HelperSetup;
  supervisorBase: (name: string) => { base: string; dataDir: string; workspace: string };
  writeSupervisorConfig: (options: {
    name: string;
    helper?: HelperSetup;
    limits?: Record<string, string | number>;
    turns?: Record<string, unknown>;
  }) => { base: string; dataDir: string; workspace: string; socket: string; configPath: string };
}

/**
 * Loaded by a computed specifier so tsc keeps test code out of the build (dist is packaged);
 * the benches run under tsx, which loads the TypeScript source.
 */
const SERVED_MODULE = ['..', 'test', 'support', 'served-supervisor.js'].join('/');
const support = (await import(SERVED_MODULE)) as ServedSupportModule;

const CLI = path.join(path.dirname(new URL(import.meta.url).pathname), '..', 'dist', 'supervisor', 'cli', 'main.js');
/** The identity helper's compiled-in lock directory (identity-helper/src). */
const UID_LOCK_DIR = '/run/turnhost-uid-locks';

export interface TurnRecordView {
  id: string;
  state: string;
  result: { status: string; exitCode: number | null; detail?: string } | null;
}

export interface BenchServerOptions {
  name: string;
  identity: IdentityChoice;
  /** separate_uid: the helper's worker uid range (one uid per running turn). */
  uidRange: UidRange;
  limits?: Record<string, string | number>;
  /** `turns` keys (maxConcurrent, preparedWorkers, ...). */
  turns?: Record<string, unknown>;
  /** Extra environment of the supervisor (the launch bench's phase file). */
  env?: Record<string, string>;
}

/** What one process of a turn or a sandbox holds, from /proc. */
export interface ProcessFacts {
  pid: number;
  ppid: number;
  uid: number;
  comm: string;
  zombie: boolean;
}

export function listProcesses(): ProcessFacts[] {
  const facts: ProcessFacts[] = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^[0-9]+$/.test(name)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      const close = stat.lastIndexOf(')');
      const [state, ppid] = stat.slice(close + 2).split(' ');
      const status = fs.readFileSync(`/proc/${name}/status`, 'utf8');
      const uid = Number(/^Uid:\s+([0-9]+)/m.exec(status)?.[1] ?? -1);
      facts.push({
        pid: Number(name),
        ppid: Number(ppid),
        uid,
        comm: stat.slice(stat.indexOf('(') + 1, close),
        zombie: state === 'Z',
      });
    } catch {
      // gone meanwhile
    }
  }
  return facts;
}

/** Every live descendant of `root` (not `root` itself). */
export function descendants(root: number, all: ProcessFacts[] = listProcesses()): ProcessFacts[] {
  const children = new Map<number, ProcessFacts[]>();
  for (const p of all) children.set(p.ppid, [...(children.get(p.ppid) ?? []), p]);
  const found: ProcessFacts[] = [];
  const queue = [...(children.get(root) ?? [])];
  while (queue.length > 0) {
    const next = queue.shift()!;
    if (!next.zombie) found.push(next);
    queue.push(...(children.get(next.pid) ?? []));
  }
  return found;
}

/** Resident memory in bytes: RSS, and PSS (shared pages divided among their sharers). */
export interface Memory {
  rss: number;
  pss: number;
}

export function memoryOf(pids: number[]): Memory {
  const total = { rss: 0, pss: 0 };
  for (const pid of pids) {
    try {
      const rollup = fs.readFileSync(`/proc/${pid}/smaps_rollup`, 'utf8');
      total.rss += 1024 * Number(/^Rss:\s+([0-9]+) kB/m.exec(rollup)?.[1] ?? 0);
      total.pss += 1024 * Number(/^Pss:\s+([0-9]+) kB/m.exec(rollup)?.[1] ?? 0);
    } catch {
      // gone meanwhile
    }
  }
  return total;
}

export const MiB = 1024 * 1024;

/** What the turns left behind; every count but `preparedLeaves` should be 0 once they ended. */
export interface Leftovers {
  cgroupLeaves: number;
  /** Leaves of prepared workers: idle by design while the pool is on. */
  preparedLeaves: number;
  /** Mounts of this host (the supervisor's mount namespace) beyond those before the turns. */
  mounts: string[];
  /** The supervisor's open fds beyond those before the turns. */
  supervisorFds: number;
  uidLocksHeld: number;
  /** Live processes of the worker uids, or (shared_uid) below the supervisor but prepared workers. */
  processes: number;
}

interface Baseline {
  mounts: Set<string>;
  fds: number;
}

function mountLines(pid: number): string[] {
  // The mount point and source: ids change, the place does not.
  return fs
    .readFileSync(`/proc/${pid}/mountinfo`, 'utf8')
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => line.split(' ').slice(3, 5).join(' '));
}

function fdCount(pid: number): number {
  return fs.readdirSync(`/proc/${pid}/fd`).length;
}

/** Held lock files of the range's uids, but those of `excluded` (prepared workers' uids). */
function heldUidLocks(range: UidRange, excluded: Set<number>): number {
  if (!fs.existsSync(UID_LOCK_DIR)) return 0;
  const inodes = new Set(
    fs
      .readdirSync(UID_LOCK_DIR)
      .filter((name) => Number(name) >= range.first && Number(name) < range.first + range.count)
      .filter((name) => !excluded.has(Number(name)))
      .map((name) => String(fs.statSync(path.join(UID_LOCK_DIR, name)).ino)),
  );
  return fs
    .readFileSync('/proc/locks', 'utf8')
    .split('\n')
    .filter((line) => inodes.has(line.split(/\s+/)[5]?.split(':')[2] ?? '')).length;
}

export class BenchServer {
  private agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
  private baseline: Baseline | null = null;

  private constructor(
    readonly options: BenchServerOptions,
    private readonly child: ChildProcess,
    private readonly log: string[],
    private readonly helper: HelperSetup | null,
    readonly base: string,
    readonly dataDir: string,
    readonly workspace: string,
    readonly socket: string,
    private readonly token: string,
  ) {}

  static async start(options: BenchServerOptions): Promise<BenchServer> {
    const { dataDir } = support.supervisorBase(options.name);
    const helper = options.identity === 'separate_uid' ? support.setUpHelper([dataDir], options.uidRange) : null;
    const written = support.writeSupervisorConfig({
      name: options.name,
      ...(helper ? { helper } : {}),
      ...(options.limits ? { limits: options.limits } : {}),
      ...(options.turns ? { turns: options.turns } : {}),
    });
    const child = spawn(process.execPath, [CLI, 'serve', '--config', written.configPath, '--socket', written.socket], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', HOME: written.base, LANG: 'C.UTF-8', ...options.env },
    });
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    // The log's tail, for a bench that fails: what the supervisor said last.
    const log: string[] = [];
    child.stdout.on('data', (d: Buffer) =>
      log.push(
        ...d
          .toString()
          .split('\n')
          .filter((line) => line !== ''),
      ),
    );
    child.stdout.on('data', () => log.splice(0, Math.max(0, log.length - 200)));
    for (let waited = 0; !fs.existsSync(written.socket); waited += 20) {
      if (child.exitCode !== null || waited > 30_000) {
        helper?.remove();
        throw new Error(`supervisor ${options.name} did not start: ${stderr}`);
      }
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const token = fs.readFileSync(path.join(written.dataDir, 'api-token'), 'utf8').trim();
    return new BenchServer(
      options,
      child,
      log,
      helper,
      written.base,
      written.dataDir,
      written.workspace,
      written.socket,
      token,
    );
  }

  /** The supervisor's last log lines (and its exit, when it ended). */
  logTail(lines = 20): string {
    const ended = this.child.exitCode !== null || this.child.signalCode !== null;
    const exit = ended ? `\n(supervisor exited: ${this.child.exitCode ?? this.child.signalCode})` : '';
    return this.log.slice(-lines).join('\n') + exit;
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  /** `fresh`: on a connection of its own, closed after the answer (many requests at once). */
  request(method: string, urlPath: string, body?: unknown, fresh = false): Promise<{ status: number; body: any }> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    return new Promise((resolve, reject) => {
      const req = http.request(
        {
          socketPath: this.socket,
          agent: fresh ? false : this.agent,
          method,
          path: urlPath,
          headers: {
            authorization: `Bearer ${this.token}`,
            ...(payload ? { 'content-type': 'application/json', 'content-length': String(payload.length) } : {}),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('end', () => {
            const text = Buffer.concat(chunks).toString('utf8');
            try {
              resolve({ status: res.statusCode ?? 0, body: JSON.parse(text) });
            } catch {
              resolve({ status: res.statusCode ?? 0, body: text });
            }
          });
        },
      );
      req.on('error', reject);
      req.end(payload);
    });
  }

  /**
   * POST /api/turns (with `?wait=S`: answered at the turn's exit record); a refusal or a turn
   * that did not end well aborts the bench, which would otherwise time a failure.
   */
  async createTurn(
    argv: string[],
    options: { waitSeconds?: number; sessionId?: string; fresh?: boolean } = {},
  ): Promise<TurnRecordView> {
    const query = options.waitSeconds === undefined ? '' : `?wait=${options.waitSeconds}`;
    const body = { sessionId: options.sessionId ?? 'bench', mode: 'ordinary', cwd: this.workspace, argv };
    const answer = await this.request('POST', `/api/turns${query}`, body, options.fresh ?? false);
    if (answer.status !== 201)
      throw new Error(`POST /api/turns answered ${answer.status}: ${JSON.stringify(answer.body)}`);
    const turn = (answer.body as { turn: TurnRecordView }).turn;
    if (options.waitSeconds !== undefined && (turn.state !== 'finished' || turn.result?.status !== 'ok'))
      throw new Error(`turn ${turn.id} ended ${turn.state} ${JSON.stringify(turn.result)}`);
    return turn;
  }

  /** A turn to its exit record, POST to answer. */
  runToExit(argv: string[]): Promise<TurnRecordView> {
    return this.createTurn(argv, { waitSeconds: 60 });
  }

  async cancel(id: string): Promise<void> {
    const answer = await this.request('POST', `/api/turns/${id}/cancel?wait=60`);
    if (answer.status !== 200 && answer.status !== 409)
      throw new Error(`cancel ${id} answered ${answer.status}: ${JSON.stringify(answer.body)}`);
  }

  async status(): Promise<any> {
    const answer = await this.request('GET', '/api/status');
    if (answer.status !== 200) throw new Error(`GET /api/status answered ${answer.status}`);
    return answer.body;
  }

  /** Until no prepared worker is starting and (when the pool is on) one is ready; at most 10 s. */
  async poolSettled(): Promise<void> {
    const wanted = Number(this.options.turns?.['preparedWorkers'] ?? 0);
    for (let waited = 0; waited < 10_000; waited += 5) {
      const pool = (await this.status()).runtime.preparedWorkers as { ready: number; starting: number } | undefined;
      if (pool === undefined || (pool.starting === 0 && pool.ready >= Math.min(wanted, 1))) return;
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }

  /** The supervisor's process and every live process below it: the turns' and the prepared workers'. */
  turnProcesses(all: ProcessFacts[] = listProcesses()): ProcessFacts[] {
    return descendants(this.pid, all);
  }

  /**
   * The bench's own kept-alive connections are fds of the supervisor too: closed before each
   * count, with a moment for the supervisor to see them close.
   */
  private async closeConnections(): Promise<void> {
    this.agent.destroy();
    this.agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
    await new Promise((resolve) => setTimeout(resolve, 200));
  }

  /** Taken once the supervisor served a turn, so what a first turn sets up for good is not counted as left. */
  async takeBaseline(): Promise<void> {
    await this.closeConnections();
    this.baseline = { mounts: new Set(mountLines(this.pid)), fds: fdCount(this.pid) };
  }

  async leftovers(): Promise<Leftovers> {
    if (this.baseline === null) throw new Error('takeBaseline first');
    await this.closeConnections();
    const subtree = turnSubtreeName(
      discoverCgroupLayout({ proc: '/proc', sysFsCgroup: '/sys/fs/cgroup' }),
      this.dataDir,
    );
    const leaves = subtree === undefined ? v2TurnLeaves(this.pid) : cgroupLeaves(subtree);
    const prepared = leaves.filter((leaf) => /prepared/.test(path.basename(leaf))).length;
    const range = this.options.uidRange;
    const all = listProcesses();
    const inRange = (uid: number): boolean => uid >= range.first && uid < range.first + range.count;
    const preparedPids = new Set<number>();
    // The processes of a prepared worker live in its leaf; they are idle by design.
    for (const leaf of leaves.filter((l) => /prepared/.test(path.basename(l))))
      for (const pid of readProcs(leaf)) preparedPids.add(pid);
    const turnPids = new Set(this.turnProcesses(all).map((p) => p.pid));
    const left = all.filter(
      (p) =>
        !p.zombie &&
        !preparedPids.has(p.pid) &&
        (turnPids.has(p.pid) || (this.options.identity === 'separate_uid' && inRange(p.uid))),
    );
    return {
      cgroupLeaves: leaves.length - prepared,
      preparedLeaves: prepared,
      mounts: mountLines(this.pid).filter((line) => !this.baseline!.mounts.has(line)),
      supervisorFds: fdCount(this.pid) - this.baseline.fds,
      uidLocksHeld:
        this.options.identity === 'separate_uid'
          ? heldUidLocks(range, new Set(all.filter((p) => preparedPids.has(p.pid)).map((p) => p.uid)))
          : 0,
      processes: left.length,
    };
  }

  async stop(): Promise<void> {
    this.agent.destroy();
    if (this.child.exitCode === null) {
      const gone = new Promise((resolve) => this.child.once('exit', resolve));
      this.child.kill('SIGTERM');
      const exited = await Promise.race([
        gone.then(() => true),
        new Promise((resolve) => setTimeout(resolve, 15_000, false)),
      ]);
      if (!exited) this.child.kill('SIGKILL');
    }
    this.helper?.remove();
    fs.rmSync(this.base, { recursive: true, force: true });
  }
}

function readProcs(dir: string): number[] {
  try {
    return fs
      .readFileSync(path.join(dir, 'cgroup.procs'), 'utf8')
      .split('\n')
      .filter((line) => line !== '')
      .map(Number);
  } catch {
    return [];
  }
}

/**
 * cgroup v2: the supervisor runs in `<own>/supervisor` and its turns in `<own>/turns/<leaf>`
 * (cgroup/turn-cgroup.ts).
 */
function v2TurnLeaves(pid: number): string[] {
  const own = /^0::(.*)$/m.exec(fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8'))?.[1];
  if (own === undefined) return [];
  const turnsDir = path.join('/sys/fs/cgroup', path.dirname(own), 'turns');
  try {
    return fs
      .readdirSync(turnsDir, { withFileTypes: true })
      .filter((entry) => entry.isDirectory())
      .map((entry) => path.join(turnsDir, entry.name));
  } catch {
    return [];
  }
}

/** cgroup v1: the turn leaves below the supervisor's subtree in every hierarchy, by name. */
function cgroupLeaves(subtree: string): string[] {
  const found = new Map<string, string>();
  const walk = (dir: string, depth: number, inside: boolean): void => {
    let entries: fs.Dirent[];
    try {
      entries = fs.readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const entry of entries) {
      if (!entry.isDirectory()) continue;
      const child = path.join(dir, entry.name);
      if (inside && entry.name !== 'turns' && entry.name !== 'prepared') found.set(entry.name, child);
      if (depth < 8) walk(child, depth + 1, inside || entry.name === subtree);
    }
  };
  walk('/sys/fs/cgroup', 0, false);
  return [...found.values()];
}

/** The identity modes a bench argument names: `separate_uid`, `shared_uid` or `both`. */
export function identityChoices(arg: string | undefined, fallback: 'both' | IdentityChoice): IdentityChoice[] {
  const value = arg ?? fallback;
  if (value === 'both') return ['separate_uid', 'shared_uid'];
  if (value === 'separate_uid' || value === 'shared_uid') return [value];
  throw new Error(`identity: expected separate_uid, shared_uid or both, not ${value}`);
}

export function percentile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1))] ?? NaN;
}

/** Runs a program to its exit; a nonzero exit aborts the bench (a broken case measures nothing). */
export function runToExit(file: string, args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(file, args, { stdio: 'ignore' });
    child.on('error', reject);
    child.on('close', (code, signal) =>
      code === 0 ? resolve() : reject(new Error(`${file} ${args.join(' ')}: exit ${code ?? signal}`)),
    );
  });
}

export function hasProgram(name: string): boolean {
  return ['/usr/bin', '/bin', '/usr/sbin', '/sbin'].some((dir) => fs.existsSync(path.join(dir, name)));
}

/** bubblewrap's sandbox as the benches compare: every namespace, the host's tree read-only. */
export const BWRAP_ARGS = ['--unshare-all', '--die-with-parent', '--ro-bind', '/', '/'];

/** One line for the leak check. */
export function describeLeftovers(left: Leftovers): string {
  return (
    `turn cgroup leaves ${left.cgroupLeaves} (+${left.preparedLeaves} prepared, idle by design), ` +
    `new mounts ${left.mounts.length}${left.mounts.length > 0 ? ` [${left.mounts.join('; ')}]` : ''}, ` +
    `supervisor fds ${left.supervisorFds >= 0 ? '+' : ''}${left.supervisorFds}, uid locks held ${left.uidLocksHeld}, ` +
    `processes ${left.processes}`
  );
}
