/** Bodies of the status, health, readiness and activity routes. */
import { Type, type Static } from '@sinclair/typebox';
import { GovernanceEvent } from './events.js';
import { HostCapacity } from './placement.js';
import { WorkerHostStatus } from './worker-host.js';

export const Health = Type.Object(
  { status: Type.Literal('ok'), uptime: Type.Number(), timestamp: Type.String({ format: 'date-time' }) },
  { title: 'Health' },
);
export type Health = Static<typeof Health>;

export const Ready = Type.Object(
  {
    status: Type.Literal('ready'),
    checkedAt: Type.String({ format: 'date-time' }),
    /** Absent when the daemon serves no turns (no turn manager). */
    capacity: Type.Optional(HostCapacity),
  },
  { title: 'Ready' },
);
export type Ready = Static<typeof Ready>;

const CapacityStatus = Type.Object(
  {
    maxConcurrent: Type.Integer({
      minimum: 1,
      description: 'Turns that may run at once: turns.maxConcurrent, capped by the worker uid range (separate_uid).',
    }),
    configured: Type.Integer({ minimum: 1, description: 'turns.maxConcurrent as configured or derived.' }),
    source: Type.Union([Type.Literal('configured'), Type.Literal('derived')]),
    cappedBy: Type.Union([Type.Literal('uid_range'), Type.Null()]),
    uidRangeSize: Type.Union([Type.Integer(), Type.Null()], {
      description: 'separate_uid: the verified worker uid range; each running turn holds one uid of it.',
    }),
    derived: Type.Object({
      value: Type.Integer({ minimum: 1 }),
      memoryBound: Type.Union([Type.Integer(), Type.Null()]),
      cpuBound: Type.Integer(),
      memoryBytes: Type.Number(),
      cpus: Type.Integer(),
      memoryLimitBytes: Type.Union([Type.Number(), Type.Null()]),
    }),
    reason: Type.String({ description: 'The effective value and where it came from, the formula with its numbers.' }),
  },
  { title: 'ConcurrencyStatus' },
);

export const SystemStatus = Type.Object(
  {
    software: Type.Object({ release: Type.String(), sourceCommit: Type.String() }),
    host: Type.Object({
      kernel: Type.String(),
      distro: Type.String(),
      cpus: Type.Number(),
      memoryBytes: Type.Number(),
    }),
    runtime: Type.Object({
      workerHost: Type.Union([WorkerHostStatus, Type.Null()]),
      events: Type.Object({
        databasePath: Type.String(),
        fallbackLogPath: Type.String(),
        fallbackActive: Type.Boolean(),
        fallbackPendingEvents: Type.Integer(),
        lastFallbackAt: Type.Union([Type.String(), Type.Null()]),
        lastFallbackReason: Type.Union([Type.String(), Type.Null()]),
        replayedAtStart: Type.Integer(),
      }),
      capacity: Type.Optional(HostCapacity),
      preparedWorkers: Type.Optional(Type.Object({ ready: Type.Integer(), starting: Type.Integer() })),
      concurrency: Type.Optional(CapacityStatus),
      egressRelay: Type.Optional(
        Type.Union([
          Type.Object({
            state: Type.Union(['starting', 'ready', 'failed', 'stopped'].map((s) => Type.Literal(s))),
            failure: Type.Union([Type.String(), Type.Null()]),
          }),
          Type.Null(),
        ]),
      ),
    }),
    uptime: Type.Number(),
  },
  { title: 'SystemStatus' },
);
export type SystemStatus = Static<typeof SystemStatus>;

export const ActivityView = Type.Object(
  {
    runningTurns: Type.Array(
      Type.Object({
        turnId: Type.String(),
        sessionId: Type.Union([Type.String(), Type.Null()]),
        mode: Type.String(),
        identity: Type.String(),
        workerUid: Type.Union([Type.Integer(), Type.Null()]),
        command: Type.String(),
        startedAt: Type.String(),
        limits: Type.Record(Type.String(), Type.Unknown()),
      }),
    ),
    recentDenials: Type.Array(GovernanceEvent),
    recentEvents: Type.Array(GovernanceEvent),
  },
  { title: 'ActivityView' },
);
export type ActivityView = Static<typeof ActivityView>;
