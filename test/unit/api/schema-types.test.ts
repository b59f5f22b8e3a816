/**
 * The daemon's own types and the API schema's types agree: each value the daemon answers is
 * assignable to the schema's type. `npx tsc -p tsconfig.test.json` fails when they drift; the
 * run-time half checks the fixture status against the JSON Schema.
 */
import t from 'tap';
import type { Static } from '@sinclair/typebox';
import {
  GovernanceEvent as GovernanceEventSchema,
  TurnRecord as TurnRecordSchema,
  WorkerHostStatus as WorkerHostStatusSchema,
} from '../../../api/schema/index.js';
import { compileValidator, createAjv } from '../../../api/schema/validate.js';
import type { GovernanceEvent } from '../../../supervisor/events/types.js';
import type { WorkerHostStatus } from '../../../supervisor/probes/types.js';
import type { TurnRecord } from '../../../supervisor/turns/types.js';
import { fakeStatus } from '../../support/app-server.js';

type Assignable<From, To> = [From] extends [To] ? true : false;
const checks: [
  Assignable<WorkerHostStatus, Static<typeof WorkerHostStatusSchema>>,
  Assignable<GovernanceEvent, Static<typeof GovernanceEventSchema>>,
  Assignable<TurnRecord, Static<typeof TurnRecordSchema>>,
] = [true, true, true];

t.test('the daemon types are assignable to the schema types', async (t) => {
  t.same(checks, [true, true, true]);
});

t.test('a probe answer validates against WorkerHostStatus', async (t) => {
  const validate = compileValidator(createAjv(), WorkerHostStatusSchema);
  t.equal(validate(fakeStatus()).ok, true);
  const broken = { ...fakeStatus(), governed: { available: 'yes' } };
  t.equal(validate(broken).ok, false);
});
