/**
 * One forward (plain HTTP) request of a turn proxy, once its checks passed: the request goes
 * upstream and the answer comes back. Heads always pass through Node's HTTP parser and writer
 * (hop-by-hop headers dropped, Host rebuilt: http-messages.ts). A body framed by one plain
 * Content-Length with at least FORWARD_RELAY_MIN_BYTES still to come goes through the kernel
 * relay (relay/), one way, exactly that many bytes, instead of through JavaScript:
 *
 * - The answer's body: after the answer's head (and whatever of the body Node had already
 *   read) is written through Node, the upstream socket is taken from Node and the relay copies
 *   the rest into a duplicate of the client's fd, which Node keeps: Node's HTTP server still
 *   owns the client connection and keeps it alive for the next request, since the relay moved
 *   exactly the bytes the answer's Content-Length announced. The upstream connection is closed
 *   afterwards: Node's HTTP client would read the next answer as the rest of this body, and
 *   opening a connection costs less than the body's relay saves.
 * - The request's body: after the request's head (and what Node had already read of the body)
 *   is written through Node, the client socket is taken from Node's HTTP server and the relay
 *   copies the rest into a duplicate of the upstream fd, which Node keeps for reading the
 *   answer. Node's HTTP server cannot have the connection back (its parser still waits for the
 *   body, and may hold bytes of a following request no API returns), so the answer goes out on
 *   the same connection through a response of our own, with `Connection: close`. The upstream
 *   connection stays consistent and may return to the pool.
 *
 * Why bodies this large only: a hand-off (dup, two pipes, epoll, a thread wake-up) costs about
 * what Node spends relaying 100-200 KiB, and each relayed request costs a connection (upstream
 * or client) reopened later. Smaller bodies, chunked ones and everything else stay in Node, as
 * does everything while the relay is not ready. Events, byte counts and the byte cap are the
 * same either way: the relay charges the turn's budget for every byte it reads.
 */
import http from 'node:http';
import net from 'node:net';
import type { ByteBudget } from './relay/byte-budget.js';
import type { KernelRelay } from './relay/kernel-relay.js';
import { adoptableFd, borrowFd, detachSocket } from './relay/socket-handoff.js';
import { spliceSys } from './relay/splice-sys.js';
import type { Exchange, Target } from './exchange.js';
import {
  declaredRequestLength,
  declaredResponseLength,
  responseHeaders,
  upstreamHeaders,
  type Refused,
} from './http-messages.js';
import type { UpstreamPool } from './upstream-pool.js';

/** The least body still to come that goes through the kernel relay (docs/egress.md, "Forward bodies"). */
export const FORWARD_RELAY_MIN_BYTES = 256 * 1024;

/** Methods a request may be sent again for, on a fresh connection, when a reused one failed before any answer (RFC 9110 9.2.2, without a body). */
export const RETRYABLE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** How long the connection of an answer of our own may stay open after it, to read the client's close. */
const ANSWER_LINGER_MS = 2000;
const EMPTY = Buffer.alloc(0);

/** What a forward request needs of its turn proxy. */
export interface ForwardContext {
  /** Null, or not ready: every body stays in Node. */
  kernel: KernelRelay | null;
  budget: ByteBudget;
  idleTimeoutMs: number;
  pool: UpstreamPool;
  /** False when the bytes took the turn over its allowance (the exchange is then cut). */
  charge(bytes: number, exchange: Exchange): boolean;
  /** `socket` works for `exchange` now; `upstreamFailed` is what an error on it means. */
  assign(socket: net.Socket, exchange: Exchange, upstreamFailed: () => void): void;
  /** `socket` works for nobody (it goes to the pool, or away). */
  unassign(socket: net.Socket): void;
  /** The function that gives an upstream connection's slot back when its socket closes. */
  slotRelease(socket: net.Socket): (() => void) | undefined;
  connectForRequests(target: Target): Promise<{ ok: true; socket: net.Socket } | { ok: false; refused: Refused }>;
  refuseResponse(res: http.ServerResponse, refused: Refused): void;
  /**
   * The client's connection leaves Node's HTTP server (a request body goes to the relay): it
   * stays counted for the connection cap, and closed with the turn, until `release` or until
   * the socket the answer is written on (`adopt`) closes.
   */
  clientDetached(exchange: Exchange): { adopt(socket: net.Socket): void; release(): void };
  /** Sockets the relay writes to: the HTTP server writes nothing to them meanwhile (not even a refusal). */
  relayWriting: WeakSet<net.Socket>;
}

