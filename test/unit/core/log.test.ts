import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import {
  createLogger,
  createMemoryLogger,
  createStderrSink,
  parseLogLevel,
  stderrIsJournal,
  withLogFields,
} from '../../../core/log.js';

t.test('one JSON object per line, below-threshold records dropped', async (t) => {
  const { logger, lines } = createMemoryLogger('info');
  logger.debug('hidden');
  logger.info('shown', { turnId: 't1' });
  logger.child({ component: 'http' }).warn('careful');
  t.equal(lines.length, 2);
  const first = JSON.parse(lines[0]!);
  t.equal(first.level, 'info');
  t.equal(first.msg, 'shown');
  t.equal(first.turnId, 't1');
  t.match(first.ts, /^\d{4}-\d\d-\d\dT/);
  t.equal(JSON.parse(lines[1]!).component, 'http');
});

t.test('log levels parse strictly', async (t) => {
  t.equal(parseLogLevel('warn'), 'warn');
  t.equal(parseLogLevel('verbose'), undefined);
});

t.test('a shared level switch changes every logger of the tree at once', async (t) => {
  const lines: Array<[string, string]> = [];
  const level = { level: 'warn' as const } as { level: 'debug' | 'info' | 'warn' | 'error' };
  const root = createLogger({ level, sink: (line, lvl) => lines.push([lvl, line]) });
  const child = root.child({ component: 'x' });
  child.info('hidden');
  level.level = 'debug';
  child.debug('now shown');
  root.info('root too');
  t.same(
    lines.map(([lvl, line]) => [lvl, JSON.parse(line).msg]),
    [
      ['debug', 'now shown'],
      ['info', 'root too'],
    ],
  );
});

t.test('stderr is the journal only when JOURNAL_STREAM names fd 2 itself', async (t) => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-log-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  const fd = fs.openSync(path.join(dir, 'stream'), 'w');
  t.teardown(() => fs.closeSync(fd));
  const { dev, ino } = fs.fstatSync(fd, { bigint: true });
  t.ok(stderrIsJournal({ JOURNAL_STREAM: `${dev}:${ino}` }, fd), 'device and inode of the fd');
  t.notOk(stderrIsJournal({ JOURNAL_STREAM: `${dev}:${ino + 1n}` }, fd), 'another inode: redirected elsewhere');
  t.notOk(stderrIsJournal({}, fd), 'no variable');
  t.notOk(stderrIsJournal({ JOURNAL_STREAM: 'garbage' }, fd), 'malformed');
});

t.test('lines to the journal carry their syslog priority prefix', async (t) => {
  const written: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = (chunk: string) => {
    written.push(chunk);
    return true;
  };
  try {
    const journal = createLogger({ level: 'debug', sink: createStderrSink({ journal: true }) });
    journal.debug('d');
    journal.info('i');
    journal.warn('w');
    journal.error('e');
    createLogger({ sink: createStderrSink({ journal: false }) }).warn('plain');
  } finally {
    process.stderr.write = write;
  }
  t.same(
    written.map((line) => line.slice(0, 3)),
    ['<7>', '<6>', '<4>', '<3>', '{"t'],
  );
  t.equal(JSON.parse(written[2]!.slice(3)).msg, 'w', 'the JSON follows the prefix');
});

t.test('withLogFields: every logger, in the call and the work it starts, carries the fields', async (t) => {
  const { logger, lines } = createMemoryLogger('debug');
  const other = createLogger({ sink: (line) => lines.push(line) });
  await withLogFields({ requestId: 'r-1' }, async () => {
    logger.info('direct');
    await new Promise((resolve) => setTimeout(resolve, 1));
    other.child({ part: 'deep' }).warn('after a timer');
    withLogFields({ step: 2 }, () => logger.info('nested', { requestId: 'explicit' }));
  });
  logger.info('outside');
  t.match(
    lines.map((l) => JSON.parse(l)),
    [
      { msg: 'direct', requestId: 'r-1' },
      { msg: 'after a timer', requestId: 'r-1', part: 'deep' },
      { msg: 'nested', requestId: 'explicit', step: 2 },
      { msg: 'outside' },
    ],
  );
  t.notOk('requestId' in JSON.parse(lines[3]!), 'nothing leaks past the call');
});
