/**
 * Worker-host probes: the truthful answer to "what can the worker boundary enforce here, now".
 * Every call re-reads and re-tries everything; a pass is never cached and a failure never
 * short-circuits the next probe. The turn manager calls `probeMode` before each turn; boot and
 * explicit checks call `runWorkerHostProbes`.
 */
import { discoverCgroupLayout } from '../../cgroup/discover.js';
import type { CgroupLayout } from '../../cgroup/types.js';
import type { Logger } from '../../core/log.js';
import type { TurnhostConfig } from '../config/types.js';
import { probeLandlock, probeNetworkNamespaces, probeSeccomp } from './facilities.js';
import {
  probeIdentity,
  type HelperProbe,
  type IdentityProbe,
  type SharedProbe,
  type SupervisorIds,
} from './identity.js';
import { probeLimits } from './limits.js';
import { rootServerWarning, supervisorIsRoot } from './root.js';
import { probeMaskedView, type HelperViewProbe, type ViewFacts } from './view.js';
import { supervisorStateInWorkspace } from './state.js';
import {
  probeWorkspaceCap,
  probeWorkspaceTurns,
  type WorkspaceImageProbe,
  type WorkspaceViewRunner,
} from './workspaces.js';
import { keptViewPaths } from './kept-paths.js';
import { hiddenHostPaths, supervisorStatePaths } from '../view/descriptor.js';
import type {
  BoundaryFacilities,
  GovernedStatus,
  ModeAvailability,
  ProbeTrigger,
  WorkerHostStatus,
  WorkerLimitsStatus,
} from './types.js';
import type { IdentityMode, WorkerMode } from '../../core/modes.js';
import { PORTLESS_ENTRY_RULES } from '../../proxy/policy.js';

export interface ProbeContext {
  config: TurnhostConfig;
  logger: Logger;
  /** The supervisor's real and effective uid; defaults to this process's. */
  ids?: SupervisorIds;
  /** Where `TURNHOST_WORKER_LIMITS` is read; defaults to process.env. */
  env?: NodeJS.ProcessEnv;
  /** Runs the qualified identity helper's own probe and answers its receipt. */
  helperProbe?: HelperProbe;
  /** Runs the helper's `view`; when given, each mode's masked view is verified on a sentinel tree. */
  helperView?: HelperViewProbe;
  /** No helper configured: runs the shared_uid launcher's probe, the only source of a shared_uid claim. */
  sharedProbe?: SharedProbe;
  /** No helper configured: runs the shared_uid launcher's `view` (same verification). */
  sharedView?: HelperViewProbe;
  /** Runs the helper's image probe: whether a workspace image bounds here (workspaces.maxBytes). */
  helperImageProbe?: WorkspaceImageProbe;
  /** No helper configured (a root supervisor): the shared_uid launcher's image probe. */
  sharedImageProbe?: WorkspaceImageProbe;
}

export interface ModeProbe {
  availability: ModeAvailability;
  /** Absent when no identity was established (then the mode is unavailable). */
  identity?: IdentityMode;
  workerUid?: number;
  /** The verified worker uid range (separate_uid only): each concurrent turn takes one uid from it. */
  uidRange?: { first: number; count: number };
  limits: WorkerLimitsStatus;
  cgroupLayout: CgroupLayout;
}

interface BoundaryFacts {
  ids: SupervisorIds;
  identity: IdentityProbe;
  layout: CgroupLayout;
  seccomp: BoundaryFacilities['seccomp'];
  networkNamespaces: BoundaryFacilities['networkNamespaces'];
  landlock: BoundaryFacilities['landlock'];
  limits: WorkerLimitsStatus;
  /** Per mode, why its masked view does not hold (absent: holds). */
  viewRequirement: Partial<Record<WorkerMode, string>>;
  /** What the last view probe saw a worker able to do (for the root-server warning). */
  viewFacts: ViewFacts | null;
  /** The supervisor's own state inside a workspace root, when it is. */
  stateInWorkspace: string | undefined;
}

