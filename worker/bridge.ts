/**
 * Inside the worker's loopback-only network namespace: `127.0.0.1:<port>` is the only way out,
 * and every TCP connection to it becomes a fresh connection to the turn's proxy unix socket.
 * The bridge relays bytes and nothing else; the proxy decides.
 */
import net from 'node:net';
import { fail, ok, type Result } from '../core/result.js';

export interface EgressBridge {
  port: number;
  /**
   * Where connections go from now on. The worker listens before it knows its turn (the command
   * that could connect starts only later); until then every connection is closed at once.
   */
  target(socketPath: string): void;
  close(): void;
}

function relay(client: net.Socket, socketPath: string | null, open: Set<net.Socket>): void {
  if (socketPath === null) {
    client.destroy();
    return;
  }
  const proxy = net.connect({ path: socketPath, allowHalfOpen: true });
  for (const socket of [client, proxy]) {
    open.add(socket);
    socket.once('close', () => open.delete(socket));
  }
  client.setNoDelay(true);
  client.on('error', () => proxy.destroy());
  proxy.on('error', () => client.destroy());
  client.on('close', () => proxy.destroySoon());
  proxy.on('close', () => client.destroySoon());
  client.pipe(proxy);
  proxy.pipe(client);
}

export async function startEgressBridge(options: { socketPath?: string; port?: number }): Promise<Result<EgressBridge, 'listen_failed'>> {
  const open = new Set<net.Socket>();
  let socketPath = options.socketPath ?? null;
  const server = net.createServer({ allowHalfOpen: true }, (client) => relay(client, socketPath, open));
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen({ host: '127.0.0.1', port: options.port ?? 0 }, () => {
        server.removeListener('error', reject);
        resolve();
      });
    });
  } catch (error) {
    return fail('listen_failed', `egress bridge cannot listen on 127.0.0.1:${options.port ?? 0}: ${(error as Error).message}`);
  }
  const address = server.address() as net.AddressInfo;
  return ok({
    port: address.port,
    target: (path: string) => {
      socketPath = path;
    },
    close: () => {
      server.close();
      for (const socket of open) socket.destroy();
    },
  });
}
