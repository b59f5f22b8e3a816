/**
 * Moves one brokered request (brokers.ts): the turn's origin-form request goes to the broker's
 * upstream with the turn's credential headers stripped and the broker's own set, dialled
 * through the turn proxy's resolve → classify → dial guard (the address checks apply; the
 * allowlist does not: the broker is the operator's own entry), then over TLS when the upstream
 * is https. The answer streams back as it arrives: each chunk is written to the turn when it
 * comes, nothing is buffered, and a stream stays open for as long as bytes flow (the idle
 * timeout counts silence only). A redirect is never followed: any 3xx answers 502.
 */
import http from 'node:http';
import type net from 'node:net';
import { performance } from 'node:perf_hooks';
import tls from 'node:tls';
import type { Result } from '../core/result.js';
import {
  brokeredRequestHeaders,
  brokeredResponseHeaders,
  matchBrokered,
  refusalBody,
  type Broker,
  type BrokeredRequest,
  type Brokers,
} from './brokers.js';
import { visiblePath, type ConnectionOutcome, type ConnectionRecord, type DenialReason } from './events.js';
import type { Target } from './exchange.js';

/** What a brokered request needs of its turn proxy. */
export interface BrokerRelayContext {
  brokers: Brokers;
  idleTimeoutMs: number;
  /** The proxy's guarded dial: a slot of the connection cap, the address checks, bytes charged as they are read. */
  dial(target: Target): Promise<Result<{ socket: net.Socket; release: () => void }, DenialReason | 'connect_failed'>>;
  /** False when the bytes took the turn over its allowance. */
  charge(bytes: number): boolean;
  budgetLeft(): number;
  deny(reason: DenialReason, detail: string, host: string, port: number | null): void;
  record(record: ConnectionRecord): void;
  /** A request in flight, which the turn's end aborts (recorded at once); false once the proxy is closed. */
  started(request: BrokeredRequestHandle): boolean;
  ended(request: BrokeredRequestHandle): void;
}

export interface BrokeredRequestHandle {
  abort(outcome: ConnectionOutcome): void;
}

/** The status and JSON type of each refusal the turn can read. */
const REFUSAL_STATUS: Record<string, number> = {
  relay_method_refused: 405,
  relay_route_refused: 403,
  relay_request_too_large: 413,
};

function answerError(res: http.ServerResponse, status: number, type: string, message: string): void {
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = refusalBody(type, message);
  res.shouldKeepAlive = false;
  res.writeHead(status, {
    'content-type': 'application/json',
    'content-length': Buffer.byteLength(body),
    connection: 'close',
  });
  res.end(body);
}

function declaredLength(req: http.IncomingMessage): number | null {
  const raw = req.headers['content-length'];
  if (raw === undefined || !/^[0-9]{1,15}$/.test(raw)) return null;
  return Number(raw);
}

/**
 * A broker's TLS context, made once: a context with the system roots and the broker's CA costs
 * tens of milliseconds to build (every root certificate is parsed), which every request would
 * otherwise add to its time to first byte.
 */
const secureContexts = new WeakMap<Broker, tls.SecureContext>();

function secureContextOf(broker: Broker): tls.SecureContext | undefined {
  if (broker.ca === null) return undefined;
  let context = secureContexts.get(broker);
  if (context === undefined) {
    context = tls.createSecureContext({ ca: [...tls.rootCertificates, broker.ca] });
    secureContexts.set(broker, context);
  }
  return context;
}

/**
 * The last TLS session each broker's upstream handed out: the next request resumes it instead
 * of a full handshake (each request opens its own connection). The certificate was verified
 * when the session was made, against the same context.
 */
const sessions = new WeakMap<Broker, Buffer>();

/** Opens TLS over the checked socket; the upstream's certificate is verified against the system roots and the broker's CA. */
function secured(socket: net.Socket, broker: Broker): net.Socket {
  if (!broker.tls) return socket;
  const secureContext = secureContextOf(broker);
  const session = sessions.get(broker);
  const secure = tls.connect({
    socket,
    servername: broker.serverName ?? undefined,
    ...(secureContext ? { secureContext } : {}),
    ...(session ? { session } : {}),
    ALPNProtocols: ['http/1.1'],
  });
  secure.on('session', (ticket: Buffer) => sessions.set(broker, ticket));
  return secure;
}

/** Serves an origin-form request on the turn's egress listener: a broker's, or refused. */
export async function relayBrokered(
  context: BrokerRelayContext,
  req: http.IncomingMessage,
  res: http.ServerResponse,
): Promise<void> {
  const method = req.method ?? 'GET';
  const matched = matchBrokered(context.brokers, method, req.url ?? '/');
  if (!matched.ok) {
    context.deny(matched.reason, matched.detail, '', null);
    req.resume();
    return answerError(res, REFUSAL_STATUS[matched.reason]!, matched.reason, matched.detail);
  }
  const { broker } = matched.request;
  const where = { host: broker.authority.host.host, port: broker.authority.port };
  const declared = declaredLength(req);
  if (broker.maxRequestBytes !== null && declared !== null && declared > broker.maxRequestBytes) {
    const detail = `the request body is ${declared} bytes, above ${broker.maxRequestBytes}`;
    context.deny('relay_request_too_large', detail, where.host, where.port);
    req.resume();
    return answerError(res, 413, 'relay_request_too_large', detail);
  }
  if (context.budgetLeft() === 0) {
    context.deny('cap_exceeded', 'the turn used its byte allowance', where.host, where.port);
    req.resume();
    return answerError(res, 403, 'cap_exceeded', 'the turn used its byte allowance');
  }
  await new BrokeredExchange(context, req, res, matched.request, declared).run();
}

