/**
 * WorkerHostStatus: the probes' truthful report of what the worker boundary can enforce on this
 * host. Shapes follow the reference contract ("Worker host status", "Root server warning",
 * "Verified worker identity", "Worker resource limits", "Governed availability").
 */
import type { LimitName, LimitSource } from '../../core/limits.js';
import type { IdentityMode, WorkerMode } from '../../core/modes.js';
import type { ProtectedPathMode } from '../config/types.js';

export type ProbeTrigger = 'boot' | 'turn' | 'check';

export interface ModeAvailability {
  available: boolean;
  checkedAt: string;
  trigger: ProbeTrigger;
  /** Present when unavailable: the first missing requirement, in words an operator can act on. */
  requirement?: string;
}

interface LimitEnforced {
  limit: LimitName;
  source: LimitSource;
  /** bytes for data, file_size, memory and tmp_size; CPUs for cpu; a count otherwise. */
  value: number;
  /** Which cgroup backend enforces it (cgroup limits only). */
  backend?: 'cgroup_v2' | 'cgroup_v1';
}

interface LimitAbsent {
  limit: LimitName;
  source: LimitSource;
  reason: string;
}

export interface WorkerLimitsStatus {
  enforced: LimitEnforced[];
  absent: LimitAbsent[];
}

interface ProtectedPath {
  path: string;
  mode: ProtectedPathMode;
  reason: string;
}

export interface GovernedStatus {
  available: boolean;
  /** database_in_workspace: the supervisor's own state lies beneath a workspace root. */
  reason?: 'worker_host_unavailable' | 'database_in_workspace';
  detail?: string;
  hostExecution: 'worker' | 'host';
  profile: 'governed';
  protectedPaths: ProtectedPath[];
  /** Omitted when no probe of this run established it (docs/probes.md, "Receipts only from proof"). */
  identity?: IdentityMode;
  workerUid?: number;
  egress: { active: boolean; detail: string };
  /** Whether this status describes the startup configuration or one a reload changed (set by the daemon). */
  configurationView?: 'startup' | 'live';
}

/** One kernel facility the boundary depends on. */
export interface FacilityStatus {
  available: boolean;
  detail: string;
}

export interface BoundaryFacilities {
  seccomp: FacilityStatus & { actions: string[] };
  networkNamespaces: FacilityStatus;
  landlock: FacilityStatus & { abi: number | null };
  cgroup: FacilityStatus & {
    layout: 'v2' | 'hybrid' | 'v1' | 'none';
    ownCgroup: string | null;
    nsdelegate: boolean;
    delegated: boolean;
  };
  identityHelper: FacilityStatus & { path: string | null; qualified: boolean };
}

/** The workspace byte and inode cap here (docs/workspaces.md, "The byte and inode cap"). */
export interface WorkspaceCapStatus {
  /** true only where each new workspace is its own filesystem of workspaces.maxBytes. */
  enforced: boolean;
  /** image: a filesystem per workspace; measured: checked at turn start and host writes only; none: no cap. */
  mechanism: 'image' | 'measured' | 'none';
  maxBytes: number | null;
  maxFiles: number | null;
  /** What the host lacks for a real bound, when it is not enforced. */
  requirement?: string;
}

export type AttackResult = 'held' | 'broken' | 'skipped';

/** One case of the attack battery in one mode (docs/probes.md, "Attack battery"). */
export interface AttestedCase {
  case: string;
  mode: WorkerMode;
  result: AttackResult;
  /** The evidence: the errno, bytes or exit status seen, or why the case was skipped. */
  reason: string;
  checkedAt: string;
}

/** The last attack run: every case in every enabled mode, and how many of each outcome. */
export interface BoundaryAttestation {
  checkedAt: string;
  identity?: IdentityMode;
  cases: AttestedCase[];
  counts: { held: number; broken: number; skipped: number };
}

export interface WorkerHostStatus {
  ordinary?: ModeAvailability;
  restricted?: ModeAvailability;
  /**
   * Turns in a workspace: the ordinary mode, a usable workspaces root and (separate_uid) the
   * helper's `workspace_root` for it. Absent when workspaces are not configured.
   */
  workspaceTurns?: ModeAvailability;
  /** The byte and inode cap of workspaces. Absent when workspaces are not configured. */
  workspaceCap?: WorkspaceCapStatus;
  rootServer?: { warning: string };
  /** Omitted when no probe of this run established it (docs/probes.md, "Receipts only from proof"). */
  identity?: IdentityMode;
  /** The nonzero uid verified by the identity helper's own probe in this check. */
  workerUid?: number;
  /** separate_uid: the range the helper's probe verified; each running turn holds one uid of it. */
  uidRange?: { first: number; count: number };
  limits: WorkerLimitsStatus;
  governed: GovernedStatus;
  boundary: BoundaryFacilities;
  /** The last `check --attack` (or boot/scheduled attack run); absent until one ran. */
  attested?: BoundaryAttestation;
}
