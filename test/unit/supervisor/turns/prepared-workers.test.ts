/**
 * The prepared-worker pool's bookkeeping with stand-in workers whose preparation the test
 * finishes by hand; real workers go through it in test/integration/supervisor/turns/prepared-workers.test.ts.
 */
import { EventEmitter } from 'node:events';
import t from 'tap';
import { createMemoryLogger } from '../../../../core/log.js';
import { createPreparedWorkerPool, type PoolWorker } from '../../../../supervisor/turns/prepared-workers.js';

interface FakeWorker extends PoolWorker {
  stopped: boolean;
  ended: boolean;
  exit(): void;
}

function fakeWorker(key: string, n: number): FakeWorker {
  const events = new EventEmitter();
  const worker: FakeWorker = {
    name: `prepared_${n}`,
    key,
    stopped: false,
    ended: false,
    onEnd: (listener) => events.once('end', listener),
    exit() {
      worker.ended = true;
      events.emit('end');
    },
  };
  return worker;
}

function pool(capacity: number) {
  const preparations: Array<{ key: string; finish(ok: boolean): FakeWorker | null }> = [];
  let made = 0;
  const workers = createPreparedWorkerPool<FakeWorker, string>({
    capacity,
    idleMs: 60_000,
    keyOf: (spec) => spec,
    prepare: (spec) =>
      new Promise((resolve) => {
        preparations.push({
          key: spec,
          finish(ok) {
            const worker = ok ? fakeWorker(spec, made++) : null;
            resolve(worker);
            return worker;
          },
        });
      }),
    stop: async (worker) => {
      worker.stopped = true;
    },
    logger: createMemoryLogger('error').logger,
  });
  return { workers, preparations };
}

const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

t.test('one worker per key; a take while it starts waits for it', async (t) => {
  const { workers, preparations } = pool(2);
  workers.prepareFor('a');
  workers.prepareFor('a');
  t.equal(preparations.length, 1, 'a second request for the same key prepares nothing');
  t.same(workers.counts(), { ready: 0, starting: 1 });
  const taking = workers.take('a');
  const worker = preparations[0]!.finish(true);
  t.equal(await taking, worker, 'the taker gets the worker once ready');
  t.notOk(worker!.stopped);
  t.same(workers.counts(), { ready: 0, starting: 0 });
  t.equal(await workers.take('a'), null, 'a worker serves one take');
});

t.test('full: the oldest worker gives way, even while it is still starting', async (t) => {
  const { workers, preparations } = pool(1);
  workers.prepareFor('a');
  workers.prepareFor('b');
  t.equal(preparations.length, 2);
  const a = preparations[0]!.finish(true);
  await tick();
  t.ok(a!.stopped, 'the replaced worker is stopped once it exists');
  const b = preparations[1]!.finish(true);
  await tick();
  t.same(workers.counts(), { ready: 1, starting: 0 });
  t.equal(await workers.take('a'), null);
  t.equal(await workers.take('b'), b);
});

t.test('a worker that exits while idle leaves the pool; a failed preparation leaves nothing', async (t) => {
  const { workers, preparations } = pool(2);
  workers.prepareFor('a');
  workers.prepareFor('b');
  const a = preparations[0]!.finish(true)!;
  preparations[1]!.finish(false);
  await tick();
  t.same(workers.counts(), { ready: 1, starting: 0 });
  a.exit();
  await tick();
  t.same(workers.counts(), { ready: 0, starting: 0 });
  t.ok(a.stopped, 'its resources are released');
});

t.test('evictOne stops an idle worker only', async (t) => {
  const { workers, preparations } = pool(2);
  workers.prepareFor('a');
  t.equal(await workers.evictOne(), false, 'a starting worker is not evicted');
  const a = preparations[0]!.finish(true)!;
  await tick();
  t.equal(await workers.evictOne(), true);
  t.ok(a.stopped);
  t.same(workers.counts(), { ready: 0, starting: 0 });
});

t.test('close stops ready and starting workers and prepares nothing after', async (t) => {
  const { workers, preparations } = pool(2);
  workers.prepareFor('a');
  workers.prepareFor('b');
  const a = preparations[0]!.finish(true)!;
  await tick();
  const closing = workers.close();
  const b = preparations[1]!.finish(true)!;
  await closing;
  t.ok(a.stopped && b.stopped, 'both are stopped');
  workers.prepareFor('c');
  t.equal(preparations.length, 2);
});

t.test('capacity 0 prepares nothing', async (t) => {
  const { workers, preparations } = pool(0);
  workers.prepareFor('a');
  t.equal(preparations.length, 0);
});
