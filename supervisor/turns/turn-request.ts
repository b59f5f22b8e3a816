/**
 * What a validated turn request resolves to before any worker is involved: its limits (the
 * configured defaults, lowered only), its egress policy, the worker spec a worker is started
 * for (and a prepared worker is matched by), and the command's environment.
 */
import type { ResolvedLimits } from '../../core/limits.js';
import type { WorkerMode } from '../../core/modes.js';
import { ok, type Result } from '../../core/result.js';
import { buildTurnPolicy, type EgressPolicy } from '../../proxy/policy.js';
import { lowerOnly, parseLimitSettings } from '../limits/parse.js';
import { resolveDefaultLimits } from '../probes/limits.js';
import type { TurnhostConfig } from '../config/types.js';
import { NODE_PROXY_ENV } from './env-filter.js';
import { brokersForMode, type TurnBrokers } from './turn-brokers.js';
import { DEFAULT_COMMAND_PATH } from './worker-process.js';
import type { TurnRequest } from './types.js';

/** What a worker is started for: a prepared worker serves only a turn with the same key. */
export interface WorkerSpec {
  mode: WorkerMode;
  /** A workspace turn: the lease its worker runs under (uid null: a shared_uid workspace). */
  lease?: { id: string; uid: number | null; path: string };
  cwd: string;
  limits: ResolvedLimits;
  egressAdditions: readonly string[];
  policy: EgressPolicy;
  /** The providers and brokered credentials its proxy serves (no secret: those are read at the proxy's start). */
  brokers: TurnBrokers;
}

export function workerKey(
  spec: Pick<WorkerSpec, 'mode' | 'cwd' | 'limits' | 'egressAdditions' | 'policy' | 'lease' | 'brokers'>,
): string {
  const limits = Object.entries(spec.limits).sort(([a], [b]) => a.localeCompare(b));
  // The policy is part of the key: a worker prepared before a configuration reload changed the
  // allowlist holds a proxy with the old policy and must not serve a turn resolved under the new one;
  // the same holds for its brokers.
  const { allow, deny, allowAddressRanges } = spec.policy;
  const policy = [allow, deny, allowAddressRanges].map((entries) => entries.map((entry) => entry.text));
  return JSON.stringify([
    spec.mode,
    spec.cwd,
    limits,
    [...spec.egressAdditions].sort(),
    policy,
    spec.brokers,
    spec.lease?.id ?? null,
  ]);
}

/** The worker spec of a request, or the field that makes it invalid. */
export function resolveWorkerSpec(
  config: TurnhostConfig,
  env: NodeJS.ProcessEnv,
  request: TurnRequest,
): Result<{ spec: WorkerSpec }> & { field?: string } {
  const limits = resolveTurnLimits(config, env, request.limits);
  if (!limits.ok) return { ...limits, field: limits.field ?? 'limits' };
  const policy = buildTurnPolicy(config.egress, { mode: request.mode, additions: request.egressAllow });
  if (!policy.ok) return { ...policy, field: 'egressAllow' };
  return ok({
    spec: {
      mode: request.mode,
      cwd: request.cwd,
      limits: limits.limits,
      egressAdditions: request.egressAllow ?? [],
      policy: policy.policy,
      brokers: brokersForMode(config.egress, request.mode),
    },
  });
}

function resolveTurnLimits(
  config: TurnhostConfig,
  env: NodeJS.ProcessEnv,
  overrides: TurnRequest['limits'],
): Result<{ limits: ResolvedLimits }> & { field?: string } {
  const defaults = resolveDefaultLimits(config, env);
  if (!defaults.ok) return defaults;
  const disabled = new Set(config.limitsDisabled);
  const enabled: ResolvedLimits = Object.fromEntries(
    Object.entries(defaults.limits).filter(([name]) => !disabled.has(name as keyof ResolvedLimits)),
  );
  if (!overrides) return ok({ limits: enabled });
  const parsed = parseLimitSettings(overrides, 'limits');
  if (!parsed.ok) return { ...parsed, field: 'limits' };
  const lowered = lowerOnly(enabled, parsed.limits);
  if (!lowered.ok) return { ...lowered, field: 'limits' };
  return lowered;
}

/**
 * The command's environment (env-filter.ts has the rules): a fixed base, the caller's variables
 * as given (validation refused the names the boundary owns), then what the boundary sets. The
 * worker adds the proxy variables, and the launch the turn's TMPDIR.
 */
export function commandEnv(request: TurnRequest): Record<string, string> {
  return {
    PATH: DEFAULT_COMMAND_PATH,
    HOME: request.cwd,
    LANG: 'C.UTF-8',
    ...(request.tty ? { TERM: 'xterm-256color' } : {}),
    ...request.env,
    ...NODE_PROXY_ENV,
  };
}
