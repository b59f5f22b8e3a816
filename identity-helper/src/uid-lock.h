/* Worker uid leases, exclusive across every supervisor on the host (docs/identity-helper-
 * protocol.md, "Uid leases"): one lock file per uid in a root-owned directory, flock()ed by
 * the process that waits for the worker (the monitor) for the worker's whole life, and a uid
 * with any live process is never handed out, whoever holds or held its lock. */
#ifndef IDENTITY_HELPER_UID_LOCK_H
#define IDENTITY_HELPER_UID_LOCK_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "failure.h"

/* Takes `wanted` (in range), or with `search` the first free uid of the range from `wanted`
 * on. On success `*uid` is the uid taken and `*lock_fd` holds its lock (close-on-exec; the
 * lock ends when the last copy of the fd is closed). Exit code 80 when `wanted` (or, with
 * `search`, every uid of the range) is leased or has live processes; 70 when the lock
 * directory is not a root-owned directory only root can change. */
int uid_lock_take(const struct helper_config *c, uint32_t wanted, bool search, uint32_t *uid,
                  int *lock_fd, struct failure *f);

#endif
