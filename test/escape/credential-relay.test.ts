/**
 * Credentials a turn never holds, from inside real turns in both identity modes: the model
 * client in the turn (Python's standard library) reaches a TLS fake upstream through the
 * inference relay with a placeholder key, reading the event stream chunk by chunk; git clones
 * and pushes over https through a brokered credential against a smart-HTTP server (git
 * http-backend) that wants basic auth; a command that dumps its environment,
 * /proc/self/environ, the files it can read and its memory finds no real secret; the
 * upstreams reached past the brokers are refused; restricted turns have no other egress.
 * The secrets are in no event, log line or database byte.
 */
import { execFileSync, spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import type net from 'node:net';
import path from 'node:path';
import t from 'tap';
import { makeTestCa } from '../support/test-ca.js';
import { createTurnHarness, runTurn, type TurnHarness } from '../support/turn-harness.js';

const MODEL_SECRET = `sk-relaytest-${crypto.randomBytes(8).toString('hex')}`;
const GIT_TOKEN = `gittoken-${crypto.randomBytes(8).toString('hex')}`;
const GIT_BASIC = Buffer.from(`gituser:${GIT_TOKEN}`).toString('base64');
/**
 * What the dump searches for, as patterns that cannot match their own text (the first
 * character in brackets): the turn is never told a secret, not even to look for it.
 */
const NEEDLES = [
  '[s]k-relaytest-[0-9a-f]{16}',
  '[g]ittoken-[0-9a-f]{16}',
  `[${GIT_BASIC[0]}]${GIT_BASIC.slice(1, 16)}`,
];

const ca = makeTestCa(['localhost']);
t.teardown(() => ca.remove());

/** The model upstream: it answers an event stream only to the real key, each next event once the client acknowledged the last. */
let acknowledge: (() => void) | null = null;
const modelSeen: { key: string | undefined; url: string }[] = [];
const model = https.createServer({ key: ca.key, cert: ca.cert }, (req, res) => {
  const key = req.headers['x-api-key'] as string | undefined;
  modelSeen.push({ key, url: req.url ?? '' });
  req.resume();
  req.on('end', () => {
    if (key !== MODEL_SECRET) {
      res.writeHead(401, { 'content-type': 'application/json' });
      res.end('{"type":"error","error":{"type":"authentication_error"}}');
      return;
    }
    if (req.url === '/v1/messages/count_tokens') {
      const next = acknowledge;
      acknowledge = null;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{"input_tokens":1}');
      next?.();
      return;
    }
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    let sent = 0;
    const send = (): void => {
      sent++;
      if (sent > 3) return void res.end('event: message_stop\ndata: {}\n\n');
      res.write(`event: delta\ndata: {"n":${sent}}\n\n`);
      acknowledge = send;
    };
    send();
  });
});

/** The git host: git http-backend behind https, for basic auth with the token only. */
const gitRoot = fs.mkdtempSync('/run/turnhost-git-');
t.teardown(() => fs.rmSync(gitRoot, { recursive: true, force: true }));
const bare = path.join(gitRoot, 'repo.git');
execFileSync('git', ['init', '-q', '--bare', '-b', 'main', bare]);
const seed = path.join(gitRoot, 'seed');
execFileSync('git', ['init', '-q', '-b', 'main', seed]);
fs.writeFileSync(path.join(seed, 'README'), 'seed\n');
const gitId = ['-c', 'user.name=seed', '-c', 'user.email=seed@test'];
execFileSync('git', [...gitId, '-C', seed, 'add', 'README']);
execFileSync('git', [...gitId, '-C', seed, 'commit', '-q', '-m', 'seed']);
execFileSync('git', ['-C', seed, 'push', '-q', bare, 'main']);
const gitAuthorizations: (string | undefined)[] = [];
const gitServer = https.createServer({ key: ca.key, cert: ca.cert }, (req, res) => {
  gitAuthorizations.push(req.headers.authorization);
  if (req.headers.authorization !== `Basic ${GIT_BASIC}`) {
    req.resume();
    res.writeHead(401, { 'www-authenticate': 'Basic realm="git"' });
    res.end();
    return;
  }
  const url = new URL(req.url ?? '/', 'https://git.test');
  const cgi = spawn('git', ['http-backend'], {
    env: {
      PATH: process.env.PATH,
      GIT_PROJECT_ROOT: gitRoot,
      GIT_HTTP_EXPORT_ALL: '1',
      REMOTE_USER: 'gituser',
      REQUEST_METHOD: req.method ?? 'GET',
      PATH_INFO: decodeURIComponent(url.pathname),
      QUERY_STRING: url.search.slice(1),
      CONTENT_TYPE: req.headers['content-type'] ?? '',
      ...(req.headers['content-length'] ? { CONTENT_LENGTH: req.headers['content-length'] } : {}),
      GIT_PROTOCOL: String(req.headers['git-protocol'] ?? ''),
      HTTP_CONTENT_ENCODING: req.headers['content-encoding'] ?? '',
    },
  });
  req.pipe(cgi.stdin);
  let head = Buffer.alloc(0);
  let headDone = false;
  cgi.stdout.on('data', (chunk: Buffer) => {
    if (headDone) return void res.write(chunk);
    head = Buffer.concat([head, chunk]);
    const end = head.indexOf('\r\n\r\n');
    if (end < 0) return;
    headDone = true;
    let status = 200;
    const headers: Record<string, string> = {};
    for (const line of head.subarray(0, end).toString().split('\r\n')) {
      const colon = line.indexOf(':');
      const name = line.slice(0, colon).trim();
      const value = line.slice(colon + 1).trim();
      if (name.toLowerCase() === 'status') status = Number(value.split(' ')[0]);
      else headers[name] = value;
    }
    res.writeHead(status, headers);
    res.write(head.subarray(end + 4));
  });
  cgi.stdout.on('end', () => res.end());
});

const listen = (server: https.Server): Promise<number> =>
  new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port)));
