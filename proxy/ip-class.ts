/**
 * IP addresses as bytes, CIDR matching and address classes. Strict parsing only: resolver
 * answers and operator CIDRs are already canonical, so anything unusual is refused rather than
 * interpreted (lenient spellings of hosts are handled in host.ts before they get here).
 */
import { fail, ok, type Result } from '../core/result.js';

export interface IpAddress {
  family: 4 | 6;
  bytes: Uint8Array;
}

export interface Cidr {
  family: 4 | 6;
  bytes: Uint8Array;
  prefix: number;
  text: string;
}

export type AddressClass =
  | 'public'
  | 'metadata'
  | 'loopback'
  | 'private'
  | 'link_local'
  | 'cgnat'
  | 'ula'
  | 'nat64'
  | 'multicast'
  | 'unspecified'
  | 'broadcast'
  | 'this_network'
  | 'reserved';

const DECIMAL_OCTET = /^(0|[1-9][0-9]{0,2})$/;
const HEX_GROUP = /^[0-9a-f]{1,4}$/i;
const MAX_ADDRESS_TEXT = 45;

/** Strict dotted quad: four decimal octets, no leading zeros. */
function parseIpv4(text: string): IpAddress | null {
  const parts = text.split('.');
  if (parts.length !== 4) return null;
  const bytes = new Uint8Array(4);
  for (let i = 0; i < 4; i++) {
    const part = parts[i]!;
    if (!DECIMAL_OCTET.test(part)) return null;
    const value = Number(part);
    if (value > 255) return null;
    bytes[i] = value;
  }
  return { family: 4, bytes };
}

function parseHexGroups(text: string): number[] | null {
  if (text === '') return [];
  const groups: number[] = [];
  for (const group of text.split(':')) {
    if (!HEX_GROUP.test(group)) return null;
    groups.push(parseInt(group, 16));
  }
  return groups;
}

/** IPv6 without brackets and without a zone id; an embedded dotted quad is accepted last. */
export function parseIpv6(text: string): IpAddress | null {
  if (text.length === 0 || text.length > MAX_ADDRESS_TEXT) return null;
  let body = text;
  let tail: number[] = [];
  const lastColon = body.lastIndexOf(':');
  if (lastColon >= 0 && body.indexOf('.', lastColon) >= 0) {
    const v4 = parseIpv4(body.slice(lastColon + 1));
    if (v4 === null) return null;
    tail = [(v4.bytes[0]! << 8) | v4.bytes[1]!, (v4.bytes[2]! << 8) | v4.bytes[3]!];
    // Keep a "::" that precedes the dotted quad; drop a single separating ':'.
    body = text.slice(0, body.endsWith('::', lastColon + 1) ? lastColon + 1 : lastColon);
  }
  const halves = body.split('::');
  if (halves.length > 2) return null;
  let groups: number[];
  if (halves.length === 2) {
    const head = parseHexGroups(halves[0]!);
    const rest = parseHexGroups(halves[1]!);
    if (head === null || rest === null) return null;
    const missing = 8 - head.length - rest.length - tail.length;
    if (missing < 1) return null;
    groups = [...head, ...new Array<number>(missing).fill(0), ...rest, ...tail];
  } else {
    const all = parseHexGroups(body);
    if (all === null) return null;
    groups = [...all, ...tail];
  }
  if (groups.length !== 8) return null;
  const bytes = new Uint8Array(16);
  groups.forEach((group, i) => {
    bytes[i * 2] = group >> 8;
    bytes[i * 2 + 1] = group & 0xff;
  });
  return { family: 6, bytes };
}

export function parseAddress(text: string): IpAddress | null {
  return text.includes(':') ? parseIpv6(text) : parseIpv4(text);
}

/** Dotted quad, or RFC 5952 compressed lowercase IPv6. */
export function formatAddress(address: IpAddress): string {
  if (address.family === 4) return Array.from(address.bytes).join('.');
  const groups: number[] = [];
  for (let i = 0; i < 8; i++) groups.push((address.bytes[i * 2]! << 8) | address.bytes[i * 2 + 1]!);
  let bestStart = -1;
  let bestLength = 1;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let end = i;
    while (end < 8 && groups[end] === 0) end++;
    if (end - i > bestLength) {
      bestStart = i;
      bestLength = end - i;
    }
    i = end;
  }
  const hex = groups.map((g) => g.toString(16));
  if (bestStart < 0) return hex.join(':');
  return `${hex.slice(0, bestStart).join(':')}::${hex.slice(bestStart + bestLength).join(':')}`;
}

const MAPPED_PREFIX = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];

