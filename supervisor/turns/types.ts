/**
 * Turns: the request a host application sends, the record the supervisor keeps, and the
 * manager surface the HTTP routes and the CLI call. Implemented by the `TurnManager` class of
 * `supervisor/turns/manager.ts`; tests serve fakes of the surface.
 */
import type Database from 'better-sqlite3';
import type { EventSink } from '../../core/events.js';
import type { LimitHit, ResolvedLimits } from '../../core/limits.js';
import type { Logger } from '../../core/log.js';
import type { WorkerMode } from '../../core/modes.js';
import type { Result } from '../../core/result.js';
import type { LimitSettings, TurnhostConfig } from '../config/types.js';
import type { ProbeContext } from '../probes/index.js';
import type { HostWriteRoots, HostWriteTurn } from '../fs/host-write.js';
import type { HelperLocation } from '../identity/helper-process.js';
import type { RelayReport } from '../../proxy/relay/kernel-relay.js';
import type { OwnListeners } from '../../proxy/self-connection.js';
import type { EgressSummary } from '../../proxy/egress-summary.js';
import type { SessionDeleteFailure, SessionDeletion, SessionPage, SessionPageQuery } from './sessions.js';

export interface TurnRequest {
  sessionId: string;
  /** Optional caller-chosen id ([A-Za-z0-9_-]{1,64}); generated when absent. */
  turnId?: string;
  mode: WorkerMode;
  argv: string[];
  /**
   * Absolute working directory inside a configured workspace root; with `workspace`, relative to
   * the workspace (the manager makes it absolute before the launch).
   */
  cwd: string;
  /** The id of a workspace (supervisor/workspaces/) the turn runs in, as the workspace's uid. */
  workspace?: string;
  env?: Record<string, string>;
  /** A pseudo-terminal of this size, or pipes when absent. */
  tty?: { cols: number; rows: number };
  timeoutSeconds?: number;
  /** Extra allowlist entries; only those the configuration permits are accepted. */
  egressAllow?: string[];
  /** Per-turn limits; each may only lower the configured default. */
  limits?: LimitSettings;
  model?: string;
  /**
   * The command's whole input, written to it and then closed (attach input is then refused):
   * text, or base64 with `stdinEncoding: 'base64'`; at most 512 KiB once decoded.
   */
  stdin?: string;
  stdinEncoding?: 'utf8' | 'base64';
}

/** What a turn page may be narrowed by: each filter is one equality on one column. */
export interface TurnFilter {
  sessionId?: string;
  state?: TurnRecord['state'];
  workspaceId?: string;
}

/**
 * One page of turns, newest first (the order their records were stored); `nextAfter` is the
 * cursor of the next page, null on the last. The cursor is the record's rowid: a record stored
 * later gets a larger one, so paging never repeats or skips a record that existed throughout.
 */
export interface TurnPage {
  turns: TurnRecord[];
  nextAfter: string | null;
}

export interface TurnPageQuery extends TurnFilter {
  /** A cursor from a previous page's `nextAfter`. */
  after?: string;
  limit?: number;
}

export type TurnStatus =
  | 'ok'
  | 'nonzero_exit'
  | 'signaled'
  | 'timeout'
  | 'cancelled'
  | 'oom_killed'
  | 'launch_refused'
  | 'internal_error'
  | 'interrupted';

export interface TurnUsage {
  userCpuUsec: number | null;
  systemCpuUsec: number | null;
  maxRssKiB: number | null;
  cgroupCpuUsec: number | null;
  memoryPeakBytes: number | null;
  pidsPeak: number | null;
  oomKills: number | null;
}

export interface TurnResult {
  status: TurnStatus;
  exitCode: number | null;
  signal: string | null;
  durationMs: number;
  usage: TurnUsage;
  limitHits: LimitHit[];
  /** For launch_refused / internal_error: the requirement or the failure, in words. */
  detail?: string;
  /**
   * Where status, exitCode and signal come from: `supervisor` when from its own facts (its stop,
   * the cgroup's OOM count, a refusal, a lost worker), `worker_report` when only the worker's
   * report of the command's wait status says so (the command cannot reach the worker, but the
   * supervisor does not see that wait status itself). Absent in records of earlier versions.
   */
  source?: 'supervisor' | 'worker_report';
  /** A workspace turn: what its workspace held when the turn ended. */
  workspace?: { id: string; bytes: number; files: number };
  /** The command never started: not_found (exit 127) or not_executable (126); `detail` says why. */
  spawnError?: 'not_found' | 'not_executable';
  /** The turn's egress through its proxy: counts and the first denials; absent when no proxy served it. */
  egress?: EgressSummary;
  /**
   * What each of the turn's streams wrote (supervisor/turns/output.ts): every byte, and those
   * past `turns.outputRetainBytes` that were not kept. Absent in records of earlier versions
   * and of turns refused before they ran.
   */
  output?: OutputCounts;
}

