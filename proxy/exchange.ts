/**
 * One CONNECT tunnel or one forward request of a turn proxy, and its accounting: bytes each
 * way, duration, the outcome (the first reason it was cut), recorded exactly once.
 */
import type net from 'node:net';
import { performance } from 'node:perf_hooks';
import type { KernelTunnel, TunnelEnd } from './relay/kernel-relay.js';
import type { ConnectionOutcome } from './events.js';
import type { Authority } from './host.js';
import type { Scope } from './policy.js';

export interface Target {
  authority: Authority;
  method: string | null;
  path: string | null;
  scope: Scope;
}

const TUNNEL_OUTCOMES: Record<TunnelEnd['outcome'], ConnectionOutcome> = {
  ok: 'ok',
  idle_timeout: 'idle_timeout',
  cap_exceeded: 'cap_exceeded',
  side_failed: 'upstream_error',
  aborted: 'turn_ended',
  relay_failed: 'relay_failed',
};

/** What a tunnel's end means for its exchange; side 0 is always the client. */
function outcomeOf(end: TunnelEnd, requestedAbort: ConnectionOutcome | null): ConnectionOutcome {
  if (end.outcome === 'aborted') return requestedAbort ?? 'turn_ended';
  if (end.outcome === 'side_failed' && end.failedSide === 0) return 'client_error';
  return TUNNEL_OUTCOMES[end.outcome];
}

/**
 * One CONNECT tunnel, or one forward request, and its accounting; records its event exactly
 * once. A tunnel's event comes when its upstream socket closes or, handed to the kernel relay,
 * when the kernel relay reports the tunnel ended. A forward request's comes when its answer was
 * delivered (or cut off); its upstream connection may live on in the pool, so the counts are
 * what moved on the connection during this request.
 */
export class Exchange {
  outcome: ConnectionOutcome = 'ok';
  readonly done: Promise<void>;
  private readonly started = performance.now();
  private recorded = false;
  /**
   * The client had sent its EOF: it was done with the connection, so a cut at the end of the
   * turn (only the rest of the answer lost) leaves the outcome 'ok'.
   */
  private clientDone = false;
  private tunnel: KernelTunnel | null = null;
  /** A forward request's upstream socket was handed to the kernel relay: its Node socket's close ends nothing. */
  private upstreamDetached = false;
  /** What an abort of a spliced tunnel asked for; applied when the kernel relay reports the end. */
  private requestedAbort: ConnectionOutcome | null = null;
  private splicedUp = 0;
  private splicedDown = 0;
  /** Null while a request waits for the fresh connection that replaces a stale reused one. */
  private socket: net.Socket | null = null;
  /** The connection's byte counters when this exchange took it over. */
  private baseline = { written: 0, read: 0 };
  /** Bytes on connections this request moved away from (a reused one that had gone stale). */
  private carried = { up: 0, down: 0 };
  /** Set once a forward request gave its connection back to the pool: the exchange no longer touches it. */
  private released: { bytesUp: number; bytesDown: number } | null = null;
  private resolveDone!: () => void;

  constructor(
    upstream: net.Socket,
    readonly target: Target,
    private readonly onDone: (exchange: Exchange) => void,
  ) {
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
    this.takeOver(upstream);
  }

  /** The connection; a tunnel's never changes, a forward request's is absent only inside `leave`..`takeOver`. */
  get upstream(): net.Socket {
    if (this.socket === null) throw new Error('the exchange is between connections');
    return this.socket;
  }

  /** True while a request left its stale connection and still waits for its fresh one. */
  awaitingConnection(): boolean {
    return this.socket === null && !this.recorded;
  }

  markClientDone(): void {
    this.clientDone = true;
  }

  /** The client is side 0 of the tunnel, the upstream side 1; `queuedUp` bytes went up with the hand-off. */
  handOff(tunnel: KernelTunnel, queuedUp: number): void {
    this.tunnel = tunnel;
    void tunnel.ended.then((end) => {
      this.splicedUp += queuedUp + end.bytes[0];
      this.splicedDown += end.bytes[1];
      if (end.eofFrom[0]) this.markClientDone();
      this.cutOff(outcomeOf(end, this.requestedAbort));
      this.finish();
    });
  }

