/**
 * The splice loop's bookkeeping, driven through one exact sequence of system-call results by a
 * scripted SpliceSys: sequences real sockets produce only now and then.
 */
import t from 'tap';
import { SpliceLoop, type RelayCommand, type TunnelReport } from '../../../../proxy/relay/splice-loop.js';
import { EAGAIN, EPOLLIN, SHUT_WR } from '../../../../core/linux-abi.js';
import { type SpliceSys } from '../../../../proxy/relay/splice-sys.js';

const WAKE_FD = 5;
const CLIENT = 10;
const UPSTREAM = 11;
const CHUNK = 262144;

/**
 * A client that has sent seven full pipe loads and its EOF, an upstream whose first write takes
 * half a load (so reads fall on odd rounds and the EOF on the last of a wake's 16), and an
 * upstream that has not answered yet.
 */
function scriptedSys(shutdowns: [number, number][]): SpliceSys {
  const fromClient = [...Array(7).fill(CHUNK), 0];
  let firstWrite = true;
  let errno = 0;
  let nextFd = 100;
  const eagain = (): number => {
    errno = EAGAIN;
    return -1;
  };
  return {
    epollCreate: () => 3,
    epollCtl: () => 0,
    epollWait: () => {
      throw new Error('the loop waited: the stop command was not read');
    },
    splice: (fdIn, fdOut, length) => {
      if (fdIn === CLIENT) return fromClient.length > 0 ? Math.min(fromClient.shift(), length) : eagain();
      if (fdIn === UPSTREAM) return eagain();
      if (fdOut === UPSTREAM) {
        if (!firstWrite) return length;
        firstWrite = false;
        return length / 2;
      }
      return eagain();
    },
    pipe: (fds) => {
      fds[0] = nextFd++;
      fds[1] = nextFd++;
      return 0;
    },
    eventfd: () => WAKE_FD,
    read: () => 8,
    write: (_fd, _buffer, length) => length,
    shutdown: (fd, how) => {
      shutdowns.push([fd, how]);
      return 0;
    },
    close: () => 0,
    dupCloexec: (fd) => fd,
    setPipeSize: () => CHUNK,
    readyNow: () => 0,
    errno: () => errno,
  };
}

t.test("an EOF read in a wake's last round is passed on at once", async (t) => {
  const shutdowns: [number, number][] = [];
  // Both commands are read before the loop first waits: the adopt serves the tunnel once, then the loop stops.
  const commands: RelayCommand[] = [
    { op: 'adopt', id: 1, fds: [CLIENT, UPSTREAM], initial: [null, null], budget: null, idleTimeoutMs: 0 },
    { op: 'stop' },
  ];
  const reports: TunnelReport[] = [];
  const loop = new SpliceLoop(
    WAKE_FD,
    () => commands.shift(),
    (report) => reports.push(report),
    scriptedSys(shutdowns),
  );
  loop.run();
  t.same(shutdowns, [[UPSTREAM, SHUT_WR]], "the client's EOF reached the upstream in the same wake");
  t.match(reports, [{ id: 1, outcome: 'aborted', bytes: [7 * CHUNK, 0], eofFrom: [true, false] }]);
});

t.test('an exact length never asks the socket for a byte past it, and passes no EOF on', async (t) => {
  const shutdowns: [number, number][] = [];
  const sys = scriptedSys(shutdowns);
  const asked: number[] = [];
  const splice = sys.splice.bind(sys);
  sys.splice = (fdIn, fdOut, length, flags) => {
    if (fdIn === CLIENT) asked.push(length);
    return splice(fdIn, fdOut, length, flags);
  };
  const length = 2 * CHUNK + 1000;
  const commands: RelayCommand[] = [
    {
      op: 'adopt',
      id: 1,
      fds: [CLIENT, UPSTREAM],
      initial: [null, null],
      lengths: [length, 0],
      budget: null,
      idleTimeoutMs: 0,
    },
    { op: 'stop' },
  ];
  const reports: TunnelReport[] = [];
  new SpliceLoop(
    WAKE_FD,
    () => commands.shift(),
    (report) => reports.push(report),
    sys,
  ).run();
  t.same(asked, [CHUNK, CHUNK, 1000], 'the last read asks for the remainder only');
  t.same(shutdowns, [], 'no EOF passed on');
  t.match(
    reports,
    [{ id: 1, outcome: 'ok', bytes: [length, 0], eofFrom: [false, false] }],
    'ends ok, unread upstream untouched',
  );
});

t.test(
  'a bulk direction copies through a 1 MiB buffer once it moved 4 MiB; an exact one that long, at once',
  async (t) => {
    const run = (lengths: [number | null, number | null]) => {
      const spliced: number[] = [];
      const read: number[] = [];
      const written: number[] = [];
      const sys = scriptedSys([]);
      let sent = 0;
      sys.splice = (fdIn, fdOut, length) => {
        if (fdIn === CLIENT) {
          spliced.push(length);
          sent += length;
          return length;
        }
        return fdOut === UPSTREAM ? length : -1;
      };
      sys.read = (fd, _buffer, length) => {
        if (fd !== CLIENT) return 8;
        read.push(length);
        if (sent >= 40 * CHUNK) return 0;
        sent += length;
        return length;
      };
      sys.write = (fd, _buffer, length) => {
        if (fd === UPSTREAM) written.push(length);
        return length;
      };
      // The upstream has nothing to send: its reads would block.
      sys.errno = () => EAGAIN;
      const commands: RelayCommand[] = [
        { op: 'adopt', id: 1, fds: [CLIENT, UPSTREAM], initial: [null, null], lengths, budget: null, idleTimeoutMs: 0 },
      ];
      // Ten wake-ups with the client readable, then the stop command.
      let waits = 0;
      sys.epollWait = (_epfd, events) => {
        const ready = waits++ < 10;
        events.writeUInt32LE(EPOLLIN, 0);
        events.writeUInt32LE(ready ? 1 : 0xffffffff, 4);
        events.writeUInt32LE(0, 8);
        if (!ready) commands.push({ op: 'stop' });
        return 1;
      };
      new SpliceLoop(
        WAKE_FD,
        () => commands.shift(),
        () => {},
        sys,
      ).run();
      return { spliced, read, written };
    };
    const open = run([null, null]);
    t.same(open.spliced, Array(16).fill(CHUNK), '4 MiB spliced in 256 KiB pieces');
    t.ok(open.read.length > 0 && open.read.every((length) => length === 4 * CHUNK), 'then read in 1 MiB pieces');
    t.same(open.written, open.read.slice(0, open.written.length), 'and written as read');
    const exact = run([8 * 1024 * 1024, 0]);
    t.same(exact.spliced, [], 'an exact 8 MiB direction never splices');
    t.same(exact.read, Array(8).fill(4 * CHUNK), 'it reads its 8 MiB, and not a byte more');
  },
);
