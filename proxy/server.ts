/**
 * The per-turn egress proxy. It listens on one unix socket per turn, usable only by the turn's
 * worker uid (SO_PEERCRED checked on every accepted connection; the socket is also mode 0600
 * and owned by that uid when this process can chown it, else mode 0666), and serves the
 * worker's egress listener, 127.0.0.1:<port> inside the worker's network namespace (handed
 * over by the worker: supervisor/turns/listener-channel.ts), where the command's proxy variables point. Serves
 * HTTP/1.1 forward requests (absolute-form `http://` URIs) and CONNECT;
 * after CONNECT the tunnel is opaque bytes, relayed by the process's kernel relay (splice(2),
 * relay/) when it is ready and Node holds nothing of either socket, else in Node. Every
 * connection and refusal becomes an event.
 */
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import type { Duplex } from 'node:stream';
import type { Logger } from '../core/log.js';
import { fail, ok, type Result } from '../core/result.js';
import { ByteBudget } from './relay/byte-budget.js';
import { kernelRelay, type KernelRelay } from './relay/kernel-relay.js';
import { checkDestination, dialChecked, systemResolver, type Resolver } from './dialer.js';
import { EventQueue, type EgressEventSink } from './event-queue.js';
import { EgressTally, type EgressSummary } from './egress-summary.js';
import {
  connectionEvent,
  denialEvent,
  recordedAuthority,
  visiblePath,
  type ConnectionOutcome,
  type ConnectionRecord,
  type DenialReason,
  type TurnIdentity,
} from './events.js';
import { formatAuthority, parseAuthority, type Authority } from './host.js';
import { peerUid } from './peer-cred.js';
import { decide, type EgressPolicy } from './policy.js';
import { Exchange, type Target } from './exchange.js';
import {
  CONNECT_ESTABLISHED,
  parseForwardTarget,
  rawResponse,
  responseParts,
  type Refusal,
  type Refused,
} from './http-messages.js';
import { UpstreamPool } from './upstream-pool.js';
import { isBrokerTarget, type Brokers } from './brokers.js';
import { relayBrokered, type BrokeredRequestHandle, type BrokerRelayContext } from './broker-relay.js';
import { ForwardRequest, RETRYABLE_METHODS, type ForwardContext } from './forward.js';
import type { OwnListeners } from './self-connection.js';

export interface ProxyCaps {
  /** Concurrent connections: client connections to the socket, and upstream connections, each. */
  maxConnections: number;
  /** Bytes both ways over all connections of the turn. */
  maxBytes: number;
  idleTimeoutMs: number;
}

export interface TurnProxyOptions {
  socketPath: string;
  allowedPeerUid: number;
  policy: EgressPolicy;
  resolver?: Resolver;
  caps: ProxyCaps;
  sink: EgressEventSink;
  turn: TurnIdentity;
  logger: Logger;
  /** Default 10 s. */
  connectTimeoutMs?: number;
  /**
   * 'owner' (default when this process is root): the socket is chowned to the worker uid,
   * mode 0600. 'peer-cred-only' (default otherwise: a non-root process cannot chown): mode
   * 0666 and SO_PEERCRED alone admits the worker uid (docs/egress.md).
   */
  socketOwnership?: SocketOwnership;
  /** Relays established CONNECT tunnels by splice(2); default this process's kernel relay, null: in Node. */
  kernel?: KernelRelay | null;
  /**
   * The supervisor's own TCP listeners (its API): never dialled, whatever the address ranges
   * allow (self-connection.ts). The proxy adds its own worker listener's port itself.
   */
  ownListeners?: OwnListeners;
  /**
   * The turn's inference providers and brokered credentials (brokers.ts), served in origin
   * form on the same listener; default none.
   */
  brokers?: Brokers;
}

export type SocketOwnership = 'owner' | 'peer-cred-only';

interface TurnProxyStats {
  clientConnections: number;
  /** Open upstream connections, idle pooled ones included (each holds a slot of the cap). */
  upstreamConnections: number;
  /** Idle upstream connections kept for the next forward request to their authority. */
  pooledConnections: number;
  totalBytes: number;
  /** CONNECT tunnels handed to the kernel relay since the proxy started. */
  splicedTunnels: number;
}

