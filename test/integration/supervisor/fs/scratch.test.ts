import t, { type Test } from 'tap';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { createMemoryLogger } from '../../../../core/log.js';
import { openEventStore } from '../../../../supervisor/events/store.js';
import type { EventStore } from '../../../../supervisor/events/types.js';
import type { AppendResult, EventInput, EventSink } from '../../../../core/events.js';
import { pruneScratch, startScratchPruner } from '../../../../supervisor/fs/scratch.js';

const KIB = 1024;

function setup(t: Test): { scratch: string; outside: string; store: EventStore } {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fs-scratch-'));
  const scratch = path.join(dir, 'scratch');
  const outside = path.join(dir, 'outside');
  fs.mkdirSync(scratch);
  fs.mkdirSync(outside);
  const store = openEventStore({
    databasePath: path.join(dir, 'events.db'),
    fallbackLogPath: path.join(dir, 'events.fallback.log'),
    unboundRetentionDays: 30,
    logger: createMemoryLogger().logger,
  });
  t.teardown(() => {
    store.close();
    fs.rmSync(dir, { recursive: true, force: true });
  });
  return { scratch, outside, store };
}

/** A file of `kib` KiB whose mtime is `age` seconds in the past. */
function put(dir: string, rel: string, kib: number, age: number): void {
  const file = path.join(dir, rel);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, Buffer.alloc(kib * KIB, 1));
  const when = new Date(Date.now() - age * 1000);
  fs.utimesSync(file, when, when);
}

function remaining(dir: string): string[] {
  return (fs.readdirSync(dir, { recursive: true }) as string[])
    .filter((p) => fs.lstatSync(path.join(dir, p)).isFile())
    .sort();
}

t.test('above the cap: oldest unpinned files go, pinned survive, one scratch_overage event', async (t) => {
  const { scratch, store } = setup(t);
  put(scratch, 'pinned/oldest.png', 4, 600);
  put(scratch, 'masks/old.png', 4, 500);
  put(scratch, 'masks/nested/mid.png', 4, 400);
  put(scratch, 'new.png', 4, 300);
  put(scratch, 'newest.png', 4, 200);
  const { logger } = createMemoryLogger();
  const result = pruneScratch({
    dir: scratch,
    capBytes: 10 * KIB,
    isPinned: (rel) => rel.startsWith('pinned/'),
    sink: store,
    logger,
  });
  t.match(result, {
    ok: true,
    bytes: 20 * KIB,
    files: 5,
    pinnedFiles: 1,
    pinnedBytes: 4 * KIB,
    overageBytes: 10 * KIB,
    removedFiles: 3,
    removedBytes: 12 * KIB,
    remainingBytes: 8 * KIB,
    underCap: true,
    event: 'database',
    errorCount: 0,
  });
  t.same(remaining(scratch), ['newest.png', 'pinned/oldest.png']);
  const page = store.query({ kind: 'scratch_overage' });
  t.ok(page.ok);
  if (!page.ok) return;
  t.equal(page.events.length, 1);
  t.match(page.events[0], {
    kind: 'scratch_overage',
    actor: 'server',
    sessionId: null,
    turnId: null,
    model: null,
    profile: null,
    payload: { bytes: 20 * KIB, pinnedFiles: 1, pinnedBytes: 4 * KIB, overageBytes: 10 * KIB },
  });
});

t.test('within the cap nothing is removed and no event is recorded', async (t) => {
  const { scratch, store } = setup(t);
  put(scratch, 'a', 4, 100);
  put(scratch, 'b', 4, 50);
  const result = pruneScratch({
    dir: scratch,
    capBytes: 8 * KIB,
    isPinned: () => false,
    sink: store,
    logger: createMemoryLogger().logger,
  });
  t.match(result, { ok: true, bytes: 8 * KIB, overageBytes: 0, removedFiles: 0, event: 'not_needed', underCap: true });
  t.same(remaining(scratch), ['a', 'b']);
  const page = store.query({ kind: 'scratch_overage' });
  t.equal(page.ok && page.events.length, 0);
});

t.test('pinned files alone above the cap: all survive, the area says it stays over', async (t) => {
  const { scratch, store } = setup(t);
  put(scratch, 'p1', 4, 100);
  put(scratch, 'p2', 4, 50);
  put(scratch, 'u', 1, 500);
  const { logger, lines } = createMemoryLogger();
  const result = pruneScratch({
    dir: scratch,
    capBytes: 4 * KIB,
    isPinned: (rel) => rel.startsWith('p'),
    sink: store,
    logger,
  });
  t.match(result, { ok: true, removedFiles: 1, remainingBytes: 8 * KIB, underCap: false, event: 'database' });
  t.same(remaining(scratch), ['p1', 'p2']);
  t.ok(lines.some((l) => l.includes('stays above its cap')));
});