export type OutputStreamName = 'stdout' | 'stderr' | 'pty';

/** What one stream wrote: `written` every byte, `dropped` those past the cap (not kept). */
interface StreamCount {
  written: number;
  dropped: number;
}
export type OutputCounts = Partial<Record<OutputStreamName, StreamCount>>;

export interface TurnRecord {
  id: string;
  sessionId: string;
  mode: WorkerMode;
  profile: 'governed' | 'strict';
  state: 'starting' | 'running' | 'finished';
  identity: 'separate_uid' | 'shared_uid';
  workerUid: number | null;
  createdAt: string;
  endedAt: string | null;
  tty: boolean;
  result: TurnResult | null;
  /** The workspace the turn ran in, or null. */
  workspaceId?: string | null;
  /**
   * What ran: the argv, the absolute cwd, the names (never the values) of the caller's
   * variables, the limits it ran under and its timeout. Null in records stored before the
   * supervisor kept them.
   */
  argv: string[] | null;
  cwd: string | null;
  envNames: string[] | null;
  limits: ResolvedLimits | null;
  timeoutSeconds: number | null;
}

/**
 * What an attached client receives, in order; `exit` is last. `dropped`: that many more bytes of
 * the stream were past the retention cap and are not kept (none of the stream's later bytes are).
 */
export type TurnStreamEvent =
  | { type: 'output'; stream: OutputStreamName; data: Buffer }
  | { type: 'dropped'; stream: OutputStreamName; bytes: number }
  | { type: 'exit'; result: TurnResult };

/** Where an attach starts in each stream (absent: the start). */
export type OutputOffsets = Partial<Record<OutputStreamName, number>>;

/** One stream of a turn's output as it stands: its bytes kept on disk and its counts. */
export interface OutputStreamState {
  /** Bytes in the file now: the readable range is [0, kept). */
  kept: number;
  written: number;
  dropped: number;
  /** The turn has ended: nothing more is written. */
  complete: boolean;
  /** The file is gone (removed from the data directory) though the record says bytes were kept. */
  gone: boolean;
}

/** A turn's output for reading over HTTP (supervisor/turns/output.ts). */
export interface TurnOutputReader {
  streams: readonly OutputStreamName[];
  stream(stream: OutputStreamName): OutputStreamState | null;
  filePath(stream: OutputStreamName): string;
}

export interface TurnAttachment {
  /**
   * Output kept before attaching is replayed first, from the files, then live output follows.
   * `drained` (the client's backpressure) resolves once the client can take more replay.
   */
  onEvent(listener: (event: TurnStreamEvent) => void, flow?: { drained(): Promise<void> }): void;
  /** `input_closed` once the turn's input has ended (eof, request stdin, or the turn finished). */
  write(data: Buffer): InputOutcome;
  /** Ends the command's input: EOF on its stdin pipe, or the terminal's EOF character (VEOF) on a pty. */
  endInput(): InputOutcome;
  resize(cols: number, rows: number): void;
  signal(signal: 'SIGINT' | 'SIGTERM' | 'SIGHUP' | 'SIGQUIT'): void;
  /**
   * Backpressure: while any attachment paused, the command's output is not read and the
   * command blocks writing it. Pauses lapse when the command has ended, and with detach.
   */
  pauseOutput(): void;
  resumeOutput(): void;
  detach(): void;
}

export type InputOutcome = Result<object, 'input_closed'>;

export type TurnCreateFailure =
  'invalid_request' | 'worker_host_unsupported' | 'capacity_exhausted' | 'draining' | 'conflict';

/** Who turned drain mode on or off: the API (`turnhost drain`, POST /api/drain) or SIGUSR2. */
export type DrainSource = 'api' | 'signal';

/** What placement reads of the turn manager: its load and whether it takes new turns. */
export interface TurnLoad {
  turnsRunning: number;
  /** turns.maxConcurrent, read now (a reload may change it). */
  maxTurns: number;
  draining: boolean;
}

