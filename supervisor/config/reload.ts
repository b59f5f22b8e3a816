/**
 * What a configuration reload (SIGHUP, `systemctl reload turnhost`) may change while the
 * supervisor runs, and what needs a restart. The reload loads and validates the configuration
 * exactly as boot does (same file, environment and flags); a configuration that no longer
 * validates changes nothing and the refusal names the key. Otherwise each live key that changed
 * is written into the running configuration object, which every mechanism reads at its use:
 *
 * - `egress.allowlist`, `denylist`, `allowAddressRanges`, `turnAdditionsAllowed`,
 *   `inference.*`, `credentials`: each turn resolves its policy and its brokers at launch; a
 *   worker prepared under the old ones is not claimed (both are part of its key,
 *   supervisor/turns/turn-request.ts);
 * - `limits`, `limitsDisabled`: resolved per turn (and part of a prepared worker's key);
 * - `logLevel`: every logger shares one level switch;
 * - `events.unboundRetentionDays`, `events.sessionRetentionDays`: read at each pruning;
 * - `events.journal`: read for each committed event;
 * - `turns.maxConcurrent`, `turns.defaultTimeoutSeconds`, `turns.maxTimeoutSeconds`,
 * - `workspaces.maxBytes`, `workspaces.maxFiles`: read when a workspace is created (its filesystem's
 *   size, which an existing workspace keeps), and by the measured checks where no image is used.
 *
 * Every other key is bound at boot (listeners, token, data directory, helper, turn temp, cgroup
 * names, the prepared-worker pool, protected paths and workspace roots that prepared workers
 * and the unit's mount namespace were built for, egress caps held by prepared workers' proxies,
 * probe roots): a change is reported as needing a restart and is not applied.
 */
import type { TurnhostConfig } from './types.js';

export const LIVE_KEYS: readonly string[] = [
  'egress.allowlist',
  'egress.denylist',
  'egress.allowAddressRanges',
  'egress.inference.providers',
  'egress.inference.ordinaryTurns',
  'egress.inference.maxRequestBytes',
  'egress.credentials',
  'egress.turnAdditionsAllowed',
  'limits',
  'limitsDisabled',
  'logLevel',
  'events.unboundRetentionDays',
  'events.sessionRetentionDays',
  'events.journal',
  'turns.maxConcurrent',
  'turns.defaultTimeoutSeconds',
  'turns.maxTimeoutSeconds',
  'workspaces.maxBytes',
  'workspaces.maxFiles',
];

type Tree = Record<string, unknown>;

const isTree = (value: unknown): value is Tree => typeof value === 'object' && value !== null && !Array.isArray(value);

/** Every leaf key path of a configuration (arrays and the limits map are leaves). */
function leafPaths(config: Tree, prefix = ''): string[] {
  const paths: string[] = [];
  for (const [key, value] of Object.entries(config)) {
    const at = prefix === '' ? key : `${prefix}.${key}`;
    if (isTree(value) && at !== 'limits') paths.push(...leafPaths(value, at));
    else paths.push(at);
  }
  return paths;
}

function valueAt(config: Tree, keyPath: string): unknown {
  let node: unknown = config;
  for (const key of keyPath.split('.')) node = isTree(node) ? node[key] : undefined;
  return node;
}

function setAt(config: Tree, keyPath: string, value: unknown): void {
  const keys = keyPath.split('.');
  let node: Tree = config;
  for (const key of keys.slice(0, -1)) node = node[key] as Tree;
  node[keys[keys.length - 1] as string] = value;
}

export interface ReloadPlan {
  /** Changed keys applied to the running configuration. */
  live: string[];
  /** Changed keys that take effect only after a restart (not applied). */
  restart: string[];
}

/** Which keys differ between the running and the newly loaded configuration, split by how they apply. */
export function planReload(running: TurnhostConfig, next: TurnhostConfig): ReloadPlan {
  const paths = new Set([...leafPaths(running), ...leafPaths(next)]);
  const plan: ReloadPlan = { live: [], restart: [] };
  for (const keyPath of [...paths].sort()) {
    const before = JSON.stringify(valueAt(running, keyPath));
    const after = JSON.stringify(valueAt(next, keyPath));
    if (before === after) continue;
    (LIVE_KEYS.includes(keyPath) ? plan.live : plan.restart).push(keyPath);
  }
  return plan;
}

/** Writes the plan's live keys from `next` into `running` (the object every mechanism holds). */
export function applyLiveKeys(running: TurnhostConfig, next: TurnhostConfig, plan: ReloadPlan): void {
  for (const keyPath of plan.live) setAt(running, keyPath, structuredClone(valueAt(next, keyPath)));
}
