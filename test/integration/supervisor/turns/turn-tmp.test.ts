/**
 * The turn's /tmp (supervisor/turns/turn-tmp.ts): a tmpfs of the turn's own, bounded by
 * tmp_size, never a directory on the host; measured at the end with a `turn_temp_purge`
 * receipt, in both identity modes and with the non-root supervisor's socket ownership.
 */
import fs from 'node:fs';
import t from 'tap';
import { createTurnHarness, runTurn, type TurnHarness } from '../../../support/turn-harness.js';

const MiB = 1024 * 1024;

function receipts(harness: TurnHarness, turnId: string) {
  const page = harness.events.query({ turn: turnId, kind: 'turn_temp_purge', limit: 10 });
  if (!page.ok) throw new Error(page.detail);
  return page.events;
}

for (const separateUid of [true, false]) {
  const mode = separateUid ? 'separate_uid' : 'shared_uid';
  t.test(`${mode}: TMPDIR is the turn's own tmpfs, bounded, measured, gone`, async (t) => {
    const harness = await createTurnHarness({
      slot: separateUid ? 71 : 76,
      separateUid,
      supervisorIsRoot: false,
      configure: (config) => (config.limits.tmp_size = '8M'),
    });
    t.teardown(() => harness.close());
    const before = fs.readdirSync('/run');
    const script = [
      'echo "tmpdir $TMPDIR"',
      'df -k "$TMPDIR" | tail -1',
      'dd if=/dev/zero of="$TMPDIR/kept" bs=1M count=3 2>/dev/null',
      'if dd if=/dev/zero of="$TMPDIR/fill" bs=1M count=16 2>/dev/null; then echo filled; else echo "stopped at the bound"; fi',
      'rm -f "$TMPDIR/fill"',
      'mkdir "$TMPDIR/d" && echo x > "$TMPDIR/d/f"',
      // Every inode of the tmpfs but its root (the view's own mountpoints for a workspace under /tmp included).
      'echo "entries $(find "$TMPDIR" -xdev -mindepth 1 | wc -l)"',
    ].join('; ');
    const run = await runTurn(harness, { argv: ['/bin/sh', '-c', script] });
    t.equal(run.result.status, 'ok', run.result.detail ?? run.stderr);
    t.equal(run.record.identity, mode);
    t.match(run.stdout, 'tmpdir /tmp');
    t.match(run.stdout, /\s8192\s+0\s+8192\s+0% \/tmp$/m, 'an 8 MiB tmpfs of its own');
    t.match(run.stdout, 'stopped at the bound', 'filling it stops at tmp_size');
    const [receipt] = receipts(harness, run.id);
    t.equal(receipt?.schemaVersion, 2);
    t.equal(receipt?.payload.outcome, 'purged');
    t.ok((receipt?.payload.bytes as number) >= 3 * MiB, 'the receipt counts what the turn left');
    const entries = Number(/^entries (\d+)$/m.exec(run.stdout)?.[1]);
    t.ok(entries >= 3, 'kept, d and d/f at least');
    t.equal(receipt?.payload.inodes, entries, 'the receipt counts every entry the turn saw');
    t.same(fs.readdirSync('/run'), before, "nothing of the turn was written to the host's /run");
  });
}
