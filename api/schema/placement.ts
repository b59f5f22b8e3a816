/**
 * What a host application reads to place turns on one of many hosts: the host's room for new
 * turns (`GET /api/ready`) and its drain mode (`POST /api/drain`), docs/hosting.md "Placing turns".
 */
import { Type, type Static } from '@sinclair/typebox';

export const HostCapacity = Type.Object(
  {
    turnsRunning: Type.Integer({ minimum: 0, description: 'Turns running now.' }),
    maxTurns: Type.Integer({ minimum: 0, description: 'The most that may run at once (turns.maxConcurrent).' }),
    freeSlots: Type.Integer({ minimum: 0, description: 'Turns that may start now: 0 while draining or full.' }),
    workspacesHeld: Type.Integer({
      minimum: 0,
      description: 'Workspaces on this host: a session using one must keep its turns here.',
    }),
    draining: Type.Boolean({ description: 'Drain mode: new turns are refused, running ones end as they would.' }),
  },
  { title: 'HostCapacity' },
);
export type HostCapacity = Static<typeof HostCapacity>;

export const DrainRequest = Type.Object(
  {
    draining: Type.Boolean({
      description: 'true: refuse new turns; false: take them again.',
      'x-detail': 'true or false',
    }),
  },
  {
    title: 'DrainRequest',
    additionalProperties: false,
    'x-unknown': 'unknown field (the body is { "draining": bool })',
  },
);
export type DrainRequest = Static<typeof DrainRequest>;

export const DrainAnswer = Type.Object(
  {
    draining: Type.Boolean(),
    changed: Type.Boolean({ description: 'false when the host was already in the mode asked for.' }),
    capacity: HostCapacity,
  },
  { title: 'DrainAnswer' },
);
export type DrainAnswer = Static<typeof DrainAnswer>;
