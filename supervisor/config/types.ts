/**
 * The supervisor's configuration after loading and validation (`supervisor/config/load.ts`).
 * The types are the configuration schema's (api/schema/config.ts), so the loader's validator,
 * the published JSON Schema and the code that reads the configuration cannot drift apart.
 * docs/configuration.md documents every key.
 */
import type {
  CONFIG_LIMIT_NAMES,
  CONFIG_LOG_LEVELS,
  PROTECTED_PATH_MODES,
  TurnhostConfig as SchemaConfig,
} from '../../api/schema/config.js';
import type { LimitName } from '../../core/limits.js';
import type { LogLevel } from '../../core/log.js';

export type { LimitSettings } from '../../api/schema/config.js';

/**
 * How the view keeps a protected path (`fs.protectedPaths[].mode`) from the worker; the probes
 * report each protected path with the same mode (supervisor/probes/types.ts).
 */
export type ProtectedPathMode = 'read_only' | 'mask_file' | 'mask_directory';

/** True when two unions hold the same members. */
type Same<A, B> = [A] extends [B] ? ([B] extends [A] ? true : false) : false;

/**
 * The schema spells out the names the daemon knows (it may import nothing of ours); a limit,
 * log level or protected-path mode added on one side only stops the build here.
 */
type ConfigNamesAgree = [
  Same<(typeof CONFIG_LIMIT_NAMES)[number], LimitName>,
  Same<(typeof CONFIG_LOG_LEVELS)[number], LogLevel>,
  Same<(typeof PROTECTED_PATH_MODES)[number], ProtectedPathMode>,
];

/**
 * The loaded configuration. It is `never` unless every name list agrees, so a disagreement
 * fails the build wherever a configuration is read.
 */
export type TurnhostConfig = ConfigNamesAgree[number] extends true ? SchemaConfig : never;
