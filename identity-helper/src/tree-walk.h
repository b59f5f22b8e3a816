/* Walks a directory tree without following any symlink and without leaving its mount: every
 * step is fd-relative (openat with O_NOFOLLOW|O_DIRECTORY, statx with AT_SYMLINK_NOFOLLOW), so
 * a symlink is an entry like any file and a racing rename cannot redirect the walk elsewhere.
 * Used by usage (measure) and release (remove). */
#ifndef IDENTITY_HELPER_TREE_WALK_H
#define IDENTITY_HELPER_TREE_WALK_H

#include <stdbool.h>
#include <stdint.h>

#include "failure.h"

/* Deeper trees are refused (the walk keeps one identity per level, no fd). */
#define TREE_WALK_MAX_DEPTH 65536

enum tree_walk_mode {
  /* counts; does not enter a mount point found inside */
  TREE_MEASURE = 0,
  /* counts and removes every entry beneath the top (not the top itself); a mount point
   * found inside is refused (82), never entered nor unmounted */
  TREE_REMOVE
};

struct tree_totals {
  uint64_t bytes; /* st_blocks * 512 of every entry */
  uint64_t files; /* entries that are not directories */
};

/* Adds the directory `top` itself (an open directory fd, borrowed) to `totals`, then
 * everything beneath it. Exit code 82 for a mount point inside in TREE_REMOVE; 76 when the tree
 * changes under the walk in a way it cannot follow safely, or on an I/O error. */
int tree_walk(int top, enum tree_walk_mode mode, struct tree_totals *totals, struct failure *f);

/* Whether two open directories lie on one mount (device, and mount id where the kernel gives
 * one): a directory on another mount than its parent is a mount point. */
bool tree_walk_same_mount(int dir_a, int dir_b);

#endif
