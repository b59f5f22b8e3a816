/**
 * Workspace archives through a real `turnhost serve`, driven with curl and the CLI, in
 * separate_uid (root and non-root supervisors, the identity helper) and shared_uid (non-root
 * supervisor): a
 * tree made with GNU tar is uploaded and used by the workspace's next turn; the download is
 * listed by GNU `tar -t` and Python's `tarfile`, with a turn's symlink stored as a link and its
 * FIFO skipped; every entry kind but files and directories, absolute and `..` names, a link in
 * the workspace on an entry's way, truncated and corrupt archives and the byte cap are refused
 * naming the entry, the entries before it staying; a turn swapping a directory for a link to a
 * host directory while the archive is read many times never gets the host's file into it.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { plainUid, type ServedSupervisor } from '../support/served-supervisor.js';
import { curl, startServedSupervisors } from '../support/served-workspaces.js';
import { stopTapInjectingIntoChildren } from '../support/no-tap-inject.js';
import { until } from '../support/until.js';

stopTapInjectingIntoChildren();
// Three real supervisors, each with turns: on a loaded machine this takes minutes.
t.setTimeout(600_000);

const MAX_BYTES = 4 * 1024 * 1024;
const supervisors = await startServedSupervisors(t.teardown.bind(t), { first: 3_198_000, count: 8 }, [
  {
    label: 'separate_uid, root supervisor',
    name: 'arc-separate',
    helper: true,
    workspacesConfig: { maxBytes: MAX_BYTES },
  },
  {
    label: 'shared_uid, non-root supervisor',
    name: 'arc-user',
    uid: plainUid(31),
    workspacesConfig: { maxBytes: MAX_BYTES },
  },
  {
    label: 'separate_uid, non-root supervisor',
    name: 'arc-separate-user',
    helper: true,
    uid: plainUid(33),
    range: { first: 3_198_600, count: 8 },
    workspacesConfig: { maxBytes: MAX_BYTES },
  },
]);

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-archive-'));
// The non-root supervisor could reach a host directory here if it followed a link.
fs.chmodSync(scratch, 0o755);
t.teardown(() => fs.rmSync(scratch, { recursive: true, force: true }));

const archiveUrl = (id: string, dir?: string) =>
  `/api/workspaces/${id}/archive${dir === undefined ? '' : `?${new URLSearchParams({ path: dir }).toString()}`}`;
const putArchive = (supervisor: ServedSupervisor, id: string, dir: string, tar: Buffer) =>
  curl(supervisor, 'PUT', archiveUrl(id, dir), tar, 'application/x-tar');

/** A tar archive written by Python's tarfile from entry descriptions (any kind, any name). */
function pythonTar(
  entries: Array<{ name: string; type?: string; data?: string; link?: string; fill?: [string, number] }>,
): Buffer {
  const script = `
import io, json, sys, tarfile
out = io.BytesIO()
with tarfile.open(fileobj=out, mode='w', format=tarfile.PAX_FORMAT) as tar:
    for e in json.loads(sys.stdin.read()):
        info = tarfile.TarInfo(e['name'])
        info.type = {'file': tarfile.REGTYPE, 'dir': tarfile.DIRTYPE, 'symlink': tarfile.SYMTYPE,
                     'hardlink': tarfile.LNKTYPE, 'fifo': tarfile.FIFOTYPE, 'chardev': tarfile.CHRTYPE,
                     'blockdev': tarfile.BLKTYPE}[e.get('type', 'file')]
        info.linkname = e.get('link', '')
        info.mode = 0o755 if info.type == tarfile.DIRTYPE else 0o644
        data = (e['fill'][0] * e['fill'][1] if 'fill' in e else e.get('data', '')).encode()
        info.size = len(data) if info.type == tarfile.REGTYPE else 0
        tar.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
sys.stdout.buffer.write(out.getvalue())
`;
  return execFileSync('python3', ['-c', script], { input: JSON.stringify(entries), maxBuffer: 64 * 1024 * 1024 });
}

/** Names (with type letter) Python's tarfile reads from an archive, and one member's content. */
function pythonList(tar: Buffer, member?: string): { names: string[]; content: string | null } {
  const script = `
import io, json, sys, tarfile
with tarfile.open(fileobj=io.BytesIO(sys.stdin.buffer.read()), mode='r:') as tar:
    names = [('d' if m.isdir() else 'l' if m.issym() else 'f' if m.isfile() else '?') + ' ' + m.name
             + (' -> ' + m.linkname if m.issym() else '') for m in tar.getmembers()]
    content = None
    if len(sys.argv) > 1:
        content = tar.extractfile(sys.argv[1]).read().decode()
print(json.dumps({'names': names, 'content': content}))
`;
  const run = spawnSync('python3', ['-c', script, ...(member === undefined ? [] : [member])], { input: tar });
  if (run.status !== 0) throw new Error(`tarfile: ${run.stderr.toString('utf8')}`);
  return JSON.parse(run.stdout.toString('utf8'));
}

