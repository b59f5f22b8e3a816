import t from 'tap';
import type { TurnhostConfig } from '../../../supervisor/config/types.js';
import {
  buildTurnPolicy,
  decide,
  deniedAddress,
  denyMatches,
  parsePattern,
  patternMatches,
  type EgressPolicy,
} from '../../../proxy/policy.js';

type Egress = TurnhostConfig['egress'];

const egress = (over: Partial<Egress> = {}): Egress => ({
  allowlist: [],
  denylist: [],
  allowAddressRanges: [],
  inference: { providers: [], ordinaryTurns: false, maxRequestBytes: 32 << 20 },
  credentials: [],
  turnAdditionsAllowed: [],
  maxConnections: 64,
  maxBytes: 1 << 30,
  idleTimeoutMs: 60_000,
  ...over,
});

const policyOf = (
  over: Partial<Egress>,
  mode: 'ordinary' | 'restricted' = 'ordinary',
  additions?: string[],
): EgressPolicy => {
  const built = buildTurnPolicy(egress(over), { mode, additions });
  if (!built.ok) throw new Error(built.detail);
  return built.policy;
};

const pattern = (entry: string) => {
  const r = parsePattern(entry);
  if (!r.ok) throw new Error(r.detail);
  return r.pattern;
};

t.test('*.suffix matches proper subdomains only', async (t) => {
  const wildcard = pattern('*.example.test');
  t.ok(patternMatches(wildcard, 'a.example.test', 443));
  t.ok(patternMatches(wildcard, 'a.b.example.test', 80));
  t.notOk(patternMatches(wildcard, 'example.test', 443), 'never the apex');
  t.notOk(patternMatches(wildcard, 'evilexample.test', 443), 'never a name that merely ends with the suffix');
  t.notOk(patternMatches(wildcard, 'example.test.evil', 443));
  t.notOk(patternMatches(pattern('example.test'), 'a.example.test', 443), 'an exact entry has no subdomains');
});

t.test('allow ports: no port means 80 and 443 only; an explicit port is that port only', async (t) => {
  const plain = pattern('example.test');
  t.ok(patternMatches(plain, 'example.test', 80));
  t.ok(patternMatches(plain, 'example.test', 443));
  t.notOk(patternMatches(plain, 'example.test', 8080));
  const ported = pattern('example.test:8443');
  t.ok(patternMatches(ported, 'example.test', 8443));
  t.notOk(patternMatches(ported, 'example.test', 443));
  t.ok(patternMatches(pattern('[::1]:8080'), '::1', 8080));
  t.ok(patternMatches(pattern('127.1:8080'), '127.0.0.1', 8080), 'entries are canonicalised too');
});

t.test('deny ports: no port means every port; an explicit port is that port only', async (t) => {
  const plain = pattern('example.test');
  for (const port of [1, 22, 80, 443, 8080, 65535]) t.ok(denyMatches(plain, 'example.test', port), `port ${port}`);
  t.notOk(denyMatches(plain, 'other.test', 22));
  const ported = pattern('*.example.test:22');
  t.ok(denyMatches(ported, 'a.example.test', 22));
  t.notOk(denyMatches(ported, 'a.example.test', 443));
  t.notOk(denyMatches(ported, 'example.test', 22), 'never the apex');
  const policy = policyOf({ allowlist: ['example.test:22', 'example.test'], denylist: ['example.test'] });
  for (const port of [22, 80, 443]) {
    const r = decide(policy, 'example.test', port);
    t.equal(!r.ok && r.reason, 'denied_by_rule', `the deny entry covers port ${port}`);
  }
});

t.test('a deny entry that is an address names that address on every path to it', async (t) => {
  const policy = policyOf({ denylist: ['10.0.0.5', '[fd00::5]:443', 'name.test'] });
  t.equal(deniedAddress(policy, '10.0.0.5', 8080)?.text, '10.0.0.5');
  t.equal(deniedAddress(policy, 'fd00::5', 443)?.text, '[fd00::5]:443');
  t.equal(deniedAddress(policy, 'fd00::5', 80), undefined, 'a deny entry with a port names that port only');
  t.equal(deniedAddress(policy, '10.0.0.6', 80), undefined);
  t.equal(deniedAddress(policy, 'name.test', 80), undefined, 'a name entry is not an address');
});

