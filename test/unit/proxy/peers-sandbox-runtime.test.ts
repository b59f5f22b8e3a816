/**
 * anthropic-experimental/sandbox-runtime's own test tables, transcribed as facts (inputs and
 * outcomes), run against this proxy's decisions. Sources (repository
 * anthropic-experimental/sandbox-runtime):
 *   test/sandbox/network-filter.test.ts          matchesDomainPattern, evaluateNetworkRules
 *   test/sandbox/domain-pattern.test.ts          matchesDomainPattern, isInjectHostCoveredByAllowedDomains,
 *                                                splitDomainPatternPort, matchesDomainPatternWithPort
 *   test/sandbox/canonical-host-routing.test.ts  the canonical authority dialled and forwarded
 *   test/sandbox/host-header-proxy.test.ts       parseHostHeader, refusals before any dial
 *
 * sandbox-runtime's 'allow' is 'allowed' here, 'deny' is 'denied_by_rule', 'no-match' (the
 * caller decides, by default a refusal) is 'not_allowlisted', 'invalid' is 'invalid_host' or
 * 'invalid_port'. Its entries have no port or one port; here an allow entry without a port
 * allows 80 and 443 only (stricter on purpose, documented), so rows about allow entries use
 * port 443 unless they are about ports. Where we differ on purpose the row says why and
 * asserts our behaviour.
 */
import t from 'tap';
import { canonicalHost, formatAuthority, parseAuthority } from '../../../proxy/host.js';
import { parseForwardTarget, upstreamHeaders } from '../../../proxy/http-messages.js';
import { denyMatches, parsePattern, patternCovers, patternMatches } from '../../../proxy/policy.js';
import { configRefusal, decideRequest, policyFor, type Decision } from './fixtures/decision.js';

const pattern = (entry: string) => {
  const parsed = parsePattern(entry);
  if (!parsed.ok) throw new Error(parsed.detail);
  return parsed.pattern;
};
/** Host against allow entry, as the proxy compares them: both canonical, port 443. */
const allows = (host: string, entry: string): boolean => {
  const canonical = canonicalHost(host);
  return canonical.ok && patternMatches(pattern(entry), canonical.host, 443);
};
const onePattern = (entries: string[]) => ({ allowlist: entries });

t.test('network-filter.test.ts matchesDomainPattern: exact match', async (t) => {
  const rows: Array<[host: string, entry: string, want: boolean]> = [
    ['example.com', 'example.com', true],
    ['example.com', 'other.com', false],
    ['EXAMPLE.com', 'example.com', true],
    ['example.com', 'EXAMPLE.COM', true],
    ['Example.Com', 'eXaMpLe.CoM', true],
    ['example.com', 'example.co', false],
    ['example.co', 'example.com', false],
    ['sub.example.com', 'example.com', false],
    ['example.com', 'sub.example.com', false],
  ];
  for (const [host, entry, want] of rows) t.equal(allows(host, entry), want, `${host} vs ${entry}`);
  // Its predicate compares before canonicalisation (['example.com.', 'example.com', false]);
  // its evaluateNetworkRules strips the dot and allows. Here every host is canonicalised first.
  t.equal(allows('example.com.', 'example.com'), true, 'a trailing dot: the same name (as its evaluateNetworkRules)');
  // ['', '', true] "degenerate but consistent": here both are refused.
  t.equal(canonicalHost('').ok, false, 'stricter on purpose: an empty host is refused');
  t.equal(configRefusal(onePattern([''])), 'invalid_pattern', 'and so is an empty entry');
});

t.test('network-filter.test.ts matchesDomainPattern: wildcard match', async (t) => {
  const rows: Array<[host: string, entry: string, want: boolean]> = [
    ['api.example.com', '*.example.com', true],
    ['www.example.com', '*.example.com', true],
    ['a.b.example.com', '*.example.com', true],
    ['a.b.c.example.com', '*.example.com', true],
    ['example.com', '*.example.com', false],
    ['example.org', '*.example.com', false],
    ['api.example.org', '*.example.com', false],
    ['evilexample.com', '*.example.com', false],
    ['notexample.com', '*.example.com', false],
    ['example.com.evil.com', '*.evil.com', true],
    ['example.com.evil.com', '*.example.com', false],
    ['API.Example.COM', '*.example.com', true],
    ['api.example.com', '*.EXAMPLE.COM', true],
    ['anything.com', '*.com', true],
    ['a.b.c.d.com', '*.com', true],
  ];
  for (const [host, entry, want] of rows) t.equal(allows(host, entry), want, `${host} vs ${entry}`);
});

