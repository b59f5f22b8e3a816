/** WebSocket messages: JSON text frames in both directions. Binary data travels as base64. */
import { Type, type Static } from '@sinclair/typebox';
import { GovernanceEvent } from './events.js';
import { TurnResult } from './turns.js';

export const EventStreamMessage = Type.Union(
  [
    Type.Object({ type: Type.Literal('event'), event: GovernanceEvent }),
    Type.Object({ type: Type.Literal('replay_progress'), lastId: Type.Integer() }),
    Type.Object({ type: Type.Literal('replay_done'), lastId: Type.Integer() }),
  ],
  { title: 'EventStreamMessage' },
);
export type EventStreamMessage = Static<typeof EventStreamMessage>;

export const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'] as const;
export type TurnSignal = (typeof SIGNALS)[number];

export const AttachServerMessage = Type.Union(
  [
    Type.Object({
      type: Type.Literal('output'),
      stream: Type.Union([Type.Literal('stdout'), Type.Literal('stderr'), Type.Literal('pty')]),
      data: Type.String({ contentEncoding: 'base64' }),
    }),
    Type.Object({ type: Type.Literal('exit'), result: TurnResult }),
    Type.Object({
      type: Type.Literal('error'),
      code: Type.Union([Type.Literal('invalid_request'), Type.Literal('input_closed')]),
      error: Type.String(),
    }),
  ],
  { title: 'AttachServerMessage' },
);
export type AttachServerMessage = Static<typeof AttachServerMessage>;

export const AttachClientMessage = Type.Union(
  [
    Type.Object({ type: Type.Literal('input'), data: Type.String({ contentEncoding: 'base64' }) }),
    Type.Object({
      type: Type.Literal('resize'),
      cols: Type.Integer({ minimum: 1, maximum: 1000 }),
      rows: Type.Integer({ minimum: 1, maximum: 1000 }),
    }),
    Type.Object({ type: Type.Literal('signal'), signal: Type.Union(SIGNALS.map((s) => Type.Literal(s))) }),
    Type.Object(
      { type: Type.Literal('eof') },
      { description: "Ends the command's input: EOF on its stdin pipe, the terminal's EOF character on a pty." },
    ),
  ],
  { title: 'AttachClientMessage' },
);
export type AttachClientMessage = Static<typeof AttachClientMessage>;
