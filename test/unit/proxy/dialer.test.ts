import t from 'tap';
import { checkAddress, resolveAndCheck, type Resolver } from '../../../proxy/dialer.js';
import { canonicalHost } from '../../../proxy/host.js';
import { formatAddress, parseCidr, type Cidr, type IpAddress } from '../../../proxy/ip-class.js';

const host = (raw: string) => {
  const r = canonicalHost(raw);
  if (!r.ok) throw new Error(r.detail);
  return { host: r.host, kind: r.kind };
};
const cidr = (text: string): Cidr => {
  const r = parseCidr(text);
  if (!r.ok) throw new Error(r.detail);
  return r.cidr;
};
const fixed =
  (answers: Record<string, string[]>): Resolver =>
  async (name) => {
    const found = answers[name];
    if (!found) throw Object.assign(new Error('not found'), { code: 'ENOTFOUND' });
    return found;
  };

t.test('every refused class is refused, and an operator range lifts exactly that range', async (t) => {
  for (const address of [
    '127.0.0.1',
    '::1',
    '10.0.0.1',
    '169.254.169.254',
    '100.64.0.1',
    'fd00::1',
    'fd00:ec2::254',
    '100.100.100.200',
    '64:ff9b::a00:1',
    '::ffff:127.0.0.1',
    '0.0.0.0',
    '224.0.0.1',
    'fe80::1%eth0',
    'not-an-ip',
  ]) {
    const r = checkAddress(address, []);
    t.equal(r.ok, false, address);
    if (!r.ok) t.equal(r.reason, 'denied_address_class');
  }
  t.equal(checkAddress('127.0.0.1', [cidr('127.0.0.0/8')]).ok, true);
  t.equal(checkAddress('::ffff:127.0.0.1', [cidr('127.0.0.0/8')]).ok, true, 'mapped addresses are checked as IPv4');
  t.equal(checkAddress('10.0.0.1', [cidr('127.0.0.0/8')]).ok, false);
  t.equal(checkAddress('93.184.216.34', []).ok, true);
});

t.test('a name is refused when any of its addresses is refused', async (t) => {
  const resolver = fixed({
    'mixed.test': ['93.184.216.34', '10.0.0.1'],
    'public.test': ['93.184.216.34', '2606:4700::1111'],
  });
  const mixed = await resolveAndCheck(host('mixed.test'), [], resolver);
  t.equal(mixed.ok, false);
  const fine = await resolveAndCheck(host('public.test'), [], resolver);
  t.same(fine.ok && fine.addresses.map((a) => a.address), ['93.184.216.34', '2606:4700::1111']);
  const missing = await resolveAndCheck(host('missing.test'), [], resolver);
  t.equal(!missing.ok && missing.reason, 'resolve_failed');
  const empty = await resolveAndCheck(host('public.test'), [], async () => []);
  t.equal(!empty.ok && empty.reason, 'resolve_failed');
});

t.test('literal addresses are checked without resolving', async (t) => {
  let calls = 0;
  const counting: Resolver = async () => {
    calls++;
    return ['93.184.216.34'];
  };
  const r = await resolveAndCheck(host('127.1'), [], counting);
  t.equal(r.ok, false);
  t.equal(calls, 0);
});

t.test('a supervisor listener is refused before the address class, and no range lifts it', async (t) => {
  const own = (address: IpAddress) => formatAddress(address) === '127.0.0.1';
  const lifted = checkAddress('127.0.0.1', [cidr('127.0.0.0/8')], own);
  t.equal(!lifted.ok && lifted.reason, 'self_connection', 'with 127.0.0.0/8 lifted');
  const unlifted = checkAddress('::ffff:127.0.0.1', [], own);
  t.equal(!unlifted.ok && unlifted.reason, 'self_connection', 'before the class: mapped, no range');
  t.equal(checkAddress('127.0.0.2', [cidr('127.0.0.0/8')], own).ok, true, 'another address passes');
  const resolver = fixed({ 'api.test': ['93.184.216.34', '127.0.0.1'] });
  const name = await resolveAndCheck(host('api.test'), [cidr('127.0.0.0/8')], resolver, own);
  t.equal(!name.ok && name.reason, 'self_connection', 'a name with one answer on the listener is refused whole');
});
