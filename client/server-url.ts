/**
 * Where the client connects and with which token, from what the caller gave: a target, a URL
 * (`http://HOST:PORT` or `unix:/PATH`, as the CLI's `--server` takes), else the environment
 * (TURNHOST_URL, TURNHOST_TOKEN), else the default listener for the address. There is no default
 * token: calling without one is refused here, before any request.
 */
import net from 'node:net';
import type { ClientOptions, ServerTarget } from './transport.js';

/** The supervisor's default listener (`listen.tcp`), used when neither the caller nor TURNHOST_URL names one. */
export const DEFAULT_SERVER_URL = 'http://127.0.0.1:7707';

export interface ConnectOptions {
  /** The server as a URL (`http://127.0.0.1:7707`, `http://[::1]:7707`, `unix:/run/turnhost/api.sock`) or a target. */
  server?: string | ServerTarget;
  /** The server as a target; the older spelling of `server`. */
  target?: ServerTarget;
  /** The bearer token; TURNHOST_TOKEN when absent. */
  token?: string;
  /** Sent as X-Request-Id on every request when given. */
  requestId?: () => string;
  /** Where TURNHOST_URL and TURNHOST_TOKEN are read (process.env unless given). */
  env?: Record<string, string | undefined>;
}

/** "127.0.0.1:7707", "localhost:0", "[::1]:7707" → host and port; null when malformed. */
function hostPort(value: string): { host: string; port: number } | null {
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]+)):([0-9]{1,5})$/.exec(value);
  if (match === null) return null;
  const host = match[1] ?? match[2] ?? '';
  const port = Number(match[3]);
  if (port > 65535) return null;
  if (match[1] !== undefined && !net.isIPv6(host)) return null;
  return { host, port };
}

/** `http://HOST:PORT` (an optional trailing `/`) or `unix:/ABSOLUTE/PATH` → a target; null when it is neither. */
export function parseServerUrl(value: string): ServerTarget | null {
  if (value.startsWith('unix:')) {
    const path = value.slice('unix:'.length);
    return path.startsWith('/') ? { kind: 'unix', path } : null;
  }
  const match = /^http:\/\/([^/]+)\/?$/.exec(value);
  const address = match?.[1] === undefined ? null : hostPort(match[1]);
  return address === null ? null : { kind: 'tcp', host: address.host, port: address.port };
}

/** A target as the URL that names it. */
export function serverUrl(target: ServerTarget): string {
  return target.kind === 'tcp'
    ? `http://${target.host.includes(':') ? `[${target.host}]` : target.host}:${target.port}`
    : `unix:${target.path}`;
}

function urlTarget(value: string, from: string): ServerTarget {
  const target = parseServerUrl(value);
  if (target === null)
    throw new TypeError(`${from}: expected http://HOST:PORT or unix:/PATH, got ${JSON.stringify(value)}`);
  return target;
}

/**
 * The options a client runs with. The server: `target`, else `server`, else TURNHOST_URL, else
 * http://127.0.0.1:7707. The token: `token`, else TURNHOST_TOKEN; neither is a TypeError.
 */
export function resolveClientOptions(options: ConnectOptions = {}): ClientOptions {
  const env = options.env ?? process.env;
  const given = options.target ?? options.server;
  const fromEnv = env['TURNHOST_URL'];
  const target =
    typeof given === 'object'
      ? given
      : given !== undefined
        ? urlTarget(given, 'server')
        : fromEnv !== undefined && fromEnv !== ''
          ? urlTarget(fromEnv, 'TURNHOST_URL')
          : urlTarget(DEFAULT_SERVER_URL, 'the default server');
  const token = options.token ?? env['TURNHOST_TOKEN'];
  if (token === undefined || token === '')
    throw new TypeError(
      `no API token for ${serverUrl(target)}: pass { token } or set TURNHOST_TOKEN (the server's token file is <dataDir>/api-token)`,
    );
  return { target, token, ...(options.requestId ? { requestId: options.requestId } : {}) };
}
