/**
 * The turn's egress policy: allow and deny patterns and the operator's address-range
 * exceptions. Nothing here tags a connection as inference: only the relay does (brokers.ts). Entries are `host`, `*.suffix` (proper subdomains only) and an
 * optional `:port`. Without a port, an allow entry allows 80 and 443 only, while a deny entry
 * refuses every port: a deny list must fail closed. Deny wins; an empty allowlist allows nothing.
 */
import { fail, ok, type Result } from '../core/result.js';
import type { WorkerMode } from '../core/modes.js';
import { canonicalHost, parsePort } from './host.js';
import { parseAddress, parseCidr, type Cidr } from './ip-class.js';

/** Ports an allow entry without `:port` allows: plain HTTP and TLS through CONNECT. A deny entry without `:port` refuses every port. */
const DEFAULT_PORTS: readonly number[] = [80, 443];

/** The port rules side by side, as `turnhost check` and the docs state them. */
export const PORTLESS_ENTRY_RULES =
  'an allow entry without a port allows ports 80 and 443 only; a deny entry without a port denies every port';

export interface HostPattern {
  kind: 'exact' | 'suffix';
  /** Canonical host; for `suffix` the part after `*.`. */
  host: string;
  /** null: no port named (an allow entry then covers DEFAULT_PORTS, a deny entry every port). */
  port: number | null;
  text: string;
}

export interface EgressPolicy {
  mode: WorkerMode;
  allow: HostPattern[];
  deny: HostPattern[];
  allowAddressRanges: Cidr[];
}

/** 'inference' and 'credential' come only from the brokers (brokers.ts); the general proxy's traffic is 'tool'. */
export type Scope = 'inference' | 'credential' | 'tool';

export type PolicyDenial = 'not_allowlisted' | 'denied_by_rule';

function splitPort(entry: string): { hostText: string; portText: string | null } {
  const close = entry.lastIndexOf(']');
  const colon = entry.lastIndexOf(':');
  if (colon < 0 || colon < close) return { hostText: entry, portText: null };
  if (!entry.startsWith('[') && entry.indexOf(':') !== colon) return { hostText: entry, portText: null };
  return { hostText: entry.slice(0, colon), portText: entry.slice(colon + 1) };
}

export function parsePattern(entry: string): Result<{ pattern: HostPattern }, 'invalid_pattern'> {
  const { hostText, portText } = splitPort(entry);
  let port: number | null = null;
  if (portText !== null) {
    const parsed = parsePort(portText);
    if (!parsed.ok) return fail('invalid_pattern', `"${entry}": ${parsed.detail}`);
    port = parsed.port;
  }
  const wildcard = hostText.startsWith('*.');
  const host = canonicalHost(wildcard ? hostText.slice(2) : hostText);
  if (!host.ok) return fail('invalid_pattern', `"${entry}": ${host.detail}`);
  if (wildcard && host.kind !== 'name')
    return fail('invalid_pattern', `"${entry}": a wildcard needs a name, not an address`);
  return ok({ pattern: { kind: wildcard ? 'suffix' : 'exact', host: host.host, port, text: entry } });
}

function parsePatterns(
  entries: readonly string[],
  field: string,
): Result<{ patterns: HostPattern[] }, 'invalid_pattern'> {
  const patterns: HostPattern[] = [];
  for (const entry of entries) {
    const parsed = parsePattern(entry);
    if (!parsed.ok) return fail('invalid_pattern', `${field}: ${parsed.detail}`);
    patterns.push(parsed.pattern);
  }
  return ok({ patterns });
}

/** `host` is canonical (from canonicalHost). A suffix never matches its apex. */
function hostMatches(pattern: HostPattern, host: string): boolean {
  if (pattern.kind === 'exact') return host === pattern.host;
  return host.endsWith('.' + pattern.host);
}

/** Whether allow entry `pattern` covers host:port; without a port it covers DEFAULT_PORTS only. */
export function patternMatches(pattern: HostPattern, host: string, port: number): boolean {
  const portAllowed = pattern.port === null ? DEFAULT_PORTS.includes(port) : pattern.port === port;
  return portAllowed && hostMatches(pattern, host);
}

/** Whether deny entry `pattern` refuses host:port; without a port it refuses every port. */
export function denyMatches(pattern: HostPattern, host: string, port: number): boolean {
  return (pattern.port === null || pattern.port === port) && hostMatches(pattern, host);
}

