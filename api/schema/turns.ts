/**
 * Turn bodies. TurnCreateRequest is the structural gate of `POST /api/turns`: types, patterns,
 * sizes and unknown fields. Checks that need the configuration (workspace roots, the timeout
 * maximum, whether restricted is enabled) stay with the turn manager's validation.
 *
 * `x-detail` is the text a refusal of that node reports after the field name; a node without
 * one reports through its nearest annotated ancestor (so `egressAllow: [1]` names
 * `egressAllow`, while `argv: ['a', 5]` names `argv[1]`). `x-unknown` is the text for a
 * property the node does not define.
 */
import { Type, type Static } from '@sinclair/typebox';
import { ID_DETAIL, ID_PATTERN, ID_SHAPE, SESSION_ID_DETAIL, SESSION_ID_PATTERN } from './ids.js';
import { WorkerMode } from './worker-host.js';

const TURN_ID_PATTERN = ID_PATTERN;
const MAX_ARGV = 4096;
const MAX_ENV = 256;
/** The most input a turn request may carry (decoded); larger input goes through attach. */
export const MAX_REQUEST_STDIN_BYTES = 512 * 1024;
const LIMIT_NAMES = ['memory', 'pids', 'cpu', 'processes', 'open_files', 'file_size', 'data'] as const;
const NO_NUL = '^[^\\u0000]*$';
/** An environment variable name execve can carry: no "=" (it ends the name) and no NUL. */
const ENV_NAME_PATTERN = '^[^=\\u0000]{1,256}$';
/** The most bytes one variable's value may hold (checked with the turn manager's validation). */
export const MAX_ENV_VALUE_BYTES = 32 * 1024;

const LimitValue = Type.Union([Type.Number(), Type.String()], {
  'x-detail': 'expected a number or a string with a unit',
});

export const TurnCreateRequest = Type.Object(
  {
    sessionId: Type.String({ pattern: SESSION_ID_PATTERN, 'x-detail': SESSION_ID_DETAIL }),
    turnId: Type.Optional(Type.String({ pattern: TURN_ID_PATTERN, 'x-detail': ID_DETAIL })),
    mode: Type.Union([Type.Literal('ordinary'), Type.Literal('restricted')], {
      'x-detail': "expected 'ordinary' or 'restricted'",
    }),
    argv: Type.Array(Type.String({ pattern: NO_NUL, 'x-detail': 'expected a string without NUL' }), {
      minItems: 1,
      maxItems: MAX_ARGV,
      'x-detail': `expected a non-empty array of at most ${MAX_ARGV} strings`,
    }),
    cwd: Type.Optional(
      Type.String({
        pattern: NO_NUL,
        maxLength: 4096,
        'x-detail': 'expected a path without NUL',
        description:
          'Without workspace: required, absolute, normalised, beneath a configured workspace root and ' +
          'clear of the workspaces root. With workspace: relative to the workspace, default ".".',
      }),
    ),
    workspace: Type.Optional(
      Type.String({
        pattern: ID_PATTERN,
        'x-detail': `expected a workspace id (${ID_SHAPE})`,
        description: 'Run in this workspace, as its uid (docs/workspaces.md).',
      }),
    ),
    env: Type.Optional(
      Type.Record(
        Type.String({ pattern: ENV_NAME_PATTERN }),
        Type.String({ pattern: NO_NUL, 'x-detail': 'expected a string without NUL' }),
        {
          maxProperties: MAX_ENV,
          additionalProperties: false,
          'x-detail': `expected an object of at most ${MAX_ENV} string variables`,
          'x-unknown': 'expected a variable name: 1-256 characters without "=" or NUL',
          description:
            "Variables for the command, each passed as given (values are never recorded: the turn's record keeps " +
            'the names). Names the boundary owns are refused with 400 naming the field (`env.LD_PRELOAD`): the ' +
            "dynamic loader's (LD_*, GLIBC_TUNABLES), the proxy variables in any letter case (HTTP_PROXY, " +
            'HTTPS_PROXY, ALL_PROXY, NO_PROXY), TMPDIR, NODE_USE_ENV_PROXY and the TURNHOST_ prefix. A value holds ' +
            `at most ${MAX_ENV_VALUE_BYTES} bytes. The supervisor's own environment never reaches a command: it ` +
            'starts from PATH, HOME (the cwd), LANG (and TERM with a tty), then these.',
        },
      ),
    ),
    tty: Type.Optional(
      Type.Union(
        [
          Type.Object(
            {
              cols: Type.Integer({ minimum: 1, maximum: 1000, 'x-detail': 'expected an integer 1-1000' }),
              rows: Type.Integer({ minimum: 1, maximum: 1000, 'x-detail': 'expected an integer 1-1000' }),
            },
            { additionalProperties: false },
          ),
          Type.Null(),
        ],
        { 'x-detail': 'expected { cols, rows }', description: 'A pseudo-terminal of this size; pipes when absent.' },
      ),
    ),
    timeoutSeconds: Type.Optional(Type.Number({ exclusiveMinimum: 0, 'x-detail': 'expected a positive number' })),
    egressAllow: Type.Optional(Type.Array(Type.String(), { 'x-detail': 'expected an array of host patterns' })),
    limits: Type.Optional(
      Type.Object(Object.fromEntries(LIMIT_NAMES.map((name) => [name, Type.Optional(LimitValue)])), {
        additionalProperties: false,
        'x-detail': 'expected an object',
        'x-unknown': 'unknown limit',
      }),
    ),
    model: Type.Optional(
      Type.String({ maxLength: 200, pattern: NO_NUL, 'x-detail': 'expected a string of at most 200 characters' }),
    ),
    stdin: Type.Optional(
      Type.String({
        'x-detail': 'expected a string',
        description: `The command's whole input, then its end; at most ${MAX_REQUEST_STDIN_BYTES} bytes once decoded.`,
      }),
    ),
    stdinEncoding: Type.Optional(
      Type.Union([Type.Literal('utf8'), Type.Literal('base64')], {
        'x-detail': "expected 'utf8' or 'base64'",
        description: 'How stdin is written (default utf8).',
      }),
    ),
  },
  {
    title: 'TurnCreateRequest',
    additionalProperties: false,
    'x-detail': 'expected a JSON object',
    'x-unknown': 'unknown field',
  },
);
export type TurnCreateRequest = Static<typeof TurnCreateRequest>;

