/**
 * Configuration loading: defaults, then the JSON file, then TURNHOST_* environment variables,
 * then command-line flags. Every layer is validated; a refusal names the key path, the
 * environment variable or the flag. docs/configuration.md documents every key.
 */
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { fail, ok, type Result } from '../../core/result.js';
import { TurnhostConfig as ConfigSchema, renderConfigSchema, TurnhostConfigFile } from '../../api/schema/config.js';
import type { FieldError } from '../../api/schema/errors.js';
import { compileValidator, createAjv } from '../../api/schema/validate.js';
import type { TurnhostConfig } from './types.js';
import {
  configuredMemoryLimit,
  deriveMaxConcurrent,
  hostCapacityFacts,
  type CapacityChoice,
  type HostCapacityFacts,
} from './capacity.js';

const INSTALLED_CODE_ROOT = '/usr/lib/turnhost';
const INSTALLED_CONFIG_PATH = '/etc/turnhost/turnhost.json';
const INSTALLED_DATA_DIR = '/var/lib/turnhost';
/** Outside the data directory: every turn's view hides the data directory whole. */
const INSTALLED_WORKSPACES_ROOT = '/var/lib/turnhost-workspaces';
/** The helper's smallest workspace image (identity-helper/src/workspace-image.h). */
const WORKSPACE_IMAGE_MIN_BYTES = 1024 * 1024;
const DEV_DATA_DIR_NAME = '.turnhost-dev';
const DEFAULT_LISTEN = '127.0.0.1:7707';
const MAX_CONFIG_FILE_BYTES = 1024 * 1024;

/** Flags of `turnhost serve` (and of client commands that read the configuration). */
export interface ConfigOverrides {
  dataDir?: string;
  listen?: string | null;
  socket?: string | null;
  logLevel?: string;
}

export interface LoadConfigOptions {
  /** `--config`: an explicitly named file must exist. */
  configPath?: string;
  env: NodeJS.ProcessEnv;
  overrides?: ConfigOverrides;
  /** Defaults to whether this code runs from the installed package (see isInstalledLayout). */
  installed?: boolean;
  /** Base of the dev data dir and dev workspace root; defaults to process.cwd(). */
  cwd?: string;
  /** The host the `turns.maxConcurrent` default is derived for; defaults to this one (tests pass their own). */
  host?: HostCapacityFacts;
}

/** Where each layer came from, for the boot log and `status`. */
export interface ConfigSources {
  /** The file read, or null when none was. */
  file: string | null;
  /** Environment variables that were applied (names only, never values). */
  env: string[];
  /** Flags that were applied. */
  cli: string[];
  installed: boolean;
  /** Whether `turns.maxConcurrent` was configured or derived from the host (supervisor/config/capacity.ts). */
  capacity: CapacityChoice;
}

export type ConfigLoadResult = Result<{ config: TurnhostConfig; sources: ConfigSources }, 'config_invalid'>;

/** The installed package lives under /usr/lib/turnhost; anything else is a development checkout. */
export function isInstalledLayout(moduleUrl: string = import.meta.url): boolean {
  const file = fileURLToPath(moduleUrl);
  return file.startsWith(INSTALLED_CODE_ROOT + path.sep);
}

export function defaultConfig(options: { installed: boolean; cwd: string }): TurnhostConfig {
  return {
    dataDir: options.installed ? INSTALLED_DATA_DIR : path.join(options.cwd, DEV_DATA_DIR_NAME),
    listen: { tcp: DEFAULT_LISTEN, socket: null, allowNonLoopback: false },
    apiToken: null,
    logLevel: 'info',
    events: { unboundRetentionDays: 30, journal: false, sessionRetentionDays: 0 },
    metrics: { listen: null },
    identityHelper: { path: null, configPath: null },
    modes: { restricted: { enabled: false } },
    limits: { processes: 512, open_files: 4096, file_size: '4G', memory: '2G', pids: 512, cpu: 1, tmp_size: '512M' },
    limitsDisabled: [],
    egress: {
      allowlist: [],
      denylist: [],
      allowAddressRanges: [],
      inference: { providers: [], ordinaryTurns: false, maxRequestBytes: 32 * 1024 * 1024 },
      credentials: [],
      turnAdditionsAllowed: [],
      maxConnections: 64,
      maxBytes: 1024 * 1024 * 1024,
      idleTimeoutMs: 60_000,
    },
    fs: {
      protectedPaths: [],
      scratch: { dir: null, capBytes: 1024 * 1024 * 1024, pruneIntervalSeconds: 300 },
      hostWriteMaxBytes: 16 * 1024 * 1024,
    },
    turns: {
      // Stands until loadConfig derives the host's own default (supervisor/config/capacity.ts).
      maxConcurrent: 4,
      defaultTimeoutSeconds: 600,
      maxTimeoutSeconds: 3600,
      workspaceRoots: [],
      preparedWorkers: 1,
      preparedWorkerIdleSeconds: 120,
      outputRetainBytes: 16 * 1024 * 1024,
    },
    workspaces: { root: options.installed ? INSTALLED_WORKSPACES_ROOT : null, maxBytes: null, maxFiles: null },
    probes: { attackAtBoot: false, attackIntervalSeconds: 0 },
    probeRoots: { proc: '/proc', sysFsCgroup: '/sys/fs/cgroup' },
  };
}

