/* The governed view's /sys (docs/filesystem-view.md, "/sys"): a fresh sysfs of the turn's own
 * network namespace, read-only, and at /sys/fs/cgroup the turn's own cgroup leaves and nothing
 * else. Built by view.c in the turn's mount namespace, after the turn's network and cgroup
 * namespaces exist (sandbox_enter_turn_namespaces). */
#ifndef IDENTITY_HELPER_SYS_VIEW_H
#define IDENTITY_HELPER_SYS_VIEW_H

#include <stdbool.h>

#include "descriptor.h"
#include "failure.h"

#define SYS_VIEW_MAX_NAME 64

/* One turn cgroup leaf, cloned read-only before the first mount of the view. */
struct cgroup_leaf {
  int tree;
  bool unified;                     /* on cgroup2 */
  char name[SYS_VIEW_MAX_NAME + 1]; /* the hierarchy's mount directory name on the host */
};

struct sys_view {
  size_t leaf_count;
  struct cgroup_leaf leaves[DESCRIPTOR_MAX_CGROUPS];
};

/* Opens each of the descriptor's `cgroup` leaves without following a symlink, checks it lies on
 * a cgroup filesystem, names it after its hierarchy's mountpoint (/proc/self/mountinfo) and
 * clones it read-only, nosuid, nodev, noexec. Exit code 78 when a leaf is refused, 71 when the
 * kernel refuses the clone. */
int sys_view_plan(const struct descriptor *d, struct sys_view *v, struct failure *f);

/* Attaches a new sysfs (read-only, nosuid, nodev, noexec) at /sys beneath `root`, then at
 * /sys/fs/cgroup: nothing more when there is no leaf (sysfs's own empty directory); the leaf
 * itself when it is a single cgroup2 leaf; else a small read-only tmpfs with one directory per
 * leaf, named after its hierarchy, the leaf bound there. Exit code 71 when a mount fails, 78
 * when a mountpoint is refused. */
int sys_view_build(int root, struct sys_view *v, struct failure *f);

#endif