const StreamCount = Type.Object(
  {
    written: Type.Integer({ minimum: 0, description: 'Every byte the stream wrote.' }),
    dropped: Type.Integer({
      minimum: 0,
      description: 'The bytes past turns.outputRetainBytes: counted, not kept (always the last ones).',
    }),
  },
  { additionalProperties: false },
);

const TurnUsage = Type.Object({
  userCpuUsec: Type.Union([Type.Number(), Type.Null()]),
  systemCpuUsec: Type.Union([Type.Number(), Type.Null()]),
  maxRssKiB: Type.Union([Type.Number(), Type.Null()]),
  cgroupCpuUsec: Type.Union([Type.Number(), Type.Null()]),
  memoryPeakBytes: Type.Union([Type.Number(), Type.Null()]),
  pidsPeak: Type.Union([Type.Number(), Type.Null()]),
  oomKills: Type.Union([Type.Number(), Type.Null()]),
});

const EgressDenial = Type.Object({
  host: Type.String({ description: 'As the request named it (no path, query or userinfo).' }),
  port: Type.Union([Type.Integer({ minimum: 0, maximum: 65535 }), Type.Null()]),
  reason: Type.String({ description: "The denial's reason, as in its `egress_denial` event (docs/egress.md)." }),
});

const TurnEgress = Type.Object(
  {
    connections: Type.Integer({ minimum: 0, description: 'Forward requests and CONNECT tunnels served.' }),
    bytesUp: Type.Integer({ minimum: 0 }),
    bytesDown: Type.Integer({ minimum: 0 }),
    denials: Type.Integer({ minimum: 0, description: 'Refused requests, all of them.' }),
    firstDenials: Type.Array(EgressDenial, { maxItems: 10, description: 'The first denials, in order.' }),
    unlistedDenials: Type.Integer({ minimum: 0, description: 'Denials beyond `firstDenials`, counted only.' }),
  },
  {
    description:
      "The turn's egress through its proxy; absent when no proxy served the turn. The `egress_connection` and `egress_denial` events are the full record.",
  },
);

export const TurnResult = Type.Object(
  {
    status: Type.Union(
      [
        'ok',
        'nonzero_exit',
        'signaled',
        'timeout',
        'cancelled',
        'oom_killed',
        'launch_refused',
        'internal_error',
        'interrupted',
      ].map((s) => Type.Literal(s)),
    ),
    exitCode: Type.Union([Type.Integer(), Type.Null()]),
    signal: Type.Union([Type.String(), Type.Null()]),
    durationMs: Type.Number(),
    usage: TurnUsage,
    limitHits: Type.Array(Type.String()),
    detail: Type.Optional(Type.String()),
    source: Type.Optional(Type.Union([Type.Literal('supervisor'), Type.Literal('worker_report')])),
    spawnError: Type.Optional(Type.Union([Type.Literal('not_found'), Type.Literal('not_executable')])),
    egress: Type.Optional(TurnEgress),
    workspace: Type.Optional(
      Type.Object(
        { id: Type.String(), bytes: Type.Integer({ minimum: 0 }), files: Type.Integer({ minimum: 0 }) },
        { description: 'A workspace turn: what its workspace held when the turn ended.' },
      ),
    ),
    output: Type.Optional(
      Type.Object(
        { stdout: Type.Optional(StreamCount), stderr: Type.Optional(StreamCount), pty: Type.Optional(StreamCount) },
        {
          additionalProperties: false,
          description:
            "What each of the turn's streams wrote (stdout and stderr with pipes, pty with a terminal). " +
            'Absent for a turn refused before it ran and in records of earlier versions.',
        },
      ),
    ),
  },
  { title: 'TurnResult' },
);
export type TurnResult = Static<typeof TurnResult>;

