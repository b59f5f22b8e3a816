/**
 * The command environment's rules. A turn command starts from a fixed base the supervisor
 * writes (PATH, HOME, LANG, TERM with a tty), then every variable the caller named in the
 * request, then what the boundary owns (TMPDIR, NODE_USE_ENV_PROXY, the proxy variables the
 * worker adds, and the variables that point model clients and git at the turn's brokers). The supervisor's own environment never reaches a command: nothing of it is
 * copied. A caller's variable passes whole, unless its name is one the boundary owns: such a
 * request is refused, naming the variable, rather than having the value silently replaced or
 * dropped.
 */

/** Set by the supervisor for every turn: Node releases whose fetch honours it then use the egress proxy. */
export const NODE_PROXY_ENV = { NODE_USE_ENV_PROXY: '1' } as const;

/** The proxy variables the worker points at the turn's egress listener; refused in any letter case. */
const PROXY_NAMES = new Set(['HTTP_PROXY', 'HTTPS_PROXY', 'ALL_PROXY', 'NO_PROXY']);

const LOADER_DETAIL = "reserved: the dynamic loader's variables are not passed to turn commands";
/** A model credential reaches a turn only as the relay's placeholder (supervisor/turns/turn-brokers.ts). */
const BROKER_DETAIL =
  "reserved: the supervisor points model clients at the turn's inference relay; a real key never enters a turn";
const GIT_DETAIL = 'reserved: the supervisor sets git configuration variables for brokered git hosts';

/** Exact names the boundary owns, with why. */
const RESERVED_NAMES = new Map<string, string>([
  ['TMPDIR', "reserved: the supervisor sets TMPDIR to the turn's own /tmp"],
  ['NODE_USE_ENV_PROXY', 'reserved: the supervisor sets it to 1 so that Node uses the egress proxy'],
  ['GLIBC_TUNABLES', LOADER_DETAIL],
  ['ANTHROPIC_BASE_URL', BROKER_DETAIL],
  ['ANTHROPIC_API_KEY', BROKER_DETAIL],
  ['ANTHROPIC_AUTH_TOKEN', BROKER_DETAIL],
  ['OPENAI_BASE_URL', BROKER_DETAIL],
  ['OPENAI_API_KEY', BROKER_DETAIL],
  ['GIT_CONFIG_COUNT', GIT_DETAIL],
  ['GIT_CONFIG_PARAMETERS', GIT_DETAIL],
]);

/** Prefixes the boundary owns, with why. */
const RESERVED_PREFIXES: ReadonlyArray<[string, string]> = [
  ['LD_', LOADER_DETAIL],
  ['TURNHOST_', 'reserved: the TURNHOST_ prefix belongs to the supervisor'],
  ['GIT_CONFIG_KEY_', GIT_DETAIL],
  ['GIT_CONFIG_VALUE_', GIT_DETAIL],
];

/** Why a caller may not name this variable, or null when it passes to the command. */
export function reservedEnvName(name: string): string | null {
  if (PROXY_NAMES.has(name.toUpperCase()))
    return "reserved: the worker sets the proxy variables (any letter case) to the turn's egress proxy";
  const exact = RESERVED_NAMES.get(name);
  if (exact !== undefined) return exact;
  for (const [prefix, detail] of RESERVED_PREFIXES) if (name.startsWith(prefix)) return detail;
  return null;
}
