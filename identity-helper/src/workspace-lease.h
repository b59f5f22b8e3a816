/* Workspace uid leases (docs/identity-helper-protocol.md, "Workspace leases"): a uid of the
 * range given to one workspace, `<workspace_root>/<lease id>`, for the workspace's whole life,
 * recorded in the lease directory (lease-record.h). The turns on a workspace run as its uid and
 * share it; unleased launches never get a leased uid. */
#ifndef IDENTITY_HELPER_WORKSPACE_LEASE_H
#define IDENTITY_HELPER_WORKSPACE_LEASE_H

#include <stdint.h>

#include "config.h"
#include "descriptor.h"
#include "failure.h"

/* op lease: leases a free uid (from `uid` on, with `uid_search` wrapping through the range) to
 * the workspace and creates its directory (the uid's, group the caller's, mode 02770); asking
 * again answers the same uid. Receipt `leased <uid>`, `lease new|existing`. */
int run_lease(const struct helper_config *c, const struct descriptor *d, struct failure *f);

/* op release: removes the workspace tree (no link followed, no mount crossed) and then the
 * lease; 82 while a turn holds the uid or a process of it lives. Receipt `released <uid>`,
 * `removed_bytes N`, `removed_files N`. */
int run_release(const struct helper_config *c, const struct descriptor *d, struct failure *f);

/* op usage: receipt `bytes N`, `files N`, `complete yes|no` of the workspace tree (no link
 * followed), within tree-walk.h's usage bounds; `no` when a bound stopped the walk or a
 * directory could not be read (the counts are then a lower bound). `image yes` when the
 * workspace is its mounted image: the counts are then its statfs (always complete). */
int run_usage(const struct helper_config *c, const struct descriptor *d, struct failure *f);

/* op mkdir: makes `dir` and its missing parents beneath the workspace, each component opened
 * from the one before with O_NOFOLLOW (a link or a file on the way is refused), each new
 * directory owned by the lease's uid, group the caller's, mode 02770, so the workspace's turns
 * may write in it. Existing directories are kept as they are. Receipt `made N`. */
int run_mkdir(const struct helper_config *c, const struct descriptor *d, struct failure *f);

/* op image: makes (with `max_bytes`, for a new, empty workspace) and mounts, or re-attaches, the
 * workspace's filesystem image (workspace-image.h). Receipt `image made|attached|mounted|none`. */
int run_image(const struct helper_config *c, const struct descriptor *d, struct failure *f);

/* The uid a separate-uid launch runs as, with its lock in `*lock_fd`: with `lease`, the lease's
 * uid (which `uid` must name), locked shared with the workspace's other turns; without, `uid`
 * (or with `uid_search` the first free uid from it on) that no workspace holds, locked
 * exclusively. */
int workspace_lease_launch_uid(const struct helper_config *c, const struct descriptor *d,
                               uint32_t *uid, int *lock_fd, struct failure *f);

#endif
