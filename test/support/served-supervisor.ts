/**
 * A real `turnhost serve` for boundary tests, in any configuration the supervisor allows:
 * separate_uid through a root-owned helper copy, or shared_uid with no helper, under root or
 * under a non-root uid. It is driven as an integrator drives it: `turnhost run`, `check` and
 * `events` over its unix socket. Everything it creates (directories, cgroups, processes) is
 * removed by `stop`.
 *
 * Clients reach it through a contract-checking proxy (contract-proxy.ts): the configuration
 * file names the proxy's socket, so the CLI (with --config) and the typed client (on `socket`)
 * get every answer checked against the OpenAPI document, while the supervisor itself is told
 * its own socket with --socket. `stop` fails, after removing everything, when an answer broke
 * the contract.
 *
 * A non-root supervisor gets what an operator would give it: a data directory and workspace of
 * its own, and its own cgroup directory in each v1 hierarchy (the delegation systemd does on
 * cgroup v2, done by hand here), which it enters before dropping to its uid. It runs in a
 * mount namespace of its own where the checkout is bound at a path every uid can traverse, so
 * a checkout below a private directory (such as /root) still serves.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { discoverCgroupLayout } from '../../cgroup/discover.js';
import { prepareCgroupSubtree, removeCgroupSubtree, subtreeTurnRoots } from '../../cgroup/turn-cgroup.js';
import { writeHelperConfig } from '../../supervisor/identity/helper-config.js';
import { turnSubtreeName } from '../../supervisor/turns/launch-environment.js';
import { startContractProxy } from './contract-proxy.js';
import { HELPER_PATH, REPO_ROOT } from './turn-harness.js';
import { until } from './until.js';

const CLI = 'dist/supervisor/cli/main.js';
/** The v1 hierarchies whose limits and accounting a turn uses. */
const V1_CONTROLLERS = ['memory', 'pids', 'cpu', 'cpuacct'];

export interface HelperSetup {
  /** The helper copy and its config, root-owned, in a root-owned directory. */
  path: string;
  configPath: string;
  uidRange: { first: number; count: number };
  remove(): void;
}

export interface SupervisorOptions {
  name: string;
  /** Absent: the supervisor runs as root. */
  uid?: number;
  helper?: HelperSetup;
  limits?: Record<string, string | number>;
  /** workspaces.root at `<base>/workspaces`, the supervisor's own (0711). */
  workspaces?: boolean;
  /** With `workspaces`: this workspaces.root instead, made by the caller (shared by two supervisors). */
  workspacesRoot?: string;
  /** More `turns` keys (e.g. outputRetainBytes). */
  turns?: Record<string, unknown>;
  /** Where the supervisor's directories go (supervisorBase); /var/lib when absent. */
  baseParent?: string;
  /** A root supervisor's checkout bound at this path in a mount namespace of its own (made here). */
  codeRoot?: string;
  /** With `workspaces`: more `workspaces` keys (e.g. maxBytes, maxFiles). */
  workspacesConfig?: Record<string, unknown>;
  /** `probes` keys (e.g. attackAtBoot). */
  probes?: Record<string, unknown>;
}

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface ServedSupervisor {
  name: string;
  uid: number;
  dataDir: string;
  workspace: string;
  configPath: string;
  /** Where clients connect: the contract-checking proxy in front of the API's unix socket. */
  socket: string;
  /** The API's own unix socket, where the supervisor listens. */
  serverSocket: string;
  /** The API token the supervisor wrote into its data directory. */
  token: string;
  /** Every answer so far that broke the API contract, as the proxy found them. */
  contractProblems: string[];
  /** The checkout as this supervisor's processes see it. */
  codeRoot: string;
  pid: number;
  cli(args: string[], options?: { input?: string }): Promise<CliResult>;
  /** `turnhost run -- argv` in the workspace, as turn `turnId` when given (for its events). */
  run(argv: string[], options?: { turnId?: string; extra?: string[] }): Promise<CliResult>;
  /** Stops and removes everything; then throws when an answer broke the API contract. */
  stop(): Promise<void>;
}

export function cgroupMountOf(controller: string): string | null {
  for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    const fields = line.split(' ');
    const dash = fields.indexOf('-');
    if (dash < 0 || fields[dash + 1] !== 'cgroup') continue;
    if ((fields[dash + 3] ?? '').split(',').includes(controller)) return fields[4] ?? null;
  }
  return null;
}