t.test('network-filter.test.ts: a wildcard never matches an IP literal', async (t) => {
  // Its predicate answers false for these; here the entries themselves are refused (a wildcard
  // needs a name), so the configuration never loads: stricter on purpose.
  for (const entry of ['*.168.1.1', '*.0.0.1', '*.1']) {
    t.equal(configRefusal(onePattern([entry])), 'invalid_pattern', `${entry} is refused`);
  }
  // And a name wildcard never matches an address.
  for (const host of ['192.168.1.1', '10.0.0.1', '127.0.0.1', '[::1]', '[fe80::1]']) {
    t.equal(allows(host, '*.example.com'), false, host);
  }
  t.equal(allows('192.168.1.1', '192.168.1.1'), true, 'IP literals still match exact entries');
  t.equal(allows('10.0.0.1', '10.0.0.1'), true);
});

t.test('network-filter.test.ts evaluateNetworkRules', async (t) => {
  const rows: Array<[name: string, host: string, allowlist: string[], denylist: string[], want: Decision]> = [
    ['deny wins when host matches both lists', 'example.com', ['example.com'], ['example.com'], 'denied_by_rule'],
    [
      'deny exact beats allow wildcard',
      'internal.example.com',
      ['*.example.com'],
      ['internal.example.com'],
      'denied_by_rule',
    ],
    ['deny wildcard beats allow exact', 'api.example.com', ['api.example.com'], ['*.example.com'], 'denied_by_rule'],
    ['any deny entry denies (middle)', 'x.com', [], ['y.com', 'x.com', 'z.com'], 'denied_by_rule'],
    ['any deny entry denies (first)', 'x.com', [], ['x.com', 'y.com', 'z.com'], 'denied_by_rule'],
    ['allow exact, empty deny', 'example.com', ['example.com'], [], 'allowed'],
    ['allow wildcard, empty deny', 'api.example.com', ['*.example.com'], [], 'allowed'],
    ['allow wildcard, other deny', 'api.example.com', ['*.example.com'], ['internal.example.com'], 'allowed'],
    ['empty lists: no match', 'example.com', [], [], 'not_allowlisted'],
    ['in neither list', 'other.com', ['example.com'], ['bad.com'], 'not_allowlisted'],
    ['wildcard apex miss', 'example.com', ['*.example.com'], [], 'not_allowlisted'],
    ['inet_aton 2130706433 vs deny 127.0.0.1', '2130706433', [], ['127.0.0.1'], 'denied_by_rule'],
    ['inet_aton 127.1 vs deny 127.0.0.1', '127.1', [], ['127.0.0.1'], 'denied_by_rule'],
    ['metadata as decimal vs deny', '2852039166', ['*.example.com'], ['169.254.169.254'], 'denied_by_rule'],
    ['uppercase host, lowercase entry', 'EXAMPLE.COM', ['example.com'], [], 'allowed'],
    ['trailing dot stripped', 'example.com.', ['example.com'], [], 'allowed'],
  ];
  const resolver = async () => ['93.184.216.34'];
  for (const [name, host, allowlist, denylist, want] of rows) {
    const policy = policyFor({ allowlist, denylist });
    t.equal(await decideRequest(policy, `${host}:443`, { resolver }), want, name);
  }
  // Host validation runs before the rules, even with *.allowed.com allowed.
  const policy = policyFor({ allowlist: ['*.allowed.com'] });
  const invalid: Array<[host: string, what: string]> = [
    ['evil.com\x00.allowed.com', 'NUL byte'],
    ['evil.com\r\n.allowed.com', 'CRLF'],
    ['::ffff:127.0.0.1%x.allowed.com', 'IPv6 zone id'],
    ['a'.repeat(256), 'over 255 characters'],
    ['', 'empty host'],
  ];
  for (const [host, what] of invalid) {
    t.equal(await decideRequest(policy, host, { defaultPort: 443, resolver }), 'invalid_host', what);
  }
});

