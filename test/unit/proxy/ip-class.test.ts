import t from 'tap';
import { classifyAddress, cidrContains, formatAddress, parseAddress, parseCidr } from '../../../proxy/ip-class.js';

const cls = (text: string): string => {
  const address = parseAddress(text);
  if (address === null) throw new Error(`unparsable ${text}`);
  return classifyAddress(address);
};

t.test('address classes', async (t) => {
  const expected: Array<[string, string]> = [
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['::1', 'loopback'],
    ['::ffff:127.0.0.1', 'loopback'],
    ['10.0.0.1', 'private'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['192.168.1.1', 'private'],
    ['169.254.1.1', 'link_local'],
    ['fe80::1', 'link_local'],
    ['febf::1', 'link_local'],
    ['100.64.0.1', 'cgnat'],
    ['100.127.255.255', 'cgnat'],
    ['fd00::1', 'ula'],
    ['fc00::1', 'ula'],
    ['64:ff9b::a00:1', 'nat64'],
    ['64:ff9b:1::1', 'nat64'],
    ['224.0.0.1', 'multicast'],
    ['ff02::1', 'multicast'],
    ['0.0.0.0', 'unspecified'],
    ['::', 'unspecified'],
    ['0.1.2.3', 'this_network'],
    ['255.255.255.255', 'broadcast'],
    ['240.0.0.1', 'reserved'],
    ['192.0.2.1', 'reserved'],
    ['::7f00:1', 'reserved'],
    ['2001:db8::1', 'reserved'],
    ['2002:7f00:1::', 'reserved'],
    ['fec0::1', 'reserved'],
    ['4000::1', 'reserved'],
    ['169.254.169.254', 'metadata'],
    ['fd00:ec2::254', 'metadata'],
    ['100.100.100.200', 'metadata'],
    ['::ffff:169.254.169.254', 'metadata'],
    ['93.184.216.34', 'public'],
    ['172.32.0.1', 'public'],
    ['100.128.0.1', 'public'],
    ['2606:4700::1111', 'public'],
  ];
  for (const [address, want] of expected) t.equal(cls(address), want, address);
});

t.test('strict parsing and RFC 5952 formatting', async (t) => {
  for (const bad of [
    '127.1',
    '0177.0.0.1',
    '01.2.3.4',
    '1.2.3.4.',
    'fe80::1%eth0',
    '1::2::3',
    '1:2:3:4:5:6:7:8:9',
    ':::',
    '[::1]',
    '',
    'localhost',
  ]) {
    t.equal(parseAddress(bad), null, JSON.stringify(bad));
  }
  const format = (text: string) => formatAddress(parseAddress(text)!);
  t.equal(format('2001:0db8:0000:0000:0000:0000:0000:0001'), '2001:db8::1');
  t.equal(format('1:0:0:2:0:0:0:3'), '1:0:0:2::3');
  t.equal(format('1:0:2:3:4:5:6:7'), '1:0:2:3:4:5:6:7', 'one zero group is not compressed');
  t.equal(format('::ffff:1.2.3.4'), '::ffff:102:304');
  t.equal(format('1:2:3:4:5:6:1.2.3.4'), '1:2:3:4:5:6:102:304');
});

t.test('CIDR matching', async (t) => {
  const cidr = (text: string) => {
    const r = parseCidr(text);
    if (!r.ok) throw new Error(r.detail);
    return r.cidr;
  };
  const has = (c: string, a: string) => cidrContains(cidr(c), parseAddress(a)!);
  t.ok(has('127.0.0.0/8', '127.9.9.9'));
  t.notOk(has('127.0.0.0/8', '128.0.0.1'));
  t.ok(has('172.16.0.0/12', '172.31.0.1'));
  t.notOk(has('172.16.0.0/12', '172.32.0.1'));
  t.ok(has('0.0.0.0/0', '8.8.8.8'));
  t.ok(has('10.1.2.3/32', '10.1.2.3'));
  t.notOk(has('10.1.2.3/32', '10.1.2.4'));
  t.ok(has('fe80::/10', 'febf::1'));
  t.notOk(has('fe80::/10', 'fec0::1'));
  t.notOk(has('127.0.0.0/8', '::1'), 'families never mix');
  for (const bad of ['127.0.0.0', '127.0.0.0/33', '::/129', '127.1/8', 'x/8', '10.0.0.0/-1', '10.0.0.0/08x']) {
    t.equal(parseCidr(bad).ok, false, bad);
  }
});