function contextIds(ctx: ProbeContext): SupervisorIds {
  return ctx.ids ?? { uid: process.getuid?.() ?? -1, euid: process.geteuid?.() ?? -1 };
}

const PROFILE_OF: Record<WorkerMode, 'governed' | 'strict'> = { ordinary: 'governed', restricted: 'strict' };

/**
 * Each mode's masked view, verified on a sentinel tree by the program that will build the
 * turns' views (the helper, or the shared_uid launcher). No established identity: nothing to
 * verify (the identity's requirement stands). No view runner: the view is unverified, and a
 * view nobody verified is not claimed.
 */
async function probeViews(
  ctx: ProbeContext,
  identity: IdentityProbe,
  modes: readonly WorkerMode[],
): Promise<Pick<BoundaryFacts, 'viewRequirement' | 'viewFacts'>> {
  const requirements: BoundaryFacts['viewRequirement'] = {};
  if (identity.identity === undefined) return { viewRequirement: requirements, viewFacts: null };
  const shared = identity.identity === 'shared_uid';
  const run = shared ? ctx.sharedView : ctx.helperView;
  let viewFacts: ViewFacts | null = null;
  const kept = keptViewPaths(ctx.config);
  for (const mode of modes) {
    if (run === undefined) {
      requirements[mode] = `the ${PROFILE_OF[mode]} worker view is unverified: no view probe can run here`;
      continue;
    }
    const probed = await probeMaskedView(run, PROFILE_OF[mode], {
      ...(shared || identity.workerUid === undefined ? {} : { workerUid: identity.workerUid }),
      hide: hiddenHostPaths(ctx.config),
      ownState: supervisorStatePaths(ctx.config),
      // An unreadable helper config is the helper's own probe's refusal (it reads the same file).
      kept: 'paths' in kept ? kept.paths : [],
    });
    if (probed.requirement !== undefined) requirements[mode] = probed.requirement;
    viewFacts ??= probed.facts;
  }
  return { viewRequirement: requirements, viewFacts };
}

async function probeBoundary(ctx: ProbeContext, modes: readonly WorkerMode[]): Promise<BoundaryFacts> {
  const ids = contextIds(ctx);
  const { config } = ctx;
  const layout = discoverCgroupLayout(config.probeRoots);
  const [identity, networkNamespaces] = await Promise.all([
    probeIdentity(config.identityHelper.path, ids, ctx.helperProbe, ctx.sharedProbe),
    probeNetworkNamespaces(supervisorIsRoot(ids)),
  ]);
  const shared = config.identityHelper.path === null;
  const limits = probeLimits({
    config,
    env: ctx.env ?? process.env,
    layout,
    workersRunAsRoot: shared && supervisorIsRoot(ids),
    workersShareUid: shared,
  });
  return {
    ids,
    identity,
    layout,
    seccomp: probeSeccomp(config.probeRoots.proc),
    networkNamespaces,
    landlock: probeLandlock(),
    limits,
    ...(await probeViews(ctx, identity, modes)),
    stateInWorkspace: supervisorStateInWorkspace(config),
  };
}

/** Holding every worker process and killing them all needs the pids controller somewhere we own. */
function cgroupRequirement(layout: CgroupLayout): string | undefined {
  if (layout.backendFor.pids !== undefined) return undefined;
  return `a cgroup that can hold and kill the whole worker: ${layout.unavailable.pids ?? 'pids controller unavailable'}`;
}

/** Requirements in a fixed order; the first missing one is the one reported. */
function firstMissingRequirement(facts: BoundaryFacts, mode: WorkerMode): string | undefined {
  if (facts.stateInWorkspace !== undefined) return facts.stateInWorkspace;
  if (!facts.seccomp.available) return facts.seccomp.detail;
  if (!facts.networkNamespaces.available) return facts.networkNamespaces.detail;
  if (facts.identity.requirement !== undefined) return facts.identity.requirement;
  return cgroupRequirement(facts.layout) ?? facts.viewRequirement[mode];
}

