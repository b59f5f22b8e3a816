import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { LaunchPhaseClock, type LaunchPhaseLine } from '../../../../supervisor/observe/launch-phases.js';

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-phases-'));
t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));

t.test('with a file, each worker appends one line: its marks in order and its turn', async (t) => {
  const file = path.join(dir, 'phases.jsonl');
  for (const [worker, turnId] of [
    ['w1', 'turn-1'],
    ['w2', null],
  ] as const) {
    const clock = new LaunchPhaseClock(file, worker);
    clock.mark('begin');
    clock.mark('ready');
    clock.mark('recorded');
    clock.write(turnId);
  }
  const lines = fs
    .readFileSync(file, 'utf8')
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line) as LaunchPhaseLine);
  t.same(
    lines.map((line) => [line.worker, line.turnId, line.marks.map(([step]) => step)]),
    [
      ['w1', 'turn-1', ['begin', 'ready', 'recorded']],
      ['w2', null, ['begin', 'ready', 'recorded']],
    ],
  );
  t.ok(
    lines.every((line) => line.marks.every(([, at]) => Number.isFinite(at) && at > 1e12)),
    'every mark is a wall-clock time in epoch milliseconds',
  );
});

t.test('a file that cannot be written does not fail the launch', async (t) => {
  const clock = new LaunchPhaseClock(path.join(dir, 'missing', 'phases.jsonl'), 'w');
  clock.mark('begin');
  t.doesNotThrow(() => clock.write('turn-1'));
});
