/**
 * Turns over many hosts: a host application holds one client per host and places each new
 * session on a host that is ready and has a free turn slot (its `GET /api/ready` capacity), then
 * keeps every later turn of that session on the same host, because the session's turns, output
 * and workspaces live there. The pool never moves a session: a pinned host that drains or fills
 * up refuses the turn itself (503 `draining`, 429 `capacity_exhausted`), and the application
 * decides (wait, or end the session and start a new one elsewhere). docs/hosting.md, "Placing turns".
 */
import type { HostCapacity } from '../api/schema/index.js';
import { TurnhostApiError } from './errors.js';
import type { TurnhostClient } from './turnhost-client.js';

/** One host's answer to `GET /api/ready`: ready with its room, or why it takes no new session. */
export type HostReadiness =
  { host: string; ready: true; capacity: HostCapacity } | { host: string; ready: false; code: string; reason: string };

/** No host could take a new session; `hosts` says why, per host. */
export class NoHostReadyError extends Error {
  readonly code = 'no_host_ready';
  constructor(readonly hosts: HostReadiness[]) {
    super(
      `no host is ready with a free turn slot: ${hosts.map((h) => `${h.host}: ${h.ready ? 'no free slot' : h.reason}`).join('; ')}`,
    );
    this.name = 'NoHostReadyError';
  }
}

/** What placement needs of a host's client (TurnhostClient has it). */
export type PoolClient = Pick<TurnhostClient, 'ready'>;

export class HostPool<Client extends PoolClient = TurnhostClient> {
  readonly #hosts: ReadonlyMap<string, Client>;
  readonly #sessions = new Map<string, string>();

  /** `hosts`: a client per host, by a name the application chooses (and stores with its sessions). */
  constructor(hosts: Record<string, Client> | ReadonlyMap<string, Client>) {
    const entries = hosts instanceof Map ? [...hosts] : Object.entries(hosts);
    if (entries.length === 0) throw new TypeError('hosts: expected at least one host');
    this.#hosts = new Map(entries);
  }

  /** Every host's readiness, asked at once; an unreachable host is not ready (code `unreachable`). */
  async readiness(): Promise<HostReadiness[]> {
    return Promise.all([...this.#hosts].map(([host, client]) => hostReadiness(host, client)));
  }

  /**
   * The host of `sessionId`: the one it is pinned to, else a ready host with the most free
   * slots (ties: the fewest turns running, then the order given), which it is then pinned to.
   * Throws NoHostReadyError, naming each host's reason, when none is ready with a free slot.
   */
  async place(sessionId: string): Promise<{ host: string; client: Client }> {
    const pinned = this.#sessions.get(sessionId);
    if (pinned !== undefined) return { host: pinned, client: this.#hosts.get(pinned)! };
    const hosts = await this.readiness();
    const best = pickHost(hosts);
    if (best === null) throw new NoHostReadyError(hosts);
    // Another placement may have pinned it while the hosts were asked: the first pin holds.
    const raced = this.#sessions.get(sessionId);
    if (raced !== undefined) return { host: raced, client: this.#hosts.get(raced)! };
    this.#sessions.set(sessionId, best);
    return { host: best, client: this.#hosts.get(best)! };
  }

  /** The client of the host `sessionId` is pinned to; a TypeError when it is not placed. */
  clientFor(sessionId: string): Client {
    const host = this.#sessions.get(sessionId);
    if (host === undefined) throw new TypeError(`session ${sessionId} is not placed on any host (place it first)`);
    return this.#hosts.get(host)!;
  }

  hostOf(sessionId: string): string | undefined {
    return this.#sessions.get(sessionId);
  }

  /** Pins a session placed earlier (the application restarted and read its own records). */
  pin(sessionId: string, host: string): void {
    if (!this.#hosts.has(host)) throw new TypeError(`host: ${host} is not in this pool`);
    const pinned = this.#sessions.get(sessionId);
    if (pinned !== undefined && pinned !== host)
      throw new TypeError(`session ${sessionId} is pinned to ${pinned}: its files are there`);
    this.#sessions.set(sessionId, host);
  }

  /** Forgets a session (after deleting it on its host): its next placement may pick any host. */
  release(sessionId: string): void {
    this.#sessions.delete(sessionId);
  }
}

async function hostReadiness(host: string, client: PoolClient): Promise<HostReadiness> {
  try {
    const ready = await client.ready();
    // A host that serves no turns answers ready without a capacity: it cannot take a session.
    if (ready.capacity === undefined)
      return { host, ready: false, code: 'no_turns', reason: 'the host serves no turns (no capacity reported)' };
    return { host, ready: true, capacity: ready.capacity };
  } catch (error) {
    if (error instanceof TurnhostApiError) return { host, ready: false, code: error.code, reason: error.message };
    throw error;
  }
}

function pickHost(hosts: HostReadiness[]): string | null {
  let best: { host: string; capacity: HostCapacity } | null = null;
  for (const h of hosts) {
    if (!h.ready || h.capacity.draining || h.capacity.freeSlots <= 0) continue;
    const better =
      best === null ||
      h.capacity.freeSlots > best.capacity.freeSlots ||
      (h.capacity.freeSlots === best.capacity.freeSlots && h.capacity.turnsRunning < best.capacity.turnsRunning);
    if (better) best = { host: h.host, capacity: h.capacity };
  }
  return best?.host ?? null;
}
