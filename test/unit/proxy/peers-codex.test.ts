/**
 * openai/codex's network proxy policy tests, transcribed as facts (inputs and outcomes), run
 * against this proxy's decisions. Sources (repository openai/codex):
 *   codex-rs/network-proxy/src/policy.rs          #[cfg(test)] mod tests (globsets, normalize_host,
 *                                                 is_loopback_host, is_non_public_ip)
 *   codex-rs/network-proxy/src/runtime.rs         #[cfg(test)] mod tests (host_blocked_*)
 *   codex-rs/network-proxy/src/network_policy.rs  #[cfg(test)] mod tests (evaluate_host_policy)
 *
 * codex's Allowed is 'allowed' here; Blocked(Denied) is 'denied_by_rule'; Blocked(NotAllowed)
 * is 'not_allowlisted'; Blocked(NotAllowedLocal) is a refusal for a local address, which here
 * is 'not_allowlisted' when the allowlist does not name the host, 'denied_address_class' when it
 * does (the proxy checks the allowlist first, then the resolved addresses), or
 * 'resolve_failed'. Not transcribed: the method modes (Full/Limited; no method-limited mode
 * here), the decider hook and the add_*_domain edits at run time (the policy is fixed for a
 * turn), the blocked-request log. Where we differ on purpose the row says why.
 */
import t from 'tap';
import type { Resolver } from '../../../proxy/dialer.js';
import { canonicalHost, formatAuthority, parseAuthority } from '../../../proxy/host.js';
import { classifyAddress, parseAddress } from '../../../proxy/ip-class.js';
import { denyMatches, parsePattern } from '../../../proxy/policy.js';
import { configRefusal, decideRequest, policyFor } from './fixtures/decision.js';

const pattern = (entry: string) => {
  const parsed = parsePattern(entry);
  if (!parsed.ok) throw new Error(parsed.detail);
  return parsed.pattern;
};
const denies = (entry: string, host: string) => denyMatches(pattern(entry), host, 80);
const resolver: Resolver = async (name) => {
  const answers: Record<string, string[]> = {
    'example.com': ['93.184.216.34'],
    'api.openai.com': ['104.18.33.45'],
    'evil.example': ['93.184.216.35'],
    localhost: ['127.0.0.1', '::1'],
  };
  const found = answers[name];
  if (found === undefined) throw Object.assign(new Error(`no answer for ${name}`), { code: 'ENOTFOUND' });
  return found;
};

t.test('policy.rs: deny globsets', async (t) => {
  // compile_globset_normalizes_trailing_dots
  t.equal(denies('Example.COM.', 'example.com'), true);
  t.equal(denies('Example.COM.', 'api.example.com'), false);
  // compile_globset_normalizes_wildcards
  t.equal(denies('*.Example.COM.', 'api.example.com'), true);
  t.equal(denies('*.Example.COM.', 'example.com'), false);
  // compile_globset_normalizes_bracketed_ipv6_literals
  t.equal(denies('[::1]', '::1'), true);
  // compile_globset_supports_mid_label_wildcards, compile_globset_normalizes_apex_and_subdomains,
  // compile_globset_preserves_scoped_ipv6_literals: here these entries are refused with the
  // configuration (stricter on purpose: an entry is host or *.suffix, and zone ids are refused);
  // `**.example.com` is written as `example.com` plus `*.example.com`.
  for (const entry of ['region*.v2.argotunnel.com', '**.Example.COM.', '[fe80::1%25lo0]']) {
    t.equal(configRefusal({ denylist: [entry] }), 'invalid_pattern', `${entry} is refused`);
  }
  t.equal(denies('example.com', 'example.com') && denies('*.example.com', 'api.example.com'), true);
});

t.test('policy.rs: normalize_host, as hosts are canonicalised here', async (t) => {
  const canonical = (raw: string, defaultPort: number | null = 443) => {
    const parsed = parseAuthority(raw, defaultPort);
    return parsed.ok ? parsed.authority.host.host : parsed.reason;
  };
  t.equal(canonical('  ExAmPlE.CoM  '), 'invalid_host', 'stricter on purpose: spaces are refused, not trimmed');
  t.equal(canonical('ExAmPlE.CoM'), 'example.com', 'the lowercasing itself');
  t.equal(canonical('example.com:1234'), 'example.com', 'the port is split off');
  t.equal(canonical('2001:db8::1'), 'invalid_host', 'stricter on purpose: brackets are for IPv6 only');
  t.equal(canonical('[2001:db8::1]'), '2001:db8::1');
  t.equal(canonical('example.com.'), 'example.com');
  t.equal(canonical('ExAmPlE.CoM.'), 'example.com');
  t.equal(canonical('example.com.:443'), 'example.com');
  t.equal(canonical('[::1]'), '::1');
  t.equal(canonical('[::1]:443'), '::1');
  for (const scoped of ['fe80::1%lo0', '[fe80::1%lo0]', '[fe80::1%25lo0]']) {
    t.equal(canonical(scoped), 'invalid_host', `stricter on purpose: ${scoped}, zone ids are refused`);
  }
  const parsed = parseAuthority('example.com:1234', null);
  t.equal(parsed.ok && formatAuthority(parsed.authority), 'example.com:1234');
});