/** The IPv4 address inside an IPv4-mapped IPv6 address (::ffff:0:0/96), or null. */
export function unmapIpv4(address: IpAddress): IpAddress | null {
  if (address.family !== 6) return null;
  for (let i = 0; i < MAPPED_PREFIX.length; i++) if (address.bytes[i] !== MAPPED_PREFIX[i]) return null;
  return { family: 4, bytes: address.bytes.slice(12) };
}

export function parseCidr(text: string): Result<{ cidr: Cidr }, 'invalid_cidr'> {
  const slash = text.indexOf('/');
  if (slash < 0) return fail('invalid_cidr', `"${text}" is not a CIDR: it needs "/prefix"`);
  const address = parseAddress(text.slice(0, slash));
  if (address === null) return fail('invalid_cidr', `"${text}" does not start with a canonical IP address`);
  const prefixText = text.slice(slash + 1);
  const maxPrefix = address.family === 4 ? 32 : 128;
  if (!/^[0-9]{1,3}$/.test(prefixText) || Number(prefixText) > maxPrefix) {
    return fail('invalid_cidr', `"${text}": prefix must be 0-${maxPrefix}`);
  }
  const prefix = Number(prefixText);
  return ok({ cidr: { family: address.family, bytes: address.bytes, prefix, text } });
}

export function cidrContains(cidr: Cidr, address: IpAddress): boolean {
  if (cidr.family !== address.family) return false;
  const fullBytes = cidr.prefix >> 3;
  for (let i = 0; i < fullBytes; i++) if (cidr.bytes[i] !== address.bytes[i]) return false;
  const remainingBits = cidr.prefix & 7;
  if (remainingBits === 0) return true;
  const mask = (0xff << (8 - remainingBits)) & 0xff;
  return (cidr.bytes[fullBytes]! & mask) === (address.bytes[fullBytes]! & mask);
}

function table(entries: Array<[string, AddressClass]>): Array<[Cidr, AddressClass]> {
  return entries.map(([text, cls]) => {
    const parsed = parseCidr(text);
    if (!parsed.ok) throw new Error(`built-in CIDR table: ${parsed.detail}`);
    return [parsed.cidr, cls];
  });
}

/** First match wins, so the specific entries (metadata, unspecified) come before their blocks. */
const IPV4_CLASSES = table([
  ['169.254.169.254/32', 'metadata'],
  ['100.100.100.200/32', 'metadata'],
  ['0.0.0.0/32', 'unspecified'],
  ['0.0.0.0/8', 'this_network'],
  ['127.0.0.0/8', 'loopback'],
  ['10.0.0.0/8', 'private'],
  ['172.16.0.0/12', 'private'],
  ['192.168.0.0/16', 'private'],
  ['169.254.0.0/16', 'link_local'],
  ['100.64.0.0/10', 'cgnat'],
  ['255.255.255.255/32', 'broadcast'],
  ['224.0.0.0/4', 'multicast'],
  ['240.0.0.0/4', 'reserved'],
  ['192.0.0.0/24', 'reserved'],
  ['192.0.2.0/24', 'reserved'],
  ['192.88.99.0/24', 'reserved'],
  ['198.18.0.0/15', 'reserved'],
  ['198.51.100.0/24', 'reserved'],
  ['203.0.113.0/24', 'reserved'],
]);

const IPV6_CLASSES = table([
  ['fd00:ec2::254/128', 'metadata'],
  ['::/128', 'unspecified'],
  ['::1/128', 'loopback'],
  ['::/96', 'reserved'],
  ['64:ff9b::/96', 'nat64'],
  ['64:ff9b:1::/48', 'nat64'],
  ['100::/64', 'reserved'],
  ['2001:db8::/32', 'reserved'],
  ['2001::/23', 'reserved'],
  ['2002::/16', 'reserved'],
  ['fc00::/7', 'ula'],
  ['fe80::/10', 'link_local'],
  ['fec0::/10', 'reserved'],
  ['ff00::/8', 'multicast'],
]);

/** Only 2000::/3 is global unicast; everything outside it is refused as reserved. */
const IPV6_GLOBAL = table([['2000::/3', 'public']])[0]![0];

export function classifyAddress(address: IpAddress): AddressClass {
  const mapped = unmapIpv4(address);
  if (mapped !== null) return classifyAddress(mapped);
  const entries = address.family === 4 ? IPV4_CLASSES : IPV6_CLASSES;
  for (const [cidr, cls] of entries) if (cidrContains(cidr, address)) return cls;
  if (address.family === 6 && !cidrContains(IPV6_GLOBAL, address)) return 'reserved';
  return 'public';
}
