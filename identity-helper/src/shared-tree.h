/* Shared mode's workspace trees (docs/identity-helper-protocol.md, "Shared mode"): the
 * shared_uid supervisor's own `<workspace_root>/<lease>` directories, measured and removed by
 * the same fd-relative walk as a leased workspace's (tree-walk.h), in a process of their own
 * and with the caller's own privilege only. Shared mode lends no uid: no lease record and no
 * uid lock are read or taken; the caller guarantees no turn runs on the workspace. */
#ifndef IDENTITY_HELPER_SHARED_TREE_H
#define IDENTITY_HELPER_SHARED_TREE_H

#include "config.h"
#include "descriptor.h"
#include "failure.h"

/* op usage in shared mode: receipt `bytes N`, `files N`, `complete yes|no` of the workspace
 * tree (no link followed, no mount entered), within tree-walk.h's usage bounds; `no` when a
 * bound stopped the walk or a directory could not be read (the counts are then a lower bound). */
int run_shared_usage(const struct helper_config *c, const struct descriptor *d, struct failure *f);

/* op release in shared mode: removes the workspace tree and its directory (no link followed, a
 * mount inside refused with 82, a directory the caller owns but may not enter or change given
 * u+rwx first). Receipt `removed_bytes N`, `removed_files N`; an absent workspace removes 0. */
int run_shared_release(const struct helper_config *c, const struct descriptor *d,
                       struct failure *f);

/* op image in shared mode: the workspace image of a root supervisor's `<workspace_root>/<lease>`
 * (workspace-image.h); refused (67) without root. */
int run_shared_image(const struct helper_config *c, const struct descriptor *d, struct failure *f);

#endif