t.test('policy.rs: is_loopback_host and is_non_public_ip', async (t) => {
  // localhost, localhost., LOCALHOST are one name here; what it is comes from its answers.
  for (const spelling of ['localhost', 'localhost.', 'LOCALHOST']) {
    const host = canonicalHost(spelling);
    t.equal(host.ok && host.host, 'localhost', spelling);
  }
  const other = canonicalHost('notlocalhost');
  t.equal(other.ok && other.host, 'notlocalhost', 'another name');
  const nonPublic = ['127.0.0.1', '::1', '10.0.0.1', '192.168.0.1', '100.64.0.1', '192.0.0.1', '192.0.2.1'];
  nonPublic.push('198.18.0.1', '198.51.100.1', '203.0.113.1', '240.0.0.1', '0.1.2.3');
  nonPublic.push('::ffff:127.0.0.1', '::ffff:10.0.0.1', 'fe80::1', 'fc00::1');
  for (const address of nonPublic) t.not(classifyAddress(parseAddress(address)!), 'public', address);
  for (const address of ['8.8.8.8', '::ffff:8.8.8.8', '1.2.3.4']) {
    t.equal(classifyAddress(parseAddress(address)!), 'public', address);
  }
});

t.test('runtime.rs host_blocked', async (t) => {
  const decide = (lists: Parameters<typeof policyFor>[0], host: string, port: number) =>
    decideRequest(policyFor(lists), `${host}:${port}`, { resolver });
  // host_blocked_denied_wins_over_allowed
  t.equal(await decide({ allowlist: ['example.com'], denylist: ['example.com'] }, 'example.com', 80), 'denied_by_rule');
  // host_blocked_requires_allowlist_match
  t.equal(await decide({ allowlist: ['example.com'] }, 'example.com', 80), 'allowed');
  t.equal(await decide({ allowlist: ['example.com'] }, '8.8.8.8', 80), 'not_allowlisted');
  // host_blocked_subdomain_wildcards_exclude_apex
  t.equal(await decide({ allowlist: ['*.openai.com'] }, 'api.openai.com', 80), 'allowed');
  t.equal(await decide({ allowlist: ['*.openai.com'] }, 'openai.com', 80), 'not_allowlisted');
  // host_blocked_global_wildcard_allowlist_allows_public_hosts_except_denylist,
  // add_denied_domain_forces_block_with_global_wildcard_allowlist: '*' is refused in an
  // allowlist here (stricter on purpose: an allowlist names hosts); the deny half agrees.
  t.equal(configRefusal({ allowlist: ['*'] }), 'invalid_pattern');
  t.equal(
    await decide({ allowlist: ['example.com', 'evil.example'], denylist: ['evil.example'] }, 'evil.example', 80),
    'denied_by_rule',
  );
  // host_blocked_rejects_loopback_when_local_binding_disabled
  t.equal(await decide({ allowlist: ['example.com'] }, '127.0.0.1', 80), 'not_allowlisted');
  t.equal(await decide({ allowlist: ['example.com'] }, 'localhost', 80), 'not_allowlisted');
  // host_blocked_allows_loopback_when_explicitly_allowlisted_and_local_binding_disabled: an
  // allowlist entry names a host, never an address class; a range must lift loopback
  // (stricter on purpose: naming localhost does not open the host's loopback services).
  t.equal(await decide({ allowlist: ['localhost'] }, 'localhost', 80), 'denied_address_class');
  t.equal(
    await decide({ allowlist: ['localhost'], allowAddressRanges: ['127.0.0.0/8', '::1/128'] }, 'localhost', 80),
    'allowed',
  );
  // host_blocked_allows_private_ip_literal_when_explicitly_allowlisted: the same rule.
  t.equal(await decide({ allowlist: ['10.0.0.1'] }, '10.0.0.1', 80), 'denied_address_class');
  t.equal(await decide({ allowlist: ['10.0.0.1'], allowAddressRanges: ['10.0.0.1/32'] }, '10.0.0.1', 80), 'allowed');
  // host_blocked_rejects_scoped_ipv6_literal_when_not_allowlisted
  t.equal(await decideRequest(policyFor({ allowlist: ['example.com'] }), '[fe80::1%lo0]:80'), 'invalid_host');
  // host_blocked_allows_scoped_ipv6_literal_when_explicitly_allowlisted: zone ids are refused
  // in entries and requests alike (stricter on purpose).
  t.equal(configRefusal({ allowlist: ['[fe80::1%lo0]'] }), 'invalid_pattern');
  // host_blocked_rejects_private_ip_literals_when_local_binding_disabled
  t.equal(await decide({ allowlist: ['example.com'] }, '10.0.0.1', 80), 'not_allowlisted');
  // host_blocked_rejects_loopback_when_allowlist_empty
  t.equal(await decide({}, '127.0.0.1', 80), 'not_allowlisted');
  // host_blocked_rejects_allowlisted_hostname_when_dns_lookup_fails
  t.equal(await decide({ allowlist: ['does-not-resolve.invalid'] }, 'does-not-resolve.invalid', 80), 'resolve_failed');
});

t.test('network_policy.rs evaluate_host_policy', async (t) => {
  // The default policy denies everything; a denied host is denied (no decider here to ask).
  t.equal(await decideRequest(policyFor({}), 'example.com:80', { resolver }), 'not_allowlisted');
  const lists = { allowlist: ['example.com'], denylist: ['blocked.com'] };
  t.equal(await decideRequest(policyFor(lists), 'blocked.com:80', { resolver }), 'denied_by_rule');
  t.equal(
    await decideRequest(policyFor({ allowlist: ['example.com'] }), '127.0.0.1:80', { resolver }),
    'not_allowlisted',
  );
});
