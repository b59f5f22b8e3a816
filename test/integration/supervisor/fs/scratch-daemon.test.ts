/**
 * The daemon prunes the configured scratch area: oldest unpinned files go, `*.pin` files stay,
 * and a `scratch_overage` event is recorded.
 */
import t from 'tap';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createMemoryLogger } from '../../../../core/log.js';
import { isPinnedScratchName } from '../../../../supervisor/fs/scratch.js';
import { apiRequest } from '../../../support/served-api.js';
import { daemonConnection, fakeProbes, startTestDaemon } from '../../../support/app-server.js';

t.test('the pinning rule: a last component ending in .pin', async (t) => {
  t.ok(isPinnedScratchName('mask.png.pin'));
  t.ok(isPinnedScratchName('a/b/keep.pin'));
  t.notOk(isPinnedScratchName('mask.png'));
  t.notOk(isPinnedScratchName('pinned.pin/inside'));
  t.notOk(isPinnedScratchName('x.pinx'));
});

t.test('the daemon prunes the scratch area and keeps pinned files', async (t) => {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-scratch-daemon-'));
  t.teardown(() => fs.rmSync(base, { recursive: true, force: true }));
  const scratch = path.join(base, 'scratch');
  fs.mkdirSync(scratch);
  const old = new Date(Date.now() - 3600_000);
  for (const [name, bytes] of [
    ['old-a.bin', 60],
    ['old-b.pin', 60],
    ['new-c.bin', 30],
  ] as const) {
    const file = path.join(scratch, name);
    fs.writeFileSync(file, Buffer.alloc(bytes));
    if (name.startsWith('old')) fs.utimesSync(file, old, old);
  }
  const configPath = path.join(base, 'turnhost.json');
  fs.writeFileSync(
    configPath,
    JSON.stringify({ fs: { scratch: { dir: scratch, capBytes: 100, pruneIntervalSeconds: 3600 } } }),
  );
  const { logger } = createMemoryLogger('debug');
  const daemon = await startTestDaemon({
    configPath,
    env: {},
    overrides: { dataDir: path.join(base, 'data'), listen: '127.0.0.1:0', socket: null },
    logger,
    runProbes: fakeProbes,
    turns: false,
  });
  t.teardown(() => daemon.close());

  // The first prune runs right after start; wait for its effect (bounded, not timed).
  for (let i = 0; i < 200 && fs.existsSync(path.join(scratch, 'old-a.bin')); i++) await sleep(25);
  t.same(
    fs.readdirSync(scratch).sort(),
    ['new-c.bin', 'old-b.pin'],
    'the oldest unpinned file went, the pinned one stayed',
  );

  const res = await apiRequest(daemonConnection(daemon), 'GET', '/api/governance/events?kind=scratch_overage');
  const body = res.body as { events: Array<{ payload: unknown; actor: string; sessionId: unknown }> };
  t.equal(body.events.length, 1);
  t.same(body.events[0]?.payload, { bytes: 150, pinnedFiles: 1, pinnedBytes: 60, overageBytes: 50 });
  t.equal(body.events[0]?.actor, 'server');
  t.equal(body.events[0]?.sessionId, null);
});
