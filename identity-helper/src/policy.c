#include "policy.h"

#include <stddef.h>
#include <unistd.h>

#include "syntax.h"

#define MAX_CALLER_GROUPS 65536

static bool caller_has_group(gid_t wanted) {
  static gid_t groups[MAX_CALLER_GROUPS];
  if (getgid() == wanted) {
    return true;
  }
  int count = getgroups(MAX_CALLER_GROUPS, groups);
  for (int i = 0; i < count; i++) {
    if (groups[i] == wanted) {
      return true;
    }
  }
  return false;
}

int policy_check_caller(const struct helper_config *c, struct failure *f) {
  if (getuid() == 0 || caller_has_group(c->caller_gid)) {
    return 0;
  }
  return fail_with(f, EXIT_CALLER_NOT_PERMITTED,
                   "caller (real uid %u) is neither root nor in caller_group %u",
                   (unsigned)getuid(), (unsigned)c->caller_gid);
}

bool policy_uid_in_range(const struct helper_config *c, uint32_t uid) {
  return uid != 0 && uid >= c->uid_first && uid - c->uid_first < c->uid_count;
}

int policy_worker_uid(const struct helper_config *c, const struct descriptor *d, uint32_t *uid,
                      struct failure *f) {
  uint32_t chosen = d->has_uid ? d->uid : c->uid_first;
  if (!policy_uid_in_range(c, chosen)) {
    return fail_with(f, EXIT_UID_OUT_OF_RANGE, "uid %u is outside the worker range %u+%u", chosen,
                     c->uid_first, c->uid_count);
  }
  if (d->has_gid && d->gid != chosen) {
    return fail_with(f, EXIT_UID_OUT_OF_RANGE, "gid %u must equal uid %u", d->gid, chosen);
  }
  *uid = chosen;
  return 0;
}

const char *policy_cgroup_root_for(const struct helper_config *c, const char *cgroup) {
  for (size_t i = 0; i < c->cgroup_root_count; i++) {
    if (path_is_strictly_beneath(cgroup, c->cgroup_roots[i])) {
      return c->cgroup_roots[i];
    }
  }
  return NULL;
}