/** Where the answer goes: a response on the client's connection. */
interface Answer {
  res: http.ServerResponse;
  socket: net.Socket;
}

/** Resolves once everything written to `socket` so far has left Node (true), or the socket failed (false). */
function flushed(socket: net.Socket): Promise<boolean> {
  return new Promise((resolve) => {
    if (socket.destroyed || !socket.writable) {
      resolve(false);
      return;
    }
    socket.write(EMPTY, (error) => resolve(!error && !socket.destroyed));
  });
}

/** Resolves true once `request` writes to its socket (a tick after http.request), false if it closed first. */
function attached(request: http.ClientRequest): Promise<boolean> {
  if (request.socket) return Promise.resolve(true);
  return new Promise((resolve) => {
    request.once('socket', () => resolve(true));
    request.once('close', () => resolve(false));
  });
}

function closeFd(fd: number | null): void {
  if (fd !== null) spliceSys().close(fd);
}

/**
 * Sends the request upstream and the answer back. A connection whose answer was read to its
 * end goes to the pool for the next request to its authority. A request on a reused
 * connection that fails before any answer is sent once more on a fresh connection.
 */
export class ForwardRequest {
  private answered = false;
  private mayRetry: boolean;
  /** The answer's target; null while the request body is in the relay and the client is nobody's. */
  private answer: Answer | null;
  /** Settles when a relayed request body is done and the answer may be written (on a new response). */
  private answerReady: Promise<Answer | null> | null = null;
  /** While the request body is in the relay: cuts it short (the answer came first). */
  private abortUpload: (() => void) | null = null;
  /** The upstream connection may go back to the pool once the answer is read. */
  private reusable = true;
  /** Node's handlers of the upstream request stand aside: its socket went to the relay. */
  private upstreamDetached = false;
  /** The upstream's answer, once its head came (complete: its parser saw the end). */
  private response: http.IncomingMessage | null = null;

  constructor(
    private readonly ctx: ForwardContext,
    private readonly req: http.IncomingMessage,
    res: http.ServerResponse,
    private readonly exchange: Exchange,
    private readonly pathAndQuery: string,
    private readonly connection: { authority: string; reused: boolean; bodiless: boolean },
  ) {
    this.mayRetry = connection.reused;
    this.answer = { res, socket: req.socket };
  }

  start(): void {
    if (this.req.socket.destroyed) {
      this.exchange.abort('client_error');
      return;
    }
    this.watchAnswer(this.answer!);
    this.send();
  }

  /** The exchange is recorded once its answer is delivered (or cut off). */
  private watchAnswer(answer: Answer): void {
    answer.res.on('close', () => {
      if (this.answer !== answer) return;
      if (!answer.res.writableFinished) this.exchange.abort('client_error');
      else this.exchange.complete();
    });
  }

  // Before any answer the request's own 'error' decides (retry or 502); after, the socket's error ends it.
  private readonly upstreamFailed = (): void => {
    if (this.answered) this.exchange.abort('upstream_error');
  };

