import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import t from 'tap';
import { defaultConfig } from '../../../../supervisor/config/load.js';
import {
  brokerEnv,
  brokersForMode,
  PLACEHOLDER_API_KEY,
  readBrokerSpecs,
} from '../../../../supervisor/turns/turn-brokers.js';

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'turnhost-brokers-'));
t.teardown(() => fs.rmSync(tmp, { recursive: true, force: true }));
const config = defaultConfig({ installed: false, cwd: tmp });
config.dataDir = path.join(tmp, 'data');
fs.mkdirSync(path.join(config.dataDir, 'secrets'), { recursive: true, mode: 0o700 });
const secretFile = path.join(config.dataDir, 'secrets', 'model');
fs.writeFileSync(secretFile, 'sk-from-file\n', { mode: 0o600 });

const provider = {
  name: 'claude',
  kind: 'anthropic' as const,
  baseUrl: 'https://api.anthropic.test',
  secret: { file: secretFile },
};
const openai = {
  name: 'gpt',
  kind: 'openai' as const,
  baseUrl: 'https://api.openai.test',
  secret: { env: 'OPENAI_SECRET' },
};
const git = {
  name: 'git_host',
  baseUrl: 'https://git.test',
  secret: { env: 'GIT_SECRET' },
  header: 'authorization',
  format: 'Basic {secret}',
  gitHost: 'git.test',
};
const tracker = { ...git, name: 'tracker', gitHost: undefined };
config.egress.inference.providers = [provider, openai];
config.egress.credentials = [git, tracker];

t.test(
  'restricted turns get the providers only; ordinary turns the credentials, and providers when enabled',
  async (t) => {
    const restricted = brokersForMode(config.egress, 'restricted');
    t.same(
      restricted.providers.map((p) => p.name),
      ['claude', 'gpt'],
    );
    t.same(restricted.credentials, []);
    const ordinary = brokersForMode(config.egress, 'ordinary');
    t.same(ordinary.providers, []);
    t.same(
      ordinary.credentials.map((c) => c.name),
      ['git_host', 'tracker'],
    );
    config.egress.inference.ordinaryTurns = true;
    t.same(
      brokersForMode(config.egress, 'ordinary').providers.map((p) => p.name),
      ['claude', 'gpt'],
    );
    config.egress.inference.ordinaryTurns = false;
  },
);

t.test('the variables point at the listener, with placeholders and git insteadOf rules', async (t) => {
  const env = brokerEnv(
    { ...brokersForMode(config.egress, 'restricted'), credentials: config.egress.credentials },
    4711,
  );
  t.same(env, {
    ANTHROPIC_BASE_URL: 'http://127.0.0.1:4711/inference/claude',
    ANTHROPIC_API_KEY: PLACEHOLDER_API_KEY,
    OPENAI_BASE_URL: 'http://127.0.0.1:4711/inference/gpt',
    OPENAI_API_KEY: PLACEHOLDER_API_KEY,
    TURNHOST_CREDENTIAL_GIT_HOST_URL: 'http://127.0.0.1:4711/credentials/git_host/',
    TURNHOST_CREDENTIAL_TRACKER_URL: 'http://127.0.0.1:4711/credentials/tracker/',
    GIT_CONFIG_KEY_0: 'url.http://127.0.0.1:4711/credentials/git_host/.insteadOf',
    GIT_CONFIG_VALUE_0: 'https://git.test/',
    GIT_CONFIG_COUNT: '1',
  });
  t.same(brokerEnv(brokersForMode(config.egress, 'restricted'), null), {}, 'no listener, no launch');
});

t.test('secrets come from the supervisor environment or a file only it can read', async (t) => {
  const env = { OPENAI_SECRET: 'sk-from-env', GIT_SECRET: 'dXNlcjp0b2tlbg==' };
  const read = readBrokerSpecs({ ...brokersForMode(config.egress, 'restricted'), credentials: [git] }, config, env);
  t.ok(read.ok);
  if (read.ok) {
    t.same(
      read.specs.providers.map((p) => p.secret),
      ['sk-from-file', 'sk-from-env'],
    );
    t.equal(read.specs.credentials[0]?.secret, 'dXNlcjp0b2tlbg==');
  }
  const missing = readBrokerSpecs(brokersForMode(config.egress, 'restricted'), config, {});
  t.match(missing, {
    ok: false,
    detail: /egress\.inference\.providers\[1\]\.secret: the supervisor's environment has no OPENAI_SECRET/,
  });
});

t.test('a secret file others could read, a symlink, or one a view shows is refused', async (t) => {
  const only = (file: string) => ({
    providers: [{ ...provider, secret: { file } }],
    credentials: [],
    maxRequestBytes: 1,
  });
  const check = (file: string, pattern: RegExp) => {
    config.egress.inference.providers = only(file).providers;
    t.match(
      readBrokerSpecs(brokersForMode(config.egress, 'restricted'), config, {}),
      { ok: false, detail: pattern },
      file,
    );
  };
  const group = path.join(config.dataDir, 'secrets', 'group');
  fs.writeFileSync(group, 'x', { mode: 0o640 });
  fs.chmodSync(group, 0o640);
  check(group, /egress\.inference\.providers\[0\]\.secret: .* no group or other permission bits/);
  const link = path.join(config.dataDir, 'secrets', 'link');
  fs.symlinkSync(secretFile, link);
  check(link, /cannot open .*ELOOP/);
  const visible = path.join(tmp, 'visible-secret');
  fs.writeFileSync(visible, 'x', { mode: 0o600 });
  check(visible, /must lie beneath a path every view hides/);
  check(path.join(config.dataDir, 'secrets'), /not a regular file/);
  config.egress.inference.providers = [provider, openai];
});
