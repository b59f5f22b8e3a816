/**
 * The kernel relay's event loop: relays established byte streams between pairs of sockets
 * with splice(2) through a pipe per direction, so the bytes never enter JavaScript; a bulk
 * direction (below) copies through a buffer of the thread's instead, never looked at. Runs in
 * its own thread (relay-thread.ts), blocked in epoll_wait; commands arrive through a message
 * port and a wake eventfd.
 *
 * A tunnel has two sides (0 and 1) and two directions: direction i reads side i and writes
 * the other side. A direction reads only while its pipe (or bulk buffer) is empty, so a slow
 * reader holds its writer back (the pipe is the whole buffer: 256 KiB, or 64 KiB when it could
 * not grow; a bulk buffer 1 MiB). EOF on a side is passed on as shutdown(SHUT_WR) of the other
 * side once the pipe is drained; the
 * tunnel ends when both directions have done so, or when a side whose peer is gone (EPOLLHUP)
 * has nothing left to send. Every fd of a tunnel is closed exactly once, in `end`, which also reports it.
 *
 * A direction may instead have an exact length (a forward request's body): it reads exactly
 * that many bytes, never one more (what follows belongs to the next message, or to no one),
 * passes no EOF on, and an EOF before the last byte ends the tunnel as that side's failure.
 * Length 0 leaves the side unread by the loop (its owner may go on reading it). A tunnel whose
 * directions are exact ends 'ok' when both have delivered everything.
 */
import {
  EAGAIN,
  EINTR,
  EPOLL_CTL_ADD,
  EPOLL_CTL_DEL,
  EPOLL_CTL_MOD,
  EPOLL_EVENT_SIZE,
  EPOLLERR,
  EPOLLHUP,
  EPOLLIN,
  EPOLLOUT,
  SHUT_WR,
  SPLICE_F_MOVE,
  SPLICE_F_NONBLOCK,
  errnoName,
} from '../../core/linux-abi.js';
import { ByteBudget } from './byte-budget.js';
import { spliceSys, type SpliceSys } from './splice-sys.js';

/** A new pipe's capacity: the most initial bytes a side may be given. */
export const PIPE_CAPACITY = 65536;
/**
 * What each pipe is grown to (F_SETPIPE_SZ): 256 KiB cut the proxy's CPU per MiB by about a
 * third against 64 KiB in bench/proxy.ts (64 MiB uploads from a Node client). Costs 512 KiB
 * of kernel memory per open tunnel, charged to the uid's pipe allowance (fs.pipe-user-pages-soft).
 */
const PIPE_BYTES_WANTED = 256 * 1024;
/**
 * A direction that moved BULK_AFTER_BYTES (or whose exact length is at least that) is a bulk
 * transfer, and copies through a BULK_BUFFER_BYTES buffer (read(2), write(2)) instead of
 * splicing. Why: what splice hands the sending socket is the received data's pages, cut at page
 * boundaries, and the receiving process pays for that per fragment. For 256 MiB downloads by
 * curl (bench/proxy.ts, interleaved runs) the copy cost the relay thread more (320-560 against
 * 180-330 µs per MiB with 1 MiB pipes) but curl about 300 µs per MiB less, so all processes
 * together 1.1-1.6 ms per MiB against 1.4-1.7 ms; 256 KiB buffers cost the thread more again.
 * The buffer is allocated when the direction turns bulk and dropped with the tunnel.
 */
const BULK_AFTER_BYTES = 4 * 1024 * 1024;
const BULK_BUFFER_BYTES = 1024 * 1024;
/** Splice rounds per direction per wake-up, so one busy tunnel cannot starve the others. */
const ROUNDS_PER_WAKE = 16;
const MAX_EVENTS = 256;
const WAKE_KEY = 0xffffffff;
const SPLICE_FLAGS = SPLICE_F_MOVE | SPLICE_F_NONBLOCK;

export type SideIndex = 0 | 1;

