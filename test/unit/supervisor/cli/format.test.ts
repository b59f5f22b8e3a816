import t from 'tap';
import { formatWorkerHost, humanBytes } from '../../../../supervisor/cli/format.js';
import type { WorkerHostStatus } from '../../../../supervisor/probes/types.js';

t.test('sizes are binary-prefixed', async (t) => {
  t.equal(humanBytes(0), '0 B');
  t.equal(humanBytes(512), '512 B');
  t.equal(humanBytes(1536), '1.5 KiB');
  t.equal(humanBytes(2 * 2 ** 30), '2 GiB');
  t.equal(humanBytes(4 * 2 ** 40), '4 TiB');
});

t.test('the worker-host table: human sizes, disabled restricted mode', async (t) => {
  const status = {
    ordinary: { available: true, checkedAt: 'now', trigger: 'check' },
    identity: 'separate_uid',
    workerUid: 7,
    limits: {
      enforced: [
        { limit: 'memory', source: 'cgroup', value: 2 * 2 ** 30, backend: 'cgroup_v2' },
        { limit: 'file_size', source: 'rlimit', value: 4 * 2 ** 30 },
        { limit: 'pids', source: 'cgroup', value: 512, backend: 'cgroup_v2' },
        { limit: 'cpu', source: 'cgroup', value: 1.5, backend: 'cgroup_v2' },
      ],
      absent: [],
    },
    governed: { available: true, configurationView: 'live', egress: { active: true, detail: 'ok' } },
    boundary: {
      seccomp: { available: true, detail: 'ok' },
      networkNamespaces: { available: true, detail: 'ok' },
      landlock: { available: true, abi: 7, detail: 'ok' },
      cgroup: { layout: 'v2', delegated: true, nsdelegate: true, detail: 'ok' },
      identityHelper: { path: '/h', detail: 'ok' },
    },
  } as unknown as WorkerHostStatus;
  const text = formatWorkerHost(status);
  t.match(text, /^restricted\s+disabled \(modes\.restricted\.enabled is false\)$/m);
  t.match(text, /^limit memory\s+enforced 2 GiB \(cgroup, cgroup_v2\)$/m);
  t.match(text, /^limit file_size\s+enforced 4 GiB \(rlimit\)$/m);
  t.match(text, /^limit pids\s+enforced 512 /m);
  t.match(text, /^limit cpu\s+enforced 1\.5 CPUs /m);
  t.match(text, /^configuration\s+live \(reloaded since start\)$/m);
});
