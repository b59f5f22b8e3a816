/**
 * How client commands reach the supervisor: `--server URL` (http://host:port or unix:/path),
 * else the configured listener (socket first); the token from TURNHOST_API_TOKEN or `apiToken`,
 * else `<dataDir>/api-token`. The requests themselves are the typed client's (client/); this
 * module only finds the server and maps refusals to exit codes.
 */
import {
  createClient,
  parseServerUrl,
  serverUrl,
  TurnhostApiError,
  type ServerTarget,
  type TurnhostClient,
} from '../../client/index.js';
import { loadConfig, parseHostPort, type ConfigOverrides } from '../config/load.js';
import { readTokenFile } from '../http/token.js';
import { CliExit, EXIT } from './exit-codes.js';

export interface Connection {
  target: ServerTarget;
  token: string;
}

const START_HINT =
  'start one with `turnhost serve` (or `make run` in a checkout), or point to it with --server URL and --data-dir DIR';

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

/** The typed API client for a resolved connection. */
export function clientFor(connection: Connection): TurnhostClient {
  return createClient({ target: connection.target, token: connection.token });
}

function notRunning(connection: Connection, code: string | undefined): CliExit {
  return new CliExit(
    EXIT.serverNotRunning,
    `turnhost: no server answers at ${serverUrl(connection.target)} (${code ?? 'error'}); ${START_HINT}`,
  );
}

const CONNECTION_ERRORS = new Set(['ECONNREFUSED', 'ENOENT', 'ECONNRESET', 'EHOSTUNREACH', 'ENOTSOCK', 'EACCES']);

/** A client call's refusal as the CLI's exit: the error answers every command shares. */
export function cliFailure(connection: Connection, error: unknown, what: string): Error {
  if (!(error instanceof TurnhostApiError)) return error instanceof Error ? error : new Error(String(error));
  if (error.code === 'unreachable')
    return error.errno !== undefined && CONNECTION_ERRORS.has(error.errno)
      ? notRunning(connection, error.errno)
      : new CliExit(EXIT.failed, `turnhost: ${what}: ${error.message}`);
  const text = `turnhost: ${what}: ${error.message}${error.code !== 'protocol_error' ? ` (${error.code})` : ''}`;
  if (error.status === 401) return new CliExit(EXIT.unavailable, `${text}; check --data-dir or TURNHOST_API_TOKEN`);
  if (error.status === 400) return new CliExit(EXIT.usage, text);
  if (error.status === 404) return new CliExit(EXIT.notFound, text);
  if (error.status === 503) return new CliExit(EXIT.refused, text);
  if (error.status === 429) return new CliExit(EXIT.capacity, text);
  if (error.status === 409) return new CliExit(EXIT.conflict, text);
  return new CliExit(EXIT.failed, text);
}

/** Runs one client call, answering its refusal as the CLI's exit. */
export async function call<T>(
  connection: Connection,
  what: string,
  run: (client: TurnhostClient) => Promise<T>,
): Promise<T> {
  try {
    return await run(clientFor(connection));
  } catch (error) {
    throw cliFailure(connection, error, what);
  }
}