export type RelayCommand =
  | {
      op: 'adopt';
      id: number;
      /** Connected, non-blocking sockets; from here on this loop owns and closes them. */
      fds: [number, number];
      /** Bytes to deliver to each side before anything relayed (at most PIPE_CAPACITY each). */
      initial: [Uint8Array | null, Uint8Array | null];
      /** Bytes to read from side 0 and from side 1: null until its EOF; a number, exactly that many. */
      lengths?: [number | null, number | null];
      budget: { shared: SharedArrayBuffer; maxBytes: number } | null;
      /** 0: no idle limit. */
      idleTimeoutMs: number;
    }
  | { op: 'abort'; id: number }
  | { op: 'stop' };

export type TunnelOutcome = 'ok' | 'idle_timeout' | 'cap_exceeded' | 'side_failed' | 'aborted' | 'relay_failed';

export interface TunnelReport {
  id: number;
  outcome: TunnelOutcome;
  /** The side whose socket failed, for 'side_failed'. */
  failedSide: SideIndex | null;
  detail: string;
  /** Bytes delivered from side 0 to side 1 and from side 1 to side 0, initial bytes excluded. */
  bytes: [number, number];
  /** Whether side 0 and side 1 had sent their EOF (an owner tells "cut off" from "was done"). */
  eofFrom: [boolean, boolean];
}

interface Side {
  fd: number;
  /** Events registered with epoll; 0 when not registered. */
  interest: number;
  /** The peer is gone for both directions (EPOLLHUP). */
  hup: boolean;
}

interface Direction {
  pipeRead: number;
  pipeWrite: number;
  /** Bytes read and not yet written: in the pipe, or in `buffer` from `bufferOffset` on. */
  pending: number;
  /** Bytes still to read for an exact direction; null: read until EOF. */
  remaining: number | null;
  eof: boolean;
  shut: boolean;
  /** Delivered to the writing side, initial bytes included. */
  delivered: number;
  initial: number;
  /** The pipe's size: the most one splice reads. */
  capacity: number;
  /** Set once the direction turned bulk: it copies through this instead of the pipe. */
  buffer: Buffer | null;
  bufferOffset: number;
}

interface Tunnel {
  id: number;
  sides: [Side, Side];
  dirs: [Direction, Direction];
  /** Both directions have exact lengths (a forward body): 'ok' only once both delivered everything. */
  exact: boolean;
  budget: ByteBudget | null;
  idleTimeoutMs: number;
  lastActivity: number;
}

const other = (side: SideIndex): SideIndex => (side === 0 ? 1 : 0);

export class SpliceLoop {
  private readonly epfd: number;
  private readonly tunnels = new Map<number, Tunnel>();
  private readonly events = Buffer.alloc(MAX_EVENTS * EPOLL_EVENT_SIZE);
  private readonly ctlEvent = Buffer.alloc(EPOLL_EVENT_SIZE);
  private readonly wakeBuffer = Buffer.alloc(8);
  private readonly pipeFds = new Int32Array(2);
  private nextIdleCheck = Infinity;
  private now = Date.now();
  private stopping = false;

  constructor(
    private readonly wakeFd: number,
    private readonly nextCommand: () => RelayCommand | undefined,
    private readonly report: (report: TunnelReport) => void,
    /** The system calls; a scripted stand-in lets a test drive one exact sequence of splice results. */
    private readonly sys: SpliceSys = spliceSys(),
  ) {
    this.epfd = this.sys.epollCreate();
    if (this.epfd < 0) throw new Error(`epoll_create1 failed: ${errnoName(this.sys.errno())}`);
    if (this.control(EPOLL_CTL_ADD, wakeFd, EPOLLIN, WAKE_KEY, 0) < 0) {
      throw new Error(`cannot watch the wake eventfd: ${errnoName(this.sys.errno())}`);
    }
  }

  run(): void {
    this.runCommands();
    while (!this.stopping) {
      const count = this.sys.epollWait(this.epfd, this.events, MAX_EVENTS, this.waitTimeout());
      if (count < 0) {
        const errno = this.sys.errno();
        if (errno === EINTR) continue;
        throw new Error(`epoll_wait failed: ${errnoName(errno)}`);
      }
      this.now = Date.now();
      for (let i = 0; i < count; i++) this.dispatch(i * EPOLL_EVENT_SIZE);
      if (this.now >= this.nextIdleCheck) this.checkIdle();
    }
    for (const tunnel of [...this.tunnels.values()]) this.end(tunnel, 'aborted', null, 'the relay stopped');
    this.sys.close(this.epfd);
  }