/** Whether every host:port `inner` matches is also matched by `outer`. */
export function patternCovers(outer: HostPattern, inner: HostPattern): boolean {
  const portsCovered =
    outer.port === null ? inner.port === null || DEFAULT_PORTS.includes(inner.port) : outer.port === inner.port;
  if (!portsCovered) return false;
  if (outer.kind === 'exact') return inner.kind === 'exact' && inner.host === outer.host;
  return inner.host.endsWith('.' + outer.host) || (inner.kind === 'suffix' && inner.host === outer.host);
}

export function decide(policy: EgressPolicy, host: string, port: number): Result<{ scope: Scope }, PolicyDenial> {
  const denied = policy.deny.find((p) => denyMatches(p, host, port));
  if (denied) return fail('denied_by_rule', `${host}:${port} matches deny entry "${denied.text}"`);
  if (!policy.allow.some((p) => patternMatches(p, host, port))) {
    return fail(
      'not_allowlisted',
      `${host}:${port} matches no allow entry (${policy.allow.length} entries, mode ${policy.mode})`,
    );
  }
  return ok({ scope: 'tool' });
}

/**
 * The deny entry naming `address` (canonical, as the dialer checked it) on `port`, if any. A
 * deny entry that is an address refuses every name that resolves to it, not only requests that
 * spell it: the operator denied the address.
 */
export function deniedAddress(policy: EgressPolicy, address: string, port: number): HostPattern | undefined {
  return policy.deny.find(
    (p) => p.kind === 'exact' && p.host === address && parseAddress(p.host) !== null && denyMatches(p, address, port),
  );
}

/** The operator's egress settings a turn's policy is built from. */
export interface EgressConfig {
  allowlist: readonly string[];
  denylist: readonly string[];
  /** CIDRs the proxy may dial although their address class is normally refused. */
  allowAddressRanges: readonly string[];
  /** Hosts a turn request may add to its allowlist (patterns, same syntax). Empty: none. */
  turnAdditionsAllowed: readonly string[];
}

export interface TurnPolicyRequest {
  mode: WorkerMode;
  /** The turn request's extra allow entries (`TurnRequest.egressAllow`). */
  additions?: readonly string[];
}

/**
 * `ordinary`: the configured allowlist plus additions covered by `turnAdditionsAllowed`.
 * `restricted`: nothing; its only way out is the inference relay (brokers.ts); additions are refused.
 */
export function buildTurnPolicy(
  egress: EgressConfig,
  request: TurnPolicyRequest,
): Result<{ policy: EgressPolicy }, 'invalid_pattern' | 'invalid_cidr' | 'addition_not_permitted'> {
  const deny = parsePatterns(egress.denylist, 'egress.denylist');
  if (!deny.ok) return deny;
  const ranges: Cidr[] = [];
  for (const text of egress.allowAddressRanges) {
    const parsed = parseCidr(text);
    if (!parsed.ok) return fail('invalid_cidr', `egress.allowAddressRanges: ${parsed.detail}`);
    ranges.push(parsed.cidr);
  }
  const additions = parsePatterns(request.additions ?? [], 'egressAllow');
  if (!additions.ok) return additions;
  let allow: HostPattern[];
  if (request.mode === 'restricted') {
    if (additions.patterns.length > 0) {
      return fail('addition_not_permitted', 'egressAllow: restricted turns reach only the inference relay');
    }
    allow = [];
  } else {
    const configured = parsePatterns(egress.allowlist, 'egress.allowlist');
    if (!configured.ok) return configured;
    const permitted = parsePatterns(egress.turnAdditionsAllowed, 'egress.turnAdditionsAllowed');
    if (!permitted.ok) return permitted;
    const refused = additions.patterns.find((a) => !permitted.patterns.some((p) => patternCovers(p, a)));
    if (refused) {
      return fail(
        'addition_not_permitted',
        `egressAllow: "${refused.text}" is not covered by egress.turnAdditionsAllowed`,
      );
    }
    allow = [...configured.patterns, ...additions.patterns];
  }
  return ok({
    policy: {
      mode: request.mode,
      allow,
      deny: deny.patterns,
      allowAddressRanges: ranges,
    },
  });
}