  /**
   * A forward request's body, one way, through the kernel relay (side 0 the client, side 1 the
   * upstream). Its bytes join the exchange's; the owner decides what its end means (cutBy).
   */
  async relayBody(tunnel: KernelTunnel): Promise<TunnelEnd> {
    this.tunnel = tunnel;
    const end = await tunnel.ended;
    this.tunnel = null;
    this.splicedUp += end.bytes[0];
    this.splicedDown += end.bytes[1];
    return end;
  }

  /** A relayed body that ended otherwise than 'ok' cut the exchange (what an abort asked for, if one did). */
  cutBy(end: TunnelEnd): void {
    if (end.outcome !== 'ok') this.cutOff(outcomeOf(end, this.requestedAbort));
  }

  /** The forward request's upstream Node socket is being destroyed for the kernel relay: the connection lives on there. */
  detachUpstream(): void {
    this.upstreamDetached = true;
    this.socket?.removeListener('close', this.onUpstreamClose);
  }

  /**
   * A forward request whose reused connection failed before any answer leaves it, at once (its
   * close must not end the request), keeping what moved on it; `takeOver` gives the fresh one.
   */
  leave(): void {
    const stale = this.upstream;
    stale.removeListener('close', this.onUpstreamClose);
    this.carried.up += stale.bytesWritten - this.baseline.written;
    this.carried.down += stale.bytesRead - this.baseline.read;
    stale.destroy();
    this.socket = null;
  }

  /** The answer was read to its end and the connection went back to the pool. */
  releaseUpstream(): void {
    const { bytesUp, bytesDown } = this.counts();
    this.upstream.removeListener('close', this.onUpstreamClose);
    this.released = { bytesUp, bytesDown };
  }

  /** A forward request's answer reached the client: its event is recorded now. */
  complete(): void {
    this.finish();
  }

  abort(outcome: ConnectionOutcome): void {
    if (this.tunnel) {
      this.requestedAbort ??= outcome;
      this.tunnel.abort();
      return;
    }
    this.cutOff(outcome);
    // A released connection belongs to the pool, perhaps already to the next request; a
    // detached one closes no Node socket to end the exchange.
    if (this.released || this.socket === null || this.upstreamDetached) this.finish();
    else this.socket.destroy();
  }

  /** Whether the exchange was cut (or recorded) already: a forward relay then goes no further. */
  get settled(): boolean {
    return this.recorded || this.outcome !== 'ok';
  }

  counts(): { bytesUp: number; bytesDown: number; durationMs: number } {
    const durationMs = Math.round(performance.now() - this.started);
    if (this.released) return { ...this.released, durationMs };
    const onSocket =
      this.socket === null
        ? { up: 0, down: 0 }
        : { up: this.socket.bytesWritten - this.baseline.written, down: this.socket.bytesRead - this.baseline.read };
    return {
      bytesUp: this.carried.up + onSocket.up + this.splicedUp,
      bytesDown: this.carried.down + onSocket.down + this.splicedDown,
      durationMs,
    };
  }

  takeOver(upstream: net.Socket): void {
    this.socket = upstream;
    this.baseline = { written: upstream.bytesWritten, read: upstream.bytesRead };
    // Handing off destroys the Node socket; its 'close' comes a tick later, after handOff set the tunnel.
    upstream.once('close', this.onUpstreamClose);
  }

  private readonly onUpstreamClose = (): void => {
    if (this.tunnel === null) this.finish();
  };

  /** The first reason a connection was cut is its outcome. */
  private cutOff(outcome: ConnectionOutcome): void {
    if (this.outcome !== 'ok') return;
    if (outcome === 'turn_ended' && this.clientDone) return;
    this.outcome = outcome;
  }

  private finish(): void {
    if (this.recorded) return;
    this.recorded = true;
    this.socket?.removeListener('close', this.onUpstreamClose);
    this.onDone(this);
    this.resolveDone();
  }
}