/**
 * Set once a real probe found the ordinary boundary available in this process; from then on
 * governed work is evaluated in workers, and status says so even while a later probe fails.
 */
let boundaryProvenInProcess = false;

const RESTRICTED_DISABLED_REQUIREMENT =
  'restricted mode is disabled in the configuration (modes.restricted.enabled is false)';

function modeAvailability(
  facts: BoundaryFacts,
  config: TurnhostConfig,
  mode: WorkerMode,
  trigger: ProbeTrigger,
): ModeAvailability {
  const requirement =
    mode === 'restricted' && !config.modes.restricted.enabled
      ? RESTRICTED_DISABLED_REQUIREMENT
      : firstMissingRequirement(facts, mode);
  const checkedAt = new Date().toISOString();
  if (requirement === undefined) {
    if (mode === 'ordinary') boundaryProvenInProcess = true;
    return { available: true, checkedAt, trigger };
  }
  return { available: false, checkedAt, trigger, requirement };
}

export async function probeMode(ctx: ProbeContext, mode: WorkerMode, trigger: ProbeTrigger): Promise<ModeProbe> {
  const disabled = mode === 'restricted' && !ctx.config.modes.restricted.enabled;
  const facts = await probeBoundary(ctx, disabled ? [] : [mode]);
  const probe: ModeProbe = {
    availability: modeAvailability(facts, ctx.config, mode, trigger),
    ...(facts.identity.identity === undefined ? {} : { identity: facts.identity.identity }),
    limits: facts.limits,
    cgroupLayout: facts.layout,
  };
  if (facts.identity.workerUid !== undefined) probe.workerUid = facts.identity.workerUid;
  if (facts.identity.uidRange !== undefined) probe.uidRange = facts.identity.uidRange;
  return probe;
}

function egressDetail(config: TurnhostConfig): string {
  const { allowlist, denylist } = config.egress;
  const lists =
    allowlist.length === 0
      ? 'an empty allowlist: workers have no network'
      : `${allowlist.length} allowed host pattern(s), ${denylist.length} denied`;
  return `per-turn egress proxy with ${lists} (${PORTLESS_ENTRY_RULES})`;
}

function governedStatus(config: TurnhostConfig, facts: BoundaryFacts, ordinary: ModeAvailability): GovernedStatus {
  const governed: GovernedStatus = {
    available: ordinary.available,
    hostExecution: ordinary.available || boundaryProvenInProcess ? 'worker' : 'host',
    profile: 'governed',
    protectedPaths: config.fs.protectedPaths.map((rule) => ({
      path: `${rule.root.replace(/\/+$/, '')}/${rule.path}`,
      mode: rule.mode,
      reason: rule.reason,
    })),
    ...(facts.identity.identity === undefined ? {} : { identity: facts.identity.identity }),
    egress: { active: true, detail: egressDetail(config) },
  };
  if (!ordinary.available) {
    governed.reason = facts.stateInWorkspace === undefined ? 'worker_host_unavailable' : 'database_in_workspace';
    governed.detail = ordinary.requirement ?? 'worker host unavailable';
  }
  if (facts.identity.workerUid !== undefined) governed.workerUid = facts.identity.workerUid;
  return governed;
}