  private send(): void {
    const { ctx, exchange } = this;
    const socket = exchange.upstream;
    ctx.assign(socket, exchange, this.upstreamFailed);
    const upstreamRequest = http.request({
      createConnection: () => socket,
      method: this.req.method,
      path: this.pathAndQuery,
      headers: upstreamHeaders(this.req.rawHeaders, exchange.target.authority),
      setHost: false,
    });
    // An upstream that closes (even with a clean FIN) before the end of its answer cut it; this
    // runs before the exchange's own close listener records the request.
    const closedEarly = (): void => {
      if (this.response && !this.upstreamDetached && !this.response.complete) exchange.abort('upstream_error');
    };
    socket.prependListener('close', closedEarly);
    socket.once('free', () => {
      socket.removeListener('close', closedEarly);
      ctx.unassign(socket);
      exchange.releaseUpstream();
      if (exchange.outcome === 'ok' && this.reusable) ctx.pool.put(this.connection.authority, socket);
      else socket.destroy();
    });
    upstreamRequest.on('error', () => {
      if (this.upstreamDetached) return;
      if (this.mayRetry && !this.answered && exchange.outcome === 'ok') void this.retry(socket);
      else void this.fail502();
    });
    upstreamRequest.on('response', (upstreamResponse) => {
      this.answered = true;
      this.response = upstreamResponse;
      void this.deliver(upstreamRequest, upstreamResponse, socket);
    });
    if (this.connection.bodiless) upstreamRequest.end();
    else if (!this.relayRequestBody(upstreamRequest, socket)) {
      this.req.on('data', (chunk: Buffer) => ctx.charge(chunk.length, exchange));
      this.req.pipe(upstreamRequest);
    }
  }

  private async fail502(): Promise<void> {
    this.exchange.abort('upstream_error');
    const answer = await this.answerTarget();
    if (answer === null) return;
    if (!answer.res.headersSent) answer.res.writeHead(502, { Connection: 'close' }).end();
    else answer.res.destroy();
  }

  private async retry(stale: net.Socket): Promise<void> {
    const { ctx, exchange } = this;
    this.mayRetry = false;
    ctx.unassign(stale);
    exchange.leave();
    const connected = await ctx.connectForRequests(exchange.target);
    if (!exchange.awaitingConnection()) {
      // Cut meanwhile (the client left, the turn ended): recorded already.
      if (connected.ok) connected.socket.destroy();
      return;
    }
    if (!connected.ok) {
      exchange.abort('upstream_error');
      if (this.answer) ctx.refuseResponse(this.answer.res, connected.refused);
      return;
    }
    exchange.takeOver(connected.socket);
    this.send();
  }

  /** The answer's target: Node's response, or, after a relayed request body, one of our own. */
  private answerTarget(): Promise<Answer | null> {
    return this.answerReady ?? Promise.resolve(this.answer);
  }

  /**
   * Hands the rest of a large request body to the kernel relay; false (nothing changed) when it
   * stays in Node. The checks come first: nothing is taken from Node before they all pass.
   */
  private relayRequestBody(upstreamRequest: http.ClientRequest, upstream: net.Socket): boolean {
    const { ctx, req, exchange } = this;
    const kernel = ctx.kernel;
    const length = declaredRequestLength(req);
    if (kernel?.state() !== 'ready' || length === null || req.complete) return false;
    if (length - req.readableLength < FORWARD_RELAY_MIN_BYTES || !adoptableFd(req.socket).ok) return false;
    // Taking the connection from Node's HTTP server ends what it still writes on it: an earlier
    // pipelined answer must be done (this request's response is the one on the connection).
    if (this.answer?.res.socket !== req.socket) return false;

    const early = req.readableLength > 0 ? (req.read(req.readableLength) as Buffer) : EMPTY;
    const remaining = length - early.length;
    if (early.length > 0 && !ctx.charge(early.length, exchange)) return true;
    // Node's HTTP server lets go of the connection; its response goes with it.
    const previous = this.answer;
    this.answer = null;
    const client = ctx.clientDetached(exchange);
    const detached = detachSocket(req.socket);
    if (!detached.ok) {
      client.release();
      previous.res.destroy();
      exchange.abort('relay_failed');
      return true;
    }
    const readFd = detached.fd;
    const answerFd = spliceSys().dupCloexec(readFd);
    this.answerReady = this.uploadThenAnswer(upstreamRequest, upstream, early, remaining, readFd, answerFd, client);
    return true;
  }