export const TurnRecord = Type.Object(
  {
    id: Type.String(),
    sessionId: Type.String(),
    mode: WorkerMode,
    profile: Type.Union([Type.Literal('governed'), Type.Literal('strict')]),
    state: Type.Union([Type.Literal('starting'), Type.Literal('running'), Type.Literal('finished')]),
    identity: Type.Union([Type.Literal('separate_uid'), Type.Literal('shared_uid')]),
    workerUid: Type.Union([Type.Integer(), Type.Null()]),
    createdAt: Type.String(),
    endedAt: Type.Union([Type.String(), Type.Null()]),
    tty: Type.Boolean(),
    result: Type.Union([TurnResult, Type.Null()]),
    workspaceId: Type.Optional(
      Type.Union([Type.String(), Type.Null()], { description: 'The workspace the turn ran in, or null.' }),
    ),
    argv: Type.Union([Type.Array(Type.String()), Type.Null()], {
      description: 'The command as it ran; null in records stored before the supervisor kept it (so too below).',
    }),
    cwd: Type.Union([Type.String(), Type.Null()], {
      description: 'The absolute working directory (a workspace turn: inside its workspace).',
    }),
    envNames: Type.Union([Type.Array(Type.String()), Type.Null()], {
      description: "The names of the request's env variables, sorted; values are never recorded.",
    }),
    limits: Type.Union([Type.Record(Type.String(), Type.Number()), Type.Null()], {
      description:
        'The limits the turn ran under, resolved: bytes for memory, data, file_size and tmp_size; CPUs for cpu; counts otherwise.',
    }),
    timeoutSeconds: Type.Union([Type.Number(), Type.Null()], {
      description: 'The timeout the turn ran under (its own, or turns.defaultTimeoutSeconds).',
    }),
  },
  { title: 'TurnRecord' },
);
export type TurnRecord = Static<typeof TurnRecord>;

export const TurnAnswer = Type.Object({ turn: TurnRecord }, { title: 'TurnAnswer' });
export type TurnAnswer = Static<typeof TurnAnswer>;
export const TurnList = Type.Object(
  {
    turns: Type.Array(TurnRecord, { description: 'Newest first.' }),
    nextAfter: Type.Union([Type.String(), Type.Null()], {
      description: "The next page's `after` (an opaque cursor), null on the last page.",
    }),
  },
  { title: 'TurnList' },
);
export type TurnList = Static<typeof TurnList>;

export const SessionSummary = Type.Object(
  {
    id: Type.String(),
    turns: Type.Integer({ minimum: 0, description: 'Turn records of the session.' }),
    workspaces: Type.Integer({ minimum: 0, description: 'Workspaces bound to it.' }),
    events: Type.Integer({ minimum: 0, description: 'Governance events bound to it.' }),
    firstActivity: Type.String({ description: 'Its oldest event or turn start.' }),
    lastActivity: Type.String({ description: 'Its newest event, turn start or turn end.' }),
  },
  { title: 'SessionSummary' },
);
export type SessionSummary = Static<typeof SessionSummary>;

export const SessionList = Type.Object(
  {
    sessions: Type.Array(SessionSummary, { description: 'The most recently begun first (by firstActivity).' }),
    nextAfter: Type.Union([Type.String(), Type.Null()], {
      description: "The next page's `after` (an opaque cursor), null on the last page.",
    }),
  },
  { title: 'SessionList' },
);
export type SessionList = Static<typeof SessionList>;

export const SessionDeletion = Type.Object(
  {
    deleted: Type.Object({
      sessionId: Type.String(),
      events: Type.Integer({ minimum: 0 }),
      turns: Type.Integer({ minimum: 0 }),
      workspaces: Type.Integer({ minimum: 0 }),
    }),
  },
  { title: 'SessionDeletion' },
);
export type SessionDeletion = Static<typeof SessionDeletion>;

export const HostWriteAnswer = Type.Object(
  {
    bytes: Type.Integer({ minimum: 0 }),
    sha256: Type.String({ pattern: '^[0-9a-f]{64}$' }),
    replaced: Type.Boolean(),
  },
  { title: 'HostWriteAnswer' },
);
export type HostWriteAnswer = Static<typeof HostWriteAnswer>;
