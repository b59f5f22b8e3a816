/**
 * A bound AF_UNIX datagram socket the tests read from: a stand-in for systemd's notification
 * socket and journald's native socket (neither runs on the build machines). Reads never block;
 * `next()` polls until a datagram is there.
 */
import { close, errnoName, lastErrno, libcFunction } from '../../core/linux-abi.js';
import { openDatagramSocket, unixAddress } from '../../core/unix-datagram.js';
import { until } from './until.js';

interface ReceiverSys {
  bind(fd: number, address: Buffer, length: number): number;
  recv(fd: number, buffer: Buffer, length: number, flags: number): number;
  close(fd: number): number;
}

function bindings(): ReceiverSys {
  return {
    bind: libcFunction('int bind(int, const void *, uint32_t)') as ReceiverSys['bind'],
    recv: libcFunction('long recv(int, void *, size_t, int)') as ReceiverSys['recv'],
    close,
  };
}

export interface DatagramReceiver {
  /** Datagrams waiting now, oldest first. */
  drain(): Buffer[];
  /** Waits (bounded) for the next datagram. */
  next(what: string): Promise<Buffer>;
  close(): void;
}

export function bindDatagramReceiver(address: string): DatagramReceiver {
  const parsed = unixAddress(address);
  if (!parsed.ok) throw new Error(parsed.detail);
  const opened = openDatagramSocket();
  if (!opened.ok) throw new Error(opened.detail);
  const fd = opened.fd;
  if (bindings().bind(fd, parsed.address.bytes, parsed.address.length) !== 0)
    throw new Error(`bind ${address}: ${errnoName(lastErrno())}`);
  const queued: Buffer[] = [];
  const read = (): void => {
    const buffer = Buffer.alloc(256 * 1024);
    for (;;) {
      const n = bindings().recv(fd, buffer, buffer.length, 0x40);
      if (n < 0) return;
      queued.push(Buffer.from(buffer.subarray(0, n)));
    }
  };
  return {
    drain() {
      read();
      return queued.splice(0);
    },
    async next(what) {
      const arrived = await until(() => {
        read();
        return queued.length > 0;
      });
      if (!arrived) throw new Error(`no datagram arrived: ${what}`);
      return queued.shift()!;
    },
    close: () => void bindings().close(fd),
  };
}
