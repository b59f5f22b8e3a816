import t from 'tap';
import { createMemoryLogger, parseLogLevel } from '../../../core/log.js';

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