export interface TurnManager {
  /** Validates, probes the mode, launches. Resolves once the worker is running (or refused). */
  /** `request` is validated here (validate.ts): the HTTP body as it came. */
  create(
    request: unknown,
  ): Promise<
    Result<{ turn: TurnRecord }, TurnCreateFailure> & { field?: string; errors?: { field: string; detail: string }[] }
  >;
  get(id: string): TurnRecord | undefined;
  list(filter?: { sessionId?: string }): TurnRecord[];
  /** One page of turn records, newest first (supervisor/turns/store.ts); running turns as they are now. */
  page(query: TurnPageQuery): Result<TurnPage, 'store_unavailable'>;
  cancel(id: string): Result<{ turn: TurnRecord }, 'not_found' | 'not_running'>;
  /** One page of sessions, the most recently begun first (supervisor/turns/sessions.ts). */
  listSessions(query: SessionPageQuery): Result<SessionPage, 'store_unavailable'>;
  /**
   * Deletes a session's workspaces, then its events and turn records (supervisor/turns/sessions.ts);
   * refused with `session_busy` while a turn of it, or a turn on one of its workspaces, runs or is
   * being launched.
   */
  deleteSession(
    sessionId: string,
  ): Promise<Result<{ deleted: SessionDeletion }, SessionDeleteFailure | 'workspaces_unavailable'>>;
  /** One retention pass (`events.sessionRetentionDays`, read now) as of `now`: the ended sessions it deleted. */
  pruneSessions(now?: Date): Result<{ deleted: SessionDeletion[] }, 'store_unavailable'>;
  /** Attaches from `offsets` (each at most the bytes kept of its stream: `invalid_offset` otherwise). */
  attach(
    id: string,
    offsets?: OutputOffsets,
  ): Result<{ attachment: TurnAttachment }, 'not_found' | 'invalid_offset'> & { field?: string };
  /** The turn's output as it stands (running or finished). */
  output(id: string): Result<{ output: TurnOutputReader }, 'not_found'>;
  /**
   * Resolves once the turn has ended, `seconds` have passed or `signal` aborted, whichever is
   * first; holds nothing after (no timer, no listener).
   */
  waitForEnd(id: string, seconds: number, signal: AbortSignal): Promise<void>;
  /**
   * A running turn's held roots for host writes. Valid until the caller next yields
   * to the event loop: use them synchronously. `turn_finished` once the worker has exited.
   */
  roots(id: string): Result<{ roots: HostWriteRoots; turn: HostWriteTurn }, 'not_found' | 'turn_finished'>;
  /** Resolves with the final result when the turn ends. */
  wait(id: string): Promise<TurnResult | undefined>;
  /** Prepared workers (supervisor/turns/prepared-workers.ts): ready to be claimed, and still starting. */
  preparedWorkers(): { ready: number; starting: number };
  /** Turns running, the cap and drain mode: what `GET /api/ready` reports for placement. */
  load(): TurnLoad;
  /**
   * Drain mode: while on, `create` refuses with `draining` and running turns end as they would.
   * Records a `host_drain` event when the mode changes; answers whether it did.
   */
  setDraining(draining: boolean, source: DrainSource): boolean;
  /** The kernel relay the turn proxies hand CONNECT tunnels to (relay/); null before any proxy started. */
  egressRelay(): RelayReport | null;
  close(): Promise<void>;
}

/**
 * What the turn manager needs of the workspaces (supervisor/workspaces/): the workspace service
 * satisfies it, and the daemon hands it over (supervisor/compose.ts), so neither imports the other.
 */
export interface TurnWorkspaces {
  /** The workspace's session binding (null: none), or undefined when there is no such workspace. */
  get(id: string): { sessionId: string | null } | undefined;
  /** A turn starts on the workspace: where it is and its uid, if it is ready. */
  claimForTurn(id: string): Result<{ workspace: { id: string; uid: number | null; path: string } }>;
  /** What the workspace holds now; `image`: it is its own filesystem, which bounds it. */
  usage(id: string): Promise<Result<{ bytes: number; files: number; image: boolean }>>;
  /** The workspaces bound to a session. */
  list(filter: { sessionId: string }): readonly unknown[];
  /**
   * Deletes every workspace bound to the session; `workspace_busy` while a turn runs on one
   * (nothing is then removed). Answers the ids removed.
   */
  deleteForSession(sessionId: string): Promise<Result<{ deleted: string[] }>>;
  /** Finishes the creates and deletes a crash left half done; runs before any turn starts. */
  recover(): Promise<void>;
  /** The shared_uid launcher, which also measures and removes shared_uid workspace trees. */
  useSharedLauncher(launcher: HelperLocation | null, problem: string | null): void;
}

/** What the turn manager is built from. */
export interface TurnManagerDeps {
  config: TurnhostConfig;
  logger: Logger;
  events: EventSink;
  db: Database.Database;
  probeContext: ProbeContext;
  /** The worker program and its arguments (the shared_uid launcher's config names them). */
  worker: { exec: string; args: string[] };
  env?: NodeJS.ProcessEnv;
  /** Where the per-turn runtime directory (proxy sockets) is created; default the OS temp dir. */
  runtimeParent?: string;
  /** Name of the turn-cgroup subtree under the supervisor's own cgroup(s); tests use unique names. */
  cgroupSubtreeName?: string;
  /** The supervisor's own TCP listeners (its API), which no turn's proxy may dial (proxy/self-connection.ts). */
  ownListeners?: OwnListeners;
  /** Default: euid is 0. Chooses how the proxy sockets are owned (a test sets false for the non-root path). */
  supervisorIsRoot?: boolean;
  /** Read-only paths the shared_uid launcher keeps in every view (default: the package root). */
  sharedViewPaths?: string[];
  /** The shared_uid launcher binary (default: the helper this installation ships). */
  sharedLauncherBinary?: string;
}