export interface TurnProxy {
  socketPath: string;
  stats(): TurnProxyStats;
  /** The turn's egress so far: counts and its first denials (complete once the proxy is closed). */
  egressSummary(): EgressSummary;
  /**
   * A prepared worker's proxy listens before its turn exists (the socket is bound into the
   * worker's view at launch); the claim names the turn here, before the command can connect.
   */
  attribute(turn: TurnIdentity, logger: Logger): void;
  /**
   * Serves a listening socket received from the worker (supervisor/turns/listener-channel.ts; this proxy owns
   * the fd from now on, and closes it on failure too). Connections on it are not peer-checked:
   * only the worker's own network namespace can reach it. Once per proxy.
   */
  serveWorkerListener(fd: number): Promise<Result<{}, 'listen_failed'>>;
  /** The worker listener's port (the turn's 127.0.0.1:<port>), once served: the brokers' URLs name it. */
  egressPort(): number | null;
  /** Destroys every connection, stops listening and removes the socket. */
  close(): Promise<void>;
}

const MAX_SOCKET_PATH = 107;
const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;
const MAX_HEADER_BYTES = 16 * 1024;
/** How long a refused connection may stay open to read its answer. */
const REFUSAL_LINGER_MS = 2000;
/**
 * Idle upstream connections are closed after this (or the turn's idle timeout, if shorter):
 * below the 5 s keep-alive of common servers (Node, Apache), which then rarely close one just
 * as it is reused.
 */
const POOL_IDLE_MS = 2000;
const POOL_PER_AUTHORITY = 8;

function listening(server: net.Server, where: string | { fd: number }): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(where, () => {
      server.removeListener('error', reject);
      resolve();
    });
  });
}

/**
 * Node closes an fd it had opened as a handle when listen() then fails, and leaves one it
 * could not open: close `fd` only while it is still the same socket, never a number reused since.
 */
function closeIfStill(fd: number, inode: bigint): void {
  try {
    if (fs.fstatSync(fd, { bigint: true }).ino === inode) fs.closeSync(fd);
  } catch {
    // Already closed.
  }
}

function closed(server: net.Server): Promise<void> {
  return new Promise<void>((resolve) => server.close(() => resolve()));
}

function validateOptions(options: TurnProxyOptions): string | null {
  if (!path.isAbsolute(options.socketPath)) return 'socketPath must be absolute';
  if (Buffer.byteLength(options.socketPath) > MAX_SOCKET_PATH)
    return `socketPath must be at most ${MAX_SOCKET_PATH} bytes`;
  if (!Number.isSafeInteger(options.allowedPeerUid) || options.allowedPeerUid < 0)
    return 'allowedPeerUid must be a uid';
  for (const key of ['maxConnections', 'maxBytes', 'idleTimeoutMs'] as const) {
    const value = options.caps[key];
    if (!Number.isSafeInteger(value) || value < 1) return `caps.${key} must be a positive integer`;
  }
  return null;
}

class TurnProxyServer implements TurnProxy {
  readonly socketPath: string;
  private closed = false;
  private readonly budget: ByteBudget;
  private readonly kernel: KernelRelay | null;
  private splicedTunnels = 0;
  private upstreamSlots = 0;
  private readonly pool: UpstreamPool;
  /** Releases an upstream connection's slot of the cap, once; keyed by its socket. */
  private readonly slotRelease = new WeakMap<net.Socket, () => void>();
  /** What a connection currently serves (absent while it waits in the pool), and what its socket error means to it. */
  private readonly owner = new WeakMap<net.Socket, { exchange: Exchange; upstreamFailed: () => void }>();
  /** Every accepted socket, refused ones included, so close() leaves none behind. */
  private readonly accepted = new Set<net.Socket>();
  /** Admitted client connections (the connection cap counts these); a spliced tunnel counts as its Exchange. */
  private readonly clients = new Set<net.Socket | Exchange>();
  private readonly exchanges = new Set<Exchange>();
  private readonly http: http.Server;
  private readonly listener: net.Server;
  private workerListener: net.Server | null = null;
  /** The worker listener's port: in the supervisor's namespace the same number is this host's, never the turn's to dial. */
  private workerListenerPort: number | null = null;
  private readonly resolver: Resolver;
  private readonly connectTimeoutMs: number;
  private readonly events: EventQueue;
  /** Client sockets the kernel relay writes an answer body to (forward.ts). */
  private readonly relayWriting = new WeakSet<net.Socket>();
  private readonly forwardContext: ForwardContext;
  private readonly tally = new EgressTally();
  private readonly brokerContext: BrokerRelayContext;
  /** Brokered requests in flight: the turn's end cuts them, each recorded before the events close. */
  private readonly brokered = new Set<BrokeredRequestHandle>();

