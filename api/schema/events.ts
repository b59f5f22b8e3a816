/** The governance event envelope and its page. Payloads are per kind and open (docs/events.md). */
import { Type, type Static } from '@sinclair/typebox';

export const GovernanceEvent = Type.Object(
  {
    id: Type.Integer({ minimum: 1 }),
    sessionId: Type.Union([Type.String(), Type.Null()]),
    turnId: Type.Union([Type.String(), Type.Null()]),
    at: Type.String({ format: 'date-time' }),
    kind: Type.String({ description: 'Clients must ignore kinds they do not know.' }),
    schemaVersion: Type.Integer({ minimum: 1 }),
    actor: Type.String(),
    model: Type.Union([Type.String(), Type.Null()]),
    profile: Type.Union([Type.String(), Type.Null()]),
    payload: Type.Record(Type.String(), Type.Unknown()),
  },
  { title: 'GovernanceEvent' },
);
export type GovernanceEvent = Static<typeof GovernanceEvent>;

export const EventsPage = Type.Object(
  {
    events: Type.Array(GovernanceEvent),
    nextAfter: Type.Union([Type.Integer(), Type.Null()], {
      description:
        'Ascending order: pass as `after` for the next page; null on the last (always null with order=desc).',
    }),
    nextBefore: Type.Union([Type.Integer(), Type.Null()], {
      description:
        'order=desc: pass as `before` for the next, older page; null on the last (always null in ascending order).',
    }),
  },
  { title: 'EventsPage' },
);
export type EventsPage = Static<typeof EventsPage>;
