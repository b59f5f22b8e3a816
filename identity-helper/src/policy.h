/* Checks of the caller and of a parsed descriptor against the helper config. */
#ifndef IDENTITY_HELPER_POLICY_H
#define IDENTITY_HELPER_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "descriptor.h"
#include "failure.h"

/* Real uid 0, or caller_group as real gid or supplementary group. Exit code 67 otherwise. */
int policy_check_caller(const struct helper_config *c, struct failure *f);

bool policy_uid_in_range(const struct helper_config *c, uint32_t uid);

/* The worker uid: the descriptor's `uid` (must be in range) or the first of the range.
 * A given `gid` must equal it. Exit code 68 otherwise. */
int policy_worker_uid(const struct helper_config *c, const struct descriptor *d, uint32_t *uid,
                      struct failure *f);

/* The configured root that `cgroup` lies strictly beneath, or NULL. */
const char *policy_cgroup_root_for(const struct helper_config *c, const char *cgroup);

#endif