t.test('a throwing isPinned keeps the file', async (t) => {
  const { scratch, store } = setup(t);
  put(scratch, 'a', 4, 100);
  const result = pruneScratch({
    dir: scratch,
    capBytes: 0,
    isPinned: () => {
      throw new Error('policy unavailable');
    },
    sink: store,
    logger: createMemoryLogger().logger,
  });
  t.match(result, { ok: true, removedFiles: 0, pinnedFiles: 1 });
  t.same(remaining(scratch), ['a']);
});

t.test('links in scratch are never followed: outside files untouched, not counted', async (t) => {
  const { scratch, outside, store } = setup(t);
  fs.writeFileSync(path.join(outside, 'big'), Buffer.alloc(64 * KIB));
  fs.mkdirSync(path.join(outside, 'dir'));
  fs.writeFileSync(path.join(outside, 'dir', 'old'), Buffer.alloc(8 * KIB));
  fs.utimesSync(path.join(outside, 'dir', 'old'), new Date(0), new Date(0));
  fs.symlinkSync(path.join(outside, 'big'), path.join(scratch, 'big-link'));
  fs.symlinkSync(path.join(outside, 'dir'), path.join(scratch, 'dir-link'));
  put(scratch, 'own', 2, 10);
  const result = pruneScratch({
    dir: scratch,
    capBytes: 0,
    isPinned: () => false,
    sink: store,
    logger: createMemoryLogger().logger,
  });
  t.match(result, { ok: true, bytes: 2 * KIB, files: 1, removedFiles: 1 });
  t.equal(fs.statSync(path.join(outside, 'big')).size, 64 * KIB);
  t.equal(fs.statSync(path.join(outside, 'dir', 'old')).size, 8 * KIB);
  t.ok(fs.lstatSync(path.join(scratch, 'big-link')).isSymbolicLink());
});

t.test('a failed event append is reported, the prune still happens', async (t) => {
  const { scratch } = setup(t);
  put(scratch, 'a', 4, 100);
  const refusing: EventSink = {
    append: (): AppendResult => ({ ok: false, reason: 'invalid_event', detail: 'simulated' }),
  };
  const { logger, lines } = createMemoryLogger();
  const result = pruneScratch({ dir: scratch, capBytes: 0, isPinned: () => false, sink: refusing, logger });
  t.match(result, { ok: true, removedFiles: 1, event: 'failed' });
  t.ok(lines.some((l) => l.includes('scratch_overage event refused')));
  const fallback: EventSink = {
    append: (): AppendResult => ({ ok: true, stored: 'fallback', detail: 'database busy' }),
  };
  put(scratch, 'b', 4, 100);
  t.match(pruneScratch({ dir: scratch, capBytes: 0, isPinned: () => false, sink: fallback, logger }), {
    ok: true,
    event: 'fallback',
  });
});

t.test('a missing or symlinked scratch dir is refused', async (t) => {
  const { scratch, outside, store } = setup(t);
  const logger = createMemoryLogger().logger;
  t.match(pruneScratch({ dir: path.join(scratch, 'nope'), capBytes: 1, isPinned: () => false, sink: store, logger }), {
    ok: false,
    reason: 'not_found',
  });
  fs.symlinkSync(outside, path.join(scratch, 'link'));
  t.match(pruneScratch({ dir: path.join(scratch, 'link'), capBytes: 1, isPinned: () => false, sink: store, logger }), {
    ok: false,
    reason: 'alias_denied',
  });
  t.match(pruneScratch({ dir: scratch, capBytes: -1, isPinned: () => false, sink: store, logger }), {
    ok: false,
    reason: 'invalid_option',
  });
});

t.test('startScratchPruner prunes periodically until stopped', async (t) => {
  const { scratch } = setup(t);
  put(scratch, 'a', 4, 100);
  const events: EventInput[] = [];
  const sink: EventSink = {
    append: (input) => {
      events.push(input);
      return { ok: true, stored: 'database', ids: [events.length] };
    },
  };
  const stop = startScratchPruner({
    dir: scratch,
    capBytes: 0,
    isPinned: () => false,
    sink,
    logger: createMemoryLogger().logger,
    intervalSeconds: 0.01,
  });
  for (let i = 0; i < 1000 && (events.length < 2 || remaining(scratch).length > 0); i++) {
    if (events.length === 1 && !fs.existsSync(path.join(scratch, 'b'))) put(scratch, 'b', 4, 100);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  stop();
  t.equal(events.length, 2, 'one event per over-cap prune');
  t.same(remaining(scratch), []);
  t.throws(() =>
    startScratchPruner({
      dir: scratch,
      capBytes: 0,
      isPinned: () => false,
      sink,
      logger: createMemoryLogger().logger,
      intervalSeconds: 0,
    }),
  );
});