t.test('domain-pattern.test.ts matchesDomainPattern', async (t) => {
  t.equal(allows('API.Example.com', 'api.example.com'), true);
  t.equal(allows('a.example.com', '*.example.com'), true);
  t.equal(allows('a.b.example.com', '*.example.com'), true);
  t.equal(allows('example.com', '*.example.com'), false);
  t.equal(allows('notexample.com', '*.example.com'), false);
});

t.test('domain-pattern.test.ts isInjectHostCoveredByAllowedDomains: coverage of one entry by another', async (t) => {
  // Here the same question is whether a turn's addition is covered by turnAdditionsAllowed.
  const covered = (inner: string, outer: string[]) => outer.some((o) => patternCovers(pattern(o), pattern(inner)));
  t.equal(covered('api.example.com', ['api.example.com']), true);
  t.equal(covered('api.example.com', ['*.example.com']), true);
  t.equal(covered('api.example.com', ['example.com']), false);
  t.equal(
    covered('*.example.com', ['api.example.com', 'b.example.com']),
    false,
    'a wildcard is never covered by exact entries',
  );
  t.equal(covered('*.api.example.com', ['*.example.com']), true);
  t.equal(covered('*.example.com', ['*.api.example.com']), false);
  // Its predicate ignores ports; here ports are part of what an entry grants, and an entry
  // without a port grants 80 and 443, which ":443" or ":8443" do not cover: stricter on purpose.
  t.equal(covered('api.example.com', ['api.example.com:443']), false, 'stricter on purpose: 80 is not covered by :443');
  t.equal(covered('api.example.com:443', ['api.example.com:443']), true, 'the same port is');
  t.equal(covered('*.api.example.com', ['*.example.com:8443']), false, 'stricter on purpose: ports count');
  t.equal(covered('*.api.example.com:8443', ['*.example.com:8443']), true);
});

t.test('domain-pattern.test.ts splitDomainPatternPort', async (t) => {
  const split = (entry: string) => {
    const parsed = parsePattern(entry);
    return parsed.ok ? { host: parsed.pattern.host, kind: parsed.pattern.kind, port: parsed.pattern.port } : null;
  };
  t.same(split('example.com:443'), { host: 'example.com', kind: 'exact', port: 443 });
  t.same(split('*.example.com:8080'), { host: 'example.com', kind: 'suffix', port: 8080 });
  t.same(split('example.com'), { host: 'example.com', kind: 'exact', port: null });
  // Left whole there, then refused by its host validation; refused here as an entry.
  for (const entry of [
    'example.com:0',
    'example.com:65536',
    'example.com:99999999',
    'example.com:0443',
    'example.com:abc',
    'example.com:443.allowed.com',
    'example.com:',
    'example.com:80:443',
    '[::1',
    '[::1]junk',
    '[::1]:',
    '[::1]:0',
    '[::1]:65536',
  ]) {
    t.equal(split(entry), null, `${entry} is refused`);
  }
  t.same(split('[::1]'), { host: '::1', kind: 'exact', port: null });
  t.same(split('[::1]:443'), { host: '::1', kind: 'exact', port: 443 });
  t.same(split('[2001:0db8:0000::0001]:8443'), { host: '2001:db8::1', kind: 'exact', port: 8443 });
  t.same(split('[fd00:ec2::254]'), { host: 'fd00:ec2::254', kind: 'exact', port: null });
  // There an unbracketed IPv6 entry is kept whole and matches every port; here it is refused:
  // brackets are for IPv6 only (stricter on purpose; the configuration names the entry).
  for (const entry of ['fd00:ec2::254', '::1']) t.equal(split(entry), null, `${entry} is refused`);
  // '*:22' (every host, port 22) is a deny entry there; a bare '*' is refused here in every
  // list (codex refuses it in deny lists too): stricter on purpose, the configuration fails closed.
  t.equal(split('*:22'), null, "'*:22' is refused");
  t.equal(configRefusal({ denylist: ['*:22'] }), 'invalid_pattern');
});

