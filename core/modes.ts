/**
 * The worker modes and identities every layer speaks of: a turn's mode picks its profile (the
 * filesystem view and egress it gets), and the identity says whose uid its worker runs as.
 */
export type WorkerMode = 'ordinary' | 'restricted';
export type WorkerProfile = 'governed' | 'strict';
export type IdentityMode = 'separate_uid' | 'shared_uid';

export function profileFor(mode: WorkerMode): WorkerProfile {
  return mode === 'ordinary' ? 'governed' : 'strict';
}
