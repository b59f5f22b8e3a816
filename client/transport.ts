/**
 * The wire under every call: an HTTP exchange or a WebSocket to the server over loopback TCP
 * or a unix socket, with the bearer token and a request id, and a refusal turned into a
 * TurnhostApiError.
 */
import http from 'node:http';
import WebSocket from 'ws';
import { errorFromBody, unreachable } from './errors.js';

export type ServerTarget = { kind: 'tcp'; host: string; port: number } | { kind: 'unix'; path: string };

export interface ClientOptions {
  target: ServerTarget;
  token: string;
  /** Sent as X-Request-Id on every request when given. */
  requestId?: () => string;
}

/** A request body and its content type. */
export interface RequestBody {
  type: string;
  data: Buffer;
}

/** An answer of an expected status: its bytes, their JSON (unless asked raw) and the headers. */
export interface Exchanged {
  parsed: unknown;
  data: Buffer;
  headers: http.IncomingHttpHeaders;
}

/** A query string of the parameters that are set, with its `?`; empty when none is. */
export function query(params: Record<string, string | number | undefined>): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) if (value !== undefined) search.set(name, String(value));
  const text = search.toString();
  return text === '' ? '' : `?${text}`;
}

export const jsonBody = (value: unknown): RequestBody => ({
  type: 'application/json',
  data: Buffer.from(JSON.stringify(value)),
});

export const octetBody = (data: Buffer | string): RequestBody => ({
  type: 'application/octet-stream',
  data: Buffer.from(data),
});

function parseJson(data: Buffer): unknown {
  try {
    return JSON.parse(data.toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}

export class Transport {
  readonly #options: ClientOptions;
  readonly #where: { host: string; port: number } | { socketPath: string };
  /** The target as an error message names it. */
  readonly #described: string;

  constructor(options: ClientOptions) {
    this.#options = options;
    const { target } = options;
    this.#where = target.kind === 'tcp' ? { host: target.host, port: target.port } : { socketPath: target.path };
    this.#described = target.kind === 'tcp' ? `${target.host}:${target.port}` : `unix:${target.path}`;
  }

  #headers(): Record<string, string> {
    return {
      authorization: `Bearer ${this.#options.token}`,
      ...(this.#options.requestId ? { 'x-request-id': this.#options.requestId() } : {}),
    };
  }

  /** One HTTP exchange answered with JSON of an expected status, as that JSON. */
  request<T>(method: string, path: string, body?: RequestBody, expect: number[] = [200]): Promise<T> {
    return this.exchange(method, path, body, expect).then(({ parsed }) => parsed as T);
  }

  /** One HTTP exchange: the raw answer of an expected status, else the server's refusal. */
  exchange(
    method: string,
    path: string,
    body?: RequestBody,
    expect: number[] = [200],
    raw = false,
  ): Promise<Exchanged> {
    return new Promise((resolve, reject) => {
      const req = http.request(
        {
          ...this.#where,
          method,
          path,
          headers: {
            ...this.#headers(),
            ...(body ? { 'content-type': body.type, 'content-length': String(body.data.length) } : {}),
          },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('end', () => {
            const status = res.statusCode ?? 0;
            const data = Buffer.concat(chunks);
            if (raw && expect.includes(status)) return resolve({ parsed: undefined, data, headers: res.headers });
            const parsed = parseJson(data);
            if (expect.includes(status) && parsed !== undefined) return resolve({ parsed, data, headers: res.headers });
            reject(errorFromBody(status, parsed, `HTTP ${status}`));
          });
          res.on('error', (error) => reject(unreachable(this.#described, error)));
        },
      );
      req.on('error', (error: NodeJS.ErrnoException) => reject(unreachable(this.#described, error)));
      req.end(body?.data);
    });
  }

  /**
   * The socket at once, and its opening. A server may send its first messages in the same read
   * as the upgrade answer (an attach to a finished turn sends everything and closes), and ws
   * emits them right after 'open', before an awaiting caller resumes: so the caller attaches
   * its listeners to `ws` first, then awaits `opened`.
   */
  openSocket(path: string): { ws: WebSocket; opened: Promise<void> } {
    const { target } = this.#options;
    const url =
      target.kind === 'tcp'
        ? `ws://${target.host.includes(':') ? `[${target.host}]` : target.host}:${target.port}${path}`
        : `ws+unix://${target.path}:${path}`;
    // A server that accepts the connection but never answers the handshake is a failure too.
    const ws = new WebSocket(url, { headers: this.#headers(), maxPayload: 64 * 1024 * 1024, handshakeTimeout: 30_000 });
    const opened = new Promise<void>((resolve, reject) => {
      ws.once('open', () => resolve());
      ws.once('unexpected-response', (_req, res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          const body = parseJson(Buffer.concat(chunks));
          reject(errorFromBody(status, body, `WebSocket ${path.split('?')[0] ?? path}: HTTP ${status}`));
        });
      });
      ws.once('error', (error: NodeJS.ErrnoException) => reject(unreachable(this.#described, error)));
    });
    return { ws, opened };
  }
}
