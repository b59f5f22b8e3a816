import t from 'tap';
import { EventQueue, FLUSH_AFTER_MS, type EgressEventSink } from '../../../proxy/event-queue.js';
import type { AppendResult, EventInput } from '../../../core/events.js';

const event = (host: string): EventInput => ({
  sessionId: 's',
  turnId: 't',
  kind: 'egress_denial',
  actor: 'server',
  model: null,
  profile: 'governed',
  payload: { host, port: 80, reason: 'not_allowlisted' },
});

const stored: AppendResult = { ok: true, stored: 'database', ids: [] };

function recordingSink(batchResult: (batch: EventInput[]) => AppendResult = () => stored): {
  sink: EgressEventSink;
  calls: string[][];
} {
  const calls: string[][] = [];
  const hosts = (events: EventInput[]): string[] => events.map((e) => e.payload.host as string);
  return {
    calls,
    sink: {
      append: (e) => {
        calls.push(['append', ...hosts([e])]);
        return e.payload.host === 'bad' ? { ok: false, reason: 'invalid_event', detail: 'bad' } : stored;
      },
      appendBatch: (batch) => {
        calls.push(['batch', ...hosts(batch)]);
        return batchResult(batch);
      },
    },
  };
}

const wait = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

t.test('events queued within the flush interval are committed as one batch, stamped when pushed', async (t) => {
  const { sink, calls } = recordingSink();
  const queue = new EventQueue(sink, () => t.fail('nothing refused'));
  queue.push(event('a'));
  queue.push(event('b'));
  t.same(calls, [], 'nothing written yet');
  await wait(FLUSH_AFTER_MS + 5);
  t.same(calls, [['batch', 'a', 'b']]);
});

t.test('a full queue is committed at once', async (t) => {
  const { sink, calls } = recordingSink();
  const queue = new EventQueue(sink, () => t.fail('nothing refused'));
  for (let i = 0; i < 256; i++) queue.push(event(`h${i}`));
  t.equal(calls.length, 1);
  t.equal(calls[0]!.length, 257);
});

t.test('close() commits the queue; later events are appended as they come', async (t) => {
  const { sink, calls } = recordingSink();
  const queue = new EventQueue(sink, () => t.fail('nothing refused'));
  queue.push(event('a'));
  queue.push(event('b'));
  queue.close();
  t.same(calls, [['batch', 'a', 'b']]);
  queue.push(event('late'));
  t.same(calls, [
    ['batch', 'a', 'b'],
    ['append', 'late'],
  ]);
});

t.test('a batch refused for one invalid event is retried one by one, so only that one is refused', async (t) => {
  const { sink, calls } = recordingSink((batch) =>
    batch.some((e) => e.payload.host === 'bad')
      ? { ok: false, reason: 'invalid_event', detail: 'event 1: bad' }
      : stored,
  );
  const refused: string[] = [];
  const queue = new EventQueue(sink, (e) => refused.push(e.payload.host as string));
  queue.push(event('a'));
  queue.push(event('bad'));
  queue.push(event('c'));
  queue.close();
  t.same(calls, [
    ['batch', 'a', 'bad', 'c'],
    ['append', 'a'],
    ['append', 'bad'],
    ['append', 'c'],
  ]);
  t.same(refused, ['bad']);
});

t.test('a sink without batches gets one append per event', async (t) => {
  const appended: EventInput[] = [];
  const queue = new EventQueue({ append: (e) => (appended.push(e), stored) }, () => t.fail('nothing refused'));
  const before = Date.now();
  queue.push(event('a'));
  queue.push(event('b'));
  queue.close();
  t.equal(appended.length, 2);
  t.ok(Date.parse(appended[0]!.at!) >= before, 'stamped with the time it was pushed');
});