const modelPort = await listen(model);
const gitPort = await listen(gitServer);
t.teardown(() => {
  model.closeAllConnections();
  gitServer.closeAllConnections();
  model.close();
  gitServer.close();
});

/** The turn's model client: the stream is read event by event, each acknowledged before the next is sent. */
const CLIENT = `
import http.client, os, urllib.parse
base = urllib.parse.urlsplit(os.environ['ANTHROPIC_BASE_URL'])
key = os.environ['ANTHROPIC_API_KEY']
def post(path, body, accept):
    c = http.client.HTTPConnection(base.hostname, base.port)
    c.request('POST', base.path + path, body=body, headers={'x-api-key': key, 'content-type': 'application/json', 'accept': accept, 'anthropic-version': '2023-06-01'})
    return c.getresponse()
r = post('/v1/messages', '{"stream":true}', 'text/event-stream')
print('status', r.status, flush=True)
events = 0
while True:
    line = r.readline()
    if not line:
        break
    if line.startswith(b'data:'):
        events += 1
        print('event', line.decode().strip(), flush=True)
        ack = post('/v1/messages/count_tokens', '{}', 'application/json')
        ack.read()
print('events', events)
`;

/** Dumps what a prompt-injected command could reach and searches it for the needles. */
const DUMP = `
import os, re, sys
needles = [re.compile(p.encode()) for p in sys.argv[1:]]
found = []
def search(where, data):
    for n in needles:
        if n.search(data):
            found.append(where)
search('os.environ', '\\n'.join(k + '=' + v for k, v in os.environ.items()).encode())
for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
    for name in ('environ', 'cmdline'):
        try:
            search(f'/proc/{pid}/{name}', open(f'/proc/{pid}/{name}', 'rb').read())
        except OSError:
            pass
files = 0
for top in ['/tmp', '/var/tmp', '/dev/shm', os.getcwd(), os.environ.get('HOME', '/'), '/etc', '/run', '/var/lib', '/root']:
    for root, dirs, names in os.walk(top):
        for name in names:
            p = os.path.join(root, name)
            try:
                if os.path.isfile(p) and os.path.getsize(p) < (4 << 20):
                    search(p, open(p, 'rb').read())
                    files += 1
            except OSError:
                pass
regions = 0
for pid in ['self'] + [p for p in os.listdir('/proc') if p.isdigit()]:
    try:
        maps = open(f'/proc/{pid}/maps').read().splitlines()
        mem = open(f'/proc/{pid}/mem', 'rb', 0)
    except OSError:
        continue
    for line in maps:
        span, perms = line.split()[:2]
        if not perms.startswith('r'):
            continue
        start, end = (int(x, 16) for x in span.split('-'))
        try:
            mem.seek(start)
            search(f'/proc/{pid}/mem {span}', mem.read(end - start))
            regions += 1
        except (OSError, ValueError, OverflowError):
            pass
print('files', files, 'regions', regions)
print('found', found)
`;

