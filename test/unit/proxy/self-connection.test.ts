import t from 'tap';
import { parseAddress, type IpAddress } from '../../../proxy/ip-class.js';
import { isLocalAddress, isSelfConnection, OwnListeners } from '../../../proxy/self-connection.js';

const ip = (text: string): IpAddress => {
  const parsed = parseAddress(text);
  if (parsed === null) throw new Error(`unparsable ${text}`);
  return parsed;
};
const interfaces =
  (...texts: string[]) =>
  () =>
    texts.map(ip);

t.test('OwnListeners: registered ports until unregistered; an unbound port 0 registers nothing', async (t) => {
  const listeners = new OwnListeners();
  const remove = listeners.add({ host: '127.0.0.1', port: 8700 });
  listeners.add({ host: '::1', port: 8700 });
  listeners.add({ host: '127.0.0.1', port: 0 });
  t.same(listeners.ports(), [8700]);
  t.equal(listeners.list().length, 2);
  remove();
  t.same(listeners.ports(), [8700], 'the other listener on that port remains');
});

t.test('local addresses: loopback, unspecified, mapped, and the interfaces read at the time', async (t) => {
  const none = interfaces();
  for (const local of ['127.0.0.1', '127.255.0.9', '::1', '0.0.0.0', '::', '::ffff:127.0.0.1']) {
    t.ok(isLocalAddress(ip(local), none), local);
  }
  for (const remote of ['93.184.216.34', '10.0.0.1', '2606:4700::1111', '169.254.169.254']) {
    t.notOk(isLocalAddress(ip(remote), none), remote);
  }
  const eth = interfaces('192.168.1.100', 'fd00::2');
  t.ok(isLocalAddress(ip('192.168.1.100'), eth));
  t.ok(isLocalAddress(ip('::ffff:192.168.1.100'), eth), 'mapped spelling of an interface address');
  t.ok(isLocalAddress(ip('fd00:0:0::2'), eth));
  t.notOk(isLocalAddress(ip('192.168.1.101'), eth));
});

t.test('a self-connection needs both: a listener port and a local address', async (t) => {
  let read = 0;
  const counting = () => {
    read++;
    return [ip('192.168.1.100')];
  };
  t.ok(isSelfConnection(ip('127.0.0.1'), 8700, [8700], counting));
  t.ok(isSelfConnection(ip('192.168.1.100'), 8700, [8700], counting));
  t.notOk(isSelfConnection(ip('93.184.216.34'), 8700, [8700], counting), 'another host on that port');
  const before = read;
  t.notOk(isSelfConnection(ip('127.0.0.1'), 8080, [8700], counting), 'this host on another port');
  t.equal(read, before, 'the interfaces are not read for a port that is no listener');
});
