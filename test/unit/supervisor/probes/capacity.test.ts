import t from 'tap';
import { deriveMaxConcurrent, type CapacityChoice } from '../../../../supervisor/config/capacity.js';
import { capacityStatus } from '../../../../supervisor/probes/capacity.js';
import type { WorkerHostStatus } from '../../../../supervisor/probes/types.js';

const GiB = 1024 ** 3;
const derived: CapacityChoice = {
  source: 'derived',
  derived: deriveMaxConcurrent({ memoryBytes: 24 * GiB, cpus: 2 }, 256 * 1024 ** 2),
};

function probe(identity: 'separate_uid' | 'shared_uid', count?: number): WorkerHostStatus {
  return {
    identity,
    ...(count === undefined ? {} : { uidRange: { first: 3_000_000, count } }),
  } as WorkerHostStatus;
}

t.test('a derived value stands when the uid range is wide enough', async (t) => {
  const status = capacityStatus({ turns: { maxConcurrent: 76 } } as never, derived, probe('separate_uid', 100));
  t.match(status, { maxConcurrent: 76, configured: 76, source: 'derived', cappedBy: null, uidRangeSize: 100 });
  t.match(status.reason, /^76 turns at once: turns\.maxConcurrent derived from the host: min\(0\.8 x 24\.0 GiB/);
});

t.test('a uid range smaller than the value caps it (separate_uid), and says so', async (t) => {
  const status = capacityStatus({ turns: { maxConcurrent: 76 } } as never, derived, probe('separate_uid', 32));
  t.match(status, { maxConcurrent: 32, configured: 76, cappedBy: 'uid_range', uidRangeSize: 32 });
  t.match(status.reason, /^32 turns at once: .*; capped at 32 by the worker uid range/);
});

t.test('shared_uid turns hold no uid of a range: no cap', async (t) => {
  const status = capacityStatus({ turns: { maxConcurrent: 76 } } as never, derived, probe('shared_uid', 8));
  t.match(status, { maxConcurrent: 76, cappedBy: null, uidRangeSize: null });
});

t.test('a configured value is reported with the derived one beside it', async (t) => {
  const configured: CapacityChoice = { ...derived, source: 'configured' };
  const status = capacityStatus({ turns: { maxConcurrent: 500 } } as never, configured, null);
  t.match(status, { maxConcurrent: 500, configured: 500, source: 'configured', derived: { value: 76 } });
  t.equal(
    status.reason,
    "500 turns at once: turns.maxConcurrent configured as 500 (the host's derived default would be 76)",
  );
});
