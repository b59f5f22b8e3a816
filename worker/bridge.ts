/**
 * Inside the worker's loopback-only network namespace: `127.0.0.1:<port>` is the only way out,
 * and every TCP connection to it becomes a fresh connection to the turn's proxy unix socket.
 * The bridge relays bytes and nothing else; the proxy decides. CONNECT tunnels move by
 * splice(2) in the worker's kernel relay thread (relay/) once it is ready; everything else,
 * and everything until the thread is ready, is relayed in Node.
 */
import net from 'node:net';
import { fail, ok, type Result } from '../core/result.js';
import type { KernelRelay, KernelTunnel } from '../relay/kernel-relay.js';

export interface EgressBridge {
  port: number;
  /**
   * Where connections go from now on. The worker listens before it knows its turn (the command
   * that could connect starts only later); until then every connection is closed at once.
   */
  target(socketPath: string): void;
  /** Stops listening and cuts every connection; resolves once the kernel relay has closed its tunnels. */
  close(): Promise<void>;
}

/** The fallback while the kernel relay is not ready: Node streams both ways. */
function relayInNode(client: net.Socket, proxy: net.Socket): void {
  client.on('close', () => proxy.destroySoon());
  proxy.on('close', () => client.destroySoon());
  client.pipe(proxy);
  proxy.pipe(client);
}

const CONNECT_PREFIX = Buffer.from('CONNECT ');

/**
 * Handing a connection to the kernel relay costs about 100 µs of CPU (dup, two pipes, epoll
 * registration, a thread wake-up: bench/proxy.ts), more than relaying a forward request of a
 * few hundred bytes in Node. So the bridge passes the client's first bytes on itself and hands
 * over only CONNECT tunnels, which may carry megabytes; once those bytes are written, Node
 * holds nothing of either socket unless the client sent more before the proxy's answer, and
 * then the hand-off is refused and Node relays.
 */
function relayFromFirstBytes(client: net.Socket, proxy: net.Socket, kernel: KernelRelay | null, tunnels: Set<KernelTunnel>): void {
  client.once('readable', () => {
    const first = client.read() as Buffer | null;
    if (first === null) {
      relayInNode(client, proxy);
      return;
    }
    const tunnel = kernel !== null && first.subarray(0, CONNECT_PREFIX.length).equals(CONNECT_PREFIX);
    proxy.write(first, () => {
      const spliced = tunnel ? kernel.adopt(client, proxy) : null;
      if (!spliced?.ok) {
        relayInNode(client, proxy);
        return;
      }
      tunnels.add(spliced.tunnel);
      void spliced.tunnel.ended.then(() => tunnels.delete(spliced.tunnel));
    });
  });
}

/** Neither socket is read before the proxy connection is up (the client was accepted paused). */
function relay(client: net.Socket, socketPath: string | null, open: Set<net.Socket>, tunnels: Set<KernelTunnel>, kernel: KernelRelay | null): void {
  if (socketPath === null) {
    client.destroy();
    return;
  }
  const proxy = net.connect({ path: socketPath, allowHalfOpen: true });
  proxy.pause();
  for (const socket of [client, proxy]) {
    open.add(socket);
    socket.once('close', () => open.delete(socket));
  }
  client.setNoDelay(true);
  client.on('error', () => proxy.destroy());
  proxy.on('error', () => client.destroy());
  proxy.once('connect', () => relayFromFirstBytes(client, proxy, kernel, tunnels));
}

export interface EgressBridgeOptions {
  socketPath?: string;
  port?: number;
  /** Relays established connections by splice(2); null relays in Node. */
  kernel?: KernelRelay | null;
}

export async function startEgressBridge(options: EgressBridgeOptions): Promise<Result<EgressBridge, 'listen_failed'>> {
  const open = new Set<net.Socket>();
  const tunnels = new Set<KernelTunnel>();
  const kernel = options.kernel ?? null;
  let socketPath = options.socketPath ?? null;
  const server = net.createServer({ allowHalfOpen: true, pauseOnConnect: true }, (client) => relay(client, socketPath, open, tunnels, kernel));
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
    close: async () => {
      server.close();
      for (const socket of open) socket.destroy();
      const ended = [...tunnels].map((tunnel) => tunnel.ended);
      for (const tunnel of tunnels) tunnel.abort();
      await Promise.all(ended);
    },
  });
}
