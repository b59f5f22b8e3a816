/**
 * Host writes through the real HTTP app into a real running turn (shared_uid mode), and the
 * turn temp: TMPDIR is the turn's own tmpfs, host writes land in it, it is measured at the end
 * with a `turn_temp_purge` receipt.
 */
import t from 'tap';
import { stopTapInjectingIntoChildren } from '../../../support/no-tap-inject.js';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { assertContract } from '../../../support/api-contract.js';
import { serveHarnessApp } from '../../../support/app-server.js';
import { createTurnHarness, runTurn, type TurnHarness } from '../../../support/turn-harness.js';
import { until } from '../../../support/until.js';

const TOKEN = 'host-write-test-token-0123456789';
const MAX_BYTES = 4096;

stopTapInjectingIntoChildren();

const harness = await createTurnHarness({
  slot: 42,
  separateUid: false,
  configure: (config) => {
    config.fs.hostWriteMaxBytes = MAX_BYTES;
  },
});
const outside = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-hw-outside-'));
const { port, close } = await serveHarnessApp(harness, TOKEN);
t.teardown(async () => {
  await close();
  await harness.close();
  fs.rmSync(outside, { recursive: true, force: true });
});

function put(
  id: string,
  query: string,
  body: Buffer | string,
  options: { chunked?: boolean } = {},
): Promise<{ status: number; json: any; headers: http.IncomingHttpHeaders }> {
  const data = Buffer.from(body);
  const length = options.chunked ? { 'transfer-encoding': 'chunked' } : { 'content-length': data.length };
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: '127.0.0.1',
        port,
        method: 'PUT',
        path: `/api/turns/${id}/files?${query}`,
        headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/octet-stream', ...length },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          try {
            assertContract('PUT', `/api/turns/${id}/files?${query}`, res.statusCode ?? 0, res.headers, text);
          } catch (error) {
            return reject(error instanceof Error ? error : new Error(String(error)));
          }
          resolve({ status: res.statusCode ?? 0, json: JSON.parse(text || 'null'), headers: res.headers });
        });
      },
    );
    // A refused upload may be cut off mid-body (EPIPE): the answer already arrived or will.
    req.on('error', (error) => ((error as NodeJS.ErrnoException).code === 'EPIPE' ? undefined : reject(error)));
    if (options.chunked) {
      // Two chunks, so the cap is crossed in the middle of the stream, not by a declared length.
      req.write(data.subarray(0, data.length >> 1));
      req.end(data.subarray(data.length >> 1));
    } else req.end(data);
  });
}

const sha = (data: string): string => createHash('sha256').update(data).digest('hex');

function eventsOf(h: TurnHarness, turnId: string, kind: string): Array<Record<string, unknown>> {
  const page = h.events.query({ turn: turnId, kind, limit: 1000 });
  if (!page.ok) throw new Error(page.detail);
  return page.events.map((e) => e.payload);
}

/**
 * Starts a turn that prints its TMPDIR, then prints what the host writes into its temp once it
 * appears, then waits; resolves once the path is printed, with the output so far.
 */
async function startWaitingTurn(): Promise<{ id: string; tmpdir: string; output: () => string }> {
  const created = await harness.turns.create({
    sessionId: 'session-hw',
    mode: 'ordinary',
    cwd: harness.workspace,
    argv: [
      '/bin/sh',
      '-c',
      'echo "$TMPDIR"; while [ ! -e "$TMPDIR/from-host/in.txt" ]; do sleep 0.05; done; echo "seen [$(cat "$TMPDIR/from-host/in.txt")]"; exec sleep 300',
    ],
  });
  if (!created.ok) throw new Error(`turn refused: ${created.reason}: ${created.detail}`);
  const id = created.turn.id;
  const attached = harness.turns.attach(id);
  if (!attached.ok) throw new Error(attached.detail);
  let out = '';
  const tmpdir = await new Promise<string>((resolve, reject) => {
    attached.attachment.onEvent((event) => {
      if (event.type === 'exit') reject(new Error(`turn ended early: ${JSON.stringify(event.result)}`));
      else if (event.type === 'output' && event.stream !== 'stderr') {
        out += event.data.toString();
        if (out.includes('\n')) resolve(out.split('\n')[0]!);
      }
    });
  });
  return { id, tmpdir, output: () => out };
}

