/**
 * The self-connection guard. A turn's proxy must never dial a listener of the supervisor's own
 * process: its HTTP API on TCP, or the turn proxy's own worker listener. An operator range such
 * as `127.0.0.0/8` (common on development hosts) lifts the loopback class for the turn's
 * origins, and without this guard it would also let the command reach the supervisor's API
 * through its proxy. So the check comes before the address classes and no
 * `egress.allowAddressRanges` entry lifts it (smokescreen refuses its own listener the same way).
 *
 * A destination is the supervisor's own when its port is a port of one of these listeners and
 * its address is an address of this host: loopback (`127.0.0.0/8`, `::1`), unspecified
 * (`0.0.0.0` and `::` connect to the host itself) or an address of a local interface, read at
 * the time of the dial. The listener's own bound address is not compared: one bound to a
 * wildcard is reachable on every local address, and refusing the port on every local address
 * covers both cases. Unix sockets (the API socket, the proxy's own socket) need no entry: the
 * proxy dials TCP to checked IP addresses only, and a host that is a path is refused as
 * `invalid_host` before anything is resolved.
 */
import os from 'node:os';
import { classifyAddress, formatAddress, parseAddress, unmapIpv4, type IpAddress } from './ip-class.js';

export interface TcpListener {
  host: string;
  port: number;
}

/**
 * The supervisor's TCP listeners, registered as they start and read at every dial: a turn's
 * proxy may start (a prepared worker) before the API listens, and listeners may come and go.
 */
export class OwnListeners {
  private readonly listeners = new Set<TcpListener>();

  /** Registers a listener; the answer unregisters it. Port 0 (not bound yet) registers nothing. */
  add(listener: TcpListener): () => void {
    if (!Number.isSafeInteger(listener.port) || listener.port < 1 || listener.port > 65535) return () => {};
    const entry = { host: listener.host, port: listener.port };
    this.listeners.add(entry);
    return () => this.listeners.delete(entry);
  }

  list(): TcpListener[] {
    return [...this.listeners];
  }

  ports(): number[] {
    return [...new Set([...this.listeners].map((listener) => listener.port))];
  }
}

/** The addresses of this host's interfaces, as os.networkInterfaces() reports them now. */
export function interfaceAddresses(): IpAddress[] {
  const addresses: IpAddress[] = [];
  for (const entries of Object.values(os.networkInterfaces())) {
    for (const entry of entries ?? []) {
      const parsed = parseAddress(entry.address);
      if (parsed !== null) addresses.push(unmapIpv4(parsed) ?? parsed);
    }
  }
  return addresses;
}

/** Whether a connection to `address` stays on this host: loopback, unspecified, or an interface's address. */
export function isLocalAddress(address: IpAddress, localAddresses: () => readonly IpAddress[]): boolean {
  const unmapped = unmapIpv4(address) ?? address;
  const cls = classifyAddress(unmapped);
  if (cls === 'loopback' || cls === 'unspecified') return true;
  const text = formatAddress(unmapped);
  return localAddresses().some((local) => local.family === unmapped.family && formatAddress(local) === text);
}

/**
 * Whether dialling `address`:`port` would reach one of `ports` on this host. The interface list
 * is read only when the port is one of them, so other dials cost a set lookup.
 */
export function isSelfConnection(
  address: IpAddress,
  port: number,
  ports: readonly number[],
  localAddresses: () => readonly IpAddress[] = interfaceAddresses,
): boolean {
  return ports.includes(port) && isLocalAddress(address, localAddresses);
}
