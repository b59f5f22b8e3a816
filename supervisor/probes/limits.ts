/**
 * Which worker limits this host will enforce, re-derived on every probe from the configured
 * limits, `TURNHOST_WORKER_LIMITS` and the cgroup layout just discovered.
 */
import { fail, ok, type Result } from '../../core/result.js';
import type { CgroupLayout } from '../../cgroup/types.js';
import type { TurnhostConfig } from '../config/types.js';
import { LIMITS_ENV, parseLimitSettings, parseLimitsEnv } from '../limits/parse.js';
import { DEFAULT_TMP_SIZE_BYTES, type ResolvedLimits } from '../../core/limits.js';
import type { WorkerLimitsStatus } from './types.js';
import type { CgroupLimitName, LimitName, LimitSource, RlimitName } from '../../core/limits.js';

const RLIMITS: readonly RlimitName[] = ['processes', 'data', 'file_size', 'open_files'];
const CGROUP_LIMITS: readonly CgroupLimitName[] = ['memory', 'pids', 'cpu'];

/**
 * The default limits for every turn: the config file's `limits`, then each limit named in
 * `TURNHOST_WORKER_LIMITS` replaces the configured one. Either source malformed refuses both.
 */
export function resolveDefaultLimits(
  config: TurnhostConfig,
  env: NodeJS.ProcessEnv,
): Result<{ limits: ResolvedLimits }, 'malformed_limits'> {
  // Both details start with their origin, so the reason reads "malformed <origin>: <detail>".
  const configured = parseLimitSettings(config.limits, 'limits config');
  if (!configured.ok) return fail('malformed_limits', `malformed ${configured.detail}`);
  const fromEnv = parseLimitsEnv(env[LIMITS_ENV] ?? '');
  if (!fromEnv.ok) return fail('malformed_limits', `malformed ${fromEnv.detail}`);
  const limits: ResolvedLimits = { ...configured.limits, ...fromEnv.limits };
  limits.tmp_size ??= DEFAULT_TMP_SIZE_BYTES;
  return ok({ limits });
}

export interface LimitsInputs {
  config: TurnhostConfig;
  env: NodeJS.ProcessEnv;
  layout: CgroupLayout;
  /** Workers run as uid 0 (shared uid under a root supervisor): RLIMIT_NPROC does not bind them. */
  workersRunAsRoot: boolean;
  /** Workers share the supervisor's uid: RLIMIT_NPROC would count every process of it. */
  workersShareUid: boolean;
}

/** Why RLIMIT_NPROC cannot bound one turn's processes, or null when it can. */
function processesGap(inputs: LimitsInputs): string | null {
  if (inputs.workersRunAsRoot) return 'uid 0 for processes: workers run as uid 0, which RLIMIT_NPROC does not bind';
  if (inputs.workersShareUid) {
    return "shared_uid for processes: RLIMIT_NPROC would count every process of the supervisor's uid, not the turn's; the pids limit bounds the turn";
  }
  return null;
}

export function probeLimits(inputs: LimitsInputs): WorkerLimitsStatus {
  const { config, layout } = inputs;
  const status: WorkerLimitsStatus = { enforced: [], absent: [] };
  const resolved = resolveDefaultLimits(config, inputs.env);
  const disabled = new Set<LimitName>(config.limitsDisabled);

  const settle = (limit: LimitName, source: LimitSource, mechanismGap: string | null): void => {
    if (disabled.has(limit)) return void status.absent.push({ limit, source, reason: 'disabled by the operator' });
    if (!resolved.ok) return void status.absent.push({ limit, source, reason: resolved.detail });
    const value = resolved.limits[limit];
    if (value === undefined) return void status.absent.push({ limit, source, reason: 'not configured' });
    if (mechanismGap !== null) return void status.absent.push({ limit, source, reason: mechanismGap });
    if (source !== 'cgroup') return void status.enforced.push({ limit, source, value });
    const backend = layout.backendFor[limit as CgroupLimitName];
    status.enforced.push({ limit, source, value, ...(backend === undefined ? {} : { backend }) });
  };

  // rlimits are set by the helper with setrlimit/prlimit, which Linux always has.
  for (const limit of RLIMITS) settle(limit, 'rlimit', limit === 'processes' ? processesGap(inputs) : null);
  // The helper mounts the turn's /tmp and /dev/shm with this size; a tmpfs has no other bound.
  settle('tmp_size', 'tmpfs', null);
  for (const limit of CGROUP_LIMITS) {
    const backend = layout.backendFor[limit];
    settle(
      limit,
      'cgroup',
      backend === undefined ? (layout.unavailable[limit] ?? `controller ${limit} unavailable`) : null,
    );
  }
  return status;
}