  private dispatch(offset: number): void {
    const mask = this.events.readUInt32LE(offset);
    const key = this.events.readUInt32LE(offset + 4);
    const side = this.events.readUInt32LE(offset + 8);
    if (key === WAKE_KEY) {
      this.sys.read(this.wakeFd, this.wakeBuffer, 8);
      this.runCommands();
      return;
    }
    // A tunnel ended earlier in this batch leaves stale events; ids are never reused.
    const tunnel = this.tunnels.get(key);
    if (tunnel && (side === 0 || side === 1)) this.service(tunnel, side, mask);
  }

  private runCommands(): void {
    for (let command = this.nextCommand(); command !== undefined; command = this.nextCommand()) {
      if (command.op === 'adopt') this.adopt(command);
      else if (command.op === 'abort') {
        const tunnel = this.tunnels.get(command.id);
        if (tunnel) this.abort(tunnel);
      } else this.stopping = true;
    }
  }

  private adopt(command: Extract<RelayCommand, { op: 'adopt' }>): void {
    const lengths = command.lengths ?? [null, null];
    const direction = (index: SideIndex): Direction => ({
      pipeRead: -1,
      pipeWrite: -1,
      pending: 0,
      remaining: lengths[index],
      eof: false,
      shut: false,
      delivered: 0,
      initial: 0,
      capacity: PIPE_CAPACITY,
      buffer: null,
      bufferOffset: 0,
    });
    const tunnel: Tunnel = {
      id: command.id,
      sides: [
        { fd: command.fds[0], interest: 0, hup: false },
        { fd: command.fds[1], interest: 0, hup: false },
      ],
      dirs: [direction(0), direction(1)],
      exact: lengths[0] !== null && lengths[1] !== null,
      budget: command.budget ? new ByteBudget(command.budget.maxBytes, command.budget.shared) : null,
      idleTimeoutMs: command.idleTimeoutMs,
      lastActivity: this.now,
    };
    this.tunnels.set(tunnel.id, tunnel);
    for (const dir of tunnel.dirs) {
      if (this.sys.pipe(this.pipeFds) < 0) {
        this.end(tunnel, 'relay_failed', null, `pipe2 failed: ${errnoName(this.sys.errno())}`);
        return;
      }
      dir.pipeRead = this.pipeFds[0]!;
      dir.pipeWrite = this.pipeFds[1]!;
      // Fewer, larger splices; refused beyond the uid's pipe allowance, and then the default will do.
      const size = this.sys.setPipeSize(dir.pipeWrite, PIPE_BYTES_WANTED);
      if (size > 0) dir.capacity = size;
    }
    for (const side of [0, 1] as const) {
      const bytes = command.initial[side];
      if (bytes === null || bytes.length === 0) continue;
      const dir = tunnel.dirs[other(side)];
      const buffer = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      // An empty pipe takes PIPE_CAPACITY bytes whole; the sender checked the length.
      if (bytes.length > PIPE_CAPACITY || this.sys.write(dir.pipeWrite, buffer, buffer.length) !== buffer.length) {
        this.end(tunnel, 'relay_failed', null, 'cannot queue the initial bytes');
        return;
      }
      dir.pending = buffer.length;
      dir.initial = buffer.length;
    }
    if (tunnel.idleTimeoutMs > 0) this.nextIdleCheck = Math.min(this.nextIdleCheck, this.now + tunnel.idleTimeoutMs);
    this.service(tunnel, 0, 0);
  }

  /**
   * An owner's abort (its turn ended) first takes in what the sockets already hold, without
   * waiting: a tunnel whose peers had both finished, or whose one peer had closed after sending
   * everything, ends 'ok' as it would have a moment later. Anything else is cut off.
   */
  private abort(tunnel: Tunnel): void {
    for (const index of [0, 1] as const) {
      if (!this.tunnels.has(tunnel.id)) return;
      const ready = this.sys.readyNow(tunnel.sides[index].fd);
      if (ready > 0) this.service(tunnel, index, ready & ~EPOLLOUT);
    }
    if (this.tunnels.has(tunnel.id)) this.end(tunnel, 'aborted', null, 'aborted by its owner');
  }

