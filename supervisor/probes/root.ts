/**
 * The root server warning: present while the supervisor runs as uid 0 (real or effective).
 * Running as root is never refused; the sentence says what that leaves open, truthfully for
 * the identity the workers actually get.
 */
import type { SupervisorIds } from './identity.js';
import type { IdentityMode } from '../../core/modes.js';

export function supervisorIsRoot(ids: SupervisorIds): boolean {
  return ids.uid === 0 || ids.euid === 0;
}

export function rootServerWarning(
  ids: SupervisorIds,
  worker: { identity: IdentityMode; workerUid?: number },
): string | undefined {
  if (!supervisorIsRoot(ids)) return undefined;
  const who = `the turnhost supervisor runs as root (uid ${ids.uid}, euid ${ids.euid})`;
  const { workerUid } = worker;
  if (workerUid !== undefined) {
    return `${who}: workers run as the identity helper's separate uid ${workerUid}, not root, but a compromise of the supervisor itself is a compromise of root; run it as the turnhost user with the setuid helper`;
  }
  if (worker.identity === 'separate_uid') {
    return `${who} and its identity helper is not verified, so no worker runs; once verified, workers get a separate uid, but a compromise of the supervisor itself is a compromise of root`;
  }
  return `${who}: workers run as uid 0 too and keep what root can do without writing: they can read root-owned files in their filesystem view and connect to root-owned Unix sockets they can reach (abstract sockets only where they share a network namespace with them); configure the identity helper or run the supervisor as the turnhost user`;
}
