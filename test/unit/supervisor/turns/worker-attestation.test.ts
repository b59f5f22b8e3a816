/**
 * The claim-time attestation rules on constructed /proc trees and cgroup leaves; the real
 * process cases are in test/escape/prepared-worker.test.ts.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import {
  attestWorker,
  checkStatusFields,
  netDevInterfaces,
  parseStatusFields,
} from '../../../../supervisor/turns/worker-attestation.js';

const WORKER = 3_100_007;
const goodStatus = [
  'Name:\tnode',
  `Uid:\t${WORKER}\t${WORKER}\t${WORKER}\t${WORKER}`,
  `Gid:\t${WORKER}\t${WORKER}\t${WORKER}\t${WORKER}`,
  'Groups:\t',
  'CapEff:\t0000000000000000',
  'CapBnd:\t0000000000000000',
  'NoNewPrivs:\t1',
  'Seccomp:\t2',
].join('\n');
const netDev = 'Inter-|   Receive\n face |bytes\n    lo:       0       0\n';

function withField(name: string, value: string): string {
  return goodStatus.replace(new RegExp(`^${name}:.*$`, 'm'), `${name}:\t${value}`);
}

const separate = { identity: 'separate_uid' as const, uid: WORKER, gid: WORKER };

t.test('a worker with its own identity, no groups, no capabilities, no_new_privs and a filter passes', async (t) => {
  t.equal(checkStatusFields(parseStatusFields(goodStatus), separate), null);
});

t.test('each weaker field is refused by name', async (t) => {
  const cases: Array<[string, string, RegExp]> = [
    ['Uid', `${WORKER}\t${WORKER}\t0\t${WORKER}`, /^Uid is/],
    ['Uid', `0\t0\t0\t0`, /^Uid is/],
    ['Gid', `${WORKER}\t0\t${WORKER}\t${WORKER}`, /^Gid is/],
    ['Groups', '0', /^Groups is "0", expected no supplementary groups/],
    ['CapEff', '0000000000000400', /^CapEff/],
    ['CapBnd', '000001ffffffffff', /^CapBnd/],
    ['NoNewPrivs', '0', /^NoNewPrivs/],
    ['Seccomp', '0', /^Seccomp is "0"/],
  ];
  for (const [field, value, expected] of cases) {
    t.match(checkStatusFields(parseStatusFields(withField(field, value)), separate), expected, `${field} ${value}`);
  }
  t.match(
    checkStatusFields(parseStatusFields(goodStatus.replace(/^Seccomp:.*$/m, '')), separate),
    /Seccomp is missing/,
  );
});

t.test('shared_uid checks the supervisor uid, no_new_privs and the filter only', async (t) => {
  const shared = { identity: 'shared_uid' as const, uid: 0, gid: 0 };
  const rootWorker = withField('Uid', '0\t0\t0\t0').replace(/^CapBnd:.*$/m, 'CapBnd:\t000001ffffffffff');
  t.equal(checkStatusFields(parseStatusFields(rootWorker), shared), null);
  t.match(
    checkStatusFields(parseStatusFields(withField('Seccomp', '0').replace(/^Uid:.*$/m, 'Uid:\t0\t0\t0\t0')), shared),
    /^Seccomp/,
  );
});

t.test('net/dev interface names', async (t) => {
  t.same(netDevInterfaces(netDev), ['lo']);
  t.same(netDevInterfaces(`${netDev}  eth0: 1 2 3\n`), ['lo', 'eth0']);
});

t.test('attestWorker reads status, net/dev and every leaf', async (t) => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'attest-'));
  t.teardown(() => fs.rmSync(root, { recursive: true, force: true }));
  const proc = path.join(root, 'proc');
  fs.mkdirSync(path.join(proc, '42', 'net'), { recursive: true });
  fs.writeFileSync(path.join(proc, '42', 'status'), goodStatus);
  fs.writeFileSync(path.join(proc, '42', 'net', 'dev'), netDev);
  const leaves = ['memory', 'pids'].map((name) => path.join(root, name));
  for (const leaf of leaves) {
    fs.mkdirSync(leaf);
    fs.writeFileSync(path.join(leaf, 'cgroup.procs'), '7\n42\n');
  }
  const expectation = { pid: 42, ...separate, cgroupPaths: leaves, procRoot: proc };
  t.same(attestWorker(expectation), { ok: true });

  fs.writeFileSync(path.join(leaves[1] as string, 'cgroup.procs'), '7\n420\n');
  t.match(attestWorker(expectation), {
    ok: false,
    reason: 'worker_attestation_failed',
    detail: /pid 42 is not in .*pids/,
  });
  fs.writeFileSync(path.join(leaves[1] as string, 'cgroup.procs'), '42\n');

  fs.writeFileSync(path.join(proc, '42', 'net', 'dev'), `${netDev}  eth0: 1 2 3\n`);
  t.match(attestWorker(expectation), { ok: false, detail: /has lo, eth0, expected only lo/ });
  fs.writeFileSync(path.join(proc, '42', 'net', 'dev'), netDev);

  t.match(attestWorker({ ...expectation, cgroupPaths: [] }), { ok: false, detail: /no cgroup leaf/ });
  t.match(attestWorker({ ...expectation, pid: 43 }), { ok: false, detail: /cannot read/ });
});
