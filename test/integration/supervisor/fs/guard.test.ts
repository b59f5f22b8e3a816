import t, { type Test } from 'tap';
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  closeRoot,
  openRoot,
  readFile,
  validateRelativePath,
  writeFile,
  type RootHandle,
} from '../../../../supervisor/fs/guard.js';

const sha = (data: string | Buffer): string => createHash('sha256').update(data).digest('hex');

interface Fixture {
  dir: string;
  root: string;
  outside: string;
  handle: RootHandle;
}

function fixture(t: Test): Fixture {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fs-guard-'));
  const root = path.join(dir, 'root');
  const outside = path.join(dir, 'outside');
  fs.mkdirSync(root);
  fs.mkdirSync(outside);
  const opened = openRoot(root);
  if (!opened.ok) throw new Error(opened.detail);
  t.teardown(() => {
    closeRoot(opened);
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { dir, root, outside, handle: opened };
}

function tempLeftovers(dir: string): string[] {
  return (fs.readdirSync(dir, { recursive: true }) as string[]).filter((p) =>
    path.basename(p).startsWith('.turnhost-tmp-'),
  );
}

const create = { mode: 'create' as const, maxBytes: 1024 };

t.test('create makes missing directories and publishes the exact bytes', async (t) => {
  const f = fixture(t);
  const written = writeFile(f.handle, 'a/b/c/mask.png', Buffer.from('png bytes'), create);
  t.match(written, { ok: true, bytes: 9, sha256: sha('png bytes'), replaced: false });
  t.equal(fs.readFileSync(path.join(f.root, 'a/b/c/mask.png'), 'utf8'), 'png bytes');
  t.equal(fs.statSync(path.join(f.root, 'a/b/c/mask.png')).mode & 0o777, 0o644);
  t.ok(fs.statSync(path.join(f.root, 'a/b')).isDirectory());
  t.same(tempLeftovers(f.root), []);
});

t.test('create refuses an existing destination', async (t) => {
  const f = fixture(t);
  fs.writeFileSync(path.join(f.root, 'x'), 'old');
  t.match(writeFile(f.handle, 'x', Buffer.from('new'), create), { ok: false, reason: 'exists' });
  fs.mkdirSync(path.join(f.root, 'd'));
  t.match(writeFile(f.handle, 'd', Buffer.from('new'), create), { ok: false, reason: 'exists' });
  t.equal(fs.readFileSync(path.join(f.root, 'x'), 'utf8'), 'old');
  t.same(tempLeftovers(f.root), []);
});

t.test('replace checks the expected content hash', async (t) => {
  const f = fixture(t);
  const file = path.join(f.root, 'doc.txt');
  fs.writeFileSync(file, 'v1');
  const stale = writeFile(f.handle, 'doc.txt', Buffer.from('v2'), {
    mode: 'replace',
    maxBytes: 64,
    expectedSha256: sha('v0'),
  });
  t.match(stale, { ok: false, reason: 'stale_base' });
  t.equal(fs.readFileSync(file, 'utf8'), 'v1');
  const fresh = writeFile(f.handle, 'doc.txt', Buffer.from('v2'), {
    mode: 'replace',
    maxBytes: 64,
    expectedSha256: sha('v1'),
  });
  t.match(fresh, { ok: true, bytes: 2, replaced: true });
  t.equal(fs.readFileSync(file, 'utf8'), 'v2');
  const anyBase = writeFile(f.handle, 'doc.txt', Buffer.from('v3'), { mode: 'replace', maxBytes: 64 });
  t.match(anyBase, { ok: true, replaced: true });
  t.same(tempLeftovers(f.root), []);
});

t.test('replace of an absent file: stale with an expected hash, created without one', async (t) => {
  const f = fixture(t);
  const withHash = writeFile(f.handle, 'new.txt', Buffer.from('x'), {
    mode: 'replace',
    maxBytes: 64,
    expectedSha256: sha('x'),
  });
  t.match(withHash, { ok: false, reason: 'stale_base' });
  t.notOk(fs.existsSync(path.join(f.root, 'new.txt')));
  t.match(writeFile(f.handle, 'new.txt', Buffer.from('x'), { mode: 'replace', maxBytes: 64 }), {
    ok: true,
    replaced: false,
  });
});

t.test('too_large: writes above the cap and reads of larger files', async (t) => {
  const f = fixture(t);
  t.match(writeFile(f.handle, 'big', Buffer.alloc(1025), create), { ok: false, reason: 'too_large' });
  t.notOk(fs.existsSync(path.join(f.root, 'big')));
  fs.writeFileSync(path.join(f.root, 'big'), Buffer.alloc(2048));
  t.match(readFile(f.handle, 'big', 2047), { ok: false, reason: 'too_large' });
  t.match(readFile(f.handle, 'big', 2048), { ok: true });
});

t.test('invalid_path names the rule', async (t) => {
  const bad = [
    '',
    '/etc/passwd',
    'a/../b',
    '..',
    './a',
    'a/.',
    'a//b',
    'a/',
    'a\0b',
    'a\nb',
    'a\u007fb',
    'x'.repeat(256),
    Array(65).fill('d').join('/'),
    Array(20).fill('y'.repeat(250)).join('/'),
    'bad\ud800',
  ];
  for (const p of bad)
    t.match(validateRelativePath(p), { ok: false, reason: 'invalid_path' }, JSON.stringify(p).slice(0, 40));
  t.match(validateRelativePath('a/b c/ü.png'), { ok: true, components: ['a', 'b c', 'ü.png'] });
  t.match(validateRelativePath('x'.repeat(255)), { ok: true });
  const f = fixture(t);
  t.match(writeFile(f.handle, '../outside/x', Buffer.from('x'), create), { ok: false, reason: 'invalid_path' });
  t.match(readFile(f.handle, '/etc/passwd', 1 << 20), { ok: false, reason: 'invalid_path' });
  t.same(fs.readdirSync(f.outside), []);
});

t.test('hard link to a file outside the root is alias_denied and the outside file is unchanged', async (t) => {
  const f = fixture(t);
  const secret = path.join(f.outside, 'secret');
  fs.writeFileSync(secret, 'host secret');
  fs.linkSync(secret, path.join(f.root, 'linked'));
  const base = sha('host secret');
  t.match(
    writeFile(f.handle, 'linked', Buffer.from('pwned'), { mode: 'replace', maxBytes: 64, expectedSha256: base }),
    {
      ok: false,
      reason: 'alias_denied',
    },
  );
  t.match(writeFile(f.handle, 'linked', Buffer.from('pwned'), { mode: 'replace', maxBytes: 64 }), {
    ok: false,
    reason: 'alias_denied',
  });
  t.match(writeFile(f.handle, 'linked', Buffer.from('pwned'), create), { ok: false, reason: 'alias_denied' });
  t.match(readFile(f.handle, 'linked', 64), { ok: false, reason: 'alias_denied' });
  t.equal(fs.readFileSync(secret, 'utf8'), 'host secret');
  t.equal(fs.statSync(secret).nlink, 2);
  t.same(tempLeftovers(f.root), []);
});

t.test('a FIFO at the leaf is refused without hanging', async (t) => {
  const f = fixture(t);
  execFileSync('mkfifo', [path.join(f.root, 'pipe')]);
  t.match(writeFile(f.handle, 'pipe', Buffer.from('x'), { mode: 'replace', maxBytes: 64 }), {
    ok: false,
    reason: 'alias_denied',
  });
  t.match(writeFile(f.handle, 'pipe', Buffer.from('x'), { mode: 'replace', maxBytes: 64, expectedSha256: sha('') }), {
    ok: false,
    reason: 'alias_denied',
  });
  t.match(writeFile(f.handle, 'pipe', Buffer.from('x'), create), { ok: false, reason: 'alias_denied' });
  t.match(readFile(f.handle, 'pipe', 64), { ok: false, reason: 'alias_denied' });
  t.ok(fs.lstatSync(path.join(f.root, 'pipe')).isFIFO());
});

t.test('sockets and devices at the leaf are alias_denied', async (t) => {
  const f = fixture(t);
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(path.join(f.root, 'sock'), resolve));
  t.teardown(() => server.close());
  execFileSync('mknod', [path.join(f.root, 'null'), 'c', '1', '3']);
  for (const leaf of ['sock', 'null']) {
    t.match(
      writeFile(f.handle, leaf, Buffer.from('x'), { mode: 'replace', maxBytes: 64 }),
      { ok: false, reason: 'alias_denied' },
      leaf,
    );
    t.match(readFile(f.handle, leaf, 64), { ok: false, reason: 'alias_denied' }, leaf);
  }
});

t.test('a symlinked intermediate directory is alias_denied and nothing lands outside', async (t) => {
  const f = fixture(t);
  fs.mkdirSync(path.join(f.root, 'a'));
  fs.symlinkSync(f.outside, path.join(f.root, 'a', 'b'));
  fs.symlinkSync('/etc', path.join(f.root, 'etc'));
  t.match(writeFile(f.handle, 'a/b/x', Buffer.from('x'), create), { ok: false, reason: 'alias_denied' });
  t.match(writeFile(f.handle, 'a/b/new/x', Buffer.from('x'), create), { ok: false, reason: 'alias_denied' });
  t.match(readFile(f.handle, 'etc/hostname', 1 << 20), { ok: false, reason: 'alias_denied' });
  t.same(fs.readdirSync(f.outside), []);
  t.same(tempLeftovers(f.root), []);
});

t.test('a symlink at the leaf is never followed', async (t) => {
  const f = fixture(t);
  const target = path.join(f.outside, 'target');
  fs.writeFileSync(target, 'outside');
  fs.symlinkSync(target, path.join(f.root, 'leaf'));
  fs.symlinkSync(path.join(f.outside, 'absent'), path.join(f.root, 'dangling'));
  t.match(writeFile(f.handle, 'leaf', Buffer.from('x'), create), { ok: false, reason: 'alias_denied' });
  t.match(writeFile(f.handle, 'leaf', Buffer.from('x'), { mode: 'replace', maxBytes: 64 }), {
    ok: false,
    reason: 'alias_denied',
  });
  t.match(writeFile(f.handle, 'dangling', Buffer.from('x'), create), { ok: false, reason: 'alias_denied' });
  t.match(readFile(f.handle, 'leaf', 64), { ok: false, reason: 'alias_denied' });
  t.equal(fs.readFileSync(target, 'utf8'), 'outside');
  t.same(fs.readdirSync(f.outside), ['target']);
});

t.test('a file where a directory is needed is not_a_directory; a missing one on read is not_found', async (t) => {
  const f = fixture(t);
  fs.writeFileSync(path.join(f.root, 'plain'), 'x');
  t.match(writeFile(f.handle, 'plain/x', Buffer.from('x'), create), { ok: false, reason: 'not_a_directory' });
  t.match(readFile(f.handle, 'plain/x', 64), { ok: false, reason: 'not_a_directory' });
  t.match(readFile(f.handle, 'nodir/x', 64), { ok: false, reason: 'not_found' });
  t.match(readFile(f.handle, 'nofile', 64), { ok: false, reason: 'not_found' });
  t.notOk(fs.existsSync(path.join(f.root, 'nodir')), 'reads never create directories');
});

t.test('readFile returns content and hash of a regular file', async (t) => {
  const f = fixture(t);
  fs.mkdirSync(path.join(f.root, 'out'));
  fs.writeFileSync(path.join(f.root, 'out', 'result.json'), '{"a":1}');
  t.match(readFile(f.handle, 'out/result.json', 64), { ok: true, sha256: sha('{"a":1}') });
  const read = readFile(f.handle, 'out/result.json', 64);
  t.equal(read.ok && read.data.toString(), '{"a":1}');
});

t.test('bad options name the field', async (t) => {
  const f = fixture(t);
  t.match(writeFile(f.handle, 'x', Buffer.from('x'), { mode: 'create', maxBytes: -1 }), {
    ok: false,
    reason: 'invalid_option',
    detail: /maxBytes/,
  });
  t.match(writeFile(f.handle, 'x', Buffer.from('x'), { mode: 'replace', maxBytes: 9, expectedSha256: 'abc' }), {
    ok: false,
    reason: 'invalid_option',
    detail: /expectedSha256/,
  });
  t.match(writeFile(f.handle, 'x', Buffer.from('x'), { mode: 'create', maxBytes: 9, fileMode: 0o4755 }), {
    ok: false,
    reason: 'invalid_option',
    detail: /fileMode/,
  });
});

t.test('openRoot refuses a symlinked or missing root', async (t) => {
  const f = fixture(t);
  fs.symlinkSync(f.root, path.join(f.dir, 'rootlink'));
  t.match(openRoot(path.join(f.dir, 'rootlink')), { ok: false, reason: 'alias_denied' });
  t.match(openRoot(path.join(f.dir, 'missing')), { ok: false, reason: 'not_found' });
  t.match(openRoot('relative/root'), { ok: false, reason: 'invalid_path' });
  t.match(openRoot(f.root + '\0/etc'), { ok: false, reason: 'invalid_path' });
});

t.test('a held directory moved away before publication is topology_changed, nothing published there', async (t) => {
  const f = fixture(t);
  const workerHome = path.join(f.dir, 'worker-home');
  fs.mkdirSync(workerHome);
  fs.mkdirSync(path.join(f.root, 'a', 'b'), { recursive: true });
  const sys = await import('../../../../supervisor/fs/sys.js');
  let moved = false;
  // The worker's move lands exactly between the temp file's fsync and the publication.
  const guard = await t.mockImport<typeof import('../../../../supervisor/fs/guard.js')>(
    '../../../../supervisor/fs/guard.js',
    {
      '../../../../supervisor/fs/sys.ts': {
        ...sys,
        fsync: (fd: number) => {
          const synced = sys.fsync(fd);
          if (!moved) {
            moved = true;
            fs.renameSync(path.join(f.root, 'a', 'b'), path.join(workerHome, 'b'));
            fs.symlinkSync(f.outside, path.join(f.root, 'a', 'b'));
          }
          return synced;
        },
      },
    },
  );
  const handle = guard.openRoot(f.root);
  if (!handle.ok) throw new Error(handle.detail);
  t.teardown(() => guard.closeRoot(handle));
  t.match(guard.writeFile(handle, 'a/b/x', Buffer.from('x'), create), { ok: false, reason: 'topology_changed' });
  t.ok(moved);
  t.same(fs.readdirSync(path.join(workerHome, 'b')), [], 'no file, not even the temp, left in the moved directory');
  t.same(fs.readdirSync(f.outside), []);
});
