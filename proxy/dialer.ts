/**
 * Resolve, classify, dial. The proxy resolves the name itself, checks every address the
 * resolver returned, and connects to exactly the address it checked, so DNS cannot hand the
 * dial a different answer than the check saw.
 */
import { lookup } from 'node:dns/promises';
import net from 'node:net';
import { fail, ok, type Result } from '../core/result.js';
import type { Authority, CanonicalHost } from './host.js';
import { deniedAddress, type EgressPolicy } from './policy.js';
import { interfaceAddresses, isSelfConnection } from './self-connection.js';
import {
  classifyAddress,
  cidrContains,
  formatAddress,
  parseAddress,
  unmapIpv4,
  type AddressClass,
  type Cidr,
  type IpAddress,
} from './ip-class.js';

/** Returns every address for a name; tests inject a fixed map. */
export type Resolver = (host: string) => Promise<string[]>;

export const systemResolver: Resolver = async (host) => {
  const answers = await lookup(host, { all: true, verbatim: true });
  return answers.map((a) => a.address);
};

/** More answers than this is refused rather than checked one by one forever. */
const MAX_ADDRESSES = 64;

/** Whether an address, on the port being dialled, is one of the supervisor's own listeners (self-connection.ts). */
export type OwnListenerCheck = (address: IpAddress) => boolean;

const NO_OWN_LISTENER: OwnListenerCheck = () => false;

export interface CheckedAddress {
  address: string;
  family: 4 | 6;
  cls: AddressClass;
}

/**
 * An address is dialable when it is none of the supervisor's own listeners (whatever the
 * ranges say) and its class is public or an operator range covers it.
 */
export function checkAddress(
  text: string,
  allowRanges: readonly Cidr[],
  ownListener: OwnListenerCheck = NO_OWN_LISTENER,
): Result<{ checked: CheckedAddress }, 'denied_address_class' | 'self_connection'> {
  const parsed = parseAddress(text);
  if (parsed === null)
    return fail('denied_address_class', `resolver answer "${text.slice(0, 64)}" is not a plain IP address`);
  const address: IpAddress = unmapIpv4(parsed) ?? parsed;
  const canonical = formatAddress(address);
  if (ownListener(address))
    return fail('self_connection', `${canonical} is this host, on a port the supervisor listens on`);
  const cls = classifyAddress(address);
  if (cls !== 'public' && !allowRanges.some((range) => cidrContains(range, address))) {
    return fail('denied_address_class', `${canonical} is ${cls} and no egress.allowAddressRanges entry covers it`);
  }
  return ok({ checked: { address: canonical, family: address.family, cls } });
}

export async function resolveAndCheck(
  host: CanonicalHost,
  allowRanges: readonly Cidr[],
  resolver: Resolver,
  ownListener: OwnListenerCheck = NO_OWN_LISTENER,
): Promise<Result<{ addresses: CheckedAddress[] }, 'resolve_failed' | 'denied_address_class' | 'self_connection'>> {
  let answers: string[];
  if (host.kind === 'name') {
    try {
      answers = await resolver(host.host);
    } catch (error) {
      return fail(
        'resolve_failed',
        `${host.host} did not resolve (${(error as NodeJS.ErrnoException).code ?? 'error'})`,
      );
    }
    if (answers.length === 0) return fail('resolve_failed', `${host.host} resolved to no address`);
    if (answers.length > MAX_ADDRESSES)
      return fail('resolve_failed', `${host.host} resolved to more than ${MAX_ADDRESSES} addresses`);
  } else {
    answers = [host.host];
  }
  // Every answer must pass: a name with one internal address is refused as a whole.
  const addresses: CheckedAddress[] = [];
  for (const answer of answers) {
    const checked = checkAddress(answer, allowRanges, ownListener);
    if (!checked.ok) return fail(checked.reason, `${host.host}: ${checked.detail}`);
    addresses.push(checked.checked);
  }
  return ok({ addresses });
}

export interface DestinationContext {
  policy: EgressPolicy;
  resolver: Resolver;
  /** Ports of the supervisor's own listeners (self-connection.ts). */
  ownPorts: readonly number[];
  /** This host's interface addresses; default: read at the check. */
  localAddresses?: () => readonly IpAddress[];
}

/**
 * Everything checked about where an allowed authority leads, before any connection: each
 * answer is none of the supervisor's listeners, is of a dialable class (or lifted by a range)
 * and is no address a deny entry names.
 */
export async function checkDestination(
  authority: Authority,
  context: DestinationContext,
): Promise<
  Result<
    { addresses: CheckedAddress[] },
    'resolve_failed' | 'denied_address_class' | 'self_connection' | 'denied_by_rule'
  >
> {
  const { policy, ownPorts, localAddresses = interfaceAddresses } = context;
  const resolved = await resolveAndCheck(authority.host, policy.allowAddressRanges, context.resolver, (address) =>
    isSelfConnection(address, authority.port, ownPorts, localAddresses),
  );
  if (!resolved.ok) return resolved;
  for (const { address } of resolved.addresses) {
    const rule = deniedAddress(policy, address, authority.port);
    if (rule) return fail('denied_by_rule', `${authority.host.host} resolves to ${address}, denied by "${rule.text}"`);
  }
  return resolved;
}

function connectTo(checked: CheckedAddress, port: number, timeoutMs: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: checked.address, port, family: checked.family, noDelay: true });
    const onError = (error: Error): void => {
      socket.destroy();
      reject(error);
    };
    socket.setTimeout(timeoutMs, () => onError(new Error(`connect timed out after ${timeoutMs} ms`)));
    socket.once('error', onError);
    socket.once('connect', () => {
      socket.removeListener('error', onError);
      socket.setTimeout(0);
      resolve(socket);
    });
  });
}

/** Tries the checked addresses in resolver order; never resolves the name again. */
export async function dialChecked(
  addresses: readonly CheckedAddress[],
  port: number,
  timeoutMs: number,
): Promise<Result<{ socket: net.Socket; address: string }, 'connect_failed'>> {
  const errors: string[] = [];
  for (const checked of addresses) {
    try {
      const socket = await connectTo(checked, port, timeoutMs);
      return ok({ socket, address: checked.address });
    } catch (error) {
      errors.push(`${checked.address}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`);
    }
  }
  return fail('connect_failed', `no address accepted the connection (${errors.join('; ')})`);
}
