/**
 * Renders the identity helper's own config file (grammar: docs/identity-helper-protocol.md).
 * Used by the dev setup and the tests; the packaged helper config is written by postinst.
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
  /** Directories beneath which turn temps live; the helper chowns only temps beneath one. */
  tempRoots?: string[];
}

export function renderHelperConfig(spec: HelperConfigSpec): string {
  const lines = [
    '# turnhost identity helper configuration (root-owned, not group/other writable)',
    `uid_range ${spec.uidRange.first} ${spec.uidRange.count}`,
    `caller_group ${spec.callerGroup}`,
    ...spec.cgroupRoots.map((root) => `cgroup_root ${root}`),
    `worker_exec ${spec.workerExec}`,
    ...spec.workerArgs.map((arg) => `worker_arg ${arg}`),
    ...(spec.viewPaths ?? []).map((viewPath) => `view_path ${viewPath}`),
    ...(spec.tempRoots ?? []).map((tempRoot) => `temp_root ${tempRoot}`),
  ];
  return lines.join('\n') + '\n';
}

/** Writes the config 0644 root-owned (the caller must be root), replacing it atomically. */
export function writeHelperConfig(file: string, spec: HelperConfigSpec): void {
  const temp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(temp, renderHelperConfig(spec), { mode: 0o644, flag: 'wx' });
  fs.renameSync(temp, file);
}