/**
 * The configuration file's published JSON Schema, its defaults those of the installed package.
 * `turns.maxConcurrent` has no fixed default: it is derived from the host it runs on.
 */
export function publishedConfigSchema(): string {
  const defaults = defaultConfig({ installed: true, cwd: '/' });
  const { maxConcurrent: _derivedPerHost, ...turns } = defaults.turns;
  return renderConfigSchema({ ...defaults, turns: turns as TurnhostConfig['turns'] });
}

type Layer = Record<string, unknown>;

// The file is checked with every key optional, the merged result with every key present.
const ajv = createAjv();
const validateFileLayer = compileValidator<Layer>(ajv, TurnhostConfigFile);
const validateMerged = compileValidator<TurnhostConfig>(ajv, ConfigSchema);

/** Where a key path sits in the document: its key's position in each object, or its index. */
function documentPosition(document: unknown, field: string): number[] {
  const position: number[] = [];
  let node = document;
  for (const segment of field.match(/[^.[\]]+/g) ?? []) {
    if (Array.isArray(node)) position.push(Number(segment));
    else if (isRecord(node)) {
      const index = Object.keys(node).indexOf(segment);
      position.push(index < 0 ? Number.MAX_SAFE_INTEGER : index);
    } else break;
    node = isRecord(node) || Array.isArray(node) ? (node as Record<string, unknown>)[segment] : undefined;
  }
  return position;
}

/** Problems as "<key path>: <expected>", in the order the document writes them (missing keys last). */
function describe(document: unknown, errors: FieldError[]): string[] {
  const positioned = errors.map((e) => ({ e, at: documentPosition(document, e.field) }));
  positioned.sort((x, y) => {
    for (let i = 0; i < Math.min(x.at.length, y.at.length); i++) if (x.at[i] !== y.at[i]) return x.at[i]! - y.at[i]!;
    return x.at.length - y.at.length;
  });
  return positioned.map(({ e }) => `${e.field}: ${e.detail}`);
}

/** "127.0.0.1:7707", "localhost:0", "[::1]:7707" → host and port; null when malformed. */
export function parseHostPort(value: string): { host: string; port: number } | null {
  const match = /^(?:\[([0-9A-Fa-f:.]+)\]|([A-Za-z0-9.-]+)):([0-9]{1,5})$/.exec(value);
  if (match === null) return null;
  const host = match[1] ?? match[2] ?? '';
  const port = Number(match[3]);
  if (port > 65535) return null;
  if (match[1] !== undefined && !net.isIPv6(host)) return null;
  return { host, port };
}