  private async uploadThenAnswer(
    upstreamRequest: http.ClientRequest,
    upstream: net.Socket,
    early: Buffer,
    remaining: number,
    readFd: number,
    answerFd: number,
    client: ReturnType<ForwardContext['clientDetached']>,
  ): Promise<Answer | null> {
    const { ctx, exchange } = this;
    // Set when the answer came first and cut the upload short (the closure sets it).
    const upload = { cutShort: false };
    // The head and the bytes Node had read go first, through Node; the relay writes after them.
    // The request writes to its socket only once attached to it (a tick after http.request).
    let sent = await attached(upstreamRequest);
    if (sent) {
      upstreamRequest.flushHeaders();
      if (early.length > 0) upstreamRequest.write(early);
      sent = await flushed(upstream);
    }
    // An answer that came meanwhile ends the upload before it starts, as it would cut it short.
    if (this.response) upload.cutShort = true;
    const lent = sent && !exchange.settled && !upload.cutShort ? borrowFd(upstream) : null;
    const adopted =
      lent?.ok === true
        ? ctx.kernel!.adoptFds([readFd, lent.fd], {
            lengths: [remaining, 0],
            budget: ctx.budget,
            idleTimeoutMs: ctx.idleTimeoutMs,
          })
        : null;
    if (adopted?.ok !== true) {
      closeFd(readFd);
      if (lent?.ok === true) closeFd(lent.fd);
      this.reusable = false;
      if (!upload.cutShort) exchange.abort(adopted ? 'relay_failed' : 'upstream_error');
    } else {
      this.abortUpload = () => {
        upload.cutShort = true;
        adopted.tunnel.abort();
      };
      const end = await exchange.relayBody(adopted.tunnel);
      this.abortUpload = null;
      if (end.outcome === 'ok') upstreamRequest.end();
      else {
        this.reusable = false;
        if (!upload.cutShort) exchange.cutBy(end);
      }
    }
    if (!upload.cutShort && exchange.outcome !== 'ok') {
      // Nothing will answer a request cut this way: its connections close.
      closeFd(answerFd);
      client.release();
      upstream.destroy();
      return null;
    }
    return this.answerOn(answerFd, client);
  }

  /** A response of our own on the connection a relayed request body came in on; it closes after the answer. */
  private answerOn(fd: number, client: ReturnType<ForwardContext['clientDetached']>): Answer {
    const socket = new net.Socket({ fd, allowHalfOpen: true, readable: true, writable: true });
    client.adopt(socket);
    // Whatever the client sends after its body is no request of ours; it is read and dropped.
    socket.on('data', () => {});
    socket.on('error', () => socket.destroy());
    socket.on('end', () => socket.destroy());
    socket.setTimeout(this.ctx.idleTimeoutMs, () => socket.destroy());
    const res = new http.ServerResponse(this.req);
    res.shouldKeepAlive = false;
    res.assignSocket(socket);
    const answer = { res, socket };
    this.answer = answer;
    res.on('finish', () => {
      // The client reads to our FIN, then closes; a client that does not is closed after a while.
      socket.end();
      socket.setTimeout(ANSWER_LINGER_MS, () => socket.destroy());
      if (this.answer === answer) this.exchange.complete();
    });
    res.on('close', () => {
      if (this.answer === answer && !res.writableFinished) this.exchange.abort('client_error');
    });
    return answer;
  }

