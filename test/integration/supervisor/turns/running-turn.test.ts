/**
 * The end of a turn's input, on a real served supervisor: `{type:"eof"}` on the attach socket
 * closes the command's stdin pipe (pipes) or writes VEOF (pty); input after it is refused with
 * `input_closed`. `turnhost run` sends eof when its own stdin ends (`echo abc | turnhost run --
 * wc -l` prints 1; `cat < /dev/null` ends at once instead of waiting forever). A request's
 * `stdin` is written and closed, and attach input is then refused; over 512 KiB is refused.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import t from 'tap';
import { stopTapInjectingIntoChildren } from '../../../support/no-tap-inject.js';
import { servedApi } from '../../../support/served-api.js';
import { serveForTest, type CliResult } from '../../../support/served-supervisor.js';
import { REPO_ROOT } from '../../../support/turn-harness.js';

stopTapInjectingIntoChildren();

const served = await serveForTest(t, { name: 'input' });
const api = servedApi(served);
const b64 = (text: string): string => Buffer.from(text).toString('base64');
const turnId = (answer: { body: unknown }): string => (answer.body as { turn: { id: string } }).turn.id;

t.test('pipes: eof ends the command input; input after it is refused', async (t) => {
  // wc prints once its stdin ends; the sleep keeps the turn running while input is refused.
  const created = await api.createTurn('input-pipes', ['/bin/sh', '-c', 'wc -l; sleep 60']);
  t.equal(created.status, 201, JSON.stringify(created.body));
  const id = turnId(created);
  const attached = await api.attach(id);
  t.teardown(() => attached.close());
  attached.send({ type: 'input', data: b64('a\nb\n') });
  attached.send({ type: 'eof' });
  t.ok(await attached.waitFor(() => attached.output().includes('2')), 'wc saw the end of its input');
  t.equal(attached.output().trim(), '2');

  attached.send({ type: 'input', data: b64('late\n') });
  const refused = await attached.waitFor((m) => m.type === 'error');
  t.match(refused, { type: 'error', code: 'input_closed', error: /^input: / });
  attached.send({ type: 'eof' });
  await attached.waitFor((m) => m.type === 'error' && attached.messages.filter((x) => x.type === 'error').length > 1);
  t.equal(attached.messages.filter((m) => m.code === 'input_closed').length, 2, 'a second eof is refused too');
  t.equal((await api.request('POST', `/api/turns/${id}/cancel`)).status, 200);
});

t.test('pty: eof writes VEOF and cat ends', async (t) => {
  const created = await api.createTurn('input-pty', ['/bin/cat'], { tty: { cols: 80, rows: 24 } });
  t.equal(created.status, 201, JSON.stringify(created.body));
  const attached = await api.attach(turnId(created));
  t.teardown(() => attached.close());
  attached.send({ type: 'input', data: b64('hello\n') });
  attached.send({ type: 'eof' });
  const exit = await attached.waitFor((m) => m.type === 'exit');
  t.match(exit?.result, { status: 'ok', exitCode: 0 }, 'cat read the end of input');
  t.match(attached.output(), /hello/);
});

t.test('turnhost run sends eof when its stdin ends', async (t) => {
  const piped = await served.cli(['run', '--cwd', served.workspace, '--', '/usr/bin/wc', '-l'], { input: 'abc\n' });
  t.equal(piped.code, 0, piped.stderr);
  t.equal(piped.stdout.trim(), '1');

  const devNull = fs.openSync('/dev/null', 'r');
  const child = spawn(
    process.execPath,
    [
      `${REPO_ROOT}/dist/supervisor/cli/main.js`,
      'run',
      '--config',
      served.configPath,
      '--cwd',
      served.workspace,
      '--',
      '/bin/cat',
    ],
    { stdio: [devNull, 'pipe', 'pipe'] },
  );
  fs.closeSync(devNull);
  const result = await collect(child);
  t.equal(result.code, 0, result.stderr);
  t.equal(result.stdout, '');
});

t.test('run --tty with piped input: the pty gets VEOF', async (t) => {
  const result = await served.cli(['run', '--tty', '--cwd', served.workspace, '--', '/bin/cat'], { input: 'xyz\n' });
  t.equal(result.code, 0, result.stderr);
  t.match(result.stdout, /xyz/);
});

t.test('POST stdin is written and closed; attach input is refused', async (t) => {
  const text = await api.createTurn('input-post', ['/bin/sh', '-c', 'wc -l; sleep 60'], { stdin: 'a\nb\nc\n' });
  t.equal(text.status, 201, JSON.stringify(text.body));
  const attached = await api.attach(turnId(text));
  t.teardown(() => attached.close());
  t.ok(await attached.waitFor(() => attached.output().includes('3')));
  t.equal(attached.output().trim(), '3');
  attached.send({ type: 'input', data: b64('more\n') });
  t.match(await attached.waitFor((m) => m.type === 'error'), { code: 'input_closed', error: /request/ });
  t.equal((await api.request('POST', `/api/turns/${turnId(text)}/cancel`)).status, 200);

  const encoded = await api.createTurn('input-post', ['/usr/bin/wc', '-c'], {
    stdin: Buffer.from([0, 1, 2, 255, 10]).toString('base64'),
    stdinEncoding: 'base64',
  });
  t.equal(encoded.status, 201, JSON.stringify(encoded.body));
  const bytes = await api.attach(turnId(encoded));
  t.teardown(() => bytes.close());
  t.match(await bytes.waitFor((m) => m.type === 'exit'), { result: { status: 'ok' } });
  t.equal(bytes.output().trim(), '5', 'the decoded bytes reached the command');
});

t.test('POST stdin over 512 KiB or ill-typed is refused naming stdin', async (t) => {
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ stdin: 'x'.repeat(512 * 1024 + 1) }, 'stdin'],
    [{ stdin: Buffer.alloc(512 * 1024 + 1).toString('base64'), stdinEncoding: 'base64' }, 'stdin'],
    [{ stdin: 5 }, 'stdin'],
    [{ stdin: '***', stdinEncoding: 'base64' }, 'stdin'],
    [{ stdin: 'x', stdinEncoding: 'hex' }, 'stdinEncoding'],
  ];
  for (const [extra, field] of cases) {
    const answer = await api.createTurn('input-cap', ['/bin/true'], extra);
    t.equal(answer.status, 400, `${field} refused`);
    t.match(answer.body, { code: 'invalid_request', field, error: new RegExp(`^${field}: `) });
  }
  const atCap = await api.createTurn('input-cap', ['/usr/bin/wc', '-c'], { stdin: 'x'.repeat(512 * 1024) });
  t.equal(atCap.status, 201, 'exactly 512 KiB is accepted');
  const attached = await api.attach(turnId(atCap));
  t.teardown(() => attached.close());
  await attached.waitFor((m) => m.type === 'exit');
  t.equal(attached.output().trim(), String(512 * 1024));
});

function collect(child: ReturnType<typeof spawn>): Promise<CliResult> {
  let stdout = '';
  let stderr = '';
  child.stdout?.on('data', (d: Buffer) => (stdout += d.toString('utf8')));
  child.stderr?.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stdout, stderr })));
}
