/**
 * A turn's brokers (proxy/brokers.ts) as the supervisor sees them: which configured providers
 * and brokered credentials a turn of each mode gets, their secrets read by the supervisor alone
 * when the turn's proxy starts, and the variables that point the turn's clients at them.
 *
 * A secret comes from the supervisor's own environment (which never reaches a command) or from
 * a file no turn can read in either identity mode: not a symlink, a regular file owned by root
 * or the supervisor, no group or other permission bits (a separate_uid worker cannot open it),
 * lying beneath a path every view hides (a shared_uid worker runs as the supervisor and is kept
 * out by its view alone). A secret that cannot be read this way refuses the turn, naming the key.
 */
import fs from 'node:fs';
import path from 'node:path';
import type { WorkerMode } from '../../core/modes.js';
import { fail, ok, type Result } from '../../core/result.js';
import type { BrokerSpecs } from '../../proxy/brokers.js';
import type { TurnhostConfig } from '../config/types.js';
import { hiddenHostPaths } from '../view/descriptor.js';

type EgressConfig = TurnhostConfig['egress'];
type ProviderEntry = EgressConfig['inference']['providers'][number];
type CredentialEntry = EgressConfig['credentials'][number];
type SecretSource = ProviderEntry['secret'];

/** The brokers of one turn, as configured: no secret in it, so it may be part of a worker's key. */
export interface TurnBrokers {
  providers: readonly ProviderEntry[];
  credentials: readonly CredentialEntry[];
  maxRequestBytes: number;
}

/** A placeholder a client library accepts as a key; worthless anywhere but at the relay, which replaces it. */
export const PLACEHOLDER_API_KEY = 'turnhost-relay-placeholder';

/**
 * Restricted turns get the providers and nothing else (no brokered credential: their only way
 * out is the model); ordinary turns get every brokered credential, and the providers when
 * `egress.inference.ordinaryTurns` is on.
 */
export function brokersForMode(egress: EgressConfig, mode: WorkerMode): TurnBrokers {
  const providers = mode === 'restricted' || egress.inference.ordinaryTurns ? egress.inference.providers : [];
  return {
    providers,
    credentials: mode === 'restricted' ? [] : egress.credentials,
    maxRequestBytes: egress.inference.maxRequestBytes,
  };
}

function beneath(root: string, file: string): boolean {
  const rel = path.relative(root, file);
  return rel !== '' && !rel.startsWith('..') && !path.isAbsolute(rel);
}

function readSecretFile(field: string, file: string, config: TurnhostConfig): Result<{ text: string }> {
  let fd: number;
  try {
    fd = fs.openSync(file, fs.constants.O_RDONLY | fs.constants.O_NOFOLLOW | fs.constants.O_NONBLOCK);
  } catch (error) {
    return fail(
      'broker_secret_unavailable',
      `${field}: cannot open ${file} (${(error as NodeJS.ErrnoException).code})`,
    );
  }
  try {
    const stat = fs.fstatSync(fd);
    const self = process.geteuid?.() ?? 0;
    if (!stat.isFile()) return fail('broker_secret_unavailable', `${field}: ${file} is not a regular file`);
    if (stat.uid !== 0 && stat.uid !== self)
      return fail('broker_secret_unavailable', `${field}: ${file} must be owned by root or the supervisor`);
    if ((stat.mode & 0o077) !== 0)
      return fail('broker_secret_unavailable', `${field}: ${file} must have no group or other permission bits`);
    const real = fs.realpathSync(file);
    const hidden = hiddenHostPaths(config).filter((entry) => entry !== config.workspaces.root);
    if (!hidden.some((root) => beneath(root, real)))
      return fail(
        'broker_secret_unavailable',
        `${field}: ${file} must lie beneath a path every view hides (${hidden.slice(0, 3).join(', ')}, …)`,
      );
    return ok({ text: fs.readFileSync(fd, 'utf8').replace(/\r?\n$/, '') });
  } finally {
    fs.closeSync(fd);
  }
}

