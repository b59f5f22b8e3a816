/**
 * What real turns need still works inside both views: a terminal (strict mounts its own
 * devpts instance), the egress proxy socket (kept at its own path under the fresh /tmp) and
 * the turn temp as TMPDIR.
 */
import t from 'tap';
import fs from 'node:fs';
import path from 'node:path';
import { createTurnHarness, runTurn } from '../../support/turn-harness.js';

const harness = await createTurnHarness({
  slot: 62,
  configure: (config) => {
    config.modes.restricted.enabled = true;
  },
});
t.teardown(() => harness.close());

/** Asks the proxy (through the worker's egress listener, which the turn proxy serves) for a host no allowlist names: a refusal proves the proxy is reachable, and nothing leaves the machine. */
const ASK_PROXY =
  'port=${HTTP_PROXY##*:}; exec 3<>/dev/tcp/127.0.0.1/$port && printf "GET http://turnhost-denied.invalid/ HTTP/1.1\\r\\nHost: turnhost-denied.invalid\\r\\nConnection: close\\r\\n\\r\\n" >&3 && head -n 1 <&3';

for (const mode of ['ordinary', 'restricted'] as const) {
  t.test(`${mode}: a pty turn gets its terminal`, async (t) => {
    const run = await runTurn(harness, {
      mode,
      argv: ['/bin/sh', '-c', 'tty; test -t 0 && echo "stdin is a tty"'],
      tty: { cols: 80, rows: 24 },
    });
    t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
    t.match(run.stdout, /\/dev\/pts\/\d+/);
    t.match(run.stdout, 'stdin is a tty');
  });

  t.test(`${mode}: the egress proxy answers through the view`, async (t) => {
    const run = await runTurn(harness, { mode, argv: ['/bin/bash', '-c', ASK_PROXY] });
    t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
    t.match(run.stdout, /^HTTP\/1\.1 4\d\d /, 'the proxy refused the unlisted host');
  });

  t.test(`${mode}: TMPDIR is the writable turn temp`, async (t) => {
    const run = await runTurn(harness, {
      mode,
      argv: ['/bin/sh', '-c', 'echo data > "$TMPDIR/file" && cat "$TMPDIR/file" && echo "$TMPDIR"'],
    });
    t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
    t.match(run.stdout, /^data\n\/.+\n$/);
  });
}

t.test('a view the probe cannot verify refuses the turn before any worker starts', async (t) => {
  const brokenDir = fs.mkdtempSync('/run/turnhost-view-broken-');
  t.teardown(() => fs.rmSync(brokenDir, { recursive: true, force: true }));
  const broken = await createTurnHarness({
    slot: 63,
    configure: (config) => {
      // The harness's own helper config plus a view_path that does not exist: every view fails.
      const original = fs.readFileSync(config.identityHelper.configPath!, 'utf8');
      const brokenConfig = path.join(brokenDir, 'identity-helper.conf');
      fs.writeFileSync(brokenConfig, `${original}view_path /nonexistent-turnhost-view-path\n`, { mode: 0o644 });
      config.identityHelper = { ...config.identityHelper, configPath: brokenConfig };
    },
  });
  t.teardown(() => broken.close());
  const created = await broken.turns.create({
    sessionId: 's-view',
    mode: 'ordinary',
    cwd: broken.workspace,
    argv: ['/bin/true'],
  });
  t.equal(created.ok, false);
  if (created.ok) return;
  t.equal(created.reason, 'worker_host_unsupported');
  t.match(created.detail, /the governed worker view cannot be built: view: view_path \/nonexistent-turnhost-view-path/);
});
