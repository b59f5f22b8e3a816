/**
 * A non-root supervisor's turn temp path (supervisorIsRoot: false forces it; the helper still
 * runs as root here): the temp is created as the supervisor's own, the helper's launch hands it
 * to the worker uid, and at turn end the helper's reclaim hands the tree back before the
 * supervisor purges it with a complete `turn_temp_purge` receipt.
 */
import fs from 'node:fs';
import path from 'node:path';
import t from 'tap';
import { createTurnHarness, runTurn } from '../../../support/turn-harness.js';

const harness = await createTurnHarness({ slot: 71, supervisorIsRoot: false });
t.teardown(() => harness.close());

t.test('the temp belongs to the worker during the turn and is reclaimed and purged after it', async (t) => {
  const script = [
    'set -e',
    'stat -c "owner %u mode %a" "$TMPDIR"',
    'mkdir -p "$TMPDIR/a/b"',
    'echo data > "$TMPDIR/a/b/file"',
    'mkfifo "$TMPDIR/a/fifo"',
    'ln -s /etc/hostname "$TMPDIR/a/link"',
    'chmod 0500 "$TMPDIR/a"',
  ].join('; ');
  const run = await runTurn(harness, { argv: ['/bin/sh', '-c', script] });
  t.equal(run.result.exitCode, 0, run.stderr);
  t.equal(run.record.identity, 'separate_uid');
  t.equal(run.stdout.trim(), `owner ${run.record.workerUid} mode 700`, 'the worker uid owns its temp during the turn');

  const reclaimed = harness.logLines.filter((line) => line.includes('turn temp reclaimed') && line.includes(run.id));
  t.equal(reclaimed.length, 1, 'the helper reclaimed the temp');
  t.match(reclaimed[0], /"reclaimed":6/, 'a, a/b, file, fifo, link and the temp itself came back to the supervisor');
  t.notOk(harness.logLines.some((line) => line.includes('turn temp reclaim failed')));

  const page = harness.events.query({ turn: run.id, kind: 'turn_temp_purge', limit: 10 });
  if (!page.ok) throw new Error(page.detail);
  t.equal(page.events.length, 1);
  t.match(
    page.events[0]?.payload,
    { files: 1, bytes: 5, linkedFiles: 0, specialFiles: 2, outcome: 'purged' },
    'complete receipt',
  );
  t.notOk(fs.existsSync(path.join(harness.config.turns.tempRoot, run.id)), 'the temp is gone');
});