function readSecret(
  field: string,
  source: SecretSource,
  config: TurnhostConfig,
  env: NodeJS.ProcessEnv,
): Result<{ text: string }> {
  if ('env' in source) {
    const value = env[source.env];
    if (value === undefined || value === '')
      return fail('broker_secret_unavailable', `${field}: the supervisor's environment has no ${source.env}`);
    return ok({ text: value });
  }
  const read = readSecretFile(field, source.file, config);
  if (read.ok && read.text === '') return fail('broker_secret_unavailable', `${field}: ${source.file} is empty`);
  return read;
}

function readCa(field: string, file: string | undefined): Result<{ ca: string | null }> {
  if (file === undefined) return ok({ ca: null });
  try {
    return ok({ ca: fs.readFileSync(file, 'utf8') });
  } catch (error) {
    return fail(
      'broker_secret_unavailable',
      `${field}: cannot read ${file} (${(error as NodeJS.ErrnoException).code})`,
    );
  }
}

/** Every secret and CA of the turn's brokers, read now; the refusal names the configuration key. */
export function readBrokerSpecs(
  brokers: TurnBrokers,
  config: TurnhostConfig,
  env: NodeJS.ProcessEnv,
): Result<{ specs: BrokerSpecs }> {
  const providers: BrokerSpecs['providers'][number][] = [];
  for (const provider of brokers.providers) {
    const index = config.egress.inference.providers.indexOf(provider);
    const field = `egress.inference.providers[${index}]`;
    const secret = readSecret(`${field}.secret`, provider.secret, config, env);
    if (!secret.ok) return secret;
    const ca = readCa(`${field}.caFile`, provider.caFile);
    if (!ca.ok) return ca;
    providers.push({ ...provider, secret: secret.text, ca: ca.ca });
  }
  const credentials: BrokerSpecs['credentials'][number][] = [];
  for (const credential of brokers.credentials) {
    const index = config.egress.credentials.indexOf(credential);
    const field = `egress.credentials[${index}]`;
    const secret = readSecret(`${field}.secret`, credential.secret, config, env);
    if (!secret.ok) return secret;
    const ca = readCa(`${field}.caFile`, credential.caFile);
    if (!ca.ok) return ca;
    credentials.push({ ...credential, secret: secret.text, ca: ca.ca });
  }
  return ok({ specs: { providers, credentials, maxRequestBytes: brokers.maxRequestBytes } });
}

const PROVIDER_VARIABLES = {
  anthropic: { base: 'ANTHROPIC_BASE_URL', key: 'ANTHROPIC_API_KEY' },
  openai: { base: 'OPENAI_BASE_URL', key: 'OPENAI_API_KEY' },
} as const;

/**
 * The variables that point the turn's clients at its brokers on its egress listener: the
 * conventional base URL and a placeholder key of the first provider of each kind,
 * TURNHOST_CREDENTIAL_<NAME>_URL for each brokered credential, and for each `gitHost` a git
 * `url.<broker>.insteadOf` rule through GIT_CONFIG_COUNT/KEY_n/VALUE_n (git 2.31 and later).
 * The caller's request may set none of these names (env-filter.ts).
 */
export function brokerEnv(brokers: TurnBrokers, port: number | null): Record<string, string> {
  // No port: the listener was not served, and no command is launched.
  if (port === null) return {};
  const origin = `http://127.0.0.1:${port}`;
  const env: Record<string, string> = {};
  for (const provider of brokers.providers) {
    const names = PROVIDER_VARIABLES[provider.kind];
    if (env[names.base] !== undefined) continue;
    env[names.base] = `${origin}/inference/${provider.name}`;
    env[names.key] = PLACEHOLDER_API_KEY;
  }
  let gitRules = 0;
  for (const credential of brokers.credentials) {
    const url = `${origin}/credentials/${credential.name}/`;
    env[`TURNHOST_CREDENTIAL_${credential.name.toUpperCase()}_URL`] = url;
    if (credential.gitHost === undefined) continue;
    env[`GIT_CONFIG_KEY_${gitRules}`] = `url.${url}.insteadOf`;
    env[`GIT_CONFIG_VALUE_${gitRules}`] = `https://${credential.gitHost}/`;
    gitRules++;
  }
  if (gitRules > 0) env.GIT_CONFIG_COUNT = String(gitRules);
  return env;
}
