/**
 * What the probes read of the identity helper's own config, and the paths every worker view
 * must keep visible. The worker itself needs none: the helper executes it from a descriptor it
 * opened before building the view. A configured helper's config may still name `view_path`
 * lines (programs an operator's turns rely on); a view that hid one would break those turns, so
 * the view probes check each stays readable. The shared_uid launcher keeps no path of its own.
 */
import fs from 'node:fs';
import type { TurnhostConfig } from '../config/types.js';

/** The packaged helper's compiled-in config (identity-helper/Makefile, HELPER_CONFIG_PATH). */
const PACKAGED_HELPER_CONFIG = '/etc/turnhost/identity-helper.conf';

/** The helper config the configured helper reads. */
export function helperConfigPath(config: TurnhostConfig): string {
  return config.identityHelper.configPath ?? PACKAGED_HELPER_CONFIG;
}

/** The values of every `key value` line of a helper config (grammar: docs/identity-helper-protocol.md). */
export function helperConfigValues(configPath: string, key: string): { values: string[] } | { unreadable: string } {
  let text: string;
  try {
    text = fs.readFileSync(configPath, 'utf8');
  } catch (error) {
    return { unreadable: (error as Error).message };
  }
  const values: string[] = [];
  for (const line of text.split('\n')) {
    const fields = line.trim().split(/\s+/);
    if (fields.length === 2 && fields[0] === key && fields[1] !== undefined) values.push(fields[1]);
  }
  return { values };
}

/** The paths a turn's view keeps visible (`view_path`), or why they cannot be known. */
export function keptViewPaths(config: TurnhostConfig): { paths: string[] } | { requirement: string } {
  if (config.identityHelper.path === null) return { paths: [] };
  const configPath = helperConfigPath(config);
  const kept = helperConfigValues(configPath, 'view_path');
  if ('unreadable' in kept)
    return {
      requirement: `the identity helper config ${configPath} cannot be read to find the paths its views keep (view_path): ${kept.unreadable}`,
    };
  return { paths: kept.values };
}