t.test('host writes into a running turn', async (t) => {
  const { id, tmpdir, output } = await startWaitingTurn();
  t.equal(tmpdir, '/tmp', "TMPDIR is the view's /tmp, the turn's own tmpfs");

  const created = await put(id, 'path=sub/a.txt&mode=create', 'first');
  t.equal(created.status, 201);
  t.equal(created.headers['location'], `/api/turns/${id}/files?path=sub%2Fa.txt&mode=replace&root=workspace`);
  t.same(created.json, { bytes: 5, sha256: sha('first'), replaced: false });
  t.equal(fs.readFileSync(path.join(harness.workspace, 'sub/a.txt'), 'utf8'), 'first');

  const again = await put(id, 'path=sub/a.txt&mode=create', 'second');
  t.equal(again.status, 409);
  t.equal(again.json.code, 'exists');

  const replaced = await put(id, `path=sub/a.txt&mode=replace&sha256=${sha('first')}`, 'second');
  t.equal(replaced.status, 200);
  t.same(replaced.json, { bytes: 6, sha256: sha('second'), replaced: true });

  const stale = await put(id, `path=sub/a.txt&mode=replace&sha256=${sha('first')}`, 'third');
  t.equal(stale.status, 409);
  t.equal(stale.json.code, 'stale_base');
  t.equal(
    fs.readFileSync(path.join(harness.workspace, 'sub/a.txt'), 'utf8'),
    'second',
    'stale write left the file alone',
  );

  fs.symlinkSync(outside, path.join(harness.workspace, 'escape'));
  const throughLink = await put(id, 'path=escape/planted.txt&mode=create', 'x');
  t.equal(throughLink.status, 409);
  t.equal(throughLink.json.code, 'alias_denied');
  fs.writeFileSync(path.join(outside, 'target.txt'), 'outside');
  fs.symlinkSync(path.join(outside, 'target.txt'), path.join(harness.workspace, 'leaf-link'));
  const leafLink = await put(id, 'path=leaf-link&mode=replace', 'x');
  t.equal(leafLink.status, 409);
  t.equal(leafLink.json.code, 'alias_denied');
  t.same(fs.readdirSync(outside), ['target.txt'], 'nothing landed outside');
  t.equal(fs.readFileSync(path.join(outside, 'target.txt'), 'utf8'), 'outside');

  const tooLarge = await put(id, 'path=big.bin&mode=create', Buffer.alloc(MAX_BYTES + 1));
  t.equal(tooLarge.status, 413);
  t.equal(tooLarge.json.code, 'body_too_large');
  t.notOk(fs.existsSync(path.join(harness.workspace, 'big.bin')));
  const chunked = await put(id, 'path=big-chunked.bin&mode=create', Buffer.alloc(MAX_BYTES * 4), { chunked: true });
  t.equal(chunked.status, 413, 'a chunked body is cut off at the cap');
  t.notOk(fs.existsSync(path.join(harness.workspace, 'big-chunked.bin')));
  const atCap = await put(id, 'path=cap.bin&mode=create', Buffer.alloc(MAX_BYTES));
  t.equal(atCap.status, 201, 'exactly the cap is accepted');

  const dotdot = await put(id, 'path=../escape.txt&mode=create', 'x');
  t.equal(dotdot.status, 400);
  t.equal(dotdot.json.code, 'invalid_path');
  t.equal(dotdot.json.field, 'path');
  const absolute = await put(id, `path=${encodeURIComponent(outside)}/abs.txt&mode=create`, 'x');
  t.equal(absolute.status, 400);
  t.equal(absolute.json.field, 'path');
  for (const [query, field] of [
    ['mode=create', 'path'],
    ['path=a&mode=append', 'mode'],
    ['path=a&mode=create&root=home', 'root'],
    ['path=a&mode=create&sha256=00', 'sha256'],
    ['path=a&mode=replace&sha256=zz', 'sha256'],
    ['path=a&mode=create&extra=1', 'extra'],
    ['path=a&path=b&mode=create', 'path'],
  ] as const) {
    const bad = await put(id, query, 'x');
    t.equal(bad.status, 400, query);
    t.equal(bad.json.field, field, `${query} names ${field}`);
  }
  const several = await put(id, 'mode=append&root=home&colour=1', 'x');
  t.same(
    several.json.errors,
    [
      { field: 'colour', detail: 'unknown parameter' },
      { field: 'path', detail: 'required (a path relative to the root)' },
      { field: 'mode', detail: "expected 'create' or 'replace'" },
      { field: 'root', detail: "expected 'workspace' or 'temp'" },
    ],
    'every refused parameter at once',
  );

  const inTemp = await put(id, 'path=from-host/in.txt&mode=create&root=temp', 'temp data');
  t.equal(inTemp.status, 201);
  t.ok(await until(() => output().includes('seen [temp data]'), 60_000), 'the command read what the host wrote');
  t.notOk(fs.existsSync('/tmp/from-host/in.txt'), "the write went to the turn's tmpfs, not the host's /tmp");

  t.equal((await put('turn_unknown', 'path=a&mode=create', 'x')).status, 404);

  const writes = eventsOf(harness, id, 'host_write');
  t.same(
    writes.map((p) => p['path']),
    ['sub/a.txt', 'sub/a.txt', 'cap.bin', 'from-host/in.txt'],
  );
  t.same(writes[1], { path: 'sub/a.txt', bytes: 6, sha256: sha('second'), replaced: true });
  const refused = eventsOf(harness, id, 'host_write_refused');
  t.same(
    refused.map((p) => [p['path'], p['reason']]),
    [
      ['sub/a.txt', 'exists'],
      ['sub/a.txt', 'stale_base'],
      ['escape/planted.txt', 'alias_denied'],
      ['leaf-link', 'alias_denied'],
      ['big.bin', 'too_large'],
      ['big-chunked.bin', 'too_large'],
      ['../escape.txt', 'invalid_path'],
      [`${outside}/abs.txt`, 'invalid_path'],
    ],
  );
  for (const payload of [...writes, ...refused]) {
    t.notOk(String(payload['path']).includes(harness.workspace), 'event paths are relative, never host paths');
  }

  t.ok(harness.turns.cancel(id).ok);
  await harness.turns.wait(id);
  const finished = await put(id, 'path=late.txt&mode=create', 'x');
  t.equal(finished.status, 409);
  t.equal(finished.json.code, 'turn_finished');
  t.equal(eventsOf(harness, id, 'turn_temp_purge').length, 1, 'the turn temp is measured and let go at turn end');
});

