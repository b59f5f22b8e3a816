import t, { type Test } from 'tap';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { closeRoot, readFile } from '../../../../supervisor/fs/guard.js';
import {
  createTurnTemp,
  measureTurnTemp,
  purgeTurnTemp,
  turnTempPurgePayload,
} from '../../../../supervisor/fs/turn-temp.js';

const WORKER_UID = 65011;

interface Snapshot {
  [rel: string]: { mode: number; size: number; nlink: number; mtimeMs: number; content?: string };
}

/** Everything under `dir` (not following links), with file contents. */
function snapshot(dir: string): Snapshot {
  const out: Snapshot = {};
  for (const rel of fs.readdirSync(dir, { recursive: true }) as string[]) {
    const st = fs.lstatSync(path.join(dir, rel));
    out[rel] = {
      mode: st.mode,
      size: st.size,
      nlink: st.nlink,
      mtimeMs: st.mtimeMs,
      ...(st.isFile() ? { content: fs.readFileSync(path.join(dir, rel), 'utf8') } : {}),
    };
  }
  return out;
}

function etcFacts(): Record<string, { mtimeMs: number; size: number; ino: number }> {
  const facts: Record<string, { mtimeMs: number; size: number; ino: number }> = {};
  for (const name of ['passwd', 'hostname', 'hosts', 'group']) {
    const st = fs.lstatSync(path.join('/etc', name));
    facts[name] = { mtimeMs: st.mtimeMs, size: st.size, ino: st.ino };
  }
  facts['.'] = {
    mtimeMs: fs.statSync('/etc').mtimeMs,
    size: fs.readdirSync('/etc').length,
    ino: fs.statSync('/etc').ino,
  };
  return facts;
}

function setup(t: Test): { dir: string; parent: string; outside: string } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turn-temp-'));
  const parent = path.join(dir, 'temps');
  const outside = path.join(dir, 'outside');
  fs.mkdirSync(parent, { mode: 0o700 });
  fs.mkdirSync(path.join(outside, 'deep'), { recursive: true });
  fs.writeFileSync(path.join(outside, 'secret'), 'host secret');
  fs.writeFileSync(path.join(outside, 'deep', 'keep'), 'keep me');
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  return { dir, parent, outside };
}

t.test('createTurnTemp: 0700, owned by the worker uid, held', async (t) => {
  const { parent } = setup(t);
  const temp = createTurnTemp({ parentDir: parent, name: 'turn-1', uid: WORKER_UID, gid: WORKER_UID });
  if (!temp.ok) throw new Error(temp.detail);
  t.teardown(() => closeRoot(temp));
  const st = fs.statSync(path.join(parent, 'turn-1'));
  t.equal(st.uid, WORKER_UID);
  t.equal(st.gid, WORKER_UID);
  t.equal(st.mode & 0o777, 0o700);
  t.match(createTurnTemp({ parentDir: parent, name: 'turn-1', uid: WORKER_UID, gid: WORKER_UID }), {
    ok: false,
    reason: 'exists',
  });
  t.match(createTurnTemp({ parentDir: parent, name: '../x', uid: WORKER_UID, gid: WORKER_UID }), {
    ok: false,
    reason: 'invalid_path',
  });
});

t.test('createTurnTemp refuses a parent a worker could write', async (t) => {
  const { dir } = setup(t);
  const open = path.join(dir, 'open');
  fs.mkdirSync(open);
  fs.chmodSync(open, 0o1777);
  t.match(createTurnTemp({ parentDir: open, name: 'turn', uid: WORKER_UID, gid: WORKER_UID }), {
    ok: false,
    reason: 'alias_denied',
  });
  const foreign = path.join(dir, 'foreign');
  fs.mkdirSync(foreign, { mode: 0o755 });
  fs.chownSync(foreign, WORKER_UID, WORKER_UID);
  t.match(createTurnTemp({ parentDir: foreign, name: 'turn', uid: WORKER_UID, gid: WORKER_UID }), {
    ok: false,
    reason: 'alias_denied',
  });
  fs.symlinkSync(open, path.join(dir, 'link'));
  t.match(createTurnTemp({ parentDir: path.join(dir, 'link'), name: 'turn', uid: WORKER_UID, gid: WORKER_UID }), {
    ok: false,
    reason: 'alias_denied',
  });
});