t.test('domain-pattern.test.ts matchesDomainPatternWithPort', async (t) => {
  const deny = (host: string, port: number, entry: string) => denyMatches(pattern(entry), host, port);
  const allow = (host: string, port: number, entry: string) => patternMatches(pattern(entry), host, port);
  // IPv6 literals, compared canonical.
  t.equal(deny('::1', 443, '[::1]:443'), true);
  t.equal(deny('::1', 80, '[::1]:443'), false);
  t.equal(deny('::1', 80, '[::1]'), true);
  t.equal(deny('fd00:ec2::254', 80, '[fd00:ec2::254]'), true);
  t.equal(deny('2001:db8::1', 8443, '[2001:DB8:0:0::1]:8443'), true);
  // An entry without a port matches every port: so does a deny entry here. An allow entry
  // without a port allows 80 and 443 only (stricter on purpose, documented).
  t.equal(deny('example.com', 22, 'example.com'), true, 'deny entry, port 22');
  t.equal(deny('a.example.com', 65535, '*.example.com'), true, 'deny wildcard, port 65535');
  t.equal(allow('example.com', 22, 'example.com'), false, 'stricter on purpose: allow entry, port 22');
  t.equal(allow('a.example.com', 65535, '*.example.com'), false, 'stricter on purpose: allow wildcard, port 65535');
  for (const match of [deny, allow]) {
    t.equal(match('example.com', 443, 'example.com:443'), true);
    t.equal(match('example.com', 80, 'example.com:443'), false);
    t.equal(match('a.example.com', 8443, '*.example.com:8443'), true);
    t.equal(match('a.example.com', 443, '*.example.com:8443'), false);
  }
});

t.test(
  'canonical-host-routing.test.ts: every spelling is dialled and forwarded as its canonical authority',
  async (t) => {
    const connect = (raw: string) => {
      const parsed = parseAuthority(raw, null);
      return parsed.ok ? formatAuthority(parsed.authority) : parsed.reason;
    };
    t.equal(connect('Api.MITM.invalid.:443'), 'api.mitm.invalid:443');
    for (const raw of ['127.1:443', '0x7f.0.0.1:443', '2130706433:443']) t.equal(connect(raw), '127.0.0.1:443', raw);
    t.equal(connect('Upstream.invalid.:80'), 'upstream.invalid:80');
    t.equal(connect('Pinned.invalid.:443'), 'pinned.invalid:443');
    // Plain HTTP: the request-target and Host going upstream are rebuilt from the canonical authority.
    const forwarded = (url: string, host: string) => {
      const target = parseForwardTarget(url);
      if (!target.ok) return target.reason;
      const parsed = parseAuthority(target.authorityText, 80);
      if (!parsed.ok) return parsed.reason;
      const headers = upstreamHeaders(['Host', host], parsed.authority);
      return `${target.pathAndQuery} host=${String(headers.host)}`;
    };
    t.equal(
      forwarded('http://Api.MITM.invalid./v1/thing?q=1', 'Api.MITM.invalid.'),
      '/v1/thing?q=1 host=api.mitm.invalid',
    );
    t.equal(forwarded('http://api.mitm.invalid.:8080/x', 'api.mitm.invalid.:8080'), '/x host=api.mitm.invalid:8080');
    t.equal(
      forwarded(
        'http://[2001:0db8:0000:0000:0000:0000:0000:0001]:8080/x',
        '[2001:0db8:0000:0000:0000:0000:0000:0001]:8080',
      ),
      '/x host=[2001:db8::1]:8080',
    );
    t.equal(
      forwarded('http://Files.Example.invalid./v1/files', 'Files.Example.invalid.'),
      '/v1/files host=files.example.invalid',
    );
  },
);

