/**
 * Renders the identity helper's own config file (grammar: docs/identity-helper-protocol.md):
 * the root-owned config of a separate-uid helper (the dev setup and the tests; the packaged one
 * ships in the deb), and the supervisor's own config of the shared-mode launcher.
 */
import fs from 'node:fs';

export interface HelperConfigSpec {
  uidRange: { first: number; count: number };
  callerGroup: string;
  cgroupRoots: string[];
  workerExec: string;
  workerArgs: string[];
  /** Read-only paths every filesystem view keeps (the worker's program and its modules). */
  viewPaths?: string[];
  /** Where the uid lease locks live; the helper's compiled-in default when absent. */
  uidLockDir?: string;
  /** Where the workspace uid lease records live; the helper's compiled-in default when absent. */
  uidLeaseDir?: string;
  /** Directories whose `<root>/<lease id>` entries may be leased workspaces. */
  workspaceRoots?: string[];
}

/** `workspaceRoots`: whose `<root>/<id>` directories its usage and release ops may walk. */
export type SharedLauncherSpec = Omit<HelperConfigSpec, 'uidRange' | 'callerGroup' | 'uidLockDir' | 'uidLeaseDir'>;

function launchLines(spec: SharedLauncherSpec): string[] {
  return [
    ...spec.cgroupRoots.map((root) => `cgroup_root ${root}`),
    `worker_exec ${spec.workerExec}`,
    ...spec.workerArgs.map((arg) => `worker_arg ${arg}`),
    ...(spec.viewPaths ?? []).map((viewPath) => `view_path ${viewPath}`),
    ...(spec.workspaceRoots ?? []).map((root) => `workspace_root ${root}`),
  ];
}

function renderHelperConfig(spec: HelperConfigSpec): string {
  const lines = [
    '# turnhost identity helper configuration (root-owned, not group/other writable)',
    `uid_range ${spec.uidRange.first} ${spec.uidRange.count}`,
    `caller_group ${spec.callerGroup}`,
    ...(spec.uidLockDir === undefined ? [] : [`uid_lock_dir ${spec.uidLockDir}`]),
    ...(spec.uidLeaseDir === undefined ? [] : [`uid_lease_dir ${spec.uidLeaseDir}`]),
    ...launchLines(spec),
  ];
  return lines.join('\n') + '\n';
}

function renderSharedLauncherConfig(spec: SharedLauncherSpec): string {
  return (
    ["# turnhost shared-mode launcher configuration (the supervisor's own)", ...launchLines(spec)].join('\n') + '\n'
  );
}

function writeAtomically(file: string, text: string, mode: number): void {
  const temp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(temp, text, { mode, flag: 'wx' });
  fs.renameSync(temp, file);
}

/** Writes the config 0644 root-owned (the caller must be root), replacing it atomically. */
export function writeHelperConfig(file: string, spec: HelperConfigSpec): void {
  writeAtomically(file, renderHelperConfig(spec), 0o644);
}

/** Writes the shared-mode launcher's config 0600, owned by this process, replacing it atomically. */
export function writeSharedLauncherConfig(file: string, spec: SharedLauncherSpec): void {
  writeAtomically(file, renderSharedLauncherConfig(spec), 0o600);
}