  private async deliver(
    upstreamRequest: http.ClientRequest,
    upstreamResponse: http.IncomingMessage,
    upstream: net.Socket,
  ): Promise<void> {
    // The answer came while the request body was still in the relay: the rest of it is not sent.
    if (this.abortUpload) {
      this.reusable = false;
      this.abortUpload();
    }
    const answer = await this.answerTarget();
    // After this tick's read: Node's parser has pushed what it read of the body behind the head.
    await new Promise((resolve) => process.nextTick(resolve));
    if (answer === null || this.exchange.settled) {
      upstream.destroy();
      return;
    }
    const { res } = answer;
    res.writeHead(
      upstreamResponse.statusCode ?? 502,
      upstreamResponse.statusMessage,
      responseHeaders(upstreamResponse.rawHeaders),
    );
    const length = declaredResponseLength(upstreamResponse, this.req.method ?? 'GET');
    const requestSent = upstreamRequest.writableEnded || !this.reusable;
    if (length !== null && requestSent && (await this.relayAnswerBody(answer, upstreamResponse, upstream, length)))
      return;
    // A chunk that took the turn over its allowance was charged (and the exchange cut) when the
    // socket read it, before the parser passes it on: it must not reach the client.
    upstreamResponse.on('data', () => {
      if (this.exchange.outcome !== 'ok') res.destroy();
    });
    upstreamResponse.pipe(res);
    upstreamResponse.on('error', () => res.destroy());
    if (!this.reusable) res.once('finish', () => upstream.destroy());
  }

  /**
   * Hands the rest of a large answer body to the kernel relay; false (nothing changed) when it
   * stays in Node. The checks come first: nothing is taken from Node before they all pass.
   */
  private async relayAnswerBody(
    answer: Answer,
    upstreamResponse: http.IncomingMessage,
    upstream: net.Socket,
    length: number,
  ): Promise<boolean> {
    const { ctx, exchange } = this;
    const kernel = ctx.kernel;
    const already = upstreamResponse.readableLength;
    if (kernel?.state() !== 'ready' || upstreamResponse.complete || length - already < FORWARD_RELAY_MIN_BYTES)
      return false;
    // The response must be the one writing to the connection now, not one queued behind an
    // earlier pipelined answer: the relay writes into the connection at once.
    if (!adoptableFd(upstream).ok || answer.socket.destroyed || answer.res.socket !== answer.socket) return false;

    const early = already > 0 ? (upstreamResponse.read(already) as Buffer) : EMPTY;
    // Node's HTTP client lets go of the upstream connection; its slot is held until the relay is done.
    this.upstreamDetached = true;
    upstreamResponse.on('error', () => {});
    exchange.detachUpstream();
    const release = ctx.slotRelease(upstream);
    if (release) upstream.removeListener('close', release);
    ctx.unassign(upstream);
    const detached = detachSocket(upstream);
    if (!detached.ok) {
      release?.();
      upstream.destroy();
      answer.res.destroy();
      exchange.abort('relay_failed');
      return true;
    }
    const readFd = detached.fd;
    ctx.relayWriting.add(answer.socket);
    answer.socket.setTimeout(0);
    const done = (): void => {
      ctx.relayWriting.delete(answer.socket);
      release?.();
      if (!answer.socket.destroyed) answer.socket.setTimeout(ctx.idleTimeoutMs);
    };
    if (early.length > 0) answer.res.write(early);
    else answer.res.flushHeaders();
    const lent = (await flushed(answer.socket)) && !exchange.settled ? borrowFd(answer.socket) : null;
    const adopted =
      lent?.ok === true
        ? kernel.adoptFds([lent.fd, readFd], {
            lengths: [0, length - early.length],
            budget: ctx.budget,
            idleTimeoutMs: ctx.idleTimeoutMs,
          })
        : null;
    if (adopted?.ok !== true) {
      closeFd(readFd);
      if (lent?.ok === true) closeFd(lent.fd);
      done();
      exchange.abort(adopted ? 'relay_failed' : 'client_error');
      answer.res.destroy();
      return true;
    }
    const end = await exchange.relayBody(adopted.tunnel);
    done();
    if (end.outcome !== 'ok') {
      // The response may have closed already (the client left, the turn ended): its close
      // listener then found the relay running; the exchange is recorded here.
      exchange.cutBy(end);
      exchange.abort(exchange.outcome);
      answer.res.destroy();
    } else if (answer.res.destroyed) exchange.complete();
    else answer.res.end();
    return true;
  }
}