t.test('canonical-host-routing.test.ts: allow and deny agree on every spelling', async (t) => {
  const resolver = async () => ['93.184.216.34'];
  const allowed = policyFor({ allowlist: ['files.example.invalid', 'api.mitm.invalid', '*.mitm.invalid'] });
  for (const spelling of ['api.mitm.invalid.:443', 'API.Mitm.Invalid:443', 'Files.Example.invalid.:80']) {
    t.equal(await decideRequest(allowed, spelling, { resolver }), 'allowed', spelling);
  }
  const narrow = policyFor({ allowlist: ['api.mitm.invalid', 'files.example.invalid'] });
  for (const spelling of [
    'other.mitm.invalid:443',
    'other.mitm.invalid.:443',
    'OTHER.mitm.invalid.:443',
    'other.example.invalid.:80',
  ]) {
    t.equal(await decideRequest(narrow, spelling, { resolver }), 'not_allowlisted', spelling);
  }
  // deniedDomains ['evil.mitm.invalid', '127.0.0.1'] against every spelling; the origin port is
  // no default port, and the deny entry without a port covers it (as there).
  const originPort = 41234;
  const denied = policyFor({
    allowlist: ['*.mitm.invalid', `127.0.0.1:${originPort}`],
    denylist: ['evil.mitm.invalid', '127.0.0.1'],
    allowAddressRanges: ['127.0.0.0/8'],
  });
  for (const spelling of [
    'evil.mitm.invalid:443',
    'evil.mitm.invalid.:443',
    'EVIL.MITM.invalid.:443',
    `127.1:${originPort}`,
    `0x7f.0.0.1:${originPort}`,
    `2130706433:${originPort}`,
    `0177.0.0.1:${originPort}`,
  ]) {
    t.equal(await decideRequest(denied, spelling, { resolver }), 'denied_by_rule', spelling);
  }
  t.equal(await decideRequest(denied, 'ok.mitm.invalid.:443', { resolver }), 'allowed', 'a sibling stays allowed');
  // allowedDomains ['127.0.0.1'] reaches 127.1:<originPort> there (an allow entry covers every
  // port); here an allow entry without a port allows 80 and 443 only: stricter on purpose.
  const portless = policyFor({ allowlist: ['127.0.0.1'], allowAddressRanges: ['127.0.0.0/8'] });
  t.equal(
    await decideRequest(portless, `127.1:${originPort}`),
    'not_allowlisted',
    'stricter on purpose: no default port',
  );
  t.equal(await decideRequest(portless, '127.1:443'), 'allowed', 'port 443 is allowed');
});

t.test('host-header-proxy.test.ts parseHostHeader: the Host header as the proxy parses it', async (t) => {
  const host = (raw: string, defaultPort: number) => {
    const parsed = parseAuthority(raw, defaultPort);
    return parsed.ok ? formatAuthority(parsed.authority) : null;
  };
  // A bare host takes the request's default port: 443 for its HTTPS host-header proxy, 80 for
  // a plain forward request here.
  t.equal(host('api.github.com', 443), 'api.github.com:443');
  t.equal(host('api.github.com', 80), 'api.github.com:80');
  t.equal(host('example.com:8443', 443), 'example.com:8443');
  t.equal(host('[::1]', 443), '[::1]:443');
  t.equal(host('[::1]:9443', 443), '[::1]:9443');
  for (const bad of ['', 'a/b', 'user@host', 'host:0', 'host:70000', 'host:abc', '[::1%lo0]', 'a b', 'host:443:1']) {
    t.equal(host(bad, 443), null, `${JSON.stringify(bad)} is refused`);
  }
});

t.test('host-header-proxy.test.ts: refusals come before any dial; the target and Host never disagree', async (t) => {
  // There an origin-form request is routed by its Host header, and an absolute-form target's
  // authority is discarded for the Host. Here only absolute-form http:// targets are served: an
  // origin-form request is refused (invalid_request), and a Host that disagrees with the target
  // is refused (host_mismatch) rather than either one trusted over the other: stricter on purpose.
  t.equal(parseForwardTarget('/repos/x/y?per_page=1').ok, false, 'origin-form is refused');
  const target = parseForwardTarget('https://attacker.example/p?q=1');
  t.equal(!target.ok && target.reason, 'unsupported_scheme', 'https:// goes through CONNECT');
  const policy = policyFor({ allowlist: ['127.0.0.1'] });
  t.equal(await decideRequest(policy, 'evil.example/../x', { defaultPort: 80 }), 'invalid_host', 'an invalid host');
  const blocked = policyFor({ allowlist: ['other.example'] });
  t.equal(await decideRequest(blocked, '127.0.0.1:443'), 'not_allowlisted', 'allowlist deny: nothing dialled');
});