t.test('turn temp: no hard link reaches a host file from it; measured at the end with a receipt', async (t) => {
  const hostFile = path.join(harness.workspace, 'hard-target.txt');
  fs.writeFileSync(hostFile, 'keep me');
  const script = [
    'echo "$TMPDIR"',
    'echo hello > "$TMPDIR/a.txt"',
    'mkdir "$TMPDIR/d" && echo world > "$TMPDIR/d/b.txt"',
    'ln -s /etc "$TMPDIR/etc-link"',
    'ln -s "$1" "$TMPDIR/host-link"',
    '{ if ln "$1" "$TMPDIR/hard" 2>/dev/null; then echo "hard link made"; else echo "no hard link across filesystems"; fi; }',
    'mkfifo "$TMPDIR/fifo"',
    'echo "entries $(find "$TMPDIR" -xdev -mindepth 1 | wc -l)"',
  ].join(' && ');
  const run = await runTurn(harness, { argv: ['/bin/sh', '-c', script, 'sh', hostFile] });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  t.equal(run.stdout.split('\n')[0], '/tmp', 'the command saw TMPDIR');
  t.match(run.stdout, 'no hard link across filesystems', "a workspace file cannot be linked into the turn's tmpfs");
  t.equal(fs.readFileSync(hostFile, 'utf8'), 'keep me', 'the workspace file is untouched');
  t.ok(fs.existsSync('/etc/passwd'), '/etc is untouched');
  const [receipt] = eventsOf(harness, run.id, 'turn_temp_purge');
  t.equal(receipt?.['outcome'], 'purged');
  t.equal(receipt?.['inodes'], Number(/^entries (\d+)$/m.exec(run.stdout)?.[1]), 'every entry counted');
  t.ok((receipt?.['bytes'] as number) > 0, 'the bytes it held');
});

t.test('separate uid: the worker uid writes its turn temp', async (t) => {
  const separate = await createTurnHarness({ slot: 43 });
  t.teardown(() => separate.close());
  const run = await runTurn(separate, {
    argv: ['/bin/sh', '-c', 'id -u; stat -c %u:%a "$TMPDIR"; echo x > "$TMPDIR/f" && stat -c %u "$TMPDIR/f"'],
  });
  t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
  t.equal(run.record.identity, 'separate_uid', 'the turn ran as a separate uid');
  const [uid, root, owner] = run.stdout.trim().split('\n');
  t.equal(root, '0:1777', "the turn's tmpfs root is sticky and world-writable, like any /tmp");
  t.equal(owner, uid, 'what the worker writes there is its own');
  t.equal(eventsOf(separate, run.id, 'turn_temp_purge').length, 1);
});
