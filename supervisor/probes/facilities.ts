/**
 * Kernel facilities the worker boundary depends on, each tried or read for real on every
 * probe: seccomp actions, network namespaces, the Landlock ABI.
 */
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import {
  EOPNOTSUPP,
  ENOSYS,
  errnoName,
  lastErrno,
  syscall,
  SYS_LANDLOCK_CREATE_RULESET,
} from '../../core/linux-abi.js';
import type { BoundaryFacilities } from './types.js';

/** The filter compiled by core/seccomp answers with these actions. */
const REQUIRED_SECCOMP_ACTIONS = ['errno', 'kill_process', 'allow'] as const;

export function probeSeccomp(procRoot: string): BoundaryFacilities['seccomp'] {
  const file = path.join(procRoot, 'sys/kernel/seccomp/actions_avail');
  let actions: string[];
  try {
    actions = fs.readFileSync(file, 'utf8').trim().split(/\s+/).filter(Boolean);
  } catch {
    return { available: false, detail: `seccomp filters unavailable: ${file} cannot be read`, actions: [] };
  }
  const missing = REQUIRED_SECCOMP_ACTIONS.filter((a) => !actions.includes(a));
  if (missing.length > 0) {
    return { available: false, detail: `seccomp actions missing from ${file}: ${missing.join(', ')}`, actions };
  }
  return { available: true, detail: `seccomp filters with actions ${REQUIRED_SECCOMP_ACTIONS.join(', ')}`, actions };
}

const UNSHARE_TIMEOUT_MS = 10_000;
const SYSTEM_PATH = '/usr/sbin:/usr/bin:/sbin:/bin';

/**
 * Creates a network namespace in a short-lived child. As root that is `unshare --net`; a
 * non-root supervisor tries it inside a user namespace, which proves kernel support (the
 * setuid helper creates the real one).
 */
export function probeNetworkNamespaces(supervisorIsRoot: boolean): Promise<BoundaryFacilities['networkNamespaces']> {
  const args = supervisorIsRoot ? ['--net', 'true'] : ['--user', '--map-root-user', '--net', 'true'];
  return new Promise((resolve) => {
    execFile('unshare', args, { timeout: UNSHARE_TIMEOUT_MS, env: { PATH: SYSTEM_PATH } }, (error, _stdout, stderr) => {
      if (error === null) {
        resolve({ available: true, detail: `created a network namespace (unshare ${args.join(' ')})` });
        return;
      }
      const why = stderr.trim() || error.message;
      resolve({ available: false, detail: `network namespaces unavailable: unshare ${args.join(' ')} failed: ${why}` });
    });
  });
}

const LANDLOCK_CREATE_RULESET_VERSION = 1;

/** `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)` answers the ABI. */
export function probeLandlock(): BoundaryFacilities['landlock'] {
  const abi = Number(
    syscall(SYS_LANDLOCK_CREATE_RULESET, 'void *', null, 'size_t', 0, 'uint32_t', LANDLOCK_CREATE_RULESET_VERSION),
  );
  if (abi >= 1) return { available: true, detail: `Landlock ABI ${abi}`, abi };
  const errno = lastErrno();
  const why =
    errno === ENOSYS
      ? 'kernel without Landlock'
      : errno === EOPNOTSUPP
        ? 'Landlock disabled at boot (lsm=)'
        : errnoName(errno);
  return { available: false, detail: `Landlock unavailable: ${why}`, abi: null };
}