function configureBrokers(config: TurnHarness['config']): void {
  const dataDir = config.dataDir;
  fs.mkdirSync(dataDir, { recursive: true, mode: 0o700 });
  const secrets = path.join(dataDir, 'secrets');
  fs.mkdirSync(secrets, { mode: 0o700 });
  fs.writeFileSync(path.join(secrets, 'model'), `${MODEL_SECRET}\n`, { mode: 0o600 });
  fs.writeFileSync(path.join(secrets, 'git'), GIT_BASIC, { mode: 0o600 });
  config.modes.restricted.enabled = true;
  config.egress.allowAddressRanges = ['127.0.0.0/8'];
  config.egress.inference = {
    providers: [
      {
        name: 'claude',
        kind: 'anthropic',
        baseUrl: `https://localhost:${modelPort}`,
        secret: { file: path.join(secrets, 'model') },
        caFile: ca.caFile,
      },
    ],
    ordinaryTurns: true,
    maxRequestBytes: 1 << 20,
  };
  config.egress.credentials = [
    {
      name: 'git',
      baseUrl: `https://127.0.0.1:${gitPort}`,
      secret: { file: path.join(secrets, 'git') },
      header: 'authorization',
      format: 'Basic {secret}',
      gitHost: 'git.test',
      caFile: ca.caFile,
    },
  ];
}

