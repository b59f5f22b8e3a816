/**
 * What `turnhost run` tells the user beyond the command's own output, through a real served
 * supervisor in each identity mode: the egress its proxy denied (a `curl` whose CONNECT was
 * refused says only `CONNECT tunnel failed, response 403`), why a command did not start (exit
 * 127 alone says nothing), and a second Ctrl-C that cancels a turn whose command ignores SIGINT.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import t from 'tap';
import { stopTapInjectingIntoChildren } from '../../../support/no-tap-inject.js';
import {
  setUpHelper,
  startSupervisor,
  stopSupervisors,
  supervisorBase,
  type ServedSupervisor,
} from '../../../support/served-supervisor.js';
import { REPO_ROOT } from '../../../support/turn-harness.js';
import { until } from '../../../support/until.js';

stopTapInjectingIntoChildren();

const SEPARATE_RANGE = { first: 3_195_000, count: 8 };
const helper = setUpHelper([supervisorBase('runreport-separate').dataDir], SEPARATE_RANGE);
t.teardown(() => helper.remove());
const supervisors: Array<[string, ServedSupervisor]> = [
  ['separate_uid', await startSupervisor({ name: 'runreport-separate', helper })],
  ['shared_uid', await startSupervisor({ name: 'runreport-shared' })],
];
t.teardown(() => stopSupervisors(supervisors.map(([, supervisor]) => supervisor)));

// A loopback server the turn names: the proxy must refuse it (no allowlist entry), so nothing
// ever connects; were the policy to let it through, the test would see the connection.
let connected = 0;
const origin = net.createServer((socket) => {
  connected += 1;
  socket.destroy();
});
await new Promise<void>((resolve) => origin.listen(0, '127.0.0.1', resolve));
t.teardown(() => new Promise((resolve) => origin.close(resolve)));
const originPort = (origin.address() as net.AddressInfo).port;

for (const [mode, served] of supervisors) {
  t.test(`${mode}: a denied fetch is named on stderr when the command ends`, async (t) => {
    // --noproxy '': the turn's NO_PROXY lists loopback, which in its own network namespace is
    // its own; the proxy is asked for the host's loopback instead, as a fetch of any host would be.
    const fetch = ['curl', '-sS', '--noproxy', '', `https://127.0.0.1:${originPort}/`];
    const run = await served.run(fetch);
    t.not(run.code, 0, 'curl failed');
    t.match(run.stderr, /CONNECT tunnel failed, response 403/, "curl's own view of it");
    t.match(
      run.stderr,
      new RegExp(`^turnhost: egress denied: 127\\.0\\.0\\.1:${originPort} \\(not_allowlisted\\)$`, 'm'),
      'the host, port and reason',
    );
    t.equal(connected, 0, 'the origin saw no connection');

    const json = await served.run(fetch, { extra: ['--json'] });
    const result = JSON.parse(json.stdout) as { egress?: Record<string, unknown> };
    t.match(result.egress, {
      connections: 0,
      denials: 1,
      firstDenials: [{ host: '127.0.0.1', port: originPort, reason: 'not_allowlisted' }],
      unlistedDenials: 0,
    });

    const quiet = await served.run(['/bin/true']);
    t.equal(quiet.code, 0);
    t.equal(quiet.stderr, '', 'a turn without denials prints nothing of its own');
  });

  t.test(`${mode}: a command that is not found says so`, async (t) => {
    const run = await served.run(['no-such-cmd']);
    t.equal(run.code, 127);
    t.match(run.stderr, /^turnhost: "no-such-cmd": command not found/m);
    const plainFile = path.join(served.workspace, 'not-a-program');
    fs.writeFileSync(plainFile, 'data\n', { mode: 0o644 });
    const notExecutable = await served.run(['./not-a-program']);
    t.equal(notExecutable.code, 126);
    t.match(notExecutable.stderr, /^turnhost: "\.\/not-a-program": \S+ is not an executable file$/m);
  });

  t.test(`${mode}: a second Ctrl-C cancels a turn that ignores SIGINT`, async (t) => {
    const cli = spawn(
      process.execPath,
      [
        path.join(REPO_ROOT, 'dist/supervisor/cli/main.js'),
        'run',
        '--config',
        served.configPath,
        '--cwd',
        served.workspace,
        '--',
        'sh',
        '-c',
        "trap '' INT; echo ready; sleep 30; echo survived",
      ],
      { stdio: ['ignore', 'pipe', 'pipe'], cwd: served.workspace },
    );
    let stdout = '';
    let stderr = '';
    cli.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
    cli.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    let code: number | null | undefined;
    cli.on('close', (c) => (code = c));
    t.teardown(() => {
      if (code === undefined) cli.kill('SIGKILL');
    });
    t.ok(await until(() => stdout.includes('ready'), 60_000), 'the command runs');

    cli.kill('SIGINT');
    t.ok(await until(() => stderr.includes('press Ctrl-C again'), 30_000), 'the first Ctrl-C says what a second does');
    t.match(stderr, /^turnhost: press Ctrl-C again within 3 s to cancel the turn$/m);
    t.equal(code, undefined, 'the command ignored the forwarded SIGINT: the turn still runs');

    cli.kill('SIGINT');
    t.ok(await until(() => code !== undefined, 60_000), 'the second Ctrl-C ends the turn');
    t.equal(code, 125, 'the exit code of a cancelled turn');
    t.match(stderr, /^turnhost: cancelling turn \S+$/m);
    t.match(stderr, /: cancelled$/m);
    t.notMatch(stdout, /survived/);
  });
}