  constructor(private options: TurnProxyOptions) {
    this.socketPath = options.socketPath;
    this.resolver = options.resolver ?? systemResolver;
    this.connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    this.budget = new ByteBudget(options.caps.maxBytes);
    this.pool = new UpstreamPool({
      perAuthority: POOL_PER_AUTHORITY,
      idleMs: Math.min(POOL_IDLE_MS, options.caps.idleTimeoutMs),
    });
    // Started with the proxy, so that it is ready by the turn's first CONNECT.
    this.kernel = options.kernel === undefined ? kernelRelay() : options.kernel;
    this.events = new EventQueue(options.sink, (event, refused) => {
      this.options.logger.error('egress event refused by the store', { kind: event.kind, detail: refused.detail });
    });
    this.forwardContext = {
      kernel: this.kernel,
      budget: this.budget,
      idleTimeoutMs: options.caps.idleTimeoutMs,
      pool: this.pool,
      charge: (bytes, exchange) => this.charge(bytes, exchange),
      assign: (socket, exchange, upstreamFailed) => this.assign(socket, exchange, upstreamFailed),
      unassign: (socket) => this.owner.delete(socket),
      slotRelease: (socket) => this.slotRelease.get(socket),
      connectForRequests: (target) => this.connectForRequests(target),
      refuseResponse: (res, refused) => this.refuseResponse(res, refused),
      clientDetached: (exchange) => this.clientDetached(exchange),
      relayWriting: this.relayWriting,
    };
    this.brokerContext = {
      brokers: options.brokers ?? { inference: new Map(), credential: new Map() },
      idleTimeoutMs: options.caps.idleTimeoutMs,
      dial: (target) => this.dial(target),
      charge: (bytes) => this.charge(bytes, null),
      budgetLeft: () => this.budget.remaining(),
      deny: (reason, detail, host, port) => this.deny({ reason, detail, host, port }),
      record: (record) => this.recordBrokered(record),
      started: (request) => {
        if (this.closed) return false;
        this.brokered.add(request);
        return true;
      },
      ended: (request) => this.brokered.delete(request),
    };
    // Node's own Host check answers a bare 400 that records nothing; hostHeaderAgrees refuses
    // the same requests as a policy decision, with its reason and its event.
    this.http = http.createServer({
      maxHeaderSize: MAX_HEADER_BYTES,
      requestTimeout: 0,
      keepAlive: true,
      requireHostHeader: false,
    });
    this.http.on('request', (req, res) => void this.handleForward(req, res));
    this.http.on('connect', (req, socket, head) => {
      const client = netSocket(socket);
      if (client) void this.handleConnect(req, client, head);
    });
    this.http.on('upgrade', (req, socket) => {
      const client = netSocket(socket);
      if (client)
        this.refuseRaw(client, {
          status: 403,
          refusal: this.refusalFor(req, 'unsupported_upgrade', 'protocol upgrades are not relayed'),
        });
    });
    this.http.on('clientError', (error, socket) => {
      const detail = `malformed request (${(error as NodeJS.ErrnoException).code ?? 'parse error'})`;
      const client = netSocket(socket);
      // The relay is writing an answer's body into it: a refusal now would land inside that body.
      if (client && this.relayWriting.has(client)) client.destroy();
      else if (client)
        this.refuseRaw(client, { status: 400, refusal: { reason: 'invalid_request', detail, host: '', port: null } });
    });
    this.listener = net.createServer({ allowHalfOpen: true, pauseOnConnect: true }, (socket) =>
      this.acceptFromSocketPath(socket),
    );
  }

