/**
 * The wire under every call: an HTTP exchange with the server over loopback TCP or a unix
 * socket, with the bearer token and a request id, and a refusal turned into a TurnhostApiError.
 * Its declarations name no `ws` type, so an integrator type-checks the client without @types/ws.
 */
import http from 'node:http';
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

export function parseJson(data: Buffer): unknown {
  try {
    return JSON.parse(data.toString('utf8')) as unknown;
  } catch {
    return undefined;
  }
}

export class Transport {
  readonly target: ServerTarget;
  /** The target as an error message names it. */
  readonly described: string;
  readonly #token: string;
  /** Holds `requestId`, looked up at each call. */
  readonly #options: ClientOptions;
  readonly #where: { host: string; port: number } | { socketPath: string };

  constructor(options: ClientOptions) {
    const { target, token } = options;
    this.target = target;
    this.#token = token;
    this.#options = options;
    this.#where = target.kind === 'tcp' ? { host: target.host, port: target.port } : { socketPath: target.path };
    this.described = target.kind === 'tcp' ? `${target.host}:${target.port}` : `unix:${target.path}`;
  }

  /** The headers of every request and WebSocket handshake; each call draws a new request id. */
  headers(): Record<string, string> {
    return {
      authorization: `Bearer ${this.#token}`,
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
            ...this.headers(),
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
          res.on('error', (error) => reject(unreachable(this.described, error)));
        },
      );
      req.on('error', (error: NodeJS.ErrnoException) => reject(unreachable(this.described, error)));
      req.end(body?.data);
    });
  }
}
