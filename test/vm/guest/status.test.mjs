// VM tier, first file: the plumbing (systemd as PID 1, cgroup v2, the delegated unit, the setuid
// helper) and the supervisor's own account of what it enforces.
import fs from 'node:fs';
import { check, comment, expect, finish } from './tap.mjs';
import { SERVICE, SERVICE_CGROUP, api, serviceMainPid, sh, waitForSupervisor } from './client.mjs';

comment(`kernel ${sh('uname -r').trim()}, systemd ${sh('systemctl --version').split('\n')[0]}`);

await check('systemd is PID 1 and the cgroup2 hierarchy is mounted alone at /sys/fs/cgroup', () => {
  expect(fs.readlinkSync('/proc/1/exe').endsWith('/systemd'), 'PID 1 is not systemd', {
    exe: fs.readlinkSync('/proc/1/exe'),
  });
  const mounts = fs.readFileSync('/proc/self/mountinfo', 'utf8');
  expect(/ \/sys\/fs\/cgroup .* - cgroup2 /.test(mounts), 'no cgroup2 at /sys/fs/cgroup', { mounts });
  expect(!/ - cgroup /.test(mounts), 'a cgroup v1 hierarchy is mounted');
});

await check('the identity helper is installed root:turnhost 4750', () => {
  const stat = fs.statSync('/usr/local/libexec/turnhost/identity-helper');
  const gid = Number(sh('getent group turnhost | cut -d: -f3'));
  expect(stat.uid === 0 && stat.gid === gid && (stat.mode & 0o7777) === 0o4750, 'wrong owner or mode', {
    uid: stat.uid,
    gid: stat.gid,
    mode: (stat.mode & 0o7777).toString(8),
  });
});

await check('the supervisor answers /api/health', async () => {
  await waitForSupervisor();
});

await check('the supervisor runs as turnhost inside its delegated cgroup subtree', () => {
  const pid = serviceMainPid();
  expect(pid > 0, `${SERVICE} has no main process`, { state: sh(`systemctl status ${SERVICE} --no-pager || true`) });
  const user = sh(`ps -o user= -p ${pid}`).trim();
  expect(user === 'turnhost', `main process runs as ${user}`);
  const cgroup = fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').trim();
  expect(cgroup.startsWith(`0::/system.slice/${SERVICE}`), 'main process outside the unit cgroup', { cgroup });
  const owner = fs.statSync(SERVICE_CGROUP).uid;
  expect(owner === Number(sh('id -u turnhost')), 'the unit cgroup is not delegated to turnhost', { owner });
  comment(
    `supervisor cgroup: ${cgroup}; unit subtree_control: ${fs.readFileSync(`${SERVICE_CGROUP}/cgroup.subtree_control`, 'utf8').trim()}`,
  );
});

await check(
  'status (after a fresh check): memory, pids and cpu enforced by cgroup v2; identity separate_uid; ordinary available',
  async () => {
    const checked = await api('POST', '/api/status/worker-host');
    expect(checked.status === 200, `POST /api/status/worker-host answered ${checked.status}`, { body: checked.body });
    const answer = await api('GET', '/api/status');
    expect(answer.status === 200, `GET /api/status answered ${answer.status}`, { body: answer.body });
    const host = answer.body.runtime?.workerHost;
    expect(host, 'status has no runtime.workerHost', { body: answer.body });
    for (const limit of ['memory', 'pids', 'cpu']) {
      const enforced = host.limits.enforced.find((entry) => entry.limit === limit);
      expect(
        enforced?.source === 'cgroup' && enforced.backend === 'cgroup_v2',
        `${limit} is not enforced by cgroup v2`,
        { limits: host.limits },
      );
    }
    expect(host.identity === 'separate_uid', `identity is ${host.identity}`, { workerHost: host });
    expect(host.ordinary?.available === true, 'ordinary mode unavailable', { ordinary: host.ordinary });
    expect(
      Number.isInteger(host.workerUid) && host.workerUid >= 200000 && host.workerUid < 201000,
      'workerUid outside the subuid range',
      {
        workerUid: host.workerUid,
      },
    );
  },
);

finish();
