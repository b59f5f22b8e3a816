/**
 * Starting the worker process: the identity helper's launch (separate_uid), or the same worker
 * entry run by this process under new namespaces (shared_uid). Either way the worker gets its
 * stdio on 0-2, the protocol socket on 3 and the listener channel on 4, and nothing else.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import type net from 'node:net';
import path from 'node:path';
import { listOpenFds, markCloseOnExec } from '../../core/fds.js';
import type { ResolvedLimits } from '../../core/limits.js';
import type { IdentityMode, WorkerProfile } from '../../core/modes.js';
import { fail, ok, type Result } from '../../core/result.js';
import {
  spawnHelperLaunch,
  type HelperLocation,
  type HelperProtectRule,
  type HelperRlimitName,
} from '../identity/helper-client.js';
import type { TurnhostConfig } from '../config/types.js';

export const DEFAULT_COMMAND_PATH = '/usr/local/bin:/usr/bin:/bin';

/**
 * The worker's own environment (the command's is in its launch message). libuv must not submit
 * work to io_uring: the seccomp filter the worker installs answers io_uring_* with EPERM.
 */
const WORKER_ENV = { PATH: DEFAULT_COMMAND_PATH, LANG: 'C.UTF-8', UV_USE_IO_URING: '0' };

const RLIMIT_FOR: Record<'processes' | 'data' | 'file_size' | 'open_files', HelperRlimitName> = {
  processes: 'nproc',
  data: 'data',
  file_size: 'fsize',
  open_files: 'nofile',
};

export function helperLocation(config: TurnhostConfig): HelperLocation | null {
  const { path: helperPath, configPath } = config.identityHelper;
  return helperPath ? { path: helperPath, configPath } : null;
}

/** Identifies the helper binary and its config: a worker is not used across a change of either. */
export function helperStamp(helper: HelperLocation | null): string {
  if (!helper) return '';
  const stamp = (file: string | null | undefined): string => {
    if (file === undefined || file === null) return '-';
    try {
      const st = fs.statSync(file);
      return `${st.dev}:${st.ino}:${st.size}:${st.mtimeMs}:${st.mode}:${st.uid}`;
    } catch {
      return 'missing';
    }
  };
  return `${stamp(helper.path)}|${stamp(helper.configPath)}`;
}

/**
 * Whatever this process inherited without close-on-exec (a service manager's or a CI harness's
 * fds) must never reach a worker: shared_uid workers are spawned by this process directly.
 */
export function markInheritedFdsCloseOnExec(): Result {
  const listed = listOpenFds();
  if (!listed.ok) return listed;
  const failed = listed.fds.filter(({ fd }) => fd > 2 && !markCloseOnExec(fd).ok).map(({ fd }) => fd);
  // The directory fd that listed /proc/self/fd is closed by now, so marking it fails harmlessly.
  const stillOpen = failed.filter((fd) => fs.existsSync(`/proc/self/fd/${fd}`));
  return stillOpen.length === 0 ? ok({}) : fail('fcntl_failed', `fds ${stillOpen.join(', ')} stay inheritable`);
}

export interface WorkerLaunch {
  identity: IdentityMode;
  helper: HelperLocation | null;
  uid: number;
  cgroupPaths: readonly string[];
  limits: ResolvedLimits;
  cwd: string;
  profile: WorkerProfile;
  view: { workspace: string; protect: HelperProtectRule[] };
  tempPath: string;
  proxySocket: string;
  listenerChannelFd: number;
  /** The compiled worker entry and the node that runs it (shared_uid runs it directly). */
  worker: { node: string; entry: string };
}

export type SpawnedWorker = { child: ChildProcess; protocol: net.Socket };

/** Starts the worker process; its fd 4 is `listenerChannelFd`, which the caller closes afterwards. */
export function spawnWorker(launch: WorkerLaunch): Result<SpawnedWorker, 'spawn_failed'> {
  try {
    const spawned =
      launch.identity === 'separate_uid' && launch.helper
        ? spawnHelperLaunch(
            launch.helper,
            {
              uid: launch.uid,
              gid: launch.uid,
              cgroups: [...launch.cgroupPaths],
              rlimits: helperRlimits(launch.limits),
              hostname: 'turnhost',
              cwd: launch.cwd,
              env: WORKER_ENV,
              profile: launch.profile,
              workspace: launch.view.workspace,
              temp: launch.tempPath,
              socket: launch.proxySocket,
              protect: launch.view.protect,
            },
            { listenerChannelFd: launch.listenerChannelFd },
          )
        : spawnSharedWorker(launch);
    if (launch.identity !== 'separate_uid') {
      const joined = joinCgroupDirect(launch.cgroupPaths, spawned.child.pid);
      if (!joined.ok) {
        spawned.child.kill('SIGKILL');
        return fail('spawn_failed', joined.detail);
      }
    }
    return ok(spawned);
  } catch (error) {
    return fail('spawn_failed', `worker spawn: ${(error as Error).message}`);
  }
}

function helperRlimits(limits: ResolvedLimits): Partial<Record<HelperRlimitName, number>> {
  const rlimits: Partial<Record<HelperRlimitName, number>> = {};
  for (const [limit, helperName] of Object.entries(RLIMIT_FOR)) {
    const value = limits[limit as keyof typeof RLIMIT_FOR];
    if (value !== undefined) rlimits[helperName] = value;
  }
  return rlimits;
}

/** shared_uid: the same worker entry, as the supervisor's uid, in new net/ipc/uts namespaces. */
function spawnSharedWorker(launch: WorkerLaunch): SpawnedWorker {
  // No helper closes fds here, and fds can appear after the start-up pass (libraries, a test
  // runner's hooks): mark again right before the spawn.
  const marked = markInheritedFdsCloseOnExec();
  if (!marked.ok) throw new Error(marked.detail);
  const asRoot = process.geteuid?.() === 0;
  const unshare = asRoot ? ['--net', '--ipc', '--uts'] : ['--user', '--map-current-user', '--net', '--ipc', '--uts'];
  const child = spawn(
    'unshare',
    [...unshare, '--', '/bin/sh', '-c', 'ip link set lo up && exec "$0" "$@"', launch.worker.node, launch.worker.entry],
    { stdio: ['pipe', 'pipe', 'pipe', 'pipe', launch.listenerChannelFd], cwd: launch.cwd, env: WORKER_ENV },
  );
  const protocol = child.stdio[3] as net.Socket;
  return { child, protocol };
}

function joinCgroupDirect(cgroupPaths: readonly string[], pid: number | undefined): Result {
  if (pid === undefined) return fail('spawn_failed', 'the worker did not start');
  for (const dir of cgroupPaths) {
    try {
      fs.writeFileSync(path.join(dir, 'cgroup.procs'), `${pid}\n`);
    } catch (error) {
      return fail('cgroup_join_failed', `joining ${dir}: ${(error as Error).message}`);
    }
  }
  return ok({});
}