  attribute(turn: TurnIdentity, logger: Logger): void {
    this.options = { ...this.options, turn, logger };
  }

  egressPort(): number | null {
    return this.workerListenerPort;
  }

  stats(): TurnProxyStats {
    return {
      clientConnections: this.clients.size,
      upstreamConnections: this.upstreamSlots,
      pooledConnections: this.pool.idleCount(),
      totalBytes: this.budget.usedBytes(),
      splicedTunnels: this.splicedTunnels,
    };
  }

  egressSummary(): EgressSummary {
    return this.tally.summary();
  }

  async listen(): Promise<Result<{}, 'listen_failed'>> {
    try {
      await listening(this.listener, this.socketPath);
      this.restrictSocket();
      return ok({});
    } catch (error) {
      this.listener.close();
      return fail('listen_failed', `cannot listen on ${this.socketPath}: ${(error as Error).message}`);
    }
  }

  async serveWorkerListener(fd: number): Promise<Result<{}, 'listen_failed'>> {
    let socketInode: bigint;
    try {
      socketInode = fs.fstatSync(fd, { bigint: true }).ino;
    } catch (error) {
      return fail('listen_failed', `the worker listener (fd ${fd}) is not open: ${(error as Error).message}`);
    }
    if (this.closed || this.workerListener !== null) {
      fs.closeSync(fd);
      return fail('listen_failed', this.closed ? 'the proxy is closed' : 'the proxy already serves a worker listener');
    }
    const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true }, (socket) =>
      this.acceptFromWorkerListener(socket),
    );
    this.workerListener = server;
    try {
      await listening(server, { fd });
      const address = server.address();
      if (address !== null && typeof address === 'object') this.workerListenerPort = address.port;
      return ok({});
    } catch (error) {
      closeIfStill(fd, socketInode);
      return fail('listen_failed', `cannot serve the worker listener (fd ${fd}): ${(error as Error).message}`);
    }
  }

  /** The peer-uid check is the guarantee; when we can chown, the mode keeps other uids from even connecting. */
  private restrictSocket(): void {
    const ownership = this.options.socketOwnership ?? (process.geteuid?.() === 0 ? 'owner' : 'peer-cred-only');
    if (ownership === 'peer-cred-only') {
      fs.chmodSync(this.socketPath, 0o666);
      return;
    }
    fs.chmodSync(this.socketPath, 0o600);
    fs.chownSync(this.socketPath, this.options.allowedPeerUid, process.getgid?.() ?? 0);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    const recorded = [...this.exchanges].map((exchange) => exchange.done);
    for (const exchange of this.exchanges) exchange.abort('turn_ended');
    this.pool.closeAll();
    for (const request of [...this.brokered]) request.abort('turn_ended');
    for (const socket of this.accepted) socket.destroy();
    this.http.close();
    await Promise.all(
      [this.listener, this.workerListener].map((server) => (server ? closed(server) : Promise.resolve())),
    );
    await Promise.all(recorded);
    this.events.close();
    fs.rmSync(this.socketPath, { force: true });
  }

  private deny(refusal: Refusal): void {
    this.tally.denial(refusal);
    this.events.push(denialEvent(this.options.turn, refusal));
    this.options.logger.info('egress denied', {
      host: refusal.host,
      port: refusal.port,
      reason: refusal.reason,
      detail: refusal.detail,
    });
  }

  /**
   * Answers and half-closes, then discards whatever the client still sends: closing with unread
   * bytes would reset the connection and the client might never read the refusal.
   */
  private refuseRaw(socket: net.Socket, refused: Refused): void {
    if (refused.status !== 502) this.deny(refused.refusal);
    if (socket.writable) socket.end(rawResponse(refused));
    socket.setTimeout(REFUSAL_LINGER_MS, () => socket.destroy());
    socket.on('error', () => socket.destroy());
    socket.on('end', () => socket.destroy());
    socket.resume();
  }

  private refuseResponse(res: http.ServerResponse, refused: Refused): void {
    if (refused.status !== 502) this.deny(refused.refusal);
    const { headers, body } = responseParts(refused);
    res.shouldKeepAlive = false;
    res.writeHead(refused.status, headers);
    res.end(body);
  }

  private refusalFor(req: http.IncomingMessage, reason: DenialReason, detail: string): Refusal {
    const url = req.url ?? '';
    return { reason, detail, host: recordedAuthority(url.replace(/^[a-z]+:\/\//i, '')), port: null };
  }

  /** A connection to the unix socket: only the turn's worker uid is served. */
  private acceptFromSocketPath(socket: net.Socket): void {
    if (!this.track(socket)) return;
    const peer = peerUid(socket);
    if (!peer.ok || peer.uid !== this.options.allowedPeerUid) {
      const detail = peer.ok ? `peer uid ${peer.uid} is not the turn's worker uid` : peer.detail;
      this.refuseRaw(socket, { status: 403, refusal: { reason: 'peer_refused', detail, host: '', port: null } });
      this.options.logger.warn('egress peer refused', {
        peerUid: peer.ok ? peer.uid : null,
        peerPid: peer.ok ? peer.pid : null,
      });
      return;
    }
    this.serveClient(socket);
  }

  /** A connection to the worker listener: it comes from the worker's network namespace, that is from the turn. */
  private acceptFromWorkerListener(socket: net.Socket): void {
    if (!this.track(socket)) return;
    socket.setNoDelay(true);
    this.serveClient(socket);
  }

  /** False (and the socket destroyed) once the proxy is closed. */
  private track(socket: net.Socket): boolean {
    if (this.closed) {
      socket.destroy();
      return false;
    }
    this.accepted.add(socket);
    socket.once('close', () => this.accepted.delete(socket));
    return true;
  }

  private serveClient(socket: net.Socket): void {
    if (this.clients.size >= this.options.caps.maxConnections) {
      const detail = `more than ${this.options.caps.maxConnections} concurrent connections`;
      this.refuseRaw(socket, { status: 403, refusal: { reason: 'cap_exceeded', detail, host: '', port: null } });
      return;
    }
    this.clients.add(socket);
    socket.once('close', () => this.clients.delete(socket));
    socket.setTimeout(this.options.caps.idleTimeoutMs, () => socket.destroy());
    this.http.emit('connection', socket);
    socket.resume();
  }

  /**
   * A client connection Node's HTTP server let go of (its request body went to the kernel relay):
   * counted for the cap by its exchange until the socket the answer goes out on closes.
   */
  private clientDetached(exchange: Exchange): { adopt(socket: net.Socket): void; release(): void } {
    this.clients.add(exchange);
    let held = true;
    const release = (): void => {
      if (held) this.clients.delete(exchange);
      held = false;
    };
    return {
      adopt: (socket) => {
        if (!this.track(socket)) return;
        this.clients.add(socket);
        release();
        socket.once('close', () => this.clients.delete(socket));
      },
      release,
    };
  }

  /** Validation, policy and the byte cap, shared by forward requests and CONNECT. */
  private admit(
    authority: Authority,
    method: string | null,
    path: string | null,
  ): Result<{ target: Target }, DenialReason> {
    const host = authority.host.host;
    const decision = decide(this.options.policy, host, authority.port);
    if (!decision.ok) return decision;
    if (this.budget.remaining() === 0)
      return fail('cap_exceeded', `the turn used its ${this.options.caps.maxBytes} bytes`);
    return ok({ target: { authority, method, path, scope: decision.scope } });
  }

  /** The ports a dial to this host must not reach: the supervisor's listeners and this proxy's worker listener. */
  private ownPorts(): number[] {
    const ports = this.options.ownListeners?.ports() ?? [];
    return this.workerListenerPort === null ? ports : [...ports, this.workerListenerPort];
  }

  /** A slot of the upstream connection cap; an idle pooled connection gives its slot up first. */
  private reserveSlot(): Result<{ release: () => void }, 'cap_exceeded'> {
    if (this.upstreamSlots >= this.options.caps.maxConnections) {
      const evicted = this.pool.evictOne();
      if (evicted !== null) this.slotRelease.get(evicted)?.();
    }
    if (this.upstreamSlots >= this.options.caps.maxConnections) {
      return fail('cap_exceeded', `more than ${this.options.caps.maxConnections} concurrent upstream connections`);
    }
    this.upstreamSlots++;
    let held = true;
    return ok({
      release: () => {
        if (held) this.upstreamSlots--;
        held = false;
      },
    });
  }

  /**
   * Reserves a slot, resolves, checks every address, dials the checked address. The socket's
   * bytes are charged to the turn and its errors and idle time go to the exchange it serves.
   */
  private async dial(
    target: Target,
  ): Promise<Result<{ socket: net.Socket; release: () => void }, DenialReason | 'connect_failed'>> {
    const slot = this.reserveSlot();
    if (!slot.ok) return slot;
    const none = { bytesUp: 0, bytesDown: 0, durationMs: 0 };
    const resolved = await checkDestination(target.authority, {
      policy: this.options.policy,
      resolver: this.resolver,
      ownPorts: this.ownPorts(),
    });
    if (!resolved.ok) {
      slot.release();
      return resolved;
    }
    const dialled = await dialChecked(resolved.addresses, target.authority.port, this.connectTimeoutMs);
    if (!dialled.ok) {
      slot.release();
      this.recordConnection(target, 'connect_failed', none);
      return dialled;
    }
    const socket = dialled.socket;
    if (this.closed) {
      slot.release();
      socket.destroy();
      this.recordConnection(target, 'turn_ended', none);
      return fail('turn_ended', 'the turn ended while connecting');
    }
    this.slotRelease.set(socket, slot.release);
    socket.on('timeout', () => this.owner.get(socket)?.exchange.abort('idle_timeout'));
    socket.on('error', () => {
      const owner = this.owner.get(socket);
      if (owner) owner.upstreamFailed();
      else socket.destroy();
    });
    socket.on('data', (chunk: Buffer) => this.charge(chunk.length, this.owner.get(socket)?.exchange ?? null, socket));
    return ok({ socket, release: slot.release });
  }

  /** An exchange for `socket`, recorded when it is done. */
  private serve(socket: net.Socket, target: Target): Exchange {
    const exchange = new Exchange(socket, target, (done) => {
      this.exchanges.delete(done);
      this.recordConnection(done.target, done.outcome, done.counts());
    });
    this.exchanges.add(exchange);
    return exchange;
  }

  /** `socket` now works for `exchange`: its idle time, bytes and errors are the exchange's. */
  private assign(
    socket: net.Socket,
    exchange: Exchange,
    upstreamFailed = () => exchange.abort('upstream_error'),
  ): void {
    this.owner.set(socket, { exchange, upstreamFailed });
    socket.setTimeout(this.options.caps.idleTimeoutMs);
  }

  /** False when the bytes took the turn over its allowance (the exchange, or an idle connection, is then cut). */
  private charge(bytes: number, exchange: Exchange | null, socket?: net.Socket): boolean {
    if (!this.budget.charge(bytes).over) return true;
    if (exchange) exchange.abort('cap_exceeded');
    else socket?.destroy();
    return false;
  }

  private recordConnection(
    target: Target,
    outcome: ConnectionOutcome,
    counts: { bytesUp: number; bytesDown: number; durationMs: number },
  ): void {
    const record = {
      host: target.authority.host.host,
      port: target.authority.port,
      method: target.method,
      path: target.path,
      ...counts,
      outcome,
      scope: target.scope,
    };
    this.events.push(connectionEvent(this.options.turn, record));
    this.tally.connection(counts);
    this.options.logger.debug('egress connection', {
      host: record.host,
      port: record.port,
      method: record.method,
      path: record.path,
      outcome,
      bytesUp: counts.bytesUp,
      bytesDown: counts.bytesDown,
    });
  }

  /** A brokered request's record: its scope, broker and status are the relay's (broker-relay.ts). */
  private recordBrokered(record: ConnectionRecord): void {
    this.events.push(connectionEvent(this.options.turn, record));
    this.tally.connection(record);
    this.options.logger.debug('brokered request', {
      broker: record.broker ?? null,
      method: record.method,
      path: record.path,
      status: record.status ?? null,
      outcome: record.outcome,
    });
  }

  private hostHeaderAgrees(
    req: http.IncomingMessage,
    authority: Authority,
    defaultPort: number | null,
  ): Result<{}, 'host_mismatch' | 'invalid_request'> {
    const hostHeaders: string[] = [];
    for (let i = 0; i + 1 < req.rawHeaders.length; i += 2) {
      if (req.rawHeaders[i]!.toLowerCase() === 'host') hostHeaders.push(req.rawHeaders[i + 1]!);
    }
    // HTTP/1.1 requires Host on every request (RFC 9112, section 3.2), and an origin may route
    // a forwarded request by it. HTTP/1.0 predates it; a CONNECT's authority-form target names
    // the host itself and the tunnel's bytes are never parsed, so many clients send none.
    if (hostHeaders.length === 0 && req.httpVersion !== '1.0' && req.method !== 'CONNECT')
      return fail('invalid_request', `an HTTP/${req.httpVersion} request without a Host header`);
    if (hostHeaders.length === 0) return ok({});
    if (hostHeaders.length > 1) return fail('host_mismatch', 'more than one Host header');
    const parsed = parseAuthority(hostHeaders[0]!, defaultPort ?? authority.port);
    if (!parsed.ok || parsed.authority.host.host !== authority.host.host || parsed.authority.port !== authority.port) {
      return fail('host_mismatch', `the Host header does not name ${formatAuthority(authority)}`);
    }
    return ok({});
  }

  /** Authority, Host agreement, policy and the byte cap: what every request passes before any connection. */
  private check(
    req: http.IncomingMessage,
    authorityText: string,
    defaultPort: number | null,
    visible: { method: string | null; path: string | null },
  ): { ok: true; target: Target } | { ok: false; refused: Refused } {
    const parsed = parseAuthority(authorityText, defaultPort);
    if (!parsed.ok) {
      return {
        ok: false,
        refused: {
          status: 403,
          refusal: { reason: parsed.reason, detail: parsed.detail, host: recordedAuthority(authorityText), port: null },
        },
      };
    }
    const authority = parsed.authority;
    const where = { host: authority.host.host, port: authority.port };
    const agrees = this.hostHeaderAgrees(req, authority, defaultPort);
    if (!agrees.ok)
      return {
        ok: false,
        refused: {
          status: agrees.reason === 'invalid_request' ? 400 : 403,
          refusal: { reason: agrees.reason, detail: agrees.detail, ...where },
        },
      };
    const admitted = this.admit(authority, visible.method, visible.path);
    if (!admitted.ok)
      return {
        ok: false,
        refused: { status: 403, refusal: { reason: admitted.reason, detail: admitted.detail, ...where } },
      };
    return { ok: true, target: admitted.target };
  }

  /** A fresh upstream connection for a checked target, or the refusal to answer. */
  private async connect(
    target: Target,
  ): Promise<{ ok: true; socket: net.Socket; release: () => void } | { ok: false; refused: Refused }> {
    const dialled = await this.dial(target);
    if (dialled.ok) return dialled;
    if (dialled.reason === 'connect_failed') return { ok: false, refused: { status: 502, detail: dialled.detail } };
    const where = { host: target.authority.host.host, port: target.authority.port };
    return {
      ok: false,
      refused: { status: 403, refusal: { reason: dialled.reason, detail: dialled.detail, ...where } },
    };
  }

  /** A fresh connection for forward requests: it may outlive the request in the pool, so it holds its slot until it closes. */
  private async connectForRequests(
    target: Target,
  ): Promise<{ ok: true; socket: net.Socket } | { ok: false; refused: Refused }> {
    const connected = await this.connect(target);
    if (connected.ok) connected.socket.once('close', connected.release);
    return connected;
  }

  private async handleForward(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    // A forward proxy receives only absolute-form targets: an origin-form one is for a broker.
    if (isBrokerTarget(req.url ?? '')) return relayBrokered(this.brokerContext, req, res);
    const forward = parseForwardTarget(req.url ?? '');
    if (!forward.ok) {
      this.refuseResponse(res, {
        status: 403,
        refusal: { reason: forward.reason, detail: forward.detail, host: '', port: null },
      });
      return;
    }
    const visible = { method: req.method ?? 'GET', path: visiblePath(forward.pathAndQuery) };
    const checked = this.check(req, forward.authorityText, 80, visible);
    if (!checked.ok) return this.refuseResponse(res, checked.refused);
    const target = checked.target;
    const authority = formatAuthority(target.authority);
    // Only a request that can be sent again takes a pooled connection: one the server closed
    // just as it was reused fails before any answer, and then the request goes on a fresh one.
    const bodiless = req.headers['content-length'] === undefined && req.headers['transfer-encoding'] === undefined;
    const reused = bodiless && RETRYABLE_METHODS.has(req.method ?? '') ? this.pool.take(authority) : null;
    let socket = reused;
    if (socket === null) {
      const connected = await this.connectForRequests(target);
      if (!connected.ok) return this.refuseResponse(res, connected.refused);
      socket = connected.socket;
    }
    new ForwardRequest(this.forwardContext, req, res, this.serve(socket, target), forward.pathAndQuery, {
      authority,
      reused: reused !== null,
      bodiless,
    }).start();
  }

  private async handleConnect(req: http.IncomingMessage, client: net.Socket, head: Buffer): Promise<void> {
    const checked = this.check(req, req.url ?? '', null, { method: null, path: null });
    if (!checked.ok) return this.refuseRaw(client, checked.refused);
    const connected = await this.connect(checked.target);
    if (!connected.ok) return this.refuseRaw(client, connected.refused);
    // The slot is the tunnel's until its event: a spliced tunnel's Node socket closes at hand-off.
    const exchange = this.serve(connected.socket, checked.target);
    this.assign(connected.socket, exchange);
    void exchange.done.then(connected.release);
    this.tunnel(client, exchange, head);
  }

  /** After the 200 the tunnel is opaque: bytes are counted and relayed, never parsed. */
  private tunnel(client: net.Socket, exchange: Exchange, head: Buffer): void {
    const upstream = exchange.upstream;
    if (client.destroyed) {
      exchange.abort('client_error');
      return;
    }
    if (head.length > 0 && !this.charge(head.length, exchange)) {
      client.destroy();
      return;
    }
    const spliced = this.kernel?.adopt(client, upstream, {
      initial: [CONNECT_ESTABLISHED, head.length > 0 ? head : null],
      budget: this.budget,
      idleTimeoutMs: this.options.caps.idleTimeoutMs,
    });
    if (spliced?.ok) {
      this.splicedTunnels++;
      this.clients.add(exchange);
      void exchange.done.then(() => this.clients.delete(exchange));
      exchange.handOff(spliced.tunnel, head.length);
      return;
    }
    client.write(CONNECT_ESTABLISHED);
    if (head.length > 0) upstream.write(head);
    client.on('data', (chunk: Buffer) => this.charge(chunk.length, exchange));
    client.on('end', () => exchange.markClientDone());
    client.on('close', (hadError) => {
      if (hadError) exchange.abort('client_error');
      else upstream.destroySoon();
    });
    // A clean close lets the last bytes reach the client; an abort (caps, timeout) cuts it off.
    upstream.on('close', () => (exchange.outcome === 'ok' ? client.destroySoon() : client.destroy()));
    client.pipe(upstream);
    upstream.pipe(client);
  }
}

export async function startTurnProxy(
  options: TurnProxyOptions,
): Promise<Result<TurnProxy, 'invalid_options' | 'listen_failed'>> {
  const invalid = validateOptions(options);
  if (invalid !== null) return fail('invalid_options', invalid);
  const server = new TurnProxyServer(options);
  const listening = await server.listen();
  if (!listening.ok) return listening;
  return {
    ok: true,
    socketPath: server.socketPath,
    stats: () => server.stats(),
    egressSummary: () => server.egressSummary(),
    attribute: (turn, logger) => server.attribute(turn, logger),
    serveWorkerListener: (fd) => server.serveWorkerListener(fd),
    egressPort: () => server.egressPort(),
    close: () => server.close(),
  };
}

/** The server's connections are net sockets (it creates no others); anything else is closed unserved. */
function netSocket(stream: Duplex): net.Socket | null {
  if (stream instanceof net.Socket) return stream;
  stream.destroy();
  return null;
}
