/**
 * `turnhost turns list|show|cancel|attach` and `turnhost session delete` through the CLI binary
 * against a served supervisor: their output, exit codes (3 unknown, 8 conflict, 2 a refused
 * parameter), per-subcommand help and completion entries.
 */
import { spawn } from 'node:child_process';
import t from 'tap';
import { stopTapInjectingIntoChildren } from '../../../support/no-tap-inject.js';
import { servedApi } from '../../../support/served-api.js';
import { serveForTest, type CliResult } from '../../../support/served-supervisor.js';
import { REPO_ROOT } from '../../../support/turn-harness.js';

stopTapInjectingIntoChildren();

const served = await serveForTest(t, { name: 'turnscli' });
const api = servedApi(served);

/** The served supervisor's --config after the command (and subcommand), before any `--`. */
function withConfig(args: string[]): string[] {
  if (args[0] === 'completion') return args;
  const at = args[0] === 'turns' || args[0] === 'session' ? 2 : 1;
  return [...args.slice(0, at), '--config', served.configPath, ...args.slice(at)];
}

/** `turnhost <command> [<sub>] --config <the served config> ...`, stdin `input` then closed. */
function cli(args: string[], input = ''): Promise<CliResult> {
  const child = spawn(process.execPath, [`${REPO_ROOT}/dist/supervisor/cli/main.js`, ...withConfig(args)], {
    stdio: ['pipe', 'pipe', 'pipe'],
    cwd: served.workspace,
  });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
  child.stdin.end(input);
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}

const run = (session: string) =>
  cli(['run', '--session', session, '--cwd', served.workspace, '--', '/bin/true']).then((r) => {
    if (r.code !== 0) throw new Error(r.stderr);
  });

t.test('turns list pages and filters; show prints a record', async (t) => {
  for (let i = 0; i < 3; i++) await run('cli-list');
  const json = await cli(['turns', 'list', '--session', 'cli-list', '--json']);
  t.equal(json.code, 0, json.stderr);
  const page = JSON.parse(json.stdout) as { turns: Array<{ id: string; state: string }>; nextAfter: string | null };
  t.equal(page.turns.length, 3);
  t.equal(page.nextAfter, null);

  const first = await cli(['turns', 'list', '--session', 'cli-list', '--limit', '2']);
  t.equal(first.code, 0, first.stderr);
  t.equal(first.stdout.trim().split('\n').length, 2, 'one page of 2');
  t.match(first.stderr, /more turns: --all/);
  const all = await cli(['turns', 'list', '--session', 'cli-list', '--limit', '2', '--all']);
  const lines = all.stdout.trim().split('\n');
  t.equal(lines.length, 3, '--all follows every page');
  t.same(
    lines.map((line) => line.split('  ')[0]),
    page.turns.map((turn) => turn.id),
  );
  t.match(lines[0], /cli-list {2}finished {2}ok {2}\d{4}-/);
  t.equal(all.stderr, '');

  const bad = await cli(['turns', 'list', '--state', 'done']);
  t.equal(bad.code, 2, 'a refused parameter is a usage error');
  t.match(bad.stderr, /state: expected one of starting, running, finished/);

  const shown = await cli(['turns', 'show', page.turns[0]!.id]);
  t.equal(shown.code, 0, shown.stderr);
  t.match(shown.stdout, new RegExp(`^id +${page.turns[0]!.id}$`, 'm'));
  t.match(shown.stdout, /^state +finished$/m);
  t.match(shown.stdout, /^result +ok$/m);
  const shownJson = await cli(['turns', 'show', page.turns[0]!.id, '--json']);
  t.match(JSON.parse(shownJson.stdout), { id: page.turns[0]!.id, sessionId: 'cli-list' });
  const missing = await cli(['turns', 'show', 'no-such-turn']);
  t.equal(missing.code, 3);
});

t.test('turns cancel and turns attach', async (t) => {
  const created = await api.createTurn('cli-cancel', ['/bin/sleep', '60']);
  const id = (created.body as { turn: { id: string } }).turn.id;
  const cancelled = await cli(['turns', 'cancel', id]);
  t.equal(cancelled.code, 0, cancelled.stderr);
  t.match(cancelled.stdout, `cancelling turn ${id}`);
  let state = '';
  const finishedState = async (): Promise<void> => {
    state = (JSON.parse((await cli(['turns', 'show', id, '--json'])).stdout) as { state: string }).state;
  };
  await finishedState();
  for (let tries = 0; state !== 'finished' && tries < 50; tries++) await finishedState();
  t.equal(state, 'finished', 'the cancelled turn finishes');
  const again = await cli(['turns', 'cancel', id]);
  t.equal(again.code, 8, 'a finished turn cannot be cancelled');
  t.match(again.stderr, /not_running/);
  t.equal((await cli(['turns', 'cancel', 'no-such-turn'])).code, 3);

  const reader = await api.createTurn('cli-attach', ['/bin/sh', '-c', 'read line; echo "got $line"; exit 3']);
  const readerId = (reader.body as { turn: { id: string } }).turn.id;
  const attached = await cli(['turns', 'attach', readerId], 'hello\n');
  t.equal(attached.code, 3, "the command's exit code");
  t.match(attached.stdout, 'got hello');

  const finished = await cli(['turns', 'attach', readerId]);
  t.equal(finished.code, 3, 'attaching to a finished turn gives its exit');
  t.equal((await cli(['turns', 'attach', 'no-such-turn'])).code, 3);
});

t.test('session delete', async (t) => {
  await run('cli-delete');
  const deleted = await cli(['session', 'delete', 'cli-delete']);
  t.equal(deleted.code, 0, deleted.stderr);
  t.match(deleted.stdout, /^deleted session cli-delete: \d+ events, 1 turns$/m);
  t.equal((await cli(['turns', 'list', '--session', 'cli-delete'])).stdout, '');
  const again = await cli(['session', 'delete', 'cli-delete', '--json']);
  t.equal(again.code, 3);

  const running = await api.createTurn('cli-busy', ['/bin/sleep', '60']);
  const busy = await cli(['session', 'delete', 'cli-busy']);
  t.equal(busy.code, 8, 'a session with a running turn is refused');
  t.match(busy.stderr, /session_busy/);
  await api.request('POST', `/api/turns/${(running.body as { turn: { id: string } }).turn.id}/cancel`);
});

t.test('help, usage errors and completion', async (t) => {
  for (const topic of ['turns list', 'turns show', 'turns cancel', 'turns attach', 'session delete']) {
    const help = await cli([...topic.split(' '), '--help']);
    t.equal(help.code, 0);
    t.match(help.stdout, `usage: turnhost ${topic}`);
  }
  const unknown = await cli(['turns', 'frob']);
  t.equal(unknown.code, 2);
  t.match(unknown.stderr, "unknown turns command 'frob'");
  const noId = await cli(['session', 'delete']);
  t.equal(noId.code, 2);
  t.match(noId.stderr, 'session delete: expected one ID');
  const completion = await cli(['completion']);
  t.match(completion.stdout, "turns) COMPREPLY=( $(compgen -W 'list show cancel attach'");
  t.match(
    completion.stdout,
    "'turns list') opts='--config --data-dir --server --json --session --workspace --state --limit --all'",
  );
  t.match(completion.stdout, "'session delete') opts=");
  t.match(completion.stdout, "--state) COMPREPLY=( $(compgen -W 'starting running finished'");
});
