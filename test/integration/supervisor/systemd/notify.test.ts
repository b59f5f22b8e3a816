/**
 * sd_notify against a fake notification socket (a bound datagram socket standing in for
 * systemd, path and abstract forms), driven by the real daemon: READY=1 only once the listeners
 * are bound and the boot probe ran, STATUS= with the probe's summary, WATCHDOG=1 at half
 * WATCHDOG_USEC, RELOADING=1 then READY=1 around a reload, STOPPING=1 at the stop.
 */
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { createMemoryLogger } from '../../../../core/log.js';
import { createServiceNotifier } from '../../../../supervisor/systemd/notify.js';
import { startTestDaemon } from '../../../support/app-server.js';
import { bindDatagramReceiver } from '../../../support/datagram-receiver.js';

const fields = (datagram: Buffer): Record<string, string> =>
  Object.fromEntries(
    datagram
      .toString('utf8')
      .trimEnd()
      .split('\n')
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
  );

function tempDir(t: { teardown(fn: () => void): void }): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-notify-'));
  t.teardown(() => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

t.test('the daemon says READY=1 after its listener answers, with the probe summary', async (t) => {
  const dir = tempDir(t);
  const socketPath = path.join(dir, 'notify.sock');
  const systemd = bindDatagramReceiver(socketPath);
  t.teardown(() => systemd.close());
  const apiSocket = path.join(dir, 'api.sock');
  let listenerUpAtReady: boolean | null = null;
  const { logger } = createMemoryLogger();
  const daemon = await startTestDaemon({
    env: { NOTIFY_SOCKET: socketPath, WATCHDOG_USEC: '200000' },
    overrides: { dataDir: path.join(dir, 'data'), listen: null, socket: apiSocket },
    logger,
    turns: false,
  });
  t.teardown(() => daemon.close());

  const messages = systemd.drain().map(fields);
  const readyIndex = messages.findIndex((m) => m['READY'] === '1');
  t.ok(readyIndex >= 0, 'READY=1 was sent by the time startDaemon resolved');
  // The status line before READY names the boot probe's result; READY's own STATUS too.
  t.match(messages[readyIndex]?.['STATUS'], /^serving; ordinary (available|UNAVAILABLE)/);
  t.equal(messages[readyIndex]?.['MAINPID'], String(process.pid));
  t.ok(
    messages.slice(0, readyIndex).some((m) => /^boot probe done: ordinary/.test(m['STATUS'] ?? '')),
    'the probe summary was reported before READY',
  );
  listenerUpAtReady = await new Promise<boolean>((resolve) => {
    const client = net.connect(apiSocket, () => {
      client.destroy();
      resolve(true);
    });
    client.on('error', () => resolve(false));
  });
  t.ok(listenerUpAtReady, 'the API socket accepts connections');

  const ping = fields(await systemd.next('WATCHDOG=1'));
  t.same(ping, { WATCHDOG: '1' }, 'watchdog pings arrive (every 100 ms for WATCHDOG_USEC=200000)');

  const reload = await daemon.reload();
  t.ok(reload.ok);
  const around = systemd
    .drain()
    .map(fields)
    .filter((m) => m['WATCHDOG'] === undefined);
  t.equal(around[0]?.['RELOADING'], '1', 'RELOADING=1 first');
  t.match(around[0]?.['MONOTONIC_USEC'], /^[0-9]+$/);
  t.equal(around[around.length - 1]?.['READY'], '1', 'READY=1 when the reload is done');

  await daemon.close();
  const last = systemd.drain().map(fields);
  t.ok(
    last.some((m) => m['STOPPING'] === '1'),
    'STOPPING=1 at the stop',
  );
});

t.test('an abstract NOTIFY_SOCKET (@name) works the same', async (t) => {
  const name = `@turnhost-notify-test-${process.pid}`;
  const systemd = bindDatagramReceiver(name);
  t.teardown(() => systemd.close());
  const notifier = createServiceNotifier({ env: { NOTIFY_SOCKET: name }, logger: createMemoryLogger().logger });
  t.teardown(() => notifier.close());
  t.ok(notifier.active);
  notifier.ready('line one\nline two');
  t.same(fields(await systemd.next('READY')), {
    READY: '1',
    STATUS: 'line one line two',
    MAINPID: String(process.pid),
  });
});

t.test('no NOTIFY_SOCKET: nothing is sent; a bad one is logged, never fatal', async (t) => {
  t.notOk(createServiceNotifier({ env: {}, logger: createMemoryLogger().logger }).active);
  const { logger, lines } = createMemoryLogger();
  const relative = createServiceNotifier({ env: { NOTIFY_SOCKET: 'relative/path' }, logger });
  t.notOk(relative.active);
  t.match(lines.join('\n'), /NOTIFY_SOCKET is not a usable socket address/);
  const dir = tempDir(t);
  const gone = createServiceNotifier({ env: { NOTIFY_SOCKET: path.join(dir, 'absent.sock') }, logger });
  t.ok(gone.active);
  gone.ready('x');
  gone.ready('y');
  gone.close();
  t.equal(lines.filter((line) => line.includes('could not be sent')).length, 1, 'logged once per kind');
});

t.test('the watchdog belongs to another pid: no pings', async (t) => {
  const notifier = createServiceNotifier({
    env: { NOTIFY_SOCKET: '@x', WATCHDOG_USEC: '1000', WATCHDOG_PID: String(process.pid + 1) },
    logger: createMemoryLogger().logger,
  });
  t.equal(notifier.watchdogMs, null);
  notifier.close();
});

t.test('the variables are taken out of the environment the supervisor passes on', async (t) => {
  const env: NodeJS.ProcessEnv = {
    NOTIFY_SOCKET: '@y',
    WATCHDOG_USEC: '1000000',
    WATCHDOG_PID: String(process.pid),
    PATH: '/bin',
  };
  const notifier = createServiceNotifier({ env, logger: createMemoryLogger().logger });
  t.equal(notifier.watchdogMs, 1000);
  t.same(env, { PATH: '/bin' });
  notifier.close();
});