/** One brokered request and its accounting: recorded exactly once, with the upstream's status. */
class BrokeredExchange implements BrokeredRequestHandle {
  private readonly started = performance.now();
  private readonly broker: Broker;
  private upstream: net.Socket | null = null;
  private status: number | null = null;
  private outcome: ConnectionOutcome = 'ok';
  private recorded = false;
  private bodyBytes = 0;

  constructor(
    private readonly context: BrokerRelayContext,
    private readonly req: http.IncomingMessage,
    private readonly res: http.ServerResponse,
    private readonly request: BrokeredRequest,
    private readonly declared: number | null,
  ) {
    this.broker = request.broker;
  }

  private target(): Target {
    const { broker } = this;
    return {
      authority: broker.authority,
      method: this.req.method ?? 'GET',
      path: visiblePath(broker.basePath + this.request.path),
      scope: broker.kind === 'inference' ? 'inference' : 'credential',
    };
  }

  async run(): Promise<void> {
    const { broker, context, req, res } = this;
    const target = this.target();
    const dialled = await context.dial(target);
    if (!dialled.ok) {
      req.resume();
      if (dialled.reason !== 'connect_failed')
        context.deny(dialled.reason, dialled.detail, target.authority.host.host, target.authority.port);
      else this.finish('connect_failed');
      return answerError(res, dialled.reason === 'connect_failed' ? 502 : 403, dialled.reason, dialled.detail);
    }
    const raw = dialled.socket;
    raw.once('close', dialled.release);
    this.upstream = raw;
    if (!context.started(this)) return this.abort('turn_ended', 'the turn ended');
    const socket = secured(raw, broker);
    socket.setTimeout(context.idleTimeoutMs, () => this.abort('idle_timeout', 'the upstream was silent too long'));
    const upstream = http.request({
      createConnection: () => socket,
      method: req.method,
      path: broker.basePath + this.request.path + this.request.query,
      headers: brokeredRequestHeaders(req.rawHeaders, broker, this.declared),
    });
    upstream.on('error', (error) =>
      this.abort('upstream_error', `the upstream failed (${(error as NodeJS.ErrnoException).code ?? error.message})`),
    );
    upstream.on('response', (answer) => this.answer(answer));
    res.on('close', () => {
      if (!res.writableFinished) this.abort('client_error', null);
    });
    this.sendBody(upstream);
  }

  /** The request body, counted against the broker's cap and the turn's allowance as it goes. */
  private sendBody(upstream: http.ClientRequest): void {
    const { broker, context, req } = this;
    req.on('data', (chunk: Buffer) => {
      if (this.recorded) return;
      this.bodyBytes += chunk.length;
      if (broker.maxRequestBytes !== null && this.bodyBytes > broker.maxRequestBytes) {
        const detail = `the request body is over ${broker.maxRequestBytes} bytes`;
        context.deny('relay_request_too_large', detail, broker.authority.host.host, broker.authority.port);
        this.abort('client_error', null, { status: 413, type: 'relay_request_too_large', message: detail });
        return;
      }
      if (!context.charge(chunk.length)) {
        this.abort('cap_exceeded', 'the turn used its byte allowance');
        return;
      }
      if (!upstream.write(chunk)) {
        req.pause();
        upstream.once('drain', () => req.resume());
      }
    });
    req.on('end', () => upstream.end());
  }

  private answer(answer: http.IncomingMessage): void {
    const { res } = this;
    const status = answer.statusCode ?? 502;
    this.status = status;
    if (status >= 300 && status < 400) {
      answer.resume();
      this.abort('redirect_refused', null, {
        status: 502,
        type: 'relay_redirect_refused',
        message: `the upstream answered ${status}; redirects are never followed`,
      });
      return;
    }
    res.writeHead(status, answer.statusMessage, brokeredResponseHeaders(answer.rawHeaders));
    // Each chunk goes out as it comes: an event stream reaches the turn event by event.
    answer.on('data', (chunk: Buffer) => {
      if (!res.write(chunk)) {
        answer.pause();
        res.once('drain', () => answer.resume());
      }
    });
    answer.on('end', () => {
      res.end();
      this.finish('ok');
      this.upstream?.destroy();
    });
    answer.on('error', () => this.abort('upstream_error', null));
  }

  /** Ends the exchange: answers the turn when nothing was answered yet, else cuts its connection. */
  abort(
    outcome: ConnectionOutcome,
    detail: string | null = null,
    error?: { status: number; type: string; message: string },
  ): void {
    if (this.recorded) return;
    this.finish(outcome);
    this.upstream?.destroy();
    if (this.res.writableFinished) return;
    if (error) answerError(this.res, error.status, error.type, error.message);
    else if (detail !== null) answerError(this.res, 502, 'relay_upstream_failed', detail);
    else this.res.destroy();
  }

  private finish(outcome: ConnectionOutcome): void {
    if (this.recorded) return;
    this.recorded = true;
    this.context.ended(this);
    this.outcome = outcome;
    const target = this.target();
    this.context.record({
      host: target.authority.host.host,
      port: target.authority.port,
      method: target.method,
      path: target.path,
      bytesUp: this.upstream?.bytesWritten ?? 0,
      bytesDown: this.upstream?.bytesRead ?? 0,
      durationMs: Math.round(performance.now() - this.started),
      outcome: this.outcome,
      scope: target.scope,
      broker: this.broker.name,
      status: this.status,
    });
  }
}
