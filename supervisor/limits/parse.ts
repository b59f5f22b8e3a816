/**
 * Worker limit values as operators write them (config `limits`, `TURNHOST_WORKER_LIMITS`,
 * per-turn overrides) turned into numbers. Any malformed entry refuses the whole input: a
 * partial application would enforce less than the operator believes.
 */
import { fail, ok, type Result } from '../../core/result.js';
import type { LimitSettings } from '../config/types.js';
import type { LimitName } from '../../core/limits.js';
import type { ResolvedLimits } from '../../core/limits.js';

type LimitUnit = 'bytes' | 'cpus' | 'count';

const LIMIT_UNITS: Readonly<Record<LimitName, LimitUnit>> = {
  memory: 'bytes',
  data: 'bytes',
  file_size: 'bytes',
  tmp_size: 'bytes',
  cpu: 'cpus',
  pids: 'count',
  processes: 'count',
  open_files: 'count',
};

const BYTE_SUFFIX: Readonly<Record<string, number>> = {
  '': 1,
  K: 1024,
  M: 1024 ** 2,
  G: 1024 ** 3,
  T: 1024 ** 4,
};

function isLimitName(name: string): name is LimitName {
  return Object.hasOwn(LIMIT_UNITS, name);
}

function parseBytes(text: string): number | null {
  const match = /^([1-9][0-9]*)([KMGT]?)$/i.exec(text);
  if (match === null) return null;
  const value = Number(match[1]) * (BYTE_SUFFIX[(match[2] ?? '').toUpperCase()] ?? NaN);
  return Number.isSafeInteger(value) ? value : null;
}

function parseCpus(text: string): number | null {
  if (!/^[0-9]+(\.[0-9]+)?$/.test(text)) return null;
  const value = Number(text);
  return Number.isFinite(value) && value > 0 && value <= 1_000_000 ? value : null;
}

function parseCount(text: string): number | null {
  if (!/^[1-9][0-9]*$/.test(text)) return null;
  const value = Number(text);
  return Number.isSafeInteger(value) ? value : null;
}

const UNIT_PARSERS: Readonly<Record<LimitUnit, (text: string) => number | null>> = {
  bytes: parseBytes,
  cpus: parseCpus,
  count: parseCount,
};

const UNIT_WORDS: Readonly<Record<LimitUnit, string>> = {
  bytes: 'a positive byte count, optionally with a K, M, G or T suffix (powers of 1024)',
  cpus: 'a positive decimal number of CPUs',
  count: 'a positive integer',
};

/**
 * Limits with a range of their own: the turn's /tmp tmpfs is mounted by the kernel with that
 * size, and below 1 MiB nothing useful fits; above 1 TiB the number is a typo, not a budget.
 */
const LIMIT_RANGES: Readonly<Partial<Record<LimitName, { min: number; max: number; words: string }>>> = {
  tmp_size: { min: 1024 ** 2, max: 1024 ** 4, words: 'between 1M and 1T' },
};

/** One limit value; numbers are taken as written in the limit's unit. */
function parseLimitValue(name: LimitName, raw: string | number): number | null {
  const text = typeof raw === 'number' ? (Number.isFinite(raw) ? String(raw) : '') : raw.trim();
  return UNIT_PARSERS[LIMIT_UNITS[name]](text);
}

function outOfRange(name: LimitName, value: number): string | null {
  const range = LIMIT_RANGES[name];
  return range !== undefined && (value < range.min || value > range.max) ? range.words : null;
}

export function parseLimitSettings(
  settings: LimitSettings,
  origin: string,
): Result<{ limits: ResolvedLimits }, 'malformed_limits'> {
  const limits: ResolvedLimits = {};
  for (const [name, raw] of Object.entries(settings as Record<string, unknown>)) {
    if (!isLimitName(name)) {
      return fail(
        'malformed_limits',
        `${origin}: unknown limit "${name}" (known: ${Object.keys(LIMIT_UNITS).join(', ')})`,
      );
    }
    if (raw === undefined) continue;
    const value = typeof raw === 'string' || typeof raw === 'number' ? parseLimitValue(name, raw) : null;
    if (value === null) {
      return fail(
        'malformed_limits',
        `${origin}: ${name} must be ${UNIT_WORDS[LIMIT_UNITS[name]]}, got ${JSON.stringify(raw)}`,
      );
    }
    const range = outOfRange(name, value);
    if (range !== null) {
      return fail('malformed_limits', `${origin}: ${name} must be ${range}, got ${JSON.stringify(raw)}`);
    }
    limits[name] = value;
  }
  return ok({ limits });
}

export const LIMITS_ENV = 'TURNHOST_WORKER_LIMITS';

/** `name=value` pairs separated by commas; an empty variable configures nothing. */
export function parseLimitsEnv(value: string): Result<{ limits: ResolvedLimits }, 'malformed_limits'> {
  const settings: Record<string, string> = {};
  if (value.trim() === '') return ok({ limits: {} });
  for (const entry of value.split(',')) {
    const equals = entry.indexOf('=');
    if (equals <= 0) return fail('malformed_limits', `${LIMITS_ENV}: entry "${entry.trim()}" is not name=value`);
    const name = entry.slice(0, equals).trim();
    if (Object.hasOwn(settings, name)) return fail('malformed_limits', `${LIMITS_ENV}: ${name} is given twice`);
    settings[name] = entry.slice(equals + 1);
  }
  return parseLimitSettings(settings, LIMITS_ENV);
}

/**
 * Per-turn overrides may only lower the defaults. A limit with no default is unlimited, so any
 * override of it lowers it and is accepted.
 */
export function lowerOnly(
  defaults: ResolvedLimits,
  overrides: ResolvedLimits,
): Result<{ limits: ResolvedLimits }, 'limit_raise'> {
  const limits: ResolvedLimits = { ...defaults };
  for (const [name, value] of Object.entries(overrides) as [LimitName, number | undefined][]) {
    if (value === undefined) continue;
    const ceiling = defaults[name];
    if (ceiling !== undefined && value > ceiling) {
      return fail(
        'limit_raise',
        `${name}: override ${value} is above the configured limit ${ceiling}; overrides may only lower`,
      );
    }
    limits[name] = value;
  }
  return ok({ limits });
}
