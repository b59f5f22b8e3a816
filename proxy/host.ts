/**
 * Host validation and canonicalisation. Every host the proxy sees passes through
 * `canonicalHost` before matching, so the policy compares one spelling per address: lowercase
 * names without the trailing dot, dotted-quad IPv4 (whatever numeric spelling came in),
 * compressed IPv6, and IPv4-mapped IPv6 as the IPv4 address it maps.
 */
import { fail, ok, type Result } from '../core/result.js';
import { formatAddress, parseIpv6, unmapIpv4, type IpAddress } from './ip-class.js';

const MAX_NAME_LENGTH = 253;
const MAX_LABEL_LENGTH = 63;
/** Longest raw input looked at: a maximal name, brackets, a trailing dot and a port. */
const MAX_RAW_LENGTH = 300;

type HostKind = 'name' | 'ipv4' | 'ipv6';

export interface CanonicalHost {
  host: string;
  kind: HostKind;
}

export interface Authority {
  host: CanonicalHost;
  port: number;
}

const LABEL = /^[a-z0-9_-]+$/;
const NUMERIC_PART = /^(0x[0-9a-f]*|[0-9]+)$/;

/** Names the first forbidden character, or null when every character may appear in a host. */
function forbiddenCharacter(raw: string): string | null {
  for (let i = 0; i < raw.length; i++) {
    const code = raw.charCodeAt(i);
    if (code === 0) return 'a NUL byte';
    if (code === 0x0d || code === 0x0a) return 'CR or LF';
    if (code < 0x20 || code === 0x7f) return `control character 0x${code.toString(16)}`;
    if (code > 0x7e) return 'a non-ASCII character (use the punycode form)';
    if (code === 0x20) return 'a space';
    if (code === 0x25) return "'%' (zone ids and percent-encoding are refused)";
    if (code === 0x40) return "'@' (userinfo is refused)";
  }
  return null;
}

function parseNumericPart(part: string): number | null {
  if (part.startsWith('0x')) return part.length === 2 ? 0 : parseInt(part.slice(2), 16);
  if (part.length > 1 && part.startsWith('0')) return /^[0-7]+$/.test(part) ? parseInt(part, 8) : null;
  return parseInt(part, 10);
}

/**
 * The IPv4 spellings browsers and libc accept (WHATWG host parser): 1-4 parts, each decimal,
 * 0x-hex or 0-octal, the last part filling the remaining bytes (`127.1`, `2130706433`).
 */
function parseLenientIpv4(name: string): Result<{ host: string }, 'invalid_host'> {
  const parts = name.split('.');
  if (parts.length > 4) return fail('invalid_host', 'a numeric host has more than 4 parts');
  const values: number[] = [];
  for (const part of parts) {
    const value = NUMERIC_PART.test(part) ? parseNumericPart(part) : null;
    if (value === null || !Number.isFinite(value))
      return fail('invalid_host', `"${part}" is not a number in an IPv4 host`);
    values.push(value);
  }
  const last = values.pop()!;
  if (values.some((v) => v > 255)) return fail('invalid_host', 'an IPv4 part exceeds 255');
  if (last >= 256 ** (4 - values.length)) return fail('invalid_host', 'the last IPv4 part is out of range');
  let address = last;
  values.forEach((v, i) => {
    address += v * 256 ** (3 - i);
  });
  const bytes = [address >>> 24, (address >>> 16) & 0xff, (address >>> 8) & 0xff, address & 0xff];
  return ok({ host: bytes.join('.') });
}

function canonicalIpv6(inner: string): Result<CanonicalHost, 'invalid_host'> {
  const address: IpAddress | null = parseIpv6(inner.toLowerCase());
  if (address === null) return fail('invalid_host', `"[${inner}]" is not an IPv6 address`);
  const mapped = unmapIpv4(address);
  if (mapped !== null) return ok({ host: formatAddress(mapped), kind: 'ipv4' as const });
  return ok({ host: formatAddress(address), kind: 'ipv6' as const });
}

