/**
 * Attack: a worker (its own uid, owning the tree) swaps directories and leaves for symlinks to
 * host directories in a tight loop while the supervisor writes into the tree through the fs
 * guard. The guard must never put a byte outside the root, not even a temporary file, and
 * every refusal must be one of its typed reasons.
 */
import t from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { closeRoot, openRoot, writeFile, type FsRefusal } from '../../supervisor/fs/guard.js';

const ATTACKER_UID = 65021;
const GUARD_WRITES = 3000;
const ATTACKER_MAX_ROUNDS = 5_000_000;

const RACE_REFUSALS: readonly FsRefusal[] = [
  'alias_denied',
  'topology_changed',
  'stale_base',
  'exists',
  'not_a_directory',
];

/**
 * Runs as the worker uid. Each round swaps `a` and then `a/b` with a symlink to an outside
 * sentinel directory (rename dir away, rename a ready symlink into its place, and back), and
 * re-plants symlinks to the sentinel file at leaf names the guard is about to use. Every step
 * ignores errors: the guard may be recreating what was just moved.
 */
const ATTACKER = String.raw`
const fs = require('node:fs');
const [root, sentinelDir, sentinelFile, maxRounds] = process.argv.slice(1);
const p = (...parts) => [root, ...parts].join('/');
const attempt = (fn) => { try { fn(); } catch {} };
const swap = (dir, link) => {
  attempt(() => fs.symlinkSync(sentinelDir, link));
  attempt(() => fs.renameSync(dir, dir + '.away'));
  attempt(() => fs.renameSync(link, dir));
  attempt(() => fs.renameSync(dir, link));
  attempt(() => fs.renameSync(dir + '.away', dir));
};
process.stdout.write('ready\n');
let rounds = 0;
for (; rounds < Number(maxRounds); rounds++) {
  swap(p('a'), p('a.link'));
  swap(p('a', 'b'), p('a', 'b.link'));
  attempt(() => fs.symlinkSync(sentinelFile, p('a', 'b', 'r')));
  attempt(() => fs.unlinkSync(p('a', 'b', 'r')));
  attempt(() => fs.symlinkSync(sentinelFile, p('a', 'f-' + (rounds % 4000))));
}
`;

interface DirFacts {
  entries: string[];
  mtimeMs: number;
  ctimeMs: number;
}

function facts(dir: string): DirFacts {
  const st = fs.statSync(dir);
  return { entries: fs.readdirSync(dir).sort(), mtimeMs: st.mtimeMs, ctimeMs: st.ctimeMs };
}

function startAttacker(root: string, sentinelDir: string, sentinelFile: string): Promise<ChildProcess> {
  const child = spawn(
    process.execPath,
    ['-e', ATTACKER, root, sentinelDir, sentinelFile, String(ATTACKER_MAX_ROUNDS)],
    {
      uid: ATTACKER_UID,
      gid: ATTACKER_UID,
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  return new Promise((resolve, reject) => {
    child.once('error', reject);
    child.stdout.once('data', () => resolve(child));
  });
}

t.test('directory and symlink swaps by a worker uid never redirect a guarded write', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fs-race-'));
  fs.chmodSync(dir, 0o711);
  const root = path.join(dir, 'root');
  const sentinelDir = path.join(dir, 'sentinel');
  const sentinelFile = path.join(dir, 'sentinel-file');
  fs.mkdirSync(path.join(root, 'a', 'b'), { recursive: true });
  for (const p of [root, path.join(root, 'a'), path.join(root, 'a', 'b')]) fs.chownSync(p, ATTACKER_UID, ATTACKER_UID);
  fs.mkdirSync(sentinelDir, { mode: 0o755 });
  fs.writeFileSync(sentinelFile, 'host file', { mode: 0o644 });
  const handle = openRoot(root);
  if (!handle.ok) throw new Error(handle.detail);
  t.teardown(() => {
    closeRoot(handle);
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const sentinelBefore = facts(sentinelDir);
  const topBefore = facts(dir).entries;

  const attacker = await startAttacker(root, sentinelDir, sentinelFile);
  const exited = new Promise<void>((resolve) => attacker.once('exit', () => resolve()));
  const outcomes = new Map<string, number>();
  const unexpected: string[] = [];
  for (let i = 0; i < GUARD_WRITES; i++) {
    const target = i % 3 === 0 ? `a/b/r` : i % 3 === 1 ? `a/b/f-${i}` : `a/f-${i}`;
    const mode = i % 3 === 0 ? 'replace' : 'create';
    const result = writeFile(handle, target, Buffer.from(`write ${i}\n`), { mode, maxBytes: 64 });
    const key = result.ok ? 'ok' : result.reason;
    outcomes.set(key, (outcomes.get(key) ?? 0) + 1);
    if (!result.ok && !RACE_REFUSALS.includes(result.reason))
      unexpected.push(`${target}: ${result.reason} ${result.detail}`);
  }
  attacker.kill('SIGKILL');
  await exited;

  t.comment(`outcomes: ${JSON.stringify(Object.fromEntries(outcomes))}`);
  t.same(unexpected, [], 'every refusal is a typed race refusal');
  t.ok((outcomes.get('ok') ?? 0) > 0, 'writes still succeed under attack');
  const refused = GUARD_WRITES - (outcomes.get('ok') ?? 0);
  t.ok(refused > 0, 'the attack was live: some writes were refused');
  t.same(facts(sentinelDir), sentinelBefore, 'the outside directory never gained an entry, not even a temporary one');
  t.equal(fs.readFileSync(sentinelFile, 'utf8'), 'host file', 'the outside file is unchanged');
  t.equal(fs.statSync(sentinelFile).nlink, 1);
  t.same(facts(dir).entries, topBefore, 'nothing appeared beside the root');
});
