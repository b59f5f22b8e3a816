/**
 * A host where ordinary turns run but workspace turns cannot: the identity helper's config has
 * no `workspace_root` line for `workspaces.root`, so it would refuse every workspace lease.
 * `check` says so and exits 4, `status` shows it, and `/api/ready` is not ready; a helper that
 * names the root makes all three green.
 */
import t from 'tap';
import { stopTapInjectingIntoChildren } from '../../../support/no-tap-inject.js';
import {
  setUpHelper,
  startSupervisor,
  stopSupervisors,
  supervisorBase,
  type ServedSupervisor,
} from '../../../support/served-supervisor.js';
import { servedApi } from '../../../support/served-api.js';

stopTapInjectingIntoChildren();

const without = setUpHelper([supervisorBase('chk-ws-without').dataDir], { first: 3_188_000, count: 4 });
const withRoot = setUpHelper(
  [supervisorBase('chk-ws-with').dataDir],
  { first: 3_188_100, count: 4 },
  {
    roots: [supervisorBase('chk-ws-with').workspacesRoot],
  },
);
t.teardown(() => {
  without.remove();
  withRoot.remove();
});
const supervisors: ServedSupervisor[] = [
  await startSupervisor({ name: 'chk-ws-without', helper: without, workspaces: true }),
  await startSupervisor({ name: 'chk-ws-with', helper: withRoot, workspaces: true }),
];
t.teardown(() => stopSupervisors(supervisors));
const [broken, working] = supervisors as [ServedSupervisor, ServedSupervisor];

t.test('no workspace_root for workspaces.root: check fails naming it, ordinary still available', async (t) => {
  const check = await broken.cli(['check']);
  t.equal(check.code, 4, check.stderr);
  t.match(check.stdout, /^ordinary +available/m);
  t.match(
    check.stdout,
    /^workspace turns +UNAVAILABLE: the identity helper config \S+ has no workspace_root line for /m,
  );
  const status = JSON.parse((await broken.cli(['status', '--json'])).stdout) as {
    runtime: { workerHost: { workspaceTurns?: { available: boolean; requirement?: string } } };
  };
  t.match(status.runtime.workerHost.workspaceTurns, { available: false, requirement: /no workspace_root line/ });
  const ready = await servedApi(broken).request('GET', '/api/ready');
  t.equal(ready.status, 503);
  t.match(ready.body, { requirement: /no workspace_root line/ });
});

t.test('the helper names the root: check passes and workspace turns are available', async (t) => {
  const check = await working.cli(['check']);
  t.equal(check.code, 0, check.stderr);
  t.match(check.stdout, /^workspace turns +available/m);
  const ready = await servedApi(working).request('GET', '/api/ready');
  t.equal(ready.status, 200);
});