  /** Moves what can move both ways, then ends the tunnel or updates what epoll watches. */
  private service(tunnel: Tunnel, side: SideIndex, mask: number): void {
    if (mask & EPOLLERR) {
      this.end(tunnel, 'side_failed', side, 'socket error');
      return;
    }
    if (mask & EPOLLHUP) tunnel.sides[side].hup = true;
    if (!this.pump(tunnel, 0) || !this.pump(tunnel, 1)) return;
    if (this.finished(tunnel)) {
      this.end(tunnel, 'ok', null, '');
      return;
    }
    for (const index of [0, 1] as const) {
      if (!this.watch(tunnel, index)) return;
    }
  }

  /** Relays direction `index` until it would block; false when the tunnel ended. */
  private pump(tunnel: Tunnel, index: SideIndex): boolean {
    const dir = tunnel.dirs[index];
    const from = tunnel.sides[index];
    const to = tunnel.sides[other(index)];
    for (let round = 0; round < ROUNDS_PER_WAKE; round++) {
      if (dir.pending > 0) {
        // A view only for the rest of a partial write: one object per call would keep the GC busy.
        const held = dir.bufferOffset === 0 ? dir.buffer : dir.buffer?.subarray(dir.bufferOffset);
        const moved = held
          ? this.sys.write(to.fd, held, dir.pending)
          : this.sys.splice(dir.pipeRead, to.fd, dir.pending, SPLICE_FLAGS);
        if (moved < 0) return this.blockedOrFailed(tunnel, other(index));
        dir.pending -= moved;
        dir.bufferOffset += moved;
        dir.delivered += moved;
        tunnel.lastActivity = this.now;
        continue;
      }
      if (dir.eof || dir.remaining === 0) break;
      // The pipe is empty here: a direction turns bulk between two reads.
      if (!dir.buffer && (dir.delivered >= BULK_AFTER_BYTES || (dir.remaining ?? 0) >= BULK_AFTER_BYTES)) {
        dir.buffer = Buffer.allocUnsafe(BULK_BUFFER_BYTES);
      }
      const room = dir.buffer ? dir.buffer.length : dir.capacity;
      // One byte past the allowance is read so that exceeding it is seen, and never sent.
      let allowance = tunnel.budget ? Math.min(room, tunnel.budget.remaining() + 1) : room;
      if (dir.remaining !== null) allowance = Math.min(allowance, dir.remaining);
      dir.bufferOffset = 0;
      const got = dir.buffer
        ? this.sys.read(from.fd, dir.buffer, allowance)
        : this.sys.splice(from.fd, dir.pipeWrite, allowance, SPLICE_FLAGS);
      if (got < 0) return this.blockedOrFailed(tunnel, index);
      if (got === 0) {
        dir.eof = true;
        if (dir.remaining !== null) {
          this.end(tunnel, 'side_failed', index, `EOF with ${dir.remaining} bytes of the message still to come`);
          return false;
        }
        break;
      }
      tunnel.lastActivity = this.now;
      if (tunnel.budget?.charge(got).over) {
        this.end(tunnel, 'cap_exceeded', null, `the turn used its ${tunnel.budget.maxBytes} bytes`);
        return false;
      }
      if (dir.remaining !== null) dir.remaining -= got;
      dir.pending = got;
    }
    // After the loop, not in it: an EOF seen in the last round, or a pipe emptied in it after the
    // EOF, leaves nothing for epoll to wake this direction for (watch() stops reading at EOF).
    if (dir.eof && dir.pending === 0 && !dir.shut) {
      dir.shut = true;
      // Fails only when the peer is already gone, and then there is nobody to tell.
      this.sys.shutdown(to.fd, SHUT_WR);
    }
    return true;
  }

