/**
 * The configuration's JSON Schema: the committed copy is current, a validator that knows none
 * of our code accepts the packaged configuration and refuses what the loader refuses, each
 * pattern agrees with the check it stands for over a corpus of edge cases, and
 * docs/configuration.md has a row for every key.
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { Ajv } from 'ajv';
import t from 'tap';
import {
  ABSOLUTE_PATH_PATTERN,
  CIDR_PATTERN,
  HOST_PORT_PATTERN,
  TurnhostConfig,
} from '../../../../api/schema/config.js';
import { defaultConfig, parseHostPort, publishedConfigSchema } from '../../../../supervisor/config/load.js';
import { REPO_ROOT } from '../../../support/turn-harness.js';

const published = fs.readFileSync(path.join(REPO_ROOT, 'docs/config.schema.json'), 'utf8');

t.test('docs/config.schema.json is the schema the loader checks with', async (t) => {
  t.ok(published === publishedConfigSchema(), 'docs/config.schema.json is not stale (npm run openapi)');
});

t.test("every key's default is the installed package's and fits its own schema", async (t) => {
  const installed = defaultConfig({ installed: true, cwd: '/' });
  // turns.maxConcurrent is derived from the host the supervisor runs on: the schema shows no default for it.
  const { maxConcurrent: _perHost, ...turns } = installed.turns;
  const defaults = { ...installed, turns } as unknown as Record<string, unknown>;
  const ajv = new Ajv({ strict: false });
  let leaves = 0;
  const walk = (node: Record<string, unknown>, value: unknown, key: string): void => {
    const properties = node['properties'] as Record<string, Record<string, unknown>> | undefined;
    if (node['type'] === 'object' && properties !== undefined && !Array.isArray(value)) {
      for (const [name, child] of Object.entries(properties)) {
        if (name === '$schema' || child['deprecated'] === true) continue;
        walk(child, (value as Record<string, unknown>)[name], key === '' ? name : `${key}.${name}`);
      }
      return;
    }
    leaves++;
    if (value === undefined) {
      t.notOk('default' in node, `${key} has no default and shows none`);
      return;
    }
    t.same(node['default'], value, `${key} shows its default`);
    t.ok(ajv.validate(node, value), `${key}'s default fits its schema: ${JSON.stringify(ajv.errors)}`);
  };
  walk(JSON.parse(published) as Record<string, unknown>, defaults, '');
  t.ok(leaves >= 39, `every key was walked (${leaves})`);
});

t.test('a plain JSON Schema validator accepts the packaged file and refuses bad ones', async (t) => {
  // An editor's or deployment tool's view: draft-07, our annotations unknown to it.
  const validate = new Ajv({ strict: false, allErrors: true }).compile(JSON.parse(published) as object);
  const packaged = JSON.parse(fs.readFileSync(path.join(REPO_ROOT, 'packaging/turnhost.json'), 'utf8')) as unknown;
  t.ok(validate(packaged), JSON.stringify(validate.errors));
  t.ok(validate({}), 'every key is optional in a file');
  const refused: unknown[] = [
    { listen: { tcp: 'nope' } },
    { listen: { tcp: '[fe80::1%eth0]:80' } },
    { turns: { tempRoot: '/run/x' } },
    { bogus: 1 },
    { limits: { disk: 1 } },
    { limitsDisabled: ['memory', 'memory'] },
    { fs: { protectedPaths: [{ root: '/w', path: '.git', mode: 'read_only' }] } },
    { egress: { allowAddressRanges: ['10.0.0.0/33'] } },
    { dataDir: '/a/./b' },
  ];
  for (const file of refused) t.notOk(validate(file), JSON.stringify(file));
});

/** The checks the patterns stand for, written with the library calls the daemon uses. */
const isNormalisedAbsolute = (v: string): boolean => path.isAbsolute(v) && !v.includes('\0') && path.normalize(v) === v;

function isCidr(v: string): boolean {
  const [address = '', bits, ...rest] = v.split('/');
  const family = net.isIP(address);
  if (rest.length > 0 || family === 0 || address.includes('%') || bits === undefined) return false;
  // Canonical prefixes only: digits without a leading zero.
  if (!/^(0|[1-9][0-9]{0,2})$/.test(bits)) return false;
  return Number(bits) <= (family === 4 ? 32 : 128);
}