async function events(supervisor: ServedSupervisor, kind: string): Promise<any[]> {
  const answer = await curl(supervisor, 'GET', `/api/governance/events?kind=${kind}&order=desc`);
  return answer.json.events;
}

const LONG_NAME = `${'n'.repeat(120)}/${'m'.repeat(110)}.txt`;

for (const [name, supervisor] of supervisors) {
  t.test(name, async (t) => {
    // Through the supervisor's own mount namespace: a non-root supervisor runs in one of its own,
    // and a capped workspace's image is mounted there, over an empty directory on the host.
    const root = path.join(`/proc/${supervisor.pid}/root`, path.dirname(supervisor.dataDir), 'workspaces');
    const id = 'archive';
    const run = (script: string) => supervisor.cli(['run', '--workspace', id, '--', '/bin/sh', '-c', script]);
    t.equal((await supervisor.cli(['workspace', 'create', id])).code, 0);
    const shown = JSON.parse((await supervisor.cli(['workspace', 'show', id, '--json'])).stdout).workspace;
    const owner = shown.uid ?? supervisor.uid;

    t.test('a tree made with GNU tar is uploaded; the next turn uses it', async (t) => {
      const tree = path.join(scratch, `${supervisor.name}-tree`);
      fs.mkdirSync(path.join(tree, 'src/lib'), { recursive: true });
      fs.mkdirSync(path.join(tree, 'empty'));
      fs.mkdirSync(path.join(tree, path.dirname(LONG_NAME)));
      fs.writeFileSync(path.join(tree, 'src/main.py'), 'print("main")\n');
      fs.writeFileSync(path.join(tree, 'src/lib/util.py'), 'X = 1\n');
      fs.writeFileSync(path.join(tree, 'run.sh'), '#!/bin/sh\necho ran\n', { mode: 0o755 });
      fs.writeFileSync(path.join(tree, LONG_NAME), 'long\n');
      for (const format of ['gnu', 'pax']) {
        const tar = execFileSync('tar', [`--format=${format}`, '-C', tree, '-cf', '-', '.']);
        const put = await putArchive(supervisor, id, `up-${format}/tree`, tar);
        t.equal(put.status, 200, put.body);
        t.same(put.json, { path: `up-${format}/tree`, files: 4, directories: 6, bytes: 14 + 6 + 19 + 5 });
      }
      const dir = path.join(root, id, 'up-gnu/tree/src');
      t.equal(fs.statSync(dir).uid, owner, 'directories are the workspace uid');
      t.equal(fs.statSync(dir).mode & 0o7777, 0o2770, '02770');
      const turn = await run(
        `cd up-gnu/tree && python3 src/main.py && ./run.sh && cat ${LONG_NAME} && ls empty && ` +
          'echo new > src/lib/new.py && rm src/main.py && ls src src/lib && cmp run.sh ../../up-pax/tree/run.sh',
      );
      t.equal(turn.code, 0, turn.stderr);
      t.equal(turn.stdout, 'main\nran\nlong\nsrc:\nlib\n\nsrc/lib:\nnew.py\nutil.py\n');
      const [extracted] = await events(supervisor, 'workspace_archive_extracted');
      t.match(extracted.payload, { workspaceId: id, path: 'up-pax/tree', files: 4, directories: 6 });
    });

    t.test('the download is listed by GNU tar and Python; links stored, not followed', async (t) => {
      const made = await run('cd up-gnu/tree && ln -s /etc/passwd pw && mkfifo pipe && echo done');
      t.equal(made.code, 0, made.stderr);
      const got = await curl(supervisor, 'GET', archiveUrl(id, 'up-gnu/tree'));
      t.equal(got.status, 200);
      const file = path.join(scratch, `${supervisor.name}-down.tar`);
      fs.writeFileSync(file, got.raw);
      const listed = execFileSync('tar', ['-tvf', file], { encoding: 'utf8' });
      t.match(listed, /^l\S+ .* pw -> \/etc\/passwd$/m, 'the symlink is a symlink entry');
      t.match(listed, new RegExp(`${LONG_NAME.replace(/\./g, '\\.')}$`, 'm'), 'a long name (pax)');
      t.notMatch(listed, /pipe/, 'the FIFO is skipped');
      const python = pythonList(got.raw, 'src/lib/util.py');
      t.same(python.names.sort(), [
        'd empty',
        `d ${path.dirname(LONG_NAME)}`,
        'd src',
        'd src/lib',
        `f ${LONG_NAME}`,
        'f run.sh',
        'f src/lib/new.py',
        'f src/lib/util.py',
        'l pw -> /etc/passwd',
      ]);
      t.equal(python.content, 'X = 1\n');
      t.notOk(got.raw.includes(fs.readFileSync('/etc/passwd')), 'the link target is not in it');
      const [read] = await events(supervisor, 'workspace_archive_read');
      t.match(read.payload, { path: 'up-gnu/tree', complete: true, files: 4, symlinks: 1, skipped: 1 });

      const whole = await curl(supervisor, 'GET', archiveUrl(id));
      t.ok(pythonList(whole.raw).names.includes('f up-pax/tree/src/main.py'), 'no path: the whole workspace');
      const pulled = path.join(scratch, `${supervisor.name}-pulled.tar`);
      const cli = await supervisor.cli(['workspace', 'files', 'pull', id, 'up-pax', pulled]);
      t.equal(cli.code, 0, cli.stderr);
      t.ok(pythonList(fs.readFileSync(pulled)).names.includes('f tree/run.sh'), 'the CLI pulls');
      const linkDir = await curl(supervisor, 'GET', archiveUrl(id, 'up-gnu/tree/pw'));
      t.equal(linkDir.status, 409, 'a link as the directory is refused');
      t.equal(linkDir.json.code, 'alias_denied');
    });

    t.test('every entry kind but files and directories is refused, naming it; the entries before stay', async (t) => {
      const cases: Array<[string, { name: string; type?: string; link?: string }]> = [
        ['symlink', { name: 'bad', type: 'symlink', link: '/etc' }],
        ['hard link', { name: 'bad', type: 'hardlink', link: 'first.txt' }],
        ['FIFO', { name: 'bad', type: 'fifo' }],
        ['device', { name: 'bad', type: 'chardev' }],
        ['device', { name: 'bad', type: 'blockdev' }],
        ['absolute', { name: '/tmp/turnhost-archive-abs' }],
        ['..', { name: '../../escaped' }],
        ['..', { name: 'sub/../../escaped' }],
      ];
      for (const [i, [kind, entry]] of cases.entries()) {
        const dir = `refused/${i}`;
        const tar = pythonTar([{ name: 'first.txt', data: 'first' }, entry, { name: 'after.txt', data: 'after' }]);
        const put = await putArchive(supervisor, id, dir, tar);
        t.equal(put.status, 400, `${kind}: ${put.body}`);
        t.equal(put.json.code, 'invalid_archive');
        t.equal(put.json.field, 'body');
        t.match(put.json.error, `entry 2 ${JSON.stringify(entry.name)}`, `${kind}: the entry is named`);
        t.equal(fs.readFileSync(path.join(root, id, dir, 'first.txt'), 'utf8'), 'first', 'the entry before stays');
        t.notOk(fs.existsSync(path.join(root, id, dir, 'after.txt')), 'nothing after it');
        const [refused] = await events(supervisor, 'workspace_archive_refused');
        t.match(refused.payload, { path: dir, reason: 'invalid_archive', entry: entry.name, files: 1 });
      }
      t.notOk(fs.existsSync(path.join(root, 'escaped')) || fs.existsSync(path.join(root, id, 'escaped')));
      t.notOk(fs.existsSync('/tmp/turnhost-archive-abs'));
    });

    t.test("a link in the workspace on an entry's way is refused; nothing lands outside", async (t) => {
      const outside = fs.mkdtempSync(path.join(scratch, 'outside-'));
      fs.chmodSync(outside, 0o777);
      t.equal((await run(`mkdir -p via && ln -s ${outside} via/out && echo ok`)).code, 0);
      const put = await putArchive(supervisor, id, 'via', pythonTar([{ name: 'out/evil', data: 'x' }]));
      t.equal(put.status, 400, put.body);
      t.match(put.json.error, 'entry 1 "out/evil"');
      const into = await putArchive(supervisor, id, 'via/out', pythonTar([{ name: 'evil', data: 'x' }]));
      t.equal(into.status, 409, 'a link as the directory itself');
      t.equal(into.json.code, 'alias_denied');
      t.same(fs.readdirSync(outside), [], 'nothing written outside');
    });

    t.test('truncated and corrupt archives are refused naming the problem', async (t) => {
      const tar = pythonTar([{ name: 'whole.txt', data: 'x'.repeat(2000) }]);
      const cut = await putArchive(supervisor, id, 'cut', tar.subarray(0, 1024 + 700));
      t.equal(cut.status, 400);
      t.match(cut.json.error, /truncated: entry 1: the content ends after/);
      t.notOk(fs.existsSync(path.join(root, id, 'cut/whole.txt')), 'a cut file is not written');
      const corrupt = Buffer.from(tar);
      corrupt[10] = 0x41; // in the header's name field: the checksum no longer matches
      const bad = await putArchive(supervisor, id, 'bad', corrupt);
      t.equal(bad.status, 400);
      t.match(bad.json.error, /checksum mismatch/);
      const junk = await putArchive(supervisor, id, 'junk', Buffer.alloc(512, 0x61));
      t.equal(junk.status, 400);
    });

    t.test('the byte cap: the entry over it is refused, the ones before stay', async (t) => {
      const capId = 'capped';
      t.equal((await supervisor.cli(['workspace', 'create', capId])).code, 0);
      const big = pythonTar([
        { name: 'one.bin', fill: ['a', 2 * 1024 * 1024] },
        { name: 'two.bin', fill: ['b', 3 * 1024 * 1024] },
      ]);
      const put = await putArchive(supervisor, capId, '.', big);
      t.equal(put.status, 409, put.body);
      t.equal(put.json.code, 'workspace_full');
      t.match(put.json.error, /entry 2 "two\.bin".*workspaces\.maxBytes/);
      t.equal(fs.statSync(path.join(root, capId, 'one.bin')).size, 2 * 1024 * 1024);
      t.notOk(fs.existsSync(path.join(root, capId, 'two.bin')));
    });

    t.test('a turn swapping a directory for a link to a host directory: the host file never appears', async (t) => {
      const host = fs.mkdtempSync(path.join(scratch, 'host-'));
      fs.chmodSync(host, 0o755);
      const marker = `marker-${path.basename(host)}`;
      fs.writeFileSync(path.join(host, marker), 'HOST-SECRET-CONTENT\n', { mode: 0o644 });
      const swapper = `
import os
os.makedirs('race/d', exist_ok=True)
open('race/d/inner', 'w').write('inner')
os.symlink(${JSON.stringify(host)}, 'race/d.lnk')
print('ready', flush=True)
swaps = 0
while not os.path.exists('race-stop'):
    os.rename('race/d', 'race/d.dir'); os.rename('race/d.lnk', 'race/d')
    os.rename('race/d', 'race/d.lnk'); os.rename('race/d.dir', 'race/d')
    swaps += 1
print(swaps)
`;
      const turnState = { settled: false };
      const turn = supervisor.cli(['run', '--workspace', id, '--', 'python3', '-c', swapper]).finally(() => {
        turnState.settled = true;
      });
      // The turn has made its tree once its link is there (or it ended early: its result says why).
      t.ok(
        await until(() => turnState.settled || fs.existsSync(path.join(root, id, 'race/d.lnk')), 120_000),
        'the turn made its tree',
      );
      let sawLink = 0;
      for (let i = 0; i < 40; i++) {
        const got = await curl(supervisor, 'GET', archiveUrl(id, 'race'));
        t.equal(got.status, 200);
        const names = pythonList(got.raw).names;
        if (names.some((n) => n.startsWith('l d '))) sawLink += 1;
        if (got.raw.includes(marker) || got.raw.includes('HOST-SECRET-CONTENT')) {
          t.fail(`archive ${i} holds the host's file: ${names.join(', ')}`);
          break;
        }
      }
      // At the top: a non-root supervisor cannot write in a directory the turn made 0755.
      const stop = await curl(supervisor, 'PUT', `/api/workspaces/${id}/files?path=race-stop`, '');
      t.equal(stop.status, 201, stop.body);
      const ended = await turn;
      t.equal(ended.code, 0, ended.stderr);
      t.ok(Number(ended.stdout.split('\n')[1]) > 0, 'the turn swapped');
      t.comment(`swaps ${ended.stdout.split('\n')[1]}, archives with d as a link: ${sawLink}`);
    });

    t.test('the CLI pushes an archive', async (t) => {
      const tar = pythonTar([{ name: 'pushed/a.txt', data: 'pushed' }]);
      const file = path.join(scratch, `${supervisor.name}-push.tar`);
      fs.writeFileSync(file, tar);
      const pushed = await supervisor.cli(['workspace', 'files', 'push', id, 'cli', file]);
      t.equal(pushed.code, 0, pushed.stderr);
      t.equal(pushed.stdout, 'extracted into cli: 1 files, 2 new directories, 6 bytes\n');
      t.equal((await run('cat cli/pushed/a.txt')).stdout, 'pushed');
    });

    t.same(supervisor.contractProblems, [], 'every answer matched the API document');
  });
}
