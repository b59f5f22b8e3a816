import t from 'tap';
import {
  brokeredRequestHeaders,
  brokeredResponseHeaders,
  compileBrokers,
  isBrokerTarget,
  matchBrokered,
  type BrokerSpecs,
} from '../../../proxy/brokers.js';

const SECRET = 'sk-unit-secret';

const specs = (over: Partial<BrokerSpecs> = {}): BrokerSpecs => ({
  providers: [
    { name: 'claude', kind: 'anthropic', baseUrl: 'https://api.anthropic.test/base/', secret: SECRET, ca: null },
    {
      name: 'gpt',
      kind: 'openai',
      baseUrl: 'https://api.openai.test',
      secret: SECRET,
      ca: null,
      routes: ['/v1/responses'],
    },
  ],
  credentials: [
    {
      name: 'tracker',
      baseUrl: 'https://tracker.test:8443/api',
      secret: SECRET,
      header: 'authorization',
      format: 'token {secret}',
      methods: ['GET'],
      pathPrefixes: ['/repos/acme'],
      ca: null,
    },
  ],
  maxRequestBytes: 100,
  ...over,
});

function brokers() {
  const compiled = compileBrokers(specs());
  if (!compiled.ok) throw new Error(compiled.detail);
  return compiled.brokers;
}

t.test('compiled brokers: upstream, credential, routes', async (t) => {
  const { inference, credential } = brokers();
  const claude = inference.get('claude')!;
  t.equal(claude.basePath, '/base');
  t.same(claude.credential, { header: 'x-api-key', value: SECRET });
  t.same(claude.paths, ['/v1/messages', '/v1/messages/count_tokens']);
  t.same(inference.get('gpt')!.credential, { header: 'authorization', value: `Bearer ${SECRET}` });
  t.same(inference.get('gpt')!.paths, ['/v1/responses'], 'configured routes replace the defaults');
  const tracker = credential.get('tracker')!;
  t.same(tracker.credential, { header: 'authorization', value: `token ${SECRET}` });
  t.equal(tracker.authority.port, 8443);
  t.equal(tracker.maxRequestBytes, null);
});

t.test('bad broker specs are refused naming the entry, never the secret', async (t) => {
  const cases: Array<[Partial<BrokerSpecs>, RegExp]> = [
    [
      { providers: [{ ...specs().providers[0]!, baseUrl: 'http://api.anthropic.test' }] },
      /providers\[0\]\.baseUrl: plain http/,
    ],
    [{ providers: [{ ...specs().providers[0]!, baseUrl: 'https://u:p@x.test' }] }, /providers\[0\]\.baseUrl/],
    [
      { providers: [{ ...specs().providers[0]!, secret: 'a\r\nx-evil: 1' }] },
      /providers\[0\]\.secret: holds a control character/,
    ],
    [{ providers: [{ ...specs().providers[0]!, secret: '' }] }, /providers\[0\]\.secret: empty/],
    [{ credentials: [{ ...specs().credentials[0]!, format: 'token' }] }, /credentials\[0\]\.format/],
    [{ credentials: [{ ...specs().credentials[0]!, header: 'Bad Header' }] }, /credentials\[0\]\.header/],
  ];
  for (const [over, pattern] of cases) {
    const compiled = compileBrokers(specs(over));
    t.equal(compiled.ok, false);
    if (!compiled.ok) {
      t.match(compiled.detail, pattern);
      t.notMatch(compiled.detail, 'evil');
    }
  }
  t.ok(compileBrokers(specs({ providers: [{ ...specs().providers[0]!, baseUrl: 'http://127.0.0.1:9/' }] })).ok);
});

t.test('routing: exact inference routes, POST only; credential prefixes and methods', async (t) => {
  const b = brokers();
  const match = (method: string, target: string) => {
    const m = matchBrokered(b, method, target);
    return m.ok ? `${m.request.broker.name} ${m.request.path}${m.request.query}` : m.reason;
  };
  t.equal(match('POST', '/inference/claude/v1/messages?beta=true'), 'claude /v1/messages?beta=true');
  t.equal(match('POST', '/inference/claude/v1/messages/count_tokens'), 'claude /v1/messages/count_tokens');
  t.equal(match('GET', '/inference/claude/v1/messages'), 'relay_method_refused');
  t.equal(match('POST', '/inference/claude/v1/messages/'), 'relay_route_refused');
  t.equal(match('POST', '/inference/claude/v1/models'), 'relay_route_refused');
  t.equal(match('POST', '/inference/gpt/v1/chat/completions'), 'relay_route_refused');
  t.equal(match('POST', '/inference/nobody/v1/messages'), 'relay_route_refused');
  t.equal(match('POST', '/credentials/claude/v1/messages'), 'relay_route_refused', 'kinds do not mix');
  t.equal(
    match('GET', '/credentials/tracker/repos/acme/x/issues?state=open'),
    'tracker /repos/acme/x/issues?state=open',
  );
  t.equal(match('GET', '/credentials/tracker/repos/acme'), 'tracker /repos/acme');
  t.equal(match('GET', '/credentials/tracker/repos/acmeevil'), 'relay_route_refused', 'a prefix ends at a segment');
  t.equal(match('POST', '/credentials/tracker/repos/acme/x'), 'relay_method_refused');
  for (const sneaky of [
    '/repos/acme/../other',
    '/repos/acme/%2e%2e/other',
    '/repos/acme/.%2E/x',
    '/repos/acme%2fx',
    '/repos/acme/a%5cb',
  ])
    t.equal(match('GET', `/credentials/tracker${sneaky}`), 'relay_route_refused', sneaky);
  t.ok(isBrokerTarget('/inference/claude/v1/messages'));
  t.notOk(isBrokerTarget('http://example.test/inference/x'));
  t.notOk(isBrokerTarget('/other'));
});

t.test(
  'request headers: the turn credentials, cookies, proxy, forwarding and hop-by-hop stripped; the broker credential set',
  async (t) => {
    const claude = brokers().inference.get('claude')!;
    const raw = [
      'X-Api-Key',
      'placeholder',
      'Authorization',
      'Bearer placeholder',
      'Api-Key',
      'p',
      'X-Goog-Api-Key',
      'p',
      'Cookie',
      'a=b',
      'Host',
      'evil.test',
      'Proxy-Authorization',
      'x',
      'Proxy-Connection',
      'keep-alive',
      'Connection',
      'x-keep',
      'Keep-Alive',
      '5',
      'Transfer-Encoding',
      'chunked',
      'TE',
      'trailers',
      'Trailer',
      'x',
      'Upgrade',
      'h2c',
      'Content-Length',
      '999',
      'Forwarded',
      'for=1.2.3.4',
      'X-Forwarded-For',
      '1.2.3.4',
      'X-Forwarded-Host',
      'a',
      'Accept-Encoding',
      'gzip',
      'Anthropic-Version',
      '2023-06-01',
      'Content-Type',
      'application/json',
    ];
    const headers = brokeredRequestHeaders(raw, claude, 12);
    t.same(headers, {
      'anthropic-version': '2023-06-01',
      'content-type': 'application/json',
      host: 'api.anthropic.test',
      'x-api-key': SECRET,
      'content-length': '12',
      connection: 'close',
    });
    t.same(
      brokeredResponseHeaders([
        'Content-Type',
        'text/event-stream',
        'Set-Cookie',
        'a=b',
        'Connection',
        'keep-alive',
        'Transfer-Encoding',
        'chunked',
        'Request-Id',
        'r1',
      ]),
      ['Content-Type', 'text/event-stream', 'Request-Id', 'r1'],
    );
  },
);
