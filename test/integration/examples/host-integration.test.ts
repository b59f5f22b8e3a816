/** examples/host-integration.ts, compiled, against a real supervisor: output, events, result. */
import { spawn } from 'node:child_process';
import path from 'node:path';
import t from 'tap';
import { serveForTest } from '../../support/served-supervisor.js';
import { REPO_ROOT } from '../../support/turn-harness.js';

t.test('the host integration example runs a turn end to end', async (t) => {
  const served = await serveForTest(t, { name: 'example' });
  const { token } = served;
  const child = spawn(
    process.execPath,
    [
      path.join(REPO_ROOT, 'dist/examples/host-integration.js'),
      '--socket',
      served.socket,
      '--cwd',
      served.workspace,
      '--',
      '/bin/sh',
      '-c',
      'read go; echo "out-line $go"; echo "rest $(wc -l)"; echo err-line >&2; exit 3',
    ],
    { env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin', TURNHOST_API_TOKEN: token }, stdio: 'pipe' },
  );
  // The command waits for this line, so it cannot finish before the example attached; the end
  // of our input reaches it as EOF (wc would wait for it until the turn's timeout).
  child.stdin.end('sent\nsecond\nthird\n');
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  t.equal(code, 3, `the command's exit code (${stderr})`);
  t.match(stdout, /^host: ordinary available/m);
  t.match(stdout, /^out-line sent$/m);
  t.match(stdout, /^rest 2$/m, 'the rest of the input, ended by EOF');
  t.match(stderr, /^err-line$/m);
  t.match(stdout, /^event: worker_launch$/m);
  t.match(stdout, /^event: worker_exit$/m);
  t.match(stdout, /^result: \{"status":"nonzero_exit","exitCode":3/m);
});