function ownV1Cgroup(controller: string): string | null {
  for (const line of fs.readFileSync('/proc/self/cgroup', 'utf8').split('\n')) {
    const [, list, cgroupPath] = line.split(':');
    if (list !== undefined && list.split(',').includes(controller)) return cgroupPath ?? null;
  }
  return null;
}

/** Removes a cgroup directory tree bottom-up (a cgroup directory holds only control files). */
function removeCgroupTree(dir: string): void {
  if (!fs.existsSync(dir)) return;
  for (const entry of fs.readdirSync(dir, { withFileTypes: true }))
    if (entry.isDirectory()) removeCgroupTree(path.join(dir, entry.name));
  try {
    fs.rmdirSync(dir);
  } catch {
    // still populated: the caller's processes have not all exited
  }
}

/** The cgroup directories (one per v1 hierarchy) a non-root supervisor named `name` runs in. */
function v1CgroupDirs(name: string): string[] {
  const dirs: string[] = [];
  for (const controller of V1_CONTROLLERS) {
    const mount = cgroupMountOf(controller);
    const own = ownV1Cgroup(controller);
    if (mount === null || own === null) continue;
    const dir = path.join(mount, own, `turnhost-esc-${name}-${process.pid}`);
    if (!dirs.includes(dir)) dirs.push(dir);
  }
  return dirs;
}

/** One cgroup directory per v1 hierarchy, owned by `uid`, below this process's own. */
function delegateV1Cgroups(name: string, uid: number): string[] {
  const dirs = v1CgroupDirs(name);
  for (const dir of dirs) {
    fs.mkdirSync(dir, { recursive: true });
    for (const file of ['', 'cgroup.procs', 'tasks']) fs.chownSync(path.join(dir, file), uid, uid);
  }
  return dirs;
}

/**
 * A helper copy and config in a root-owned directory, for `supervisors` (their data dirs). With
 * `nonRootCaller`, for that one non-root supervisor instead: a setuid-root build with the config
 * compiled in (a non-root caller's `--config` is refused), its caller group the supervisor's gid,
 * its cgroup roots the supervisor's delegated cgroups.
 */
/** Where a test helper's worker comes from, and the one non-root supervisor it may serve. */
export interface HelperExtras {
  codeRoot?: string;
  nonRootCaller?: { uid: number; name: string } | null;
}

