/**
 * How client commands reach the supervisor: `--server URL` (http://host:port or unix:/path),
 * else the configured listener (socket first); the token from TURNHOST_API_TOKEN or `apiToken`,
 * else `<dataDir>/api-token`.
 */
import http from 'node:http';
import WebSocket from 'ws';
import { loadConfig, parseHostPort, type ConfigOverrides } from '../config/load.js';
import { readTokenFile } from '../http/token.js';
import { rawText } from '../http/websocket.js';
import { CliExit, EXIT } from './exit-codes.js';

export type ServerTarget = { kind: 'tcp'; host: string; port: number } | { kind: 'unix'; path: string };

export interface Connection {
  target: ServerTarget;
  token: string;
}

export const START_HINT =
  'start one with `turnhost serve` (or `make run` in a checkout), or point to it with --server URL and --data-dir DIR';

export function describeTarget(target: ServerTarget): string {
  return target.kind === 'tcp'
    ? `http://${target.host.includes(':') ? `[${target.host}]` : target.host}:${target.port}`
    : `unix:${target.path}`;
}

export function parseServerUrl(value: string): ServerTarget | null {
  if (value.startsWith('unix:')) {
    const path = value.slice('unix:'.length);
    return path.startsWith('/') ? { kind: 'unix', path } : null;
  }
  const match = /^http:\/\/([^/]+)\/?$/.exec(value);
  const address = match?.[1] === undefined ? null : parseHostPort(match[1]);
  return address === null ? null : { kind: 'tcp', host: address.host, port: address.port };
}

function wildcardToLoopback(host: string): string {
  return host === '0.0.0.0' ? '127.0.0.1' : host === '::' ? '::1' : host;
}

export function resolveConnection(options: {
  server?: string;
  configPath?: string;
  overrides: ConfigOverrides;
  env: NodeJS.ProcessEnv;
}): Connection {
  const loaded = loadConfig({ configPath: options.configPath, env: options.env, overrides: options.overrides });
  if (!loaded.ok) throw new CliExit(EXIT.usage, `turnhost: configuration: ${loaded.detail}`);
  const { config } = loaded;

  let target: ServerTarget | null;
  if (options.server !== undefined) {
    target = parseServerUrl(options.server);
    if (target === null) throw new CliExit(EXIT.usage, `turnhost: --server: expected http://HOST:PORT or unix:/PATH`);
  } else if (config.listen.socket !== null) {
    target = { kind: 'unix', path: config.listen.socket };
  } else {
    const address = parseHostPort(config.listen.tcp ?? '');
    if (address === null) throw new CliExit(EXIT.usage, 'turnhost: no server address configured; pass --server URL');
    target = { kind: 'tcp', host: wildcardToLoopback(address.host), port: address.port };
  }

  if (config.apiToken !== null) return { target, token: config.apiToken };
  const read = readTokenFile(config.dataDir);
  if (read.ok) return { target, token: read.token };
  if (read.reason === 'token_missing')
    throw new CliExit(
      EXIT.serverNotRunning,
      `turnhost: no API token in ${config.dataDir} (${read.detail}): no server has run with this data directory; ${START_HINT}`,
    );
  throw new CliExit(EXIT.unavailable, `turnhost: cannot use the API token: ${read.detail}`);
}

export interface ApiResponse {
  status: number;
  body: unknown;
}

function notRunning(connection: Connection, code: string | undefined): CliExit {
  return new CliExit(
    EXIT.serverNotRunning,
    `turnhost: no server answers at ${describeTarget(connection.target)} (${code ?? 'error'}); ${START_HINT}`,
  );
}

const CONNECTION_ERRORS = new Set(['ECONNREFUSED', 'ENOENT', 'ECONNRESET', 'EHOSTUNREACH', 'ENOTSOCK', 'EACCES']);