  /** After a failed splice on `side`'s socket: EAGAIN and EINTR wait for epoll; anything else ends the tunnel. */
  private blockedOrFailed(tunnel: Tunnel, side: SideIndex): boolean {
    const errno = this.sys.errno();
    if (errno === EAGAIN || errno === EINTR) return true;
    this.end(tunnel, 'side_failed', side, errnoName(errno));
    return false;
  }

  /**
   * Both directions delivered their EOF (or, exact, their last byte), or a side whose peer is
   * gone has sent everything. An exact tunnel's body must arrive whole: a peer gone before that
   * shows as a failed write, never as 'ok'.
   */
  private finished(tunnel: Tunnel): boolean {
    const [first, second] = tunnel.dirs;
    const done = (dir: Direction): boolean => dir.shut || (dir.remaining === 0 && dir.pending === 0);
    if (done(first) && done(second)) return true;
    if (tunnel.exact) return false;
    return (tunnel.sides[0].hup && first.shut) || (tunnel.sides[1].hup && second.shut);
  }

  /** Registers what side `index` waits for: readable while its pipe is empty, writable while data waits for it. */
  private watch(tunnel: Tunnel, index: SideIndex): boolean {
    const side = tunnel.sides[index];
    const from = tunnel.dirs[index];
    const into = tunnel.dirs[other(index)];
    let wanted = 0;
    if (!from.eof && from.pending === 0 && from.remaining !== 0) wanted |= EPOLLIN;
    if (into.pending > 0) wanted |= EPOLLOUT;
    if (wanted === side.interest) return true;
    // Nothing wanted means not registered at all: a lingering EPOLLHUP would otherwise wake us forever.
    const op = wanted === 0 ? EPOLL_CTL_DEL : side.interest === 0 ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
    if (this.control(op, side.fd, wanted, tunnel.id, index) < 0) {
      this.end(tunnel, 'relay_failed', null, `epoll_ctl failed: ${errnoName(this.sys.errno())}`);
      return false;
    }
    side.interest = wanted;
    return true;
  }

  private control(op: number, fd: number, events: number, key: number, side: number): number {
    this.ctlEvent.writeUInt32LE(events, 0);
    this.ctlEvent.writeUInt32LE(key, 4);
    this.ctlEvent.writeUInt32LE(side, 8);
    return this.sys.epollCtl(this.epfd, op, fd, op === EPOLL_CTL_DEL ? null : this.ctlEvent);
  }

  private checkIdle(): void {
    let next = Infinity;
    for (const tunnel of [...this.tunnels.values()]) {
      if (tunnel.idleTimeoutMs === 0) continue;
      const deadline = tunnel.lastActivity + tunnel.idleTimeoutMs;
      if (this.now >= deadline) this.end(tunnel, 'idle_timeout', null, `no bytes for ${tunnel.idleTimeoutMs} ms`);
      else next = Math.min(next, deadline);
    }
    this.nextIdleCheck = next;
  }

  private waitTimeout(): number {
    if (this.nextIdleCheck === Infinity) return -1;
    return Math.max(0, Math.ceil(this.nextIdleCheck - Date.now()));
  }

  /** The one place a tunnel's fds are closed. */
  private end(tunnel: Tunnel, outcome: TunnelOutcome, failedSide: SideIndex | null, detail: string): void {
    this.tunnels.delete(tunnel.id);
    for (const side of tunnel.sides) {
      if (side.interest !== 0) this.control(EPOLL_CTL_DEL, side.fd, 0, tunnel.id, 0);
      this.sys.close(side.fd);
    }
    for (const dir of tunnel.dirs) {
      if (dir.pipeRead >= 0) this.sys.close(dir.pipeRead);
      if (dir.pipeWrite >= 0) this.sys.close(dir.pipeWrite);
    }
    const relayed = (dir: Direction): number => Math.max(0, dir.delivered - dir.initial);
    this.report({
      id: tunnel.id,
      outcome,
      failedSide,
      detail,
      bytes: [relayed(tunnel.dirs[0]), relayed(tunnel.dirs[1])],
      eofFrom: [tunnel.dirs[0].eof, tunnel.dirs[1].eof],
    });
  }
}