for (const separateUid of [true, false]) {
  t.test(separateUid ? 'separate_uid' : 'shared_uid', async (t) => {
    const harness = await createTurnHarness({
      slot: 102,
      separateUid,
      configure: configureBrokers,
    });
    t.teardown(() => harness.close());
    fs.writeFileSync(path.join(harness.workspace, 'client.py'), CLIENT);
    fs.writeFileSync(path.join(harness.workspace, 'dump.py'), DUMP);

    await t.test('the model client streams through the relay with a placeholder key', async (t) => {
      modelSeen.length = 0;
      const run = await runTurn(harness, { argv: ['python3', 'client.py'], timeoutSeconds: 60 });
      t.equal(run.result.exitCode, 0, run.stderr);
      t.match(run.stdout, /status 200/);
      t.match(run.stdout, /events 4/, 'every event arrived, each before the next was sent');
      t.ok(modelSeen.length >= 4 && modelSeen.every((seen) => seen.key === MODEL_SECRET), 'the real key, always');
    });

    await t.test('git clones and pushes over https through the broker, with no token in the turn', async (t) => {
      const before = execFileSync('git', ['--git-dir', bare, 'rev-parse', 'main']).toString().trim();
      const run = await runTurn(harness, {
        argv: [
          '/bin/sh',
          '-c',
          `set -e; cd /tmp; git clone -q https://git.test/repo.git; cd repo; echo ${t.name} >> FROM_TURN; git add FROM_TURN; ` +
            'git -c user.name=turn -c user.email=turn@test commit -q -m "from the turn"; git push -q origin main; ' +
            'echo "remote $(git remote get-url origin)"; env | grep -c "^GIT_CONFIG" || true',
        ],
        timeoutSeconds: 60,
      });
      t.equal(run.result.exitCode, 0, JSON.stringify({ result: run.result, stderr: run.stderr }));
      // git shows the remote as its insteadOf rule rewrites it: the broker on the turn's listener.
      t.match(run.stdout, /remote http:\/\/127\.0\.0\.1:[0-9]+\/credentials\/git\/repo\.git\n3\n/);
      const after = execFileSync('git', ['--git-dir', bare, 'log', '-1', '--format=%s', 'main']).toString().trim();
      t.equal(after, 'from the turn');
      t.not(before, execFileSync('git', ['--git-dir', bare, 'rev-parse', 'main']).toString().trim());
    });

    await t.test('a command dumping its environment, files and memory finds no secret', async (t) => {
      const run = await runTurn(harness, { argv: ['python3', 'dump.py', ...NEEDLES], timeoutSeconds: 120 });
      t.equal(run.result.exitCode, 0, run.stderr);
      t.match(run.stdout, /files [1-9][0-9]* regions [1-9]/, 'it did read files and memory');
      t.match(run.stdout, /found \[\]/);
      for (const secret of [MODEL_SECRET, GIT_TOKEN, GIT_BASIC]) t.notMatch(run.stdout + run.stderr, secret);
    });

    await t.test('the upstreams past the brokers are refused, and a restricted turn has no other egress', async (t) => {
      const curl = (url: string, extra = ''): string =>
        `curl -s -o /dev/null -w "%{http_connect}/%{http_code} " ${extra} ${url}; `;
      const ordinary = await runTurn(harness, {
        argv: [
          '/bin/sh',
          '-c',
          // Through the general proxy (NO_PROXY would send them straight into the turn's empty network).
          curl(`https://127.0.0.1:${gitPort}/repo.git/info/refs`, "-k --noproxy ''") +
            curl(
              `https://localhost:${modelPort}/v1/messages`,
              `-k --noproxy '' -H "x-api-key: $ANTHROPIC_API_KEY" -d {}`,
            ),
        ],
      });
      t.match(ordinary.stdout.trim(), /^403\/000 403\/000$/, 'the general proxy refuses both upstreams');
      const restricted = await runTurn(harness, {
        mode: 'restricted',
        argv: [
          '/bin/sh',
          '-c',
          'echo "git=${TURNHOST_CREDENTIAL_GIT_URL:-none} count=${GIT_CONFIG_COUNT:-none}"; ' +
            curl('http://example.com/') +
            curl('"${ANTHROPIC_BASE_URL%/inference/*}/credentials/git/repo.git/info/refs"') +
            'python3 client.py | tail -1',
        ],
        timeoutSeconds: 60,
      });
      t.match(restricted.stdout, 'git=none count=none', 'no brokered credential in a restricted turn');
      t.match(
        restricted.stdout,
        /000\/403 000\/403 .*events 4/s,
        'the relay is its way to the model, and nothing else answers',
      );
      const denials = harness.events.query({ turn: restricted.id, limit: 100, kind: 'egress_denial' });
      t.ok(denials.ok && denials.events.some((e) => e.payload.reason === 'not_allowlisted'));
      t.ok(denials.ok && denials.events.some((e) => e.payload.reason === 'relay_route_refused'));
    });

    await t.test('a secret the supervisor cannot read refuses the turn, naming the key', async (t) => {
      const providers = harness.config.egress.inference.providers;
      harness.config.egress.inference.providers = [
        { ...providers[0]!, secret: { env: 'TURNHOST_TEST_NO_SUCH_SECRET' } },
      ];
      t.teardown(() => (harness.config.egress.inference.providers = providers));
      const created = await harness.turns.create({
        sessionId: 'session-test',
        mode: 'restricted',
        argv: ['/bin/true'],
        cwd: harness.workspace,
      });
      t.equal(created.ok, false, 'the turn is refused before its command runs');
      if (!created.ok)
        t.match(
          created.detail,
          /egress\.inference\.providers\[0\]\.secret: the supervisor's environment has no TURNHOST_TEST_NO_SUCH_SECRET/,
        );
    });

    await t.test('the secrets are in no event, log line or database byte', async (t) => {
      const page = harness.events.query({ limit: 1000 });
      if (!page.ok) throw new Error(page.detail);
      const inference = page.events.filter((e) => e.kind === 'egress_connection' && e.payload.inference === true);
      t.ok(inference.length > 0 && inference.every((e) => e.payload.broker === 'claude'));
      const text = [JSON.stringify(page.events), ...harness.logLines].join('\n');
      const dbFiles = fs.readdirSync(harness.config.dataDir).filter((name) => name.startsWith('turnhost.db'));
      t.ok(dbFiles.length > 0);
      for (const secret of [MODEL_SECRET, GIT_TOKEN, GIT_BASIC]) {
        t.notMatch(text, secret);
        for (const name of dbFiles)
          t.equal(fs.readFileSync(path.join(harness.config.dataDir, name)).indexOf(secret), -1, name);
      }
    });
  });
}
