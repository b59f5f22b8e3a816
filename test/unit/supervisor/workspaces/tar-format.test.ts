/**
 * The tar reader and writer, and the extractor's naming rules, against GNU tar: what the writer
 * makes GNU tar lists; what GNU tar makes (gnu and pax formats, long names) the reader decodes;
 * bounds, truncation and corruption are failures naming the problem; the extractor refuses every
 * kind but files and directories and every name that leaves its directory, and keeps what it
 * extracted before the refusal.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { ok } from '../../../../core/result.js';
import { ArchiveExtraction, entryPath } from '../../../../supervisor/workspaces/archive-extract.js';
import {
  TarReader,
  tarEnd,
  tarHeader,
  tarPadding,
  type TarEntry,
} from '../../../../supervisor/workspaces/tar-format.js';

const LIMITS = { maxNameBytes: 4096, maxMetaBytes: 65536, maxTrailingBytes: 1024 * 1024 };

async function* chunksOf(data: Buffer, size = 700): AsyncGenerator<Buffer> {
  for (let at = 0; at < data.length; at += size) yield data.subarray(at, at + size);
}

async function readAll(data: Buffer): Promise<{ entries: Array<TarEntry & { data?: string }>; failure?: string }> {
  const reader = new TarReader(chunksOf(data), LIMITS);
  const entries: Array<TarEntry & { data?: string }> = [];
  for (;;) {
    const next = await reader.next();
    if (!next.ok) return { entries, failure: next.detail };
    if (next.entry === null) return { entries };
    if (next.entry.kind === 'file') {
      const body = await reader.body();
      if (!body.ok) return { entries, failure: body.detail };
      entries.push({ ...next.entry, data: body.data.toString('utf8') });
    } else entries.push(next.entry);
  }
}

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'tar-format-'));
t.teardown(() => fs.rmSync(scratch, { recursive: true, force: true }));
const LONG = `${'a'.repeat(150)}/${'b'.repeat(120)}`;

t.test('GNU tar lists what the writer makes, long names and large ids through pax', async (t) => {
  const common = { mode: 0o644, uid: 3_198_000, gid: 3_198_000, mtimeSeconds: 1_700_000_000 };
  const parts = [
    tarHeader({ ...common, name: Buffer.from('dir'), kind: 'directory', size: 0, mode: 0o2770 }),
    tarHeader({ ...common, name: Buffer.from('dir/file'), kind: 'file', size: 5 }),
    Buffer.from('hello'),
    tarPadding(5),
    tarHeader({ ...common, name: Buffer.from(LONG), kind: 'file', size: 0 }),
    tarHeader({
      ...common,
      name: Buffer.from('dir/link'),
      kind: 'symlink',
      size: 0,
      linkName: Buffer.from('/x'.repeat(80)),
    }),
    tarEnd(),
  ];
  const file = path.join(scratch, 'ours.tar');
  fs.writeFileSync(file, Buffer.concat(parts));
  const listed = execFileSync('tar', ['-tvf', file, '--numeric-owner'], { encoding: 'utf8' }).trim().split('\n');
  t.match(listed[0], /^drwxrws--- 3198000\/3198000 +0 .* dir\/$/);
  t.match(listed[1], /^-rw-r--r-- .* 5 .* dir\/file$/);
  t.match(listed[2], new RegExp(`${LONG}$`));
  t.match(listed[3], new RegExp(` dir/link -> ${'/x'.repeat(80)}$`));
  t.equal(execFileSync('tar', ['-xOf', file, 'dir/file'], { encoding: 'utf8' }), 'hello');
  const back = await readAll(Buffer.concat(parts));
  t.same(
    back.entries.map((e) => [e.name.toString(), e.kind, e.data]),
    [
      ['dir/', 'directory', undefined],
      ['dir/file', 'file', 'hello'],
      [LONG, 'file', ''],
      ['dir/link', 'symlink', undefined],
    ],
  );
});

t.test("the reader decodes GNU tar's gnu and pax formats", async (t) => {
  const tree = path.join(scratch, 'tree');
  fs.mkdirSync(path.join(tree, path.dirname(LONG)), { recursive: true });
  fs.writeFileSync(path.join(tree, LONG), 'long');
  fs.symlinkSync('target', path.join(tree, 'sym'));
  for (const format of ['gnu', 'pax', 'ustar']) {
    const made = spawnSync('tar', [`--format=${format}`, '-C', tree, '-cf', '-', '.']);
    if (format === 'ustar') {
      // ustar cannot hold the long name's component: GNU tar says so and leaves it out.
      t.not(made.status, 0);
      continue;
    }
    const read = await readAll(made.stdout);
    t.equal(read.failure, undefined, format);
    t.same(
      read.entries.map((e) => [e.name.toString(), e.kind]).sort(),
      [
        ['./', 'directory'],
        [`./${LONG}`, 'file'],
        [`./${path.dirname(LONG)}/`, 'directory'],
        ['./sym', 'symlink'],
      ].sort(),
      format,
    );
  }
});

t.test('truncation, corruption and bounds are failures naming the problem', async (t) => {
  const header = tarHeader({
    name: Buffer.from('f'),
    kind: 'file',
    size: 1000,
    mode: 0o644,
    uid: 0,
    gid: 0,
    mtimeSeconds: 0,
  });
  const whole = Buffer.concat([header, Buffer.alloc(1000, 0x61), tarPadding(1000), tarEnd()]);
  t.match(
    (await readAll(whole.subarray(0, 800))).failure,
    /^truncated: entry 1: the content ends after 288 of 1000 bytes$/,
  );
  t.match(
    (await readAll(whole.subarray(0, 300))).failure,
    /truncated: entry 1 \(archive byte 0\): the header ends after 300/,
  );
  const bad = Buffer.from(whole);
  bad[0] = 0x67;
  t.match((await readAll(bad)).failure, /entry 1 \(archive byte 0\): header checksum mismatch/);
  const trailing = Buffer.concat([whole, Buffer.from('junk')]);
  t.match((await readAll(trailing)).failure, /data after the end-of-archive marker/);
  const longName = tarHeader({
    name: Buffer.from('x'.repeat(5000)),
    kind: 'file',
    size: 0,
    mode: 0,
    uid: 0,
    gid: 0,
    mtimeSeconds: 0,
  });
  t.match((await readAll(Buffer.concat([longName, tarEnd()]))).failure, /pax|longer than 4096/);
  t.same((await readAll(Buffer.alloc(0))).entries, [], 'an empty stream is an empty archive');
  async function* aborted(): AsyncGenerator<Buffer> {
    yield whole.subarray(0, 600);
    throw new Error('aborted');
  }
  const reader = new TarReader(aborted(), LIMITS);
  const first = await reader.next();
  t.ok(first.ok, 'the header arrived');
  t.match(await reader.body(), { ok: false, detail: /truncated/ }, 'a failing source is a truncated archive');
});

t.test('entry names: ./ and trailing slashes dropped; absolute, .. and non-UTF-8 refused', async (t) => {
  const rel = (dir: string, name: string | Buffer) => entryPath(dir, Buffer.from(name));
  t.same(rel('up', './a/b/'), ok({ rel: 'up/a/b' }));
  t.same(rel('.', 'a/./b'), ok({ rel: 'a/b' }));
  t.same(rel('', './'), ok({ rel: null }));
  t.match(rel('up', '/etc/passwd'), { ok: false, detail: /absolute/ });
  t.match(rel('up', 'a/../../x'), { ok: false, detail: /\.\./ });
  t.match(rel('up', '..'), { ok: false, detail: /\.\./ });
  t.match(rel('up', 'a//b'), { ok: false, detail: /empty components/ });
  t.match(rel('up', Buffer.from([0x61, 0xff])), { ok: false, detail: /UTF-8/ });
  t.match(rel('up', 'a\nb'), { ok: false, detail: /control/ });
});

t.test('the extractor stops at the first refused entry and keeps what came before', async (t) => {
  const made: string[] = [];
  const written: string[] = [];
  const target = {
    makeDirectory: async (dir: string) => {
      made.push(dir);
      return ok({ made: 1 });
    },
    writeFile: (file: string, data: Buffer, executable: boolean) => {
      written.push(`${file}:${data.toString()}:${executable}`);
      return ok({ bytes: data.length, sha256: '', replaced: false });
    },
  };
  const entry = (name: string, kind: 'file' | 'directory' | 'symlink', data = '', mode = 0o644) =>
    Buffer.concat([
      tarHeader({
        name: Buffer.from(name),
        kind,
        size: data.length,
        mode,
        uid: 0,
        gid: 0,
        mtimeSeconds: 0,
        linkName: Buffer.from('/etc'),
      }),
      Buffer.from(data),
      tarPadding(data.length),
    ]);
  const archive = Buffer.concat([
    entry('d', 'directory'),
    entry('d/run', 'file', 'x', 0o755),
    entry('d/link', 'symlink'),
    entry('after', 'file', 'y'),
    tarEnd(),
  ]);
  const extraction = new ArchiveExtraction('top', target, { budgetBytes: 100, maxFileBytes: 100 });
  const outcome = await extraction.run(chunksOf(archive));
  t.match(outcome, {
    ok: false,
    reason: 'invalid_archive',
    detail: 'body: entry 3 "d/link": a symlink is not extracted (only files and directories)',
    entry: 'd/link',
    extracted: { files: 1, directories: 2, bytes: 1 },
  });
  t.same(made, ['top', 'top/d']);
  t.same(written, ['top/d/run:x:true']);

  const capped = new ArchiveExtraction('.', target, { budgetBytes: 1, maxFileBytes: 100 });
  const over = await capped.run(chunksOf(Buffer.concat([entry('a', 'file', 'xy'), tarEnd()])));
  t.match(over, { ok: false, reason: 'workspace_full', entry: 'a', extracted: { files: 0 } });
});
