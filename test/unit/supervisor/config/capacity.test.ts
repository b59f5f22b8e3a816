import t from 'tap';
import {
  configuredMemoryLimit,
  deriveMaxConcurrent,
  describeDerivation,
  MEMORY_SHARE,
  TURNS_PER_CPU,
} from '../../../../supervisor/config/capacity.js';
import { defaultConfig } from '../../../../supervisor/config/load.js';

const GiB = 1024 ** 3;
const MiB = 1024 ** 2;

t.test('the smaller of the memory term and the cores term', async (t) => {
  t.equal(MEMORY_SHARE, 0.8);
  t.equal(TURNS_PER_CPU, 64);
  // 24 GiB, 2 cores, 2 GiB per turn: memory allows floor(9.6) = 9, cores 128.
  t.match(deriveMaxConcurrent({ memoryBytes: 24 * GiB, cpus: 2 }, 2 * GiB), {
    value: 9,
    memoryBound: 9,
    cpuBound: 128,
  });
  // The same host with 16 MiB per turn: memory allows 1228, the cores term (128) binds.
  t.match(deriveMaxConcurrent({ memoryBytes: 24 * GiB, cpus: 2 }, 16 * MiB), {
    value: 128,
    memoryBound: 1228,
    cpuBound: 128,
  });
  t.match(deriveMaxConcurrent({ memoryBytes: 256 * GiB, cpus: 64 }, 512 * MiB), { value: 409, cpuBound: 4096 });
});

t.test('no memory limit: the cores term alone', async (t) => {
  t.match(deriveMaxConcurrent({ memoryBytes: 8 * GiB, cpus: 3 }, null), { value: 192, memoryBound: null });
});

t.test('never below one turn, even when one limit exceeds the host', async (t) => {
  t.match(deriveMaxConcurrent({ memoryBytes: 1 * GiB, cpus: 1 }, 4 * GiB), { value: 1, memoryBound: 0 });
  t.match(deriveMaxConcurrent({ memoryBytes: 1 * GiB, cpus: 0 }, null), { value: 64, cpuBound: 64 });
});

t.test('limits.memory in the limits grammar; disabled or unset means no memory term', async (t) => {
  const base = defaultConfig({ installed: false, cwd: '/' });
  t.equal(configuredMemoryLimit(base), 2 * GiB, 'the default 2G');
  t.equal(configuredMemoryLimit({ ...base, limits: { ...base.limits, memory: '512M' } }), 512 * MiB);
  t.equal(
    configuredMemoryLimit({ ...base, limits: { ...base.limits, memory: 1048576 } }),
    MiB,
    'a plain number is bytes',
  );
  t.equal(
    configuredMemoryLimit({ ...base, limits: { ...base.limits, memory: '3g' } }),
    3 * GiB,
    'suffixes in any case',
  );
  t.equal(configuredMemoryLimit({ ...base, limitsDisabled: ['memory'] }), null);
  const { memory: _memory, ...withoutMemory } = base.limits;
  t.equal(configuredMemoryLimit({ ...base, limits: withoutMemory }), null);
});

t.test('the description shows the formula with the host numbers', async (t) => {
  t.equal(
    describeDerivation(deriveMaxConcurrent({ memoryBytes: 24 * GiB, cpus: 2 }, 2 * GiB)),
    'min(0.8 x 24.0 GiB host memory / 2.0 GiB limits.memory = 9; 64 x 2 cores = 128), at least 1: 9',
  );
  t.equal(
    describeDerivation(deriveMaxConcurrent({ memoryBytes: 24 * GiB, cpus: 2 }, null)),
    'min(no memory term (limits.memory disabled or unset); 64 x 2 cores = 128), at least 1: 128',
  );
});
