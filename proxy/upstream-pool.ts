/**
 * Idle upstream connections of one turn proxy, kept for the next forward request to the same
 * authority. Dialling is most of a proxied request's cost (connect, accept and close on both
 * ends of loopback; bench/proxy.ts), so a command that fetches several URLs from one host
 * reuses one connection, as it would talking to the host directly.
 *
 * A connection is put here only after Node's HTTP client freed it (the response was read to
 * its end and neither side asked to close). It leaves on reuse, on any byte, EOF or error
 * from the server, after `idleMs`, or when the pool closes with its proxy; a pool never
 * outlives its turn. The key is the canonical host and port the policy matched: reuse skips
 * resolution, and the connection goes to the address that was checked when it was dialled
 * for that same name.
 */
import type net from 'node:net';

export interface UpstreamPoolLimits {
  /** Idle connections kept per authority; the oldest beyond it is closed. */
  perAuthority: number;
  idleMs: number;
}

interface IdleEntry {
  socket: net.Socket;
  drop: () => void;
}

export class UpstreamPool {
  private readonly idle = new Map<string, IdleEntry[]>();

  constructor(private readonly limits: UpstreamPoolLimits) {}

  /** The most recently parked live connection for `authority`, no longer watched by the pool. */
  take(authority: string): net.Socket | null {
    const entries = this.idle.get(authority);
    while (entries && entries.length > 0) {
      const entry = entries.pop()!;
      this.unwatch(entry);
      if (entries.length === 0) this.idle.delete(authority);
      if (!entry.socket.destroyed && entry.socket.readable && entry.socket.writable) return entry.socket;
      entry.socket.destroy();
    }
    return null;
  }

  /** Parks a freed connection; the pool destroys it when it is no longer fit for reuse. */
  put(authority: string, socket: net.Socket): void {
    const entry: IdleEntry = { socket, drop: () => this.discard(authority, entry) };
    socket.on('data', entry.drop);
    socket.on('end', entry.drop);
    socket.on('close', entry.drop);
    socket.on('timeout', entry.drop);
    // Left flowing: the server's EOF or a stray byte must be seen while the connection waits.
    socket.setTimeout(this.limits.idleMs);
    const entries = this.idle.get(authority) ?? [];
    entries.push(entry);
    this.idle.set(authority, entries);
    if (entries.length > this.limits.perAuthority) this.discard(authority, entries[0]!);
  }

  /** Closes one idle connection (the oldest of an authority) to free its slot; null when none is idle. */
  evictOne(): net.Socket | null {
    for (const [authority, entries] of this.idle) {
      const oldest = entries[0];
      if (oldest === undefined) continue;
      this.discard(authority, oldest);
      return oldest.socket;
    }
    return null;
  }

  idleCount(): number {
    let count = 0;
    for (const entries of this.idle.values()) count += entries.length;
    return count;
  }

  closeAll(): void {
    for (const [authority, entries] of [...this.idle]) {
      for (const entry of [...entries]) this.discard(authority, entry);
    }
  }

  private discard(authority: string, entry: IdleEntry): void {
    const entries = this.idle.get(authority);
    const index = entries?.indexOf(entry) ?? -1;
    if (index < 0) return;
    entries!.splice(index, 1);
    if (entries!.length === 0) this.idle.delete(authority);
    this.unwatch(entry);
    entry.socket.destroy();
  }

  private unwatch(entry: IdleEntry): void {
    entry.socket.removeListener('data', entry.drop);
    entry.socket.removeListener('end', entry.drop);
    entry.socket.removeListener('close', entry.drop);
    entry.socket.removeListener('timeout', entry.drop);
    entry.socket.setTimeout(0);
  }
}