function cgroupFacility(layout: CgroupLayout): BoundaryFacilities['cgroup'] {
  const pidsBackend = layout.backendFor.pids;
  const pidsHierarchy = layout.v1.find((h) => h.controller === 'pids');
  const ownCgroup = pidsBackend === 'cgroup_v1' ? (pidsHierarchy?.ownCgroup ?? null) : (layout.v2?.ownCgroup ?? null);
  const parts = (['memory', 'pids', 'cpu'] as const).map((c) => {
    const backend = layout.backendFor[c];
    return backend === undefined ? `${c}: ${layout.unavailable[c] ?? 'unavailable'}` : `${c}: ${backend}`;
  });
  return {
    available: pidsBackend !== undefined,
    detail: `${layout.kind} layout; ${parts.join('; ')}`,
    layout: layout.kind,
    ownCgroup,
    nsdelegate: layout.v2?.nsdelegate ?? false,
    delegated: layout.v2?.writable ?? false,
  };
}

/**
 * A failed boot probe is logged once; it never refuses the boot. The root server warning is
 * logged by the daemon (it also covers a boot probe that threw), so not here.
 */
function logBootProbe(logger: Logger, status: WorkerHostStatus): void {
  for (const mode of ['ordinary', 'restricted'] as const) {
    const availability = status[mode];
    if (availability !== undefined && !availability.available) {
      logger.warn(`worker mode ${mode} unavailable: ${availability.requirement}`, { probe: 'worker_host', mode });
    }
  }
  if (status.workspaceTurns !== undefined && !status.workspaceTurns.available)
    logger.warn(`workspace turns unavailable: ${status.workspaceTurns.requirement}`, { probe: 'worker_host' });
  if (status.workspaceCap?.mechanism === 'measured')
    logger.warn(`workspace cap not enforced: ${status.workspaceCap.requirement}`, { probe: 'worker_host' });
}

/** The program that builds the turns' views, for the workspace turns' probe. */
function workspaceViewRunner(ctx: ProbeContext, identity: IdentityProbe): WorkspaceViewRunner | undefined {
  const run = identity.identity === 'shared_uid' ? ctx.sharedView : ctx.helperView;
  if (run === undefined) return undefined;
  return identity.identity === 'shared_uid' || identity.workerUid === undefined
    ? { run }
    : { run, workerUid: identity.workerUid };
}

export async function runWorkerHostProbes(ctx: ProbeContext, trigger: ProbeTrigger): Promise<WorkerHostStatus> {
  const { config } = ctx;
  const facts = await probeBoundary(ctx, config.modes.restricted.enabled ? ['ordinary', 'restricted'] : ['ordinary']);
  const ordinary = modeAvailability(facts, config, 'ordinary', trigger);
  const workspaceTurns = await probeWorkspaceTurns(config, ordinary, trigger, workspaceViewRunner(ctx, facts.identity));
  // The program that mounts new workspaces' images is the one whose probe counts.
  const imageProbe = config.identityHelper.path === null ? ctx.sharedImageProbe : ctx.helperImageProbe;
  const workspaceCap = await probeWorkspaceCap(config, imageProbe);
  const status: WorkerHostStatus = {
    ordinary,
    ...(config.modes.restricted.enabled ? { restricted: modeAvailability(facts, config, 'restricted', trigger) } : {}),
    ...(workspaceTurns === undefined ? {} : { workspaceTurns }),
    ...(workspaceCap === undefined ? {} : { workspaceCap }),
    ...(facts.identity.identity === undefined ? {} : { identity: facts.identity.identity }),
    limits: facts.limits,
    governed: governedStatus(config, facts, ordinary),
    boundary: {
      seccomp: facts.seccomp,
      networkNamespaces: facts.networkNamespaces,
      landlock: facts.landlock,
      cgroup: cgroupFacility(facts.layout),
      identityHelper: facts.identity.helper,
    },
  };
  if (facts.identity.workerUid !== undefined) status.workerUid = facts.identity.workerUid;
  if (facts.identity.uidRange !== undefined) status.uidRange = facts.identity.uidRange;
  const warning = rootServerWarning(facts.ids, facts.identity, facts.viewFacts);
  if (warning !== undefined) status.rootServer = { warning };
  if (trigger === 'boot') logBootProbe(ctx.logger, status);
  return status;
}
