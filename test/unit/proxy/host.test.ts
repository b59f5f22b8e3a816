import t from 'tap';
import { canonicalHost, parseAuthority, formatAuthority } from '../../../proxy/host.js';

const canonical = (raw: string): string => {
  const result = canonicalHost(raw);
  if (!result.ok) throw new Error(`${JSON.stringify(raw)} refused: ${result.detail}`);
  return result.host;
};

t.test('every numeric IPv4 spelling of loopback canonicalises to 127.0.0.1', async (t) => {
  for (const spelling of [
    '127.0.0.1',
    '127.1',
    '127.0.1',
    '0x7f.1',
    '0x7F.0.0.1',
    '0177.0.0.1',
    '0177.1',
    '2130706433',
    '0x7f000001',
    '0x7f.0x0.0x0.0x1',
    '127.0.0.1.',
  ]) {
    t.equal(canonical(spelling), '127.0.0.1', spelling);
    t.equal((canonicalHost(spelling) as { kind: string }).kind, 'ipv4', spelling);
  }
  t.equal(canonical('0'), '0.0.0.0');
  t.equal(canonical('3232235521'), '192.168.0.1');
  t.equal(canonical('169.254.43518'), '169.254.169.254');
});

t.test('bracketed and mapped IPv6 canonicalise', async (t) => {
  t.equal(canonical('[::1]'), '::1');
  t.equal(canonical('[0:0:0:0:0:0:0:1]'), '::1');
  t.equal(canonical('[FD00:0000::0001]'), 'fd00::1');
  t.equal(canonical('[2001:db8:0:0:1:0:0:1]'), '2001:db8::1:0:0:1');
  t.equal(canonical('[::ffff:127.0.0.1]'), '127.0.0.1');
  t.equal(canonical('[::ffff:7f00:1]'), '127.0.0.1');
  t.equal(canonical('[::FFFF:A9FE:A9FE]'), '169.254.169.254');
  t.equal((canonicalHost('[::ffff:7f00:1]') as { kind: string }).kind, 'ipv4');
  t.equal(canonical('[64:ff9b::10.0.0.1]'), '64:ff9b::a00:1');
});

t.test('names are lowercased and lose one trailing dot', async (t) => {
  t.equal(canonical('Origin.Example.TEST.'), 'origin.example.test');
  t.equal(canonical('a_b-c.example'), 'a_b-c.example');
  t.equal(canonicalHost('example.test..').ok, false, 'two trailing dots leave an empty label');
});

t.test('validation refusals name the problem', async (t) => {
  const refusals: Array<[string, RegExp]> = [
    ['allowed.test\0.evil', /NUL/],
    ['evil\0', /NUL/],
    ['allowed.test\r\nX: y', /CR or LF/],
    ['allowed.test\n', /CR or LF/],
    ['allowed\t.test', /control/],
    ['allowed.test\x7f', /control/],
    ['allowed .test', /space/],
    ['[fe80::1%eth0]', /zone/],
    ['[fe80::1%25eth0]', /zone/],
    ['allowed%2etest', /%/],
    ['user@allowed.test', /userinfo/],
    ['ällowed.test', /non-ASCII/],
    ['', /empty/],
    ['.', /empty/],
    ['a..b', /empty label/],
    [`${'a'.repeat(64)}.test`, /label is longer than 63/],
    [Array.from({ length: 64 }, () => 'abc').join('.'), /longer than 253/],
    ['::1', /brackets/],
    ['[::1', /closing bracket/],
    ['[1::2::3]', /not an IPv6/],
    ['[::ffff:1.2.3.256]', /not an IPv6/],
    ['256.1.1.1', /exceeds 255/],
    ['1.2.3.4.5', /more than 4/],
    ['4294967296', /out of range/],
    ['09.1.1.1', /not a number/],
    ['example.123', /not a number/],
    ['*.example.test', /character other than/],
  ];
  for (const [raw, pattern] of refusals) {
    const result = canonicalHost(raw);
    t.equal(result.ok, false, JSON.stringify(raw));
    if (!result.ok) {
      t.equal(result.reason, 'invalid_host');
      t.match(result.detail, pattern, JSON.stringify(raw));
    }
  }
  t.equal(canonicalHost(`${'a'.repeat(63)}.test`).ok, true, '63-character label is fine');
});

t.test('authorities: ports 1-65535, defaults, brackets', async (t) => {
  const authority = (raw: string, def: number | null) => {
    const r = parseAuthority(raw, def);
    return r.ok ? formatAuthority(r.authority) : r.reason;
  };
  t.equal(authority('Example.test', 80), 'example.test:80');
  t.equal(authority('example.test:8080', 80), 'example.test:8080');
  t.equal(authority('[::1]:443', null), '[::1]:443');
  t.equal(authority('127.1:443', null), '127.0.0.1:443');
  t.equal(authority('example.test', null), 'invalid_port');
  t.equal(authority('example.test:0', 80), 'invalid_port');
  t.equal(authority('example.test:65536', 80), 'invalid_port');
  t.equal(authority('example.test:65535', 80), 'example.test:65535');
  t.equal(authority('example.test:', 80), 'invalid_port');
  t.equal(authority('example.test:80\0', 80), 'invalid_port');
  t.equal(authority('example.test:+80', 80), 'invalid_port');
  t.equal(authority('example.test:0443', 80), 'invalid_port', 'a leading zero is no port');
  t.equal(authority('example.test:00', 80), 'invalid_port');
  t.equal(authority('[::1]:080', 80), 'invalid_port');
  t.equal(authority('a:b:c', 80), 'invalid_host', 'two colons outside brackets: an unbracketed IPv6');
  t.equal(authority('[::1]x', 80), 'invalid_host');
  t.equal(authority('evil\0.test:443', null), 'invalid_host');
});
