/**
 * The root server warning: present while the supervisor runs as uid 0 (real or effective).
 * Running as root is never refused; the sentence says what that leaves open, truthfully for
 * the identity the workers actually get, and for shared_uid in the words of what the last view
 * probe saw a uid-0 worker do.
 */
import type { IdentityMode } from '../../core/modes.js';
import type { SupervisorIds } from './identity.js';
import type { ViewFacts } from './view.js';

export function supervisorIsRoot(ids: SupervisorIds): boolean {
  return ids.uid === 0 || ids.euid === 0;
}

function sharedRootWarning(who: string, facts: ViewFacts | null): string {
  if (facts === null) {
    return `${who}: without an identity helper its workers run as uid 0 with no capabilities, and no view probe has shown what they can reach; configure the identity helper or run the supervisor as the turnhost user`;
  }
  const host = facts.hostWritable
    ? 'the last view probe found a host file writable: the read-only view did not hold'
    : 'the last view probe found the host tree read-only to them';
  const owned =
    facts.rootOwnedReadable === false
      ? 'and a root-owned 0600 file unreadable'
      : "but able to read a root-owned 0600 file: uid 0 keeps the owner's access to every root-owned file the view shows (the view hides the supervisor's data directory, its helper config and the host's shadow files, sudoers, root's home, TLS and ssh host keys)";
  return `${who}: without an identity helper its workers run as uid 0 with no capabilities and no_new_privs; ${host}, ${owned}, and they can connect to root-owned unix sockets the view leaves visible (it replaces /run, /tmp, /var/tmp and /dev); configure the identity helper or run the supervisor as the turnhost user`;
}

export function rootServerWarning(
  ids: SupervisorIds,
  worker: { identity?: IdentityMode; workerUid?: number },
  viewFacts: ViewFacts | null = null,
): string | undefined {
  if (!supervisorIsRoot(ids)) return undefined;
  const who = `the turnhost supervisor runs as root (uid ${ids.uid}, euid ${ids.euid})`;
  if (worker.identity === 'separate_uid' && worker.workerUid !== undefined) {
    return `${who}: workers run as the identity helper's separate uid ${worker.workerUid}, not root, but a compromise of the supervisor itself is a compromise of root; run it as the turnhost user with the setuid helper`;
  }
  if (worker.identity === 'shared_uid') return sharedRootWarning(who, viewFacts);
  return `${who} and no worker identity is established, so no worker runs; once it is, a compromise of the supervisor itself is a compromise of root`;
}
