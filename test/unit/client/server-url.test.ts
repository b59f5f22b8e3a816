import t from 'tap';
import { createClient, DEFAULT_SERVER_URL, parseServerUrl, serverUrl } from '../../../client/index.js';
import { resolveClientOptions } from '../../../client/server-url.js';
import { parseHostPort } from '../../../supervisor/config/load.js';

t.test('a server URL is http://HOST:PORT or unix:/PATH, as the CLI takes it', async (t) => {
  t.same(parseServerUrl('http://127.0.0.1:7707'), { kind: 'tcp', host: '127.0.0.1', port: 7707 });
  t.same(parseServerUrl('http://[::1]:80/'), { kind: 'tcp', host: '::1', port: 80 });
  t.same(parseServerUrl('unix:/run/turnhost/api.sock'), { kind: 'unix', path: '/run/turnhost/api.sock' });
  for (const bad of ['unix:relative.sock', 'https://127.0.0.1:7707', 'http://127.0.0.1', 'http://h:1/api', 'h:1', ''])
    t.equal(parseServerUrl(bad), null, bad);
  for (const url of ['http://127.0.0.1:7707', 'http://[::1]:80', 'unix:/a/b'])
    t.equal(serverUrl(parseServerUrl(url)!), url);
});

t.test("a URL's HOST:PORT is read exactly as the configuration's listen.tcp", async (t) => {
  const corpus = [
    '127.0.0.1:7707',
    'localhost:0',
    '[::1]:7707',
    '[nothex]:1',
    'a:65536',
    'a:',
    ':1',
    'a b:1',
    '[::1]',
    'x.y-z:9',
  ];
  for (const address of corpus) {
    const parsed = parseServerUrl(`http://${address}`);
    t.same(
      parsed === null ? null : { host: (parsed as { host: string }).host, port: (parsed as { port: number }).port },
      parseHostPort(address),
      address,
    );
  }
});

t.test('the server: target, else server, else TURNHOST_URL, else the default listener', async (t) => {
  const env = { TURNHOST_URL: 'unix:/env.sock', TURNHOST_TOKEN: 'env-token' };
  const target = { kind: 'unix', path: '/target.sock' } as const;
  t.same(resolveClientOptions({ target, server: 'unix:/server.sock', env }).target, target);
  t.same(resolveClientOptions({ server: 'unix:/server.sock', env }).target, { kind: 'unix', path: '/server.sock' });
  t.same(resolveClientOptions({ env }).target, { kind: 'unix', path: '/env.sock' });
  t.same(resolveClientOptions({ env: { TURNHOST_TOKEN: 'x' } }).target, parseServerUrl(DEFAULT_SERVER_URL));
  t.throws(
    () => resolveClientOptions({ env: { ...env, TURNHOST_URL: 'http://nope' } }),
    /TURNHOST_URL: expected http:\/\/HOST:PORT or unix:\/PATH/,
  );
  t.throws(() => resolveClientOptions({ server: 'unix:x', env }), { name: 'TypeError', message: /^server: expected/ });
});

t.test('the token: token, else TURNHOST_TOKEN; none is an error before any request', async (t) => {
  t.equal(resolveClientOptions({ token: 'given', env: { TURNHOST_TOKEN: 'env' } }).token, 'given');
  t.equal(resolveClientOptions({ env: { TURNHOST_TOKEN: 'env' } }).token, 'env');
  t.throws(() => resolveClientOptions({ server: 'unix:/a.sock', env: {} }), {
    name: 'TypeError',
    message: /no API token for unix:\/a\.sock: pass \{ token \} or set TURNHOST_TOKEN/,
  });
  t.throws(() => resolveClientOptions({ env: { TURNHOST_TOKEN: '' } }), /no API token/);
});

t.test('createClient takes a URL string or nothing, reading the environment', async (t) => {
  const saved = { ...process.env };
  t.teardown(() => {
    process.env = saved;
  });
  process.env = { ...saved };
  delete process.env['TURNHOST_TOKEN'];
  t.throws(() => createClient('unix:/a.sock'), /no API token/);
  process.env['TURNHOST_TOKEN'] = 'tok';
  process.env['TURNHOST_URL'] = 'unix:/nowhere/turnhost-test.sock';
  // Nothing listens there: the call names the address the environment gave.
  await t.rejects(createClient().health(), { code: 'unreachable', message: /unix:\/nowhere\/turnhost-test\.sock/ });
});
