/* Worker uid locks, across every supervisor on the host (docs/identity-helper-protocol.md, "Uid
 * leases"): one lock file per uid in a root-owned directory, flock()ed by the process that waits
 * for the worker (the monitor) for the worker's whole life: exclusively by an unleased launch,
 * shared by the launches of one leased workspace. A uid with any live process is never handed
 * to an unleased launch, whoever holds or held its lock. */
#ifndef IDENTITY_HELPER_UID_LOCK_H
#define IDENTITY_HELPER_UID_LOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "failure.h"

/* The lock directory (made 0700 when missing). Exit code 70 when it is not a root-owned
 * directory only root can change. */
int uid_lock_dir_open(const struct helper_config *c, int *dir, struct failure *f);

/* Takes the lease guard (`<uid_lock_dir>/leases`) with flock `operation` (LOCK_SH or LOCK_EX),
 * waiting for it: lease changes hold it exclusively, uid choices shared, so no launch picks a
 * uid that a lease is taking at the same moment. */
int uid_lock_guard(int dir, int operation, int *guard_fd, struct failure *f);

/* 0 with the lock of `uid` taken by `operation` (LOCK_SH or LOCK_EX, never waiting);
 * EWOULDBLOCK when it is held in a conflicting way, or (exclusive only, when `check_procs`) a
 * live process has the uid; another errno on an error. */
int uid_lock_try(int dir, uint32_t uid, int operation, bool check_procs, int *lock_fd);

/* Uids an unleased launch must not take (the leased ones). */
typedef bool (*uid_lock_skip)(const void *context, uint32_t uid);

/* Takes `wanted` (in range), or with `search` the first free uid of the range from `wanted` on,
 * exclusively, passing over the uids `skip` names. On success `*uid` is the uid taken and
 * `*lock_fd` holds its lock (close-on-exec; the lock ends when the last copy of the fd is
 * closed). Exit code 80 when `wanted` (or, with `search`, every uid of the range) is leased or
 * has live processes. */
int uid_lock_take(const struct helper_config *c, int dir, uint32_t wanted, bool search,
                  uid_lock_skip skip, const void *skip_context, uint32_t *uid, int *lock_fd,
                  struct failure *f);

#endif