function isLoopbackHost(host: string): boolean {
  if (host === 'localhost') return true;
  if (net.isIPv4(host)) return host.split('.')[0] === '127';
  return host === '::1';
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Objects (including the limits map) merge key by key; arrays and scalars replace. */
function merge(base: Layer, layer: Layer): Layer {
  const out: Layer = { ...base };
  for (const [key, value] of Object.entries(layer)) {
    const existing = out[key];
    out[key] = isRecord(existing) && isRecord(value) ? merge(existing, value) : value;
  }
  return out;
}

function setPath(target: Layer, keyPath: string, value: unknown): void {
  const keys = keyPath.split('.');
  let node = target;
  for (const key of keys.slice(0, -1)) {
    const next = isRecord(node[key]) ? (node[key] as Layer) : {};
    node[key] = next;
    node = next;
  }
  node[keys[keys.length - 1] as string] = value;
}

/** How a TURNHOST_* string becomes a typed value. */
type EnvParser = (raw: string) => { value: unknown } | { expected: string };

const asString: EnvParser = (raw) => ({ value: raw });
const asNullableString: EnvParser = (raw) => ({ value: raw === '' || raw === 'none' ? null : raw });
const asBoolean: EnvParser = (raw) =>
  ['1', 'true', 'yes'].includes(raw)
    ? { value: true }
    : ['0', 'false', 'no'].includes(raw)
      ? { value: false }
      : { expected: 'expected true/false/1/0' };
const asInteger: EnvParser = (raw) =>
  /^[0-9]+$/.test(raw) ? { value: Number(raw) } : { expected: 'expected an integer' };
const asPathList: EnvParser = (raw) => ({ value: raw === '' ? [] : raw.split(':') });

/** Every environment override. TURNHOST_WORKER_LIMITS is deliberately absent: the limits code reads and reports it. */
const ENV_OVERRIDES: ReadonlyArray<{ name: string; key: string; parse: EnvParser }> = [
  { name: 'TURNHOST_DATA_DIR', key: 'dataDir', parse: asString },
  { name: 'TURNHOST_LISTEN', key: 'listen.tcp', parse: asNullableString },
  { name: 'TURNHOST_SOCKET', key: 'listen.socket', parse: asNullableString },
  { name: 'TURNHOST_ALLOW_NON_LOOPBACK', key: 'listen.allowNonLoopback', parse: asBoolean },
  { name: 'TURNHOST_API_TOKEN', key: 'apiToken', parse: asNullableString },
  { name: 'TURNHOST_LOG_LEVEL', key: 'logLevel', parse: asString },
  { name: 'TURNHOST_IDENTITY_HELPER', key: 'identityHelper.path', parse: asNullableString },
  { name: 'TURNHOST_IDENTITY_HELPER_CONFIG', key: 'identityHelper.configPath', parse: asNullableString },
  { name: 'TURNHOST_RESTRICTED_ENABLED', key: 'modes.restricted.enabled', parse: asBoolean },
  { name: 'TURNHOST_UNBOUND_RETENTION_DAYS', key: 'events.unboundRetentionDays', parse: asInteger },
  { name: 'TURNHOST_EVENTS_JOURNAL', key: 'events.journal', parse: asBoolean },
  { name: 'TURNHOST_SESSION_RETENTION_DAYS', key: 'events.sessionRetentionDays', parse: asInteger },
  { name: 'TURNHOST_METRICS_LISTEN', key: 'metrics.listen', parse: asNullableString },
  { name: 'TURNHOST_MAX_CONCURRENT_TURNS', key: 'turns.maxConcurrent', parse: asInteger },
  { name: 'TURNHOST_WORKSPACE_ROOTS', key: 'turns.workspaceRoots', parse: asPathList },
  { name: 'TURNHOST_PROBE_PROC_ROOT', key: 'probeRoots.proc', parse: asString },
  { name: 'TURNHOST_PROBE_CGROUP_ROOT', key: 'probeRoots.sysFsCgroup', parse: asString },
];

const CLI_OVERRIDES: ReadonlyArray<{ flag: string; option: keyof ConfigOverrides; key: string }> = [
  { flag: '--data-dir', option: 'dataDir', key: 'dataDir' },
  { flag: '--listen', option: 'listen', key: 'listen.tcp' },
  { flag: '--socket', option: 'socket', key: 'listen.socket' },
  { flag: '--log-level', option: 'logLevel', key: 'logLevel' },
];

/** Checks one override value with the key's own schema, naming the variable or flag. */
function checkOverride(label: string, keyPath: string, value: unknown): string[] {
  const layer: Layer = {};
  setPath(layer, keyPath, value);
  const checked = validateFileLayer(layer);
  return checked.ok ? [] : describe(layer, checked.errors).map((problem) => `${label} (${problem})`);
}

/**
 * `config_unreadable`: the file cannot be read or parsed, so nothing else can be judged;
 * `config_invalid`: it parsed and its keys are refused, which the variables and flags join.
 */
function readConfigFile(file: string): Result<{ layer: Layer }, 'config_unreadable' | 'config_invalid'> {
  let text: string;
  try {
    const stat = fs.statSync(file);
    if (!stat.isFile()) return fail('config_unreadable', `${file}: not a regular file`);
    if (stat.size > MAX_CONFIG_FILE_BYTES)
      return fail('config_unreadable', `${file}: larger than ${MAX_CONFIG_FILE_BYTES} bytes`);
    text = fs.readFileSync(file, 'utf8');
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? 'read error';
    return fail('config_unreadable', `${file}: cannot read the configuration file (${code})`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (error) {
    return fail('config_unreadable', `${file}: not valid JSON (${(error as Error).message})`);
  }
  if (!isRecord(parsed)) return fail('config_unreadable', `${file}: expected a JSON object at the top level`);
  // Every problem at once: an operator fixing a file should not learn of them one run at a time.
  const checked = validateFileLayer(parsed);
  if (!checked.ok) return fail('config_invalid', `${file}: ${describe(parsed, checked.errors).join('; ')}`);
  // `$schema` tells editors which schema the file follows; the configuration has no such key.
  const { $schema: _schema, ...layer } = parsed;
  return ok({ layer });
}

/** Which file to read: --config, else TURNHOST_CONFIG, else the installed default when it exists. */
function chooseConfigFile(options: LoadConfigOptions, installed: boolean, cwd: string): string | null {
  if (options.configPath !== undefined) return path.resolve(cwd, options.configPath);
  const fromEnv = options.env['TURNHOST_CONFIG'];
  if (fromEnv !== undefined && fromEnv !== '') return path.resolve(cwd, fromEnv);
  if (installed && fs.existsSync(INSTALLED_CONFIG_PATH)) return INSTALLED_CONFIG_PATH;
  return null;
}

function isBeneathDir(dir: string, root: string): boolean {
  const rel = path.relative(root, dir);
  return rel === '' || (!rel.startsWith('..') && !path.isAbsolute(rel));
}

/**
 * Broker names are path segments and variable names of one turn: each must be unique among
 * providers and credentials alike, and a git host can be brokered by one entry only.
 */
function checkBrokers(egress: TurnhostConfig['egress']): string[] {
  const problems: string[] = [];
  const seen = new Map<string, string>();
  const entries = [
    ...egress.inference.providers.map((p, i) => ({ name: p.name, field: `egress.inference.providers[${i}].name` })),
    ...egress.credentials.map((c, i) => ({ name: c.name, field: `egress.credentials[${i}].name` })),
  ];
  for (const { name, field } of entries) {
    const first = seen.get(name);
    if (first !== undefined) problems.push(`${field}: "${name}" is already the name of ${first}`);
    else seen.set(name, field.replace(/\.name$/, ''));
  }
  const gitHosts = new Map<string, number>();
  egress.credentials.forEach((credential, i) => {
    if (credential.gitHost === undefined) return;
    const first = gitHosts.get(credential.gitHost);
    if (first !== undefined)
      problems.push(
        `egress.credentials[${i}].gitHost: ${credential.gitHost} is brokered by egress.credentials[${first}]`,
      );
    else gitHosts.set(credential.gitHost, i);
  });
  return problems;
}

/** Rules that span keys, checked on the final configuration; every one that fails. */
function checkCombination(config: TurnhostConfig): string[] {
  const problems: string[] = [];
  if (config.listen.tcp === null && config.listen.socket === null)
    problems.push('listen: at least one of listen.tcp and listen.socket must be set');
  if (config.listen.tcp !== null) {
    const address = parseHostPort(config.listen.tcp);
    if (address !== null && !isLoopbackHost(address.host) && !config.listen.allowNonLoopback)
      problems.push(
        `listen.tcp: ${config.listen.tcp} is not a loopback address; set listen.allowNonLoopback to true to serve beyond this host`,
      );
  }
  if (config.metrics.listen !== null) {
    const address = parseHostPort(config.metrics.listen);
    if (address !== null && !isLoopbackHost(address.host))
      problems.push(
        `metrics.listen: ${config.metrics.listen} is not a loopback address; the metrics listener takes no token and serves this host only`,
      );
  }
  if (config.turns.defaultTimeoutSeconds > config.turns.maxTimeoutSeconds)
    problems.push('turns.defaultTimeoutSeconds: must not exceed turns.maxTimeoutSeconds');
  const workspacesRoot = config.workspaces.root;
  if (workspacesRoot === '/') problems.push('workspaces.root: must not be /');
  else if (workspacesRoot !== null && isBeneathDir(config.dataDir, workspacesRoot))
    problems.push('workspaces.root: must not contain the data directory (dataDir)');
  else if (workspacesRoot !== null && isBeneathDir(workspacesRoot, config.dataDir))
    problems.push('workspaces.root: must not lie inside the data directory (dataDir), which every view hides');
  problems.push(...checkBrokers(config.egress));
  const { maxBytes, maxFiles } = config.workspaces;
  if (maxBytes !== null && maxBytes < WORKSPACE_IMAGE_MIN_BYTES)
    problems.push(
      `workspaces.maxBytes: at least ${WORKSPACE_IMAGE_MIN_BYTES} (a workspace filesystem smaller than 1 MiB has no room for files)`,
    );
  if (maxFiles !== null && maxBytes === null)
    problems.push('workspaces.maxFiles: needs workspaces.maxBytes (the files are bounded by the workspace filesystem)');
  if (config.limitsDisabled.includes('tmp_size'))
    problems.push(
      "limitsDisabled: tmp_size cannot be disabled: the turn's /tmp is always a tmpfs of a set size (set limits.tmp_size instead)",
    );
  return problems;
}

export function loadConfig(options: LoadConfigOptions): ConfigLoadResult {
  const installed = options.installed ?? isInstalledLayout();
  const cwd = options.cwd ?? process.cwd();
  const sources: Omit<ConfigSources, 'capacity'> = { file: null, env: [], cli: [], installed };
  let capacityConfigured = false;
  let layer: Layer = defaultConfig({ installed, cwd });

  // Every problem at once: the file's, then every refused variable and flag.
  const problems: string[] = [];
  const file = chooseConfigFile(options, installed, cwd);
  if (file !== null) {
    const read = readConfigFile(file);
    if (read.ok) {
      layer = merge(layer, read.layer);
      sources.file = file;
      capacityConfigured = isRecord(read.layer['turns']) && read.layer['turns']['maxConcurrent'] !== undefined;
    } else if (read.reason === 'config_unreadable') return fail('config_invalid', read.detail);
    else problems.push(read.detail);
  }

  for (const override of ENV_OVERRIDES) {
    const raw = options.env[override.name];
    if (raw === undefined) continue;
    const parsed = override.parse(raw);
    if ('expected' in parsed) {
      problems.push(`${override.name}: ${parsed.expected}`);
      continue;
    }
    const value =
      override.key === 'dataDir' && typeof parsed.value === 'string' ? path.resolve(cwd, parsed.value) : parsed.value;
    const refused = checkOverride(override.name, override.key, value);
    if (refused.length > 0) {
      problems.push(...refused);
      continue;
    }
    setPath(layer, override.key, value);
    sources.env.push(override.name);
    if (override.key === 'turns.maxConcurrent') capacityConfigured = true;
  }

  for (const override of CLI_OVERRIDES) {
    const raw = options.overrides?.[override.option];
    if (raw === undefined) continue;
    const value = override.option === 'dataDir' && typeof raw === 'string' ? path.resolve(cwd, raw) : raw;
    const refused = checkOverride(override.flag, override.key, value);
    if (refused.length > 0) {
      problems.push(...refused);
      continue;
    }
    setPath(layer, override.key, value);
    sources.cli.push(override.flag);
  }
  if (problems.length > 0) return fail('config_invalid', problems.join('; '));

  const merged = validateMerged(layer);
  if (!merged.ok) return fail('config_invalid', describe(layer, merged.errors).join('; '));
  const combination = checkCombination(merged.value);
  if (combination.length > 0) return fail('config_invalid', combination.join('; '));
  const config = merged.value;
  const derived = deriveMaxConcurrent(options.host ?? hostCapacityFacts(), configuredMemoryLimit(config));
  if (!capacityConfigured) config.turns.maxConcurrent = derived.value;
  return ok({
    config,
    sources: { ...sources, capacity: { source: capacityConfigured ? 'configured' : 'derived', derived } },
  });
}
