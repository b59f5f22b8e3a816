// VM tier: shared_uid as an operator without the identity helper gets it, the supervisor as the
// non-root user turnhost in its own delegated unit (turnhost-vmtest-shared.service). Its workers
// keep turnhost's uid inside a user namespace, behind the same view, pid namespace, seccomp and
// cgroup v2 limits as separate-uid workers; the supervisor's status claims exactly that.
import { check, comment, expect, finish } from './tap.mjs';
import { apiAt, sh, waitFor, waitForSupervisor } from './client.mjs';

const UNIT = 'turnhost-vmtest-shared.service';
const SHARED = { baseUrl: 'http://127.0.0.1:7708', dataDir: '/var/lib/turnhost-shared' };
const WORKSPACE = '/srv/vmwork-shared';
const TURN_SECONDS = 240;
const turnhostUid = Number(sh('id -u turnhost'));

async function runToEnd(name, turn) {
  const created = await apiAt(SHARED, 'POST', '/api/turns', {
    sessionId: 'vm-tier-shared',
    mode: 'ordinary',
    cwd: WORKSPACE,
    turnId: `vm-shared-${name}-${Date.now().toString(36)}`,
    timeoutSeconds: 180,
    ...turn,
  });
  expect(created.status === 201, `POST /api/turns answered ${created.status}`, { body: created.body });
  const id = created.body.turn.id;
  const finished = await waitFor(`turn ${id} to finish`, TURN_SECONDS, async () => {
    const answer = await apiAt(SHARED, 'GET', `/api/turns/${id}`);
    return answer.body.turn?.state === 'finished' ? answer.body.turn : undefined;
  });
  comment(
    `${name} turn: ${JSON.stringify({ identity: finished.identity, workerUid: finished.workerUid, result: finished.result })}`,
  );
  return finished;
}

/** The turn's output, read back from the workspace where the command wrote it. */
function workspaceFile(name) {
  return sh(`cat ${WORKSPACE}/${name} 2>/dev/null || true`);
}

await check('the shared_uid supervisor starts as turnhost in its own delegated unit', async () => {
  sh(`systemctl start ${UNIT}`);
  await waitForSupervisor(180, SHARED);
  const pid = Number(sh(`systemctl show -p MainPID --value ${UNIT}`).trim());
  expect(sh(`ps -o user= -p ${pid}`).trim() === 'turnhost', 'the supervisor does not run as turnhost');
});

await check(
  'status: shared_uid with the supervisor uid, governed available, v2 limits and tmp_size, no root warning',
  async () => {
    const checked = await apiAt(SHARED, 'POST', '/api/status/worker-host');
    expect(checked.status === 200, `POST /api/status/worker-host answered ${checked.status}`, { body: checked.body });
    const host = checked.body;
    expect(host.ordinary?.available === true, 'ordinary is unavailable', { ordinary: host.ordinary });
    expect(host.governed?.available === true, 'governed is unavailable', { governed: host.governed });
    expect(host.identity === 'shared_uid' && host.workerUid === turnhostUid, 'not shared_uid with turnhost uid', {
      identity: host.identity,
      workerUid: host.workerUid,
    });
    expect(host.rootServer === undefined, 'a root warning for a non-root supervisor', { rootServer: host.rootServer });
    for (const limit of ['memory', 'pids', 'cpu']) {
      const enforced = host.limits.enforced.find((entry) => entry.limit === limit);
      expect(enforced?.backend === 'cgroup_v2', `${limit} is not enforced by cgroup v2`, { limits: host.limits });
    }
    const tmp = host.limits.enforced.find((entry) => entry.limit === 'tmp_size');
    expect(tmp?.value === 8 * 1024 * 1024, 'tmp_size is not enforced at 8M', { limits: host.limits });
    expect(
      host.limits.absent.some((entry) => entry.limit === 'processes'),
      'processes claimed for shared_uid',
      { limits: host.limits },
    );
  },
);

await check(
  'a shared_uid turn: no capability, no host write, no token, no worker memory, its own processes and /tmp',
  async () => {
    const script = [
      'exec > report 2>&1',
      'echo "uid $(id -u)"',
      "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status",
      'echo x > /etc/turnhost-vm-shared && echo "WROTE /etc"',
      'cat /var/lib/turnhost-shared/api-token && echo "READ token"',
      '(exec 3<>/proc/$PPID/mem) && echo "OPENED worker mem"',
      'echo "processes $(ls /proc | grep -c "^[0-9]")"',
      'head -c 20000000 /dev/zero > /tmp/fill; echo "tmp $(wc -c < /tmp/fill)"',
    ].join('\n');
    const turn = await runToEnd('attacks', { argv: ['/bin/sh', '-c', script] });
    expect(turn.identity === 'shared_uid' && turn.workerUid === turnhostUid, 'the turn is not shared_uid', { turn });
    const report = workspaceFile('report');
    comment(report.replace(/\n/g, ' | '));
    expect(report.includes(`uid ${turnhostUid}`), "the command does not run as the supervisor's uid", { report });
    for (const line of ['CapEff:\t0000000000000000', 'CapBnd:\t0000000000000000', 'NoNewPrivs:\t1', 'Seccomp:\t2'])
      expect(report.includes(line), `missing ${JSON.stringify(line)}`, { report });
    expect(!/WROTE|READ token|OPENED/.test(report), 'an attack succeeded', { report });
    const processes = Number(/processes (\d+)/.exec(report)?.[1] ?? 99);
    expect(processes <= 6, `the turn sees ${processes} processes`, { report });
    const tmp = Number(/tmp (\d+)/.exec(report)?.[1] ?? -1);
    expect(tmp >= 0 && tmp <= 8 * 1024 * 1024, `the turn wrote ${tmp} bytes into an 8M /tmp`, { report });
    expect(sh('ls /etc/turnhost-vm-shared 2>/dev/null || true') === '', '/etc written on the host');
  },
);

await check('a memory hog under the shared supervisor is OOM-killed by cgroup v2', async () => {
  const turn = await runToEnd('memory', {
    argv: ['/bin/dd', 'if=/dev/zero', 'of=/dev/null', 'bs=512M', 'count=1'],
  });
  expect(turn.result?.status === 'oom_killed', `status ${turn.result?.status}`, { result: turn.result });
});

await check('stopping the unit leaves no process of the shared supervisor', async () => {
  sh(`systemctl stop ${UNIT}`);
  const cgroup = `/sys/fs/cgroup/system.slice/${UNIT}`;
  await waitFor(`${cgroup} to be gone`, 60, () => !sh(`ls -d ${cgroup} 2>/dev/null || true`).trim());
});

finish();
