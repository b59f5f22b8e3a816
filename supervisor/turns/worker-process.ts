/**
 * Starting the worker process: the identity helper's launch, by the configured helper
 * (separate_uid) or by the shared_uid launcher (the same helper in shared mode). Either way
 * the worker gets its stdio on 0-2, the protocol socket on 3 and the listener channel on 4,
 * and nothing else, in the same view and namespaces.
 */
import type { ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import type net from 'node:net';
import { listOpenFds, markCloseOnExec } from '../../core/fds.js';
import type { ResolvedLimits } from '../../core/limits.js';
import type { WorkerProfile } from '../../core/modes.js';
import { fail, ok, type Result } from '../../core/result.js';
import type { HelperRlimitName } from '../identity/helper-descriptor.js';
import { spawnHelperLaunch } from '../identity/helper-launch.js';
import { leaseOwner } from '../identity/helper-owner.js';
import type { HelperLocation } from '../identity/helper-process.js';
import type { TurnhostConfig } from '../config/types.js';
import type { TurnView } from '../view/descriptor.js';

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
  if (!helperPath) return null;
  // Without an owner the helper refuses every lease op and leased launch: fail closed.
  const owner = leaseOwner(config.dataDir);
  return { path: helperPath, configPath, ...(owner.ok ? { owner: owner.owner } : {}) };
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
 * fds) must never reach a helper or a worker.
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
  /** The helper: a separate-uid helper, or the shared_uid launcher (`shared: true`). */
  helper: HelperLocation;
  /** separate_uid: where the helper's search for a free uid of its range starts (with `lease`: the lease's uid). */
  uidHint: number | null;
  /** A workspace turn (separate_uid): the workspace lease the worker runs under, as its uid. */
  lease?: string;
  cgroupPaths: readonly string[];
  limits: ResolvedLimits;
  cwd: string;
  profile: WorkerProfile;
  view: TurnView;
  listenerChannelFd: number;
}

export type SpawnedWorker = { child: ChildProcess; protocol: net.Socket };

/**
 * Starts the worker process through the helper; its fd 4 is `listenerChannelFd`, which the
 * caller closes afterwards. The process the caller holds is the helper's monitor: it exits with
 * the worker's status (docs/identity-helper-protocol.md, "Processes of a launch").
 */
export function spawnWorker(launch: WorkerLaunch): Result<SpawnedWorker, 'spawn_failed'> {
  // The helper closes every fd above 4 itself, but fds can appear after the start-up pass
  // (libraries, a test runner's hooks): nothing of ours may reach it open.
  const marked = markInheritedFdsCloseOnExec();
  if (!marked.ok) return fail('spawn_failed', marked.detail);
  const separate = launch.helper.shared !== true && launch.uidHint !== null;
  try {
    return ok(
      spawnHelperLaunch(
        launch.helper,
        {
          ...(separate
            ? {
                uid: launch.uidHint ?? 0,
                gid: launch.uidHint ?? 0,
                ...(launch.lease ? { lease: launch.lease, owner: launch.helper.owner } : { uidSearch: true }),
              }
            : {}),
          cgroups: [...launch.cgroupPaths],
          rlimits: helperRlimits(launch.limits, launch.helper.shared === true),
          hostname: 'turnhost',
          cwd: launch.cwd,
          env: WORKER_ENV,
          profile: launch.profile,
          workspace: launch.view.workspace,
          ...(launch.limits.tmp_size === undefined ? {} : { tmpSize: launch.limits.tmp_size }),
          protect: launch.view.protect,
          hide: launch.view.hide,
        },
        { listenerChannelFd: launch.listenerChannelFd },
      ),
    );
  } catch (error) {
    return fail('spawn_failed', `worker spawn: ${(error as Error).message}`);
  }
}

/** A shared_uid worker gets no RLIMIT_NPROC: it would count every process of the supervisor's uid. */
function helperRlimits(limits: ResolvedLimits, shared: boolean): Partial<Record<HelperRlimitName, number>> {
  const rlimits: Partial<Record<HelperRlimitName, number>> = {};
  for (const [limit, helperName] of Object.entries(RLIMIT_FOR)) {
    if (shared && limit === 'processes') continue;
    const value = limits[limit as keyof typeof RLIMIT_FOR];
    if (value !== undefined) rlimits[helperName] = value;
  }
  return rlimits;
}