function canonicalName(raw: string): Result<CanonicalHost, 'invalid_host'> {
  const lower = raw.toLowerCase();
  const name = lower.endsWith('.') ? lower.slice(0, -1) : lower;
  if (name.length === 0) return fail('invalid_host', 'the host is empty');
  if (name.length > MAX_NAME_LENGTH)
    return fail('invalid_host', `the host is longer than ${MAX_NAME_LENGTH} characters`);
  const labels = name.split('.');
  for (const label of labels) {
    if (label.length === 0) return fail('invalid_host', 'the host has an empty label');
    if (label.length > MAX_LABEL_LENGTH)
      return fail('invalid_host', `a label is longer than ${MAX_LABEL_LENGTH} characters`);
    if (!LABEL.test(label))
      return fail('invalid_host', `label "${label}" has a character other than a-z, 0-9, '-', '_'`);
  }
  // A host whose last label is numeric is an IPv4 address or nothing (WHATWG "ends in a number").
  if (NUMERIC_PART.test(labels[labels.length - 1]!)) {
    const v4 = parseLenientIpv4(name);
    return v4.ok ? ok({ host: v4.host, kind: 'ipv4' as const }) : v4;
  }
  return ok({ host: name, kind: 'name' as const });
}

/** Validates and canonicalises a host: a name, a numeric IPv4 spelling, or a bracketed IPv6. */
export function canonicalHost(raw: string): Result<CanonicalHost, 'invalid_host'> {
  if (raw.length > MAX_RAW_LENGTH) return fail('invalid_host', `the host is longer than ${MAX_NAME_LENGTH} characters`);
  const forbidden = forbiddenCharacter(raw);
  if (forbidden !== null) return fail('invalid_host', `the host contains ${forbidden}`);
  if (raw.startsWith('[')) {
    if (!raw.endsWith(']')) return fail('invalid_host', 'a bracketed IPv6 host lacks its closing bracket');
    return canonicalIpv6(raw.slice(1, -1));
  }
  if (raw.includes(':')) return fail('invalid_host', 'an IPv6 host must be in brackets');
  return canonicalName(raw);
}

/** 1-65535 in plain decimal. A leading zero is no port: `0443` is refused, not read as 443. */
export function parsePort(raw: string): Result<{ port: number }, 'invalid_port'> {
  if (!/^[0-9]{1,5}$/.test(raw)) return fail('invalid_port', 'the port is not 1-5 digits');
  if (raw.length > 1 && raw.startsWith('0')) return fail('invalid_port', `port "${raw}" has a leading zero`);
  const port = Number(raw);
  if (port < 1 || port > 65535) return fail('invalid_port', `port ${port} is outside 1-65535`);
  return ok({ port });
}

/**
 * `host[:port]` or `[v6][:port]`. `defaultPort` null means the port is required (CONNECT).
 */
export function parseAuthority(
  raw: string,
  defaultPort: number | null,
): Result<{ authority: Authority }, 'invalid_host' | 'invalid_port'> {
  if (raw.length > MAX_RAW_LENGTH)
    return fail('invalid_host', `the authority is longer than ${MAX_RAW_LENGTH} characters`);
  // Userinfo would be split at its ':' as if it were a port; refuse it before that.
  if (raw.includes('@')) return fail('invalid_host', "the authority contains '@' (userinfo is refused)");
  let hostPart = raw;
  let portPart: string | null = null;
  if (raw.startsWith('[')) {
    const close = raw.indexOf(']');
    if (close < 0) return fail('invalid_host', 'a bracketed IPv6 host lacks its closing bracket');
    hostPart = raw.slice(0, close + 1);
    const rest = raw.slice(close + 1);
    if (rest !== '') {
      if (!rest.startsWith(':')) return fail('invalid_host', 'unexpected text after a bracketed IPv6 host');
      portPart = rest.slice(1);
    }
  } else {
    const colon = raw.indexOf(':');
    // Two colons outside brackets are an IPv6 address without its brackets, never host:port.
    if (colon >= 0 && raw.indexOf(':', colon + 1) >= 0)
      return fail('invalid_host', 'an IPv6 host must be in brackets (two colons outside brackets)');
    if (colon >= 0) {
      hostPart = raw.slice(0, colon);
      portPart = raw.slice(colon + 1);
    }
  }
  const host = canonicalHost(hostPart);
  if (!host.ok) return host;
  if (portPart === null) {
    if (defaultPort === null) return fail('invalid_port', 'the authority needs an explicit port');
    return ok({ authority: { host: { host: host.host, kind: host.kind }, port: defaultPort } });
  }
  const port = parsePort(portPart);
  if (!port.ok) return port;
  return ok({ authority: { host: { host: host.host, kind: host.kind }, port: port.port } });
}

/** How a canonical host is written in an authority (IPv6 in brackets). */
export function formatAuthority(authority: Authority): string {
  const host = authority.host.kind === 'ipv6' ? `[${authority.host.host}]` : authority.host.host;
  return `${host}:${authority.port}`;
}
