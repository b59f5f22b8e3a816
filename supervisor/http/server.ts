/**
 * Listeners: loopback TCP and/or a unix socket, both serving the same app and WebSocket
 * endpoints. The socket file is created 0660 (owner and the turnhost group; the token is still
 * required). A leftover socket file is removed only if it is a socket nobody answers on.
 */
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import { fail, ok, type Result } from '../../core/result.js';
import { parseHostPort } from '../config/load.js';
import { createApp, type AppDeps } from './app.js';
import { createUpgradeHandler } from './websocket.js';

const SOCKET_MODE = 0o660;

export interface HttpListen {
  tcp: string | null;
  socket: string | null;
}

export interface HttpServerHandle {
  /** The bound TCP address (the real port when 0 was asked), or null. */
  tcp: { host: string; port: number } | null;
  socket: string | null;
  close(): Promise<void>;
}

type ListenFailure = 'listen_failed' | 'socket_in_use';

function probeSocket(path: string): Promise<boolean> {
  return new Promise((resolve) => {
    const client = net.connect(path);
    client.once('connect', () => {
      client.destroy();
      resolve(true);
    });
    client.once('error', () => resolve(false));
  });
}

/** Makes `path` free for bind: absent, or a stale socket that we remove. Anything else is refused. */
export async function clearStaleSocket(path: string): Promise<Result<{}, ListenFailure>> {
  let stat: fs.Stats;
  try {
    stat = fs.lstatSync(path);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return ok({});
    return fail('listen_failed', `${path}: cannot inspect (${(error as NodeJS.ErrnoException).code ?? 'error'})`);
  }
  if (!stat.isSocket()) return fail('listen_failed', `${path} exists and is not a socket; refusing to remove it`);
  if (await probeSocket(path)) return fail('socket_in_use', `${path}: another server answers on this socket`);
  fs.unlinkSync(path);
  return ok({});
}

function listen(server: http.Server, target: { host: string; port: number } | { path: string }): Promise<Error | null> {
  return new Promise((resolve) => {
    const onError = (error: Error): void => resolve(error);
    server.once('error', onError);
    const done = (): void => {
      server.off('error', onError);
      resolve(null);
    };
    if ('path' in target) {
      // bind() happens synchronously inside listen(), so the umask covers the socket's creation.
      const previous = process.umask(0o117);
      try {
        server.listen(target.path, done);
      } finally {
        process.umask(previous);
      }
    } else {
      server.listen(target.port, target.host, done);
    }
  });
}

function closeServer(server: http.Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}

export async function startHttp(
  deps: AppDeps,
  where: HttpListen,
): Promise<Result<{ server: HttpServerHandle }, ListenFailure>> {
  const app = createApp(deps);
  const upgrades = createUpgradeHandler(deps);
  const servers: http.Server[] = [];
  let tcp: HttpServerHandle['tcp'] = null;
  let socketPath: string | null = null;
  const make = (): http.Server => {
    const server = http.createServer(app);
    server.on('upgrade', (req, socket, head) => upgrades.handle(req, socket, head));
    servers.push(server);
    return server;
  };
  const closeAll = async (): Promise<void> => {
    upgrades.close();
    await Promise.all(servers.map(closeServer));
    if (socketPath !== null) fs.rmSync(socketPath, { force: true });
  };

  if (where.tcp !== null) {
    const address = parseHostPort(where.tcp);
    if (address === null) return fail('listen_failed', `listen.tcp: cannot parse ${where.tcp}`);
    const server = make();
    const error = await listen(server, address);
    if (error !== null) {
      await closeAll();
      return fail(
        'listen_failed',
        `cannot listen on ${where.tcp}: ${(error as NodeJS.ErrnoException).code ?? error.message}`,
      );
    }
    const bound = server.address() as net.AddressInfo;
    tcp = { host: bound.address, port: bound.port };
  }

  if (where.socket !== null) {
    const cleared = await clearStaleSocket(where.socket);
    if (!cleared.ok) {
      await closeAll();
      return cleared;
    }
    const server = make();
    const error = await listen(server, { path: where.socket });
    if (error !== null) {
      await closeAll();
      return fail(
        'listen_failed',
        `cannot listen on ${where.socket}: ${(error as NodeJS.ErrnoException).code ?? error.message}`,
      );
    }
    socketPath = where.socket;
    fs.chmodSync(socketPath, SOCKET_MODE);
  }

  return ok({ server: { tcp, socket: socketPath, close: closeAll } });
}