t.test('purge: symlinks to /etc and outside, a hard link, a fifo, a socket, nested dirs', async (t) => {
  const { parent, outside } = setup(t);
  const temp = createTurnTemp({ parentDir: parent, name: 'turn-2', uid: WORKER_UID, gid: WORKER_UID });
  if (!temp.ok) throw new Error(temp.detail);
  const tree = path.join(parent, 'turn-2');
  fs.mkdirSync(path.join(tree, 'a/b/c'), { recursive: true });
  fs.writeFileSync(path.join(tree, 'a/one'), '12345');
  fs.writeFileSync(path.join(tree, 'a/b/c/two'), 'abc');
  fs.writeFileSync(path.join(tree, 'top'), '');
  fs.symlinkSync('/etc', path.join(tree, 'etc'));
  fs.symlinkSync('/etc/passwd', path.join(tree, 'a/passwd'));
  fs.symlinkSync(outside, path.join(tree, 'a/b/outside-dir'));
  fs.symlinkSync(path.join(outside, 'secret'), path.join(tree, 'secret-link'));
  fs.linkSync(path.join(outside, 'secret'), path.join(tree, 'a/b/hardlink'));
  execFileSync('mkfifo', [path.join(tree, 'a/fifo')]);
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(path.join(tree, 'sock'), resolve));
  t.teardown(() => server.close());
  t.ok(fs.lstatSync(path.join(tree, 'sock')).isSocket());
  fs.chownSync(tree, WORKER_UID, WORKER_UID);

  const outsideBefore = snapshot(outside);
  const etcBefore = etcFacts();

  t.match(
    readFile(temp, 'a/one', 64),
    { ok: true },
    'the supervisor reads what the worker produced through the held fd',
  );
  t.match(readFile(temp, 'a/b/hardlink', 64), { ok: false, reason: 'alias_denied' });

  const measured = measureTurnTemp(temp);
  t.match(measured, { files: 3, bytes: 8, linkedFiles: 1, specialFiles: 6, directories: 3, errorCount: 0 });

  const purge = purgeTurnTemp(temp);
  t.match(purge, {
    files: 3,
    bytes: 8,
    linkedFiles: 1,
    specialFiles: 6,
    directories: 3,
    outcome: 'purged',
    errorCount: 0,
  });
  t.same(turnTempPurgePayload(purge), { files: 3, bytes: 8, linkedFiles: 1, specialFiles: 6, outcome: 'purged' });
  t.same(fs.readdirSync(tree), [], 'everything beneath the root is gone');
  t.ok(fs.statSync(tree).isDirectory(), 'the root stays without removeRoot');

  const outsideAfter = snapshot(outside);
  t.equal(outsideAfter['secret']?.nlink, 1, 'the hard link name was unlinked');
  t.same(
    { ...outsideAfter, secret: { ...outsideAfter['secret'], nlink: 2 } },
    outsideBefore,
    'outside unchanged apart from the link count',
  );
  t.equal(fs.readFileSync(path.join(outside, 'secret'), 'utf8'), 'host secret');
  t.same(etcFacts(), etcBefore, 'nothing under /etc was touched');

  const again = purgeTurnTemp(temp, { removeRoot: true });
  t.match(again, { files: 0, outcome: 'purged' });
  t.notOk(fs.existsSync(tree), 'removeRoot removes the held directory');
});

t.test('removeRoot refuses when the path no longer names the held directory', async (t) => {
  const { parent } = setup(t);
  const temp = createTurnTemp({ parentDir: parent, name: 'turn-3', uid: WORKER_UID, gid: WORKER_UID });
  if (!temp.ok) throw new Error(temp.detail);
  fs.renameSync(path.join(parent, 'turn-3'), path.join(parent, 'moved'));
  fs.mkdirSync(path.join(parent, 'turn-3'));
  fs.writeFileSync(path.join(parent, 'turn-3', 'other'), 'not ours');
  fs.writeFileSync(path.join(parent, 'moved', 'ours'), 'x');
  const purge = purgeTurnTemp(temp, { removeRoot: true });
  t.match(purge, { files: 1, outcome: 'partial', errorCount: 1 });
  t.equal(fs.readFileSync(path.join(parent, 'turn-3', 'other'), 'utf8'), 'not ours');
  t.same(fs.readdirSync(path.join(parent, 'moved')), [], 'the held directory was still purged');
});