t.test('pattern entries are validated', async (t) => {
  for (const bad of [
    '',
    '*.',
    '*',
    'a.*.test',
    '*.127.0.0.1',
    'example.test:0',
    'example.test:0443',
    'example.test:x',
    'ex ample.test',
    'evil\0.test',
    '::1',
  ]) {
    const r = parsePattern(bad);
    t.equal(r.ok, false, JSON.stringify(bad));
  }
});

t.test('deny wins over allow', async (t) => {
  const policy = policyOf({ allowlist: ['*.example.test'], denylist: ['secret.example.test'] });
  t.equal(decide(policy, 'www.example.test', 443).ok, true);
  const denied = decide(policy, 'secret.example.test', 443);
  t.equal(denied.ok, false);
  if (!denied.ok) t.equal(denied.reason, 'denied_by_rule');
});

t.test('an empty allowlist allows nothing', async (t) => {
  const policy = policyOf({ allowlist: [] });
  for (const [host, port] of [
    ['example.test', 443],
    ['api.anthropic.com', 443],
    ['127.0.0.1', 80],
  ] as const) {
    const r = decide(policy, host, port);
    t.equal(r.ok, false);
    if (!r.ok) t.equal(r.reason, 'not_allowlisted');
  }
});

t.test('the general proxy never tags inference: only the relay does', async (t) => {
  const policy = policyOf({ allowlist: ['api.anthropic.com', 'example.test'] });
  t.same(decide(policy, 'api.anthropic.com', 443), { ok: true, scope: 'tool' });
  t.same(decide(policy, 'example.test', 443), { ok: true, scope: 'tool' });
});

t.test('ordinary: additions only where turnAdditionsAllowed covers them', async (t) => {
  const over = { allowlist: ['base.test'], turnAdditionsAllowed: ['*.github.test', 'pypi.test:8443'] };
  const policy = policyOf(over, 'ordinary', ['api.github.test', '*.raw.github.test', 'pypi.test:8443']);
  t.equal(decide(policy, 'api.github.test', 443).ok, true);
  t.equal(decide(policy, 'x.raw.github.test', 443).ok, true);
  t.equal(decide(policy, 'pypi.test', 8443).ok, true);
  t.equal(decide(policy, 'base.test', 443).ok, true);
  t.equal(decide(policy, 'other.github.test', 443).ok, false, 'only the additions, not the whole permitted pattern');
  for (const refused of ['github.test', 'evil.test', 'pypi.test', 'pypi.test:443', '*.test']) {
    const r = buildTurnPolicy(egress(over), { mode: 'ordinary', additions: [refused] });
    t.equal(r.ok, false, refused);
    if (!r.ok) t.equal(r.reason, 'addition_not_permitted');
  }
  const none = buildTurnPolicy(egress({ allowlist: ['base.test'] }), { mode: 'ordinary', additions: ['x.test'] });
  t.equal(none.ok, false, 'an empty turnAdditionsAllowed permits no addition');
});

t.test('restricted: nothing through the general proxy, additions refused', async (t) => {
  const policy = policyOf({ allowlist: ['example.test', 'api.anthropic.com'] }, 'restricted');
  t.equal(decide(policy, 'api.anthropic.com', 443).ok, false, 'a model host too: restricted turns use the relay');
  t.equal(decide(policy, 'example.test', 443).ok, false, 'the ordinary allowlist does not apply');
  const r = buildTurnPolicy(egress({ turnAdditionsAllowed: ['*.test'] }), {
    mode: 'restricted',
    additions: ['x.test'],
  });
  t.equal(r.ok, false);
});

t.test('configuration errors name the field', async (t) => {
  const cases: Array<[Partial<Egress>, RegExp]> = [
    [{ allowlist: ['bad host'] }, /egress\.allowlist/],
    [{ denylist: ['*'] }, /egress\.denylist/],
    [{ allowAddressRanges: ['127.0.0.1'] }, /egress\.allowAddressRanges/],
    [{ turnAdditionsAllowed: ['*.'] }, /egress\.turnAdditionsAllowed/],
  ];
  for (const [over, field] of cases) {
    const r = buildTurnPolicy(egress(over), { mode: 'ordinary', additions: [] });
    t.equal(r.ok, false);
    if (!r.ok) t.match(r.detail, field);
  }
});
