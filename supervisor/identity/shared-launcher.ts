/**
 * The shared_uid launcher: the identity helper binary that ships with turnhost, run in shared
 * mode (`--shared`): it drops whatever a setuid bit lent it at once, then builds the same
 * namespaces, view and pid namespace as a separate-uid launch, with the supervisor's own uid
 * (inside a user namespace unless the supervisor is root). One view, built by one program, in
 * both identity modes (docs/filesystem-view.md).
 */
import fs from 'node:fs';
import path from 'node:path';
import { fail, ok, type Result } from '../../core/result.js';
import { packageRoot } from '../software.js';
import { writeSharedLauncherConfig, type SharedLauncherSpec } from './helper-config.js';
import type { HelperLocation } from './helper-process.js';

/** The helper binary of this installation: the deb's, or the one `make` built in a checkout. */
function bundledHelperPath(): string {
  const root = packageRoot();
  const packaged = path.join(root, 'identity-helper');
  return fs.existsSync(packaged) && fs.statSync(packaged).isFile()
    ? packaged
    : path.join(root, 'identity-helper/build/identity-helper');
}

/** The launcher with its config written to `dir` (a directory of this process's own). */
export function prepareSharedLauncher(
  dir: string,
  spec: SharedLauncherSpec,
  binary: string = bundledHelperPath(),
): Result<{ launcher: HelperLocation }, 'launcher_unavailable'> {
  if (!fs.existsSync(binary)) {
    return fail(
      'launcher_unavailable',
      `the shared_uid launcher ${binary} is missing (build it with make -C identity-helper)`,
    );
  }
  const configPath = path.join(dir, 'shared-launcher.conf');
  try {
    writeSharedLauncherConfig(configPath, spec);
  } catch (error) {
    return fail('launcher_unavailable', `the shared_uid launcher config ${configPath}: ${(error as Error).message}`);
  }
  return ok({ launcher: { path: binary, configPath, shared: true } });
}