export function apiRequest(connection: Connection, method: string, path: string, body?: unknown): Promise<ApiResponse> {
  const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
  const where =
    connection.target.kind === 'tcp'
      ? { host: connection.target.host, port: connection.target.port }
      : { socketPath: connection.target.path };
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        ...where,
        method,
        path,
        headers: {
          authorization: `Bearer ${connection.token}`,
          ...(payload ? { 'content-type': 'application/json', 'content-length': String(payload.length) } : {}),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: unknown = text;
          try {
            parsed = JSON.parse(text);
          } catch {
            // Non-JSON answers are passed on as text.
          }
          resolve({ status: res.statusCode ?? 0, body: parsed });
        });
      },
    );
    req.on('error', (error: NodeJS.ErrnoException) => {
      reject(
        error.code !== undefined && CONNECTION_ERRORS.has(error.code) ? notRunning(connection, error.code) : error,
      );
    });
    req.end(payload);
  });
}

/** Maps the error answers every command shares to exit codes; answers the body otherwise. */
export function expectOk(response: ApiResponse, what: string): unknown {
  if (response.status >= 200 && response.status < 300) return response.body;
  const body = response.body as { error?: string; code?: string } | undefined;
  const text = `turnhost: ${what}: ${body?.error ?? `HTTP ${response.status}`}${body?.code ? ` (${body.code})` : ''}`;
  if (response.status === 401) throw new CliExit(EXIT.unavailable, `${text}; check --data-dir or TURNHOST_API_TOKEN`);
  if (response.status === 400) throw new CliExit(EXIT.usage, text);
  if (response.status === 404) throw new CliExit(EXIT.notFound, text);
  if (response.status === 503) throw new CliExit(EXIT.refused, text);
  if (response.status === 429) throw new CliExit(EXIT.capacity, text);
  if (response.status === 409) throw new CliExit(EXIT.conflict, text);
  throw new CliExit(EXIT.failed, text);
}

/**
 * An open WebSocket whose messages and close are held until a consumer subscribes: frames that
 * arrive with the upgrade response are emitted before an `await` on the open continues.
 */
export interface OpenedSocket {
  onMessage(listener: (text: string) => void): void;
  onClose(listener: (code: number) => void): void;
  send(text: string): void;
  /** Stops reading the socket (TCP backpressure up to the server, which pauses the turn's output). */
  pause(): void;
  resume(): void;
  close(): void;
}

function holdEvents(ws: WebSocket): OpenedSocket {
  const queued: string[] = [];
  let messageListener: ((text: string) => void) | undefined;
  let closeListener: ((code: number) => void) | undefined;
  let closedWith: number | undefined;
  ws.on('message', (data) => {
    const text = rawText(data);
    if (messageListener) messageListener(text);
    else queued.push(text);
  });
  ws.on('close', (code) => {
    closedWith = code;
    if (messageListener) closeListener?.(code);
  });
  return {
    onMessage(listener) {
      messageListener = listener;
      for (const text of queued.splice(0)) listener(text);
    },
    onClose(listener) {
      closeListener = listener;
      if (closedWith !== undefined && messageListener) listener(closedWith);
    },
    send: (text) => {
      if (ws.readyState === ws.OPEN) ws.send(text);
    },
    pause: () => ws.pause(),
    resume: () => ws.resume(),
    close: () => ws.close(),
  };
}

export function openWebSocket(connection: Connection, path: string): Promise<OpenedSocket> {
  const url =
    connection.target.kind === 'tcp'
      ? `ws://${describeTarget(connection.target).slice('http://'.length)}${path}`
      : `ws+unix://${connection.target.path}:${path}`;
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url, {
      headers: { authorization: `Bearer ${connection.token}` },
      maxPayload: 64 * 1024 * 1024,
    });
    const held = holdEvents(ws);
    ws.once('open', () => resolve(held));
    ws.once('unexpected-response', (_req, res) => {
      const chunks: Buffer[] = [];
      res.on('data', (chunk: Buffer) => chunks.push(chunk));
      res.on('end', () => {
        let body: unknown;
        try {
          body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        } catch {
          body = undefined;
        }
        try {
          expectOk({ status: res.statusCode ?? 0, body }, `WebSocket ${path.split('?')[0]}`);
        } catch (error) {
          reject(error instanceof Error ? error : new Error(String(error)));
        }
      });
    });
    ws.once('error', (error: NodeJS.ErrnoException) => {
      reject(
        error.code !== undefined && CONNECTION_ERRORS.has(error.code) ? notRunning(connection, error.code) : error,
      );
    });
  });
}