export function setUpHelper(
  dataDirs: string[],
  uidRange: { first: number; count: number },
  workspaces: { roots: string[] } | null = null,
  { codeRoot = REPO_ROOT, nonRootCaller = null }: HelperExtras = {},
): HelperSetup {
  const dir = fs.mkdtempSync('/run/turnhost-esc-helper-');
  fs.chmodSync(dir, 0o755);
  const layout = discoverCgroupLayout({ proc: '/proc', sysFsCgroup: '/sys/fs/cgroup' });
  const subtrees = dataDirs.map((dataDir) => {
    const name = turnSubtreeName(layout, dataDir);
    const prepared = prepareCgroupSubtree(layout, name === undefined ? {} : { name });
    if (!prepared.ok) throw new Error(`helper cgroup roots: ${prepared.detail}`);
    return prepared.subtree;
  });
  const cgroupRoots = nonRootCaller
    ? v1CgroupDirs(nonRootCaller.name)
    : subtrees.flatMap((subtree) => subtreeTurnRoots(subtree));
  const configPath = path.join(dir, 'identity-helper.conf');
  writeHelperConfig(configPath, {
    uidRange,
    callerGroup: nonRootCaller ? String(nonRootCaller.uid) : 'root',
    cgroupRoots,
    workerExec: path.join(codeRoot, 'worker/build/turnhost-worker'),
    workerArgs: [],
    viewPaths: [codeRoot], // the native test programs
    ...(workspaces ? { workspaceRoots: workspaces.roots, uidLeaseDir: path.join(dir, 'leases') } : {}),
  });
  const helperPath = path.join(dir, 'identity-helper');
  if (nonRootCaller) {
    execFileSync('make', [
      '-s',
      '-C',
      path.join(REPO_ROOT, 'identity-helper'),
      'custom',
      `CUSTOM_CONFIG_PATH=${configPath}`,
      `CUSTOM_OUT=${helperPath}`,
    ]);
    fs.chownSync(helperPath, 0, 0);
    fs.chmodSync(helperPath, 0o4755);
  } else {
    fs.copyFileSync(HELPER_PATH, helperPath);
    fs.chmodSync(helperPath, 0o755);
  }
  return {
    path: helperPath,
    configPath,
    uidRange,
    remove: () => {
      for (const subtree of subtrees) removeCgroupSubtree(subtree);
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** The directories a supervisor named `name` uses, so a helper config can be written first. */
export function supervisorBase(
  name: string,
  parent = '/var/lib',
): {
  base: string;
  dataDir: string;
  workspace: string;
  workspacesRoot: string;
  codeRoot: string;
} {
  // Where an installed supervisor keeps its state (/var/lib), visible in the view unless hidden.
  const base = path.join(parent, `turnhost-esc-${name}-${process.pid}`);
  return {
    base,
    codeRoot: path.join(base, 'code'),
    dataDir: path.join(base, 'data'),
    workspace: path.join(base, 'workspace'),
    workspacesRoot: path.join(base, 'workspaces'),
  };
}

function collect(child: ChildProcess, input?: string): Promise<CliResult> {
  const stdout: Buffer[] = [];
  const stderr: Buffer[] = [];
  child.stdout?.on('data', (d: Buffer) => stdout.push(d));
  child.stderr?.on('data', (d: Buffer) => stderr.push(d));
  if (input !== undefined) child.stdin?.end(input);
  else child.stdin?.end();
  return new Promise((resolve) =>
    child.on('close', (code) =>
      resolve({
        code,
        stdout: Buffer.concat(stdout).toString('utf8'),
        stderr: Buffer.concat(stderr).toString('utf8'),
      }),
    ),
  );
}

/**
 * The data directory, workspace and config file of a supervisor, before it runs. `socket` is
 * where the supervisor listens; the file names `clientSocket` instead when given (a proxy).
 */
export function writeSupervisorConfig(
  options: SupervisorOptions,
  clientSocket?: string,
): {
  base: string;
  dataDir: string;
  workspace: string;
  socket: string;
  configPath: string;
} {
  const uid = options.uid ?? 0;
  const { base, dataDir, workspace, workspacesRoot: ownRoot } = supervisorBase(options.name, options.baseParent);
  const workspacesRoot = options.workspacesRoot ?? ownRoot;
  fs.mkdirSync(workspace, { recursive: true });
  if (options.workspaces && options.workspacesRoot === undefined) {
    fs.mkdirSync(workspacesRoot, { mode: 0o711 });
    fs.chownSync(workspacesRoot, uid, uid);
  }
  fs.chmodSync(base, 0o755);
  fs.chmodSync(workspace, 0o777);
  fs.chownSync(base, uid, uid);
  const socket = path.join(base, 'api.sock');
  const configPath = path.join(base, 'turnhost.json');
  fs.writeFileSync(
    configPath,
    JSON.stringify({
      dataDir,
      listen: { tcp: null, socket: clientSocket ?? socket },
      logLevel: 'info',
      identityHelper: options.helper
        ? // A non-root caller's helper has its config compiled in.
          { path: options.helper.path, configPath: uid === 0 ? options.helper.configPath : null }
        : { path: null, configPath: null },
      limits: options.limits ?? { memory: '512M', pids: 128, cpu: 1, open_files: 1024, tmp_size: '16M' },
      egress: { allowAddressRanges: [] },
      turns: { workspaceRoots: [workspace], preparedWorkers: 0, ...options.turns },
      ...(options.workspaces ? { workspaces: { root: workspacesRoot, ...options.workspacesConfig } } : {}),
      ...(options.probes ? { probes: options.probes } : {}),
    }),
  );
  fs.chmodSync(configPath, 0o644);
  return { base, dataDir, workspace, socket, configPath };
}

export async function startSupervisor(options: SupervisorOptions): Promise<ServedSupervisor> {
  const uid = options.uid ?? 0;
  const proxySocket = path.join(supervisorBase(options.name, options.baseParent).base, 'checked-api.sock');
  const { base, dataDir, workspace, socket, configPath } = writeSupervisorConfig(options, proxySocket);

  const cgroupDirs = uid === 0 ? [] : delegateV1Cgroups(options.name, uid);
  // The checkout bound at a path every uid can traverse, in the supervisor's own mount namespace.
  const bound = uid !== 0 || options.codeRoot !== undefined;
  const codeRoot = options.codeRoot ?? (uid === 0 ? REPO_ROOT : path.join(base, 'code'));
  if (bound) fs.mkdirSync(codeRoot, { recursive: true });
  const enter = cgroupDirs.map((dir) => `echo $$ > ${dir}/cgroup.procs; `).join('');
  const serve = `${process.execPath} ${path.join(codeRoot, CLI)} serve --config ${configPath} --socket ${socket}`;
  const drop = uid === 0 ? '' : `setpriv --reuid=${uid} --regid=${uid} --clear-groups `;
  const script = bound ? `${enter}mount --bind ${REPO_ROOT} ${codeRoot} && exec ${drop}${serve}` : `exec ${serve}`;
  const argv = bound ? ['unshare', '--mount', '--propagation', 'private', 'sh', '-c', script] : ['sh', '-c', script];
  const child = spawn(argv[0]!, argv.slice(1), {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', HOME: base, LANG: 'C.UTF-8' },
  });
  const log: Buffer[] = [];
  child.stdout.on('data', (d: Buffer) => log.push(d));
  child.stderr.on('data', (d: Buffer) => log.push(d));
  const state = { exited: false };
  child.on('exit', () => (state.exited = true));

  const cli = (args: string[], cliOptions: { input?: string } = {}): Promise<CliResult> =>
    collect(
      spawn(
        process.execPath,
        [path.join(REPO_ROOT, CLI), args[0] ?? 'status', '--config', configPath, ...args.slice(1)],
        {
          stdio: ['pipe', 'pipe', 'pipe'],
          cwd: workspace,
        },
      ),
      cliOptions.input,
    );

  const ready = await until(() => state.exited || fs.existsSync(socket), 30_000);
  if (!ready || state.exited) {
    throw new Error(`supervisor ${options.name} did not start: ${Buffer.concat(log).toString('utf8')}`);
  }
  const proxy = await startContractProxy({ kind: 'unix', path: socket }, { kind: 'unix', path: proxySocket });
  return {
    name: options.name,
    uid,
    dataDir,
    workspace,
    configPath,
    socket: proxySocket,
    serverSocket: socket,
    token: fs.readFileSync(path.join(dataDir, 'api-token'), 'utf8').trim(),
    contractProblems: proxy.problems,
    codeRoot,
    pid: child.pid ?? -1,
    cli,
    run(argv, runOptions = {}) {
      const id = runOptions.turnId === undefined ? [] : ['--turn-id', runOptions.turnId];
      return cli(['run', '--cwd', workspace, ...id, ...(runOptions.extra ?? []), '--', ...argv]);
    },
    async stop() {
      if (!state.exited) {
        const gone = new Promise((resolve) => child.on('exit', resolve));
        child.kill('SIGTERM');
        await Promise.race([gone, new Promise((resolve) => setTimeout(resolve, 15_000))]);
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      }
      await proxy.close();
      for (const dir of cgroupDirs) removeCgroupTree(dir);
      unmountBeneath(base);
      fs.rmSync(base, { recursive: true, force: true });
      proxy.assertConforming(options.name);
    },
  };
}

/**
 * Unmounts what a stopped supervisor left mounted beneath `dir` in this mount namespace, deepest
 * first: a capped workspace's image stays mounted across a supervisor's restart on purpose, so a
 * test that ends without deleting its workspaces leaves them (the loop devices detach themselves
 * on the unmount: they are autoclear).
 */
function unmountBeneath(dir: string): void {
  const prefix = dir.endsWith('/') ? dir : `${dir}/`;
  const points = fs
    .readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((line) => line.split(' ')[4])
    .filter((point): point is string => point !== undefined && point.startsWith(prefix))
    .sort((a, b) => b.length - a.length);
  for (const point of points) execFileSync('umount', [point], { stdio: 'ignore' });
}

/**
 * A served supervisor that stops when `t` ends; the stop fails the test when an answer broke the
 * API contract.
 */
export async function serveForTest(
  t: { teardown(fn: () => Promise<void>): void },
  options: SupervisorOptions,
): Promise<ServedSupervisor> {
  const served = await startSupervisor(options);
  t.teardown(() => served.stop());
  return served;
}

/** Stops every supervisor, each whatever the others' stops threw; then throws what they threw. */
export async function stopSupervisors(supervisors: ServedSupervisor[]): Promise<void> {
  const failures: string[] = [];
  for (const supervisor of supervisors) {
    try {
      await supervisor.stop();
    } catch (error) {
      failures.push(error instanceof Error ? error.message : String(error));
    }
  }
  if (failures.length > 0) throw new Error(failures.join('\n'));
}

/** A throwaway uid for a non-root supervisor, outside every test's worker range. */
export function plainUid(slot: number): number {
  return 3_400_000 + slot;
}
