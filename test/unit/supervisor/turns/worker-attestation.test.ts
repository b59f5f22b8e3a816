/**
 * The claim-time attestation rules on constructed /proc trees and cgroup leaves; the real
 * process cases are in test/escape/prepared-worker.test.ts and test/escape/turn-boundary.test.ts.
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
const MONITOR = 40;
const INIT = 41;
const WORKER_PID = 42;

function status(fields: Record<string, string>): string {
  return Object.entries(fields)
    .map(([name, value]) => `${name}:\t${value}`)
    .join('\n');
}

const goodFields = {
  Name: 'node',
  PPid: String(INIT),
  Uid: `${WORKER}\t${WORKER}\t${WORKER}\t${WORKER}`,
  Gid: `${WORKER}\t${WORKER}\t${WORKER}\t${WORKER}`,
  Groups: '',
  CapEff: '0000000000000000',
  CapPrm: '0000000000000000',
  CapBnd: '0000000000000000',
  NoNewPrivs: '1',
  Seccomp: '2',
  NSpid: `${WORKER_PID}\t2`,
};
const goodStatus = status(goodFields);
const netDev = 'Inter-|   Receive\n face |bytes\n    lo:       0       0\n';

function withField(name: string, value: string): string {
  return status({ ...goodFields, [name]: value });
}

const separate = { uid: WORKER, gid: WORKER, groupsMayStay: false };

t.test(
  'a worker with its own identity, no groups, no capabilities, no_new_privs, a filter and a pid namespace passes',
  async (t) => {
    t.equal(checkStatusFields(parseStatusFields(goodStatus), separate), null);
  },
);

t.test('each weaker field is refused by name', async (t) => {
  const cases: Array<[string, string, RegExp]> = [
    ['Uid', `${WORKER}\t${WORKER}\t0\t${WORKER}`, /^Uid is/],
    ['Uid', `0\t0\t0\t0`, /^Uid is/],
    ['Gid', `${WORKER}\t0\t${WORKER}\t${WORKER}`, /^Gid is/],
    ['Groups', '0', /^Groups is "0", expected no supplementary groups/],
    ['CapEff', '0000000000000400', /^CapEff/],
    ['CapPrm', '0000000000000400', /^CapPrm/],
    ['CapBnd', '000001ffffffffff', /^CapBnd/],
    ['NoNewPrivs', '0', /^NoNewPrivs/],
    ['Seccomp', '0', /^Seccomp is "0"/],
    ['NSpid', `${WORKER_PID}`, /^NSpid .*pid namespace of its own/],
    ['NSpid', `${WORKER_PID}\t1`, /^NSpid/],
  ];
  for (const [field, value, expected] of cases) {
    t.match(checkStatusFields(parseStatusFields(withField(field, value)), separate), expected, `${field} ${value}`);
  }
  t.match(
    checkStatusFields(parseStatusFields(goodStatus.replace(/^Seccomp:.*$/m, '')), separate),
    /Seccomp is missing/,
  );
});

t.test(
  'shared_uid holds the same line: no capabilities even for uid 0; groups may stay only in a user namespace',
  async (t) => {
    const rootWorker = { ...goodFields, Uid: '0\t0\t0\t0', Gid: '0\t0\t0\t0' };
    const sharedRoot = { uid: 0, gid: 0, groupsMayStay: false };
    t.equal(checkStatusFields(parseStatusFields(status(rootWorker)), sharedRoot), null);
    t.match(
      checkStatusFields(parseStatusFields(status({ ...rootWorker, CapBnd: '000001ffffffffff' })), sharedRoot),
      /^CapBnd/,
      'a uid-0 worker with a full bounding set is refused',
    );
    const inUserNamespace = { ...goodFields, Groups: '27 100' };
    t.equal(checkStatusFields(parseStatusFields(status(inUserNamespace)), { ...separate, groupsMayStay: true }), null);
  },
);

t.test('net/dev interface names', async (t) => {
  t.same(netDevInterfaces(netDev), ['lo']);
  t.same(netDevInterfaces(`${netDev}  eth0: 1 2 3\n`), ['lo', 'eth0']);
});

t.test('attestWorker finds the worker beneath the monitor and init, and reads every leaf', async (t) => {
  const root = fs.mkdtempSync(path.join(os.tmpdir(), 'attest-'));
  t.teardown(() => fs.rmSync(root, { recursive: true, force: true }));
  const proc = path.join(root, 'proc');
  const write = (pid: number, text: string, children: number[] = []): void => {
    fs.mkdirSync(path.join(proc, String(pid), 'net'), { recursive: true });
    fs.mkdirSync(path.join(proc, String(pid), 'task', String(pid)), { recursive: true });
    fs.writeFileSync(path.join(proc, String(pid), 'status'), text);
    fs.writeFileSync(
      path.join(proc, String(pid), 'task', String(pid), 'children'),
      children.map((c) => `${c} `).join(''),
    );
  };
  write(MONITOR, status({ PPid: '1', NSpid: String(MONITOR), Uid: '0\t0\t0\t0' }), [INIT]);
  write(INIT, status({ ...goodFields, PPid: String(MONITOR), NSpid: `${INIT}\t1` }), [WORKER_PID]);
  write(WORKER_PID, goodStatus);
  fs.writeFileSync(path.join(proc, String(WORKER_PID), 'net', 'dev'), netDev);
  const leaves = ['memory', 'pids'].map((name) => path.join(root, name));
  const members = `${MONITOR}\n${INIT}\n${WORKER_PID}\n`;
  for (const leaf of leaves) {
    fs.mkdirSync(leaf);
    fs.writeFileSync(path.join(leaf, 'cgroup.procs'), members);
  }
  const expectation = {
    monitorPid: MONITOR,
    identity: 'separate_uid' as const,
    ...separate,
    cgroupPaths: leaves,
    procRoot: proc,
  };
  t.same(attestWorker(expectation), { ok: true, workerPid: WORKER_PID });

  fs.writeFileSync(path.join(leaves[1]!, 'cgroup.procs'), `${MONITOR}\n${INIT}\n`);
  t.match(attestWorker(expectation), {
    ok: false,
    reason: 'worker_attestation_failed',
    detail: /pid 42 is not in .*pids/,
  });
  fs.writeFileSync(path.join(leaves[1]!, 'cgroup.procs'), members);

  write(43, status({ PPid: String(WORKER_PID) }));
  fs.writeFileSync(path.join(leaves[0]!, 'cgroup.procs'), `${members}43\n`);
  t.match(attestWorker(expectation), { ok: false, detail: /memory holds 4 processes before the launch/ });
  fs.writeFileSync(path.join(leaves[0]!, 'cgroup.procs'), members);

  write(INIT, status({ ...goodFields, PPid: String(MONITOR), NSpid: `${INIT}\t1`, CapEff: '0000000000000400' }), [
    WORKER_PID,
  ]);
  t.match(attestWorker(expectation), { ok: false, detail: /the turn's init: CapEff/ });
  write(INIT, status({ ...goodFields, PPid: String(MONITOR), NSpid: `${INIT}\t1` }), [WORKER_PID]);

  fs.writeFileSync(path.join(proc, String(WORKER_PID), 'net', 'dev'), `${netDev}  eth0: 1 2 3\n`);
  t.match(attestWorker(expectation), { ok: false, detail: /has lo, eth0, expected only lo/ });
  fs.writeFileSync(path.join(proc, String(WORKER_PID), 'net', 'dev'), netDev);

  t.match(attestWorker({ ...expectation, cgroupPaths: [] }), { ok: false, detail: /no cgroup leaf/ });
  write(39, status({ PPid: '1' }), [INIT]);
  t.match(attestWorker({ ...expectation, monitorPid: 39 }), { ok: false, detail: /pid 39 is not in/ });
  write(INIT, status({ ...goodFields, PPid: String(MONITOR), NSpid: `${INIT}\t1` }), [WORKER_PID, 43]);
  t.match(attestWorker(expectation), { ok: false, detail: /the turn's init has 2 children, not one/ });
});