const pathCorpus = (): string[] => {
  const parts = ['', '.', '..', '...', 'a', '.a', 'a.', '..a', 'a b', 'é', '\0'];
  const out = new Set<string>(['/', '//', 'a', './a', '', '/a/', '/a//', '/./', '/../']);
  for (const x of parts) {
    out.add(`/${x}`);
    out.add(`${x}/`);
    for (const y of parts) {
      out.add(`/${x}/${y}`);
      out.add(`/${x}/${y}/`);
      out.add(`${x}/${y}`);
    }
  }
  return [...out];
};

const ipv6Corpus = (): string[] => {
  const out = new Set<string>();
  const groups = ['0', '1', 'ffff', 'FFFF', '12345', 'g', '01ab'];
  for (let n = 0; n <= 9; n++) {
    const full = Array.from({ length: n }, (_, i) => groups[i % 4]!);
    out.add(full.join(':'));
    for (let cut = 0; cut <= n; cut++) {
      out.add(`${full.slice(0, cut).join(':')}::${full.slice(cut).join(':')}`);
      out.add(`${full.slice(0, cut).join(':')}::${full.slice(cut).join(':')}${n > cut ? ':' : ''}1.2.3.4`);
    }
    out.add([...full, '1.2.3.4'].join(':'));
  }
  for (const g of groups) out.add(`${g}::${g}`);
  for (const odd of [':::', '1:::2', '::1::', '::ffff:256.1.1.1', '::ffff:1.2.3', '::ffff:01.2.3.4', 'fe80::1%eth0'])
    out.add(odd);
  return [...out];
};

const ipv4Corpus = [
  '0.0.0.0',
  '10.1.0.0',
  '255.255.255.255',
  '256.1.1.1',
  '1.2.3',
  '1.2.3.4.5',
  '01.2.3.4',
  '1.2.3.04',
  '127.0.0.1',
  ' 1.2.3.4',
  '1.2.3.4 ',
];

t.test('the absolute-path pattern is path.normalize leaving an absolute path unchanged', async (t) => {
  const pattern = new RegExp(ABSOLUTE_PATH_PATTERN, 'u');
  const disagree = pathCorpus().filter((v) => pattern.test(v) !== isNormalisedAbsolute(v));
  t.same(disagree, [], 'no path on which the pattern and path.normalize disagree');
});

t.test('the HOST:PORT pattern is parseHostPort', async (t) => {
  const pattern = new RegExp(HOST_PORT_PATTERN, 'u');
  const hosts = ['localhost', '127.0.0.1', 'a-b.example', 'bad_host', '', ...ipv6Corpus().map((a) => `[${a}]`), '::1'];
  const ports = ['0', '80', '65535', '65536', '99999', '00080', '', '123456', '-1'];
  const corpus = hosts.flatMap((h) => ports.map((p) => `${h}:${p}`));
  const disagree = corpus.filter((v) => pattern.test(v) !== (parseHostPort(v) !== null));
  t.same(disagree, [], 'no address on which the pattern and parseHostPort disagree');
});

t.test('the CIDR pattern is net.isIP with a prefix in its family range', async (t) => {
  const pattern = new RegExp(CIDR_PATTERN, 'u');
  const addresses = [...ipv4Corpus, ...ipv6Corpus()];
  const prefixes = ['0', '8', '32', '33', '64', '128', '129', '08', '', 'x'];
  const corpus = [...addresses.flatMap((a) => prefixes.map((p) => `${a}/${p}`)), '10.0.0.0', '10.0.0.0/8/8'];
  const disagree = corpus.filter((v) => pattern.test(v) !== isCidr(v));
  t.same(disagree, [], 'no CIDR on which the pattern and net.isIP disagree');
  t.ok(pattern.test('::ffff:10.0.0.0/104') && pattern.test('fd00::/8'), 'IPv6 forms are accepted');
});

t.test('docs/configuration.md has a row for every key', async (t) => {
  const docs = fs.readFileSync(path.join(REPO_ROOT, 'docs/configuration.md'), 'utf8');
  const keys: string[] = [];
  const walk = (node: Record<string, unknown>, prefix: string): void => {
    for (const [key, child] of Object.entries(node['properties'] as Record<string, Record<string, unknown>>)) {
      const keyPath = prefix === '' ? key : `${prefix}.${key}`;
      // The limits map is documented as one row; so are array items.
      if (child['type'] === 'object' && child['title'] !== 'LimitSettings') walk(child, keyPath);
      else keys.push(keyPath);
    }
  };
  walk(TurnhostConfig, '');
  t.ok(keys.length > 30, `${keys.length} keys`);
  const undocumented = keys.filter((key) => !docs.includes(`| \`${key}\` |`));
  t.same(undocumented, [], 'every key has its own row');
});
