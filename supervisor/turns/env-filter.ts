/**
 * The subprocess environment filter: a turn command sees only allowlisted variables. Modelled
 * on the reference toolkit's filterSubprocessEnv: a fixed allowlist, an operator escape hatch of
 * extra names (config `turns.envExtra` or TURNHOST_ENV_EXTRA), and the control variable itself is
 * never forwarded. Values are never logged.
 */
export const ENV_EXTRA_CONTROL = 'TURNHOST_ENV_EXTRA';

/** Names a command may receive from the turn request without configuration. */
const ALLOWED_NAMES = new Set([
  'PATH',
  'HOME',
  'USER',
  'LOGNAME',
  'SHELL',
  'TERM',
  'COLORTERM',
  'NO_COLOR',
  'FORCE_COLOR',
  'LANG',
  'LANGUAGE',
  'TZ',
  'TMPDIR',
  'PWD',
  'EDITOR',
  'PAGER',
  'COLUMNS',
  'LINES',
]);
const ALLOWED_PREFIXES = ['LC_'];

/** Names that are never forwarded, even when an operator lists them: they steer loaders or our own proxying. */
const NEVER_NAMES = new Set([
  ENV_EXTRA_CONTROL,
  'LD_PRELOAD',
  'LD_LIBRARY_PATH',
  'LD_AUDIT',
  'NODE_OPTIONS',
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'ALL_PROXY',
  'NO_PROXY',
  'http_proxy',
  'https_proxy',
  'all_proxy',
  'no_proxy',
]);

const NAME_PATTERN = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const MAX_VALUE_BYTES = 32 * 1024;

/** Parses the escape hatch: a comma-separated list of variable names. Malformed names are refused. */
export function parseEnvExtra(value: string | undefined): { names: string[]; invalid: string[] } {
  const names: string[] = [];
  const invalid: string[] = [];
  for (const raw of (value ?? '').split(',')) {
    const name = raw.trim();
    if (name === '') continue;
    if (NAME_PATTERN.test(name) && !NEVER_NAMES.has(name)) names.push(name);
    else invalid.push(name);
  }
  return { names, invalid };
}

export interface EnvFilterResult {
  env: Record<string, string>;
  /** Names dropped by the filter (never values). */
  dropped: string[];
}

export function filterSubprocessEnv(requested: Record<string, string>, extraNames: readonly string[]): EnvFilterResult {
  const extra = new Set(extraNames.filter((n) => !NEVER_NAMES.has(n)));
  const env: Record<string, string> = {};
  const dropped: string[] = [];
  for (const [name, value] of Object.entries(requested)) {
    const allowed =
      !NEVER_NAMES.has(name) &&
      NAME_PATTERN.test(name) &&
      typeof value === 'string' &&
      !value.includes('\0') &&
      Buffer.byteLength(value) <= MAX_VALUE_BYTES &&
      (ALLOWED_NAMES.has(name) || ALLOWED_PREFIXES.some((p) => name.startsWith(p)) || extra.has(name));
    if (allowed) env[name] = value;
    else dropped.push(name);
  }
  return { env, dropped };
}
