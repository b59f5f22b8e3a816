/** WebSocket messages: JSON text frames in both directions. Binary data travels as base64. */
import { Type, type Static } from '@sinclair/typebox';
import { FieldError } from './errors.js';
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

const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT'] as const;
export type TurnSignal = (typeof SIGNALS)[number];

export const AttachServerMessage = Type.Union(
  [
    Type.Object({
      type: Type.Literal('output'),
      stream: Type.Union([Type.Literal('stdout'), Type.Literal('stderr'), Type.Literal('pty')]),
      data: Type.String({ contentEncoding: 'base64' }),
    }),
    Type.Object(
      {
        type: Type.Literal('dropped'),
        stream: Type.Union([Type.Literal('stdout'), Type.Literal('stderr'), Type.Literal('pty')]),
        bytes: Type.Integer({ minimum: 1 }),
      },
      {
        description:
          'After a replay of kept output: that many more bytes of the stream were written past ' +
          'turns.outputRetainBytes, not kept, and so not sent. Live output is sent whole.',
      },
    ),
    Type.Object({ type: Type.Literal('exit'), result: TurnResult }),
    Type.Object({
      type: Type.Literal('error'),
      code: Type.Union([Type.Literal('invalid_request'), Type.Literal('input_closed')]),
      error: Type.String({ description: 'What was refused; starts with the field name when one is at fault.' }),
      field: Type.Optional(Type.String({ description: 'The first refused field of an invalid message.' })),
      errors: Type.Optional(Type.Array(FieldError, { description: 'Every refused field of an invalid message.' })),
    }),
  ],
  { title: 'AttachServerMessage' },
);
export type AttachServerMessage = Static<typeof AttachServerMessage>;

const BASE64 = '^[A-Za-z0-9+/]*={0,2}$';
const closed = { additionalProperties: false };
const dimension = Type.Integer({ minimum: 1, maximum: 1000, 'x-detail': 'expected an integer 1-1000' });

/** One schema per message type: the server picks it by `type`, so a refusal names the field at fault. */
export const ATTACH_CLIENT_MESSAGES = [
  Type.Object(
    {
      type: Type.Literal('input'),
      data: Type.String({ contentEncoding: 'base64', pattern: BASE64, 'x-detail': 'expected base64 text' }),
    },
    closed,
  ),
  Type.Object(
    { type: Type.Literal('eof') },
    {
      ...closed,
      description: "Ends the command's input: EOF on its stdin pipe, the terminal's EOF character on a pty.",
    },
  ),
  Type.Object({ type: Type.Literal('resize'), cols: dimension, rows: dimension }, closed),
  Type.Object(
    {
      type: Type.Literal('signal'),
      signal: Type.Union(
        SIGNALS.map((s) => Type.Literal(s)),
        { 'x-detail': `expected one of ${SIGNALS.join(', ')}` },
      ),
    },
    closed,
  ),
] as const;

export const AttachClientMessage = Type.Union([...ATTACH_CLIENT_MESSAGES], { title: 'AttachClientMessage' });
export type AttachClientMessage = Static<typeof AttachClientMessage>;
