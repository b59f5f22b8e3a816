/**
 * The supervisor's configuration after loading and validation (`supervisor/config/load.ts`).
 * Every key is documented in docs/configuration.md. Units are explicit in the names.
 */
import type { ProtectedPathMode } from '../probes/types.js';
import type { LimitName } from '../../core/limits.js';
import type { LogLevel } from '../../core/log.js';

/** Limit values as written by operators: numbers, or strings with units ("512M", "1.5"). */
export type LimitSettings = Partial<Record<LimitName, string | number>>;

export interface ProtectedPathRule {
  /** Absolute workspace root the rule applies to. */
  root: string;
  /** Path relative to that root. */
  path: string;
  mode: ProtectedPathMode;
  reason: string;
}

export interface TurnhostConfig {
  /** Where the database, api-token and fallback log live. */
  dataDir: string;
  listen: {
    /** "HOST:PORT" on loopback, or null for no TCP listener. */
    tcp: string | null;
    /** Unix socket path, or null. */
    socket: string | null;
    /** A non-loopback `tcp` address is refused unless this is true. */
    allowNonLoopback: boolean;
  };
  /** A configured bearer token; when null the token lives in `<dataDir>/api-token` (0600). */
  apiToken: string | null;
  logLevel: LogLevel;
  events: {
    /** Days to keep events with no session. */
    unboundRetentionDays: number;
    /** Also send each committed event to the systemd journal as a structured entry. */
    journal: boolean;
    /** Days an ended session (events and turn records) is kept after its last activity; 0 keeps it forever. */
    sessionRetentionDays: number;
  };
  metrics: {
    /** A separate loopback "HOST:PORT" serving only GET /metrics without the token, or null. */
    listen: string | null;
  };
  identityHelper: {
    /** Absolute path of the identity helper, or null for shared_uid mode. */
    path: string | null;
    /** Helper config override; honoured by the helper only for a root caller (dev and tests). */
    configPath: string | null;
  };
  modes: {
    restricted: { enabled: boolean };
  };
  /** Default worker limits; per-turn overrides may only lower them. */
  limits: LimitSettings;
  /** Limits the operator turned off on purpose (reported absent: "disabled by the operator"). */
  limitsDisabled: LimitName[];
  egress: {
    allowlist: string[];
    denylist: string[];
    /** CIDRs the proxy may dial although their address class is normally refused. */
    allowAddressRanges: string[];
    inferenceHosts: string[];
    /** Hosts a turn request may add to its allowlist (patterns, same syntax). Empty: none. */
    turnAdditionsAllowed: string[];
    maxConnections: number;
    maxBytes: number;
    idleTimeoutMs: number;
  };
  fs: {
    protectedPaths: ProtectedPathRule[];
    scratch: { dir: string | null; capBytes: number; pruneIntervalSeconds: number };
    hostWriteMaxBytes: number;
  };
  turns: {
    maxConcurrent: number;
    defaultTimeoutSeconds: number;
    maxTimeoutSeconds: number;
    /** Absolute directories a turn's cwd/workspace must lie beneath. */
    workspaceRoots: string[];
    /** Extra environment variable names forwarded to turn commands beyond the built-in allowlist. */
    envExtra: string[];
    /**
     * Workers booted ahead of the turns that will claim them (0 turns it off): after each turn
     * starts, one worker for the same mode, cwd, limits and egress additions is prepared.
     */
    preparedWorkers: number;
    /** A prepared worker nobody claimed within this time is stopped. */
    preparedWorkerIdleSeconds: number;
  };
  workspaces: {
    /**
     * The directory whose entries are workspaces (`<root>/<id>`), or null: no workspaces. With an
     * identity helper it must equal one of the helper config's `workspace_root` entries.
     */
    root: string | null;
    /** A workspace holding more than this many bytes starts no turn and takes no host write. */
    maxBytes: number;
  };
  /** Roots the probes read; "/" in production, a constructed tree in tests. */
  probeRoots: { proc: string; sysFsCgroup: string };
}
