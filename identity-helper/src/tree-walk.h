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

/* A workspace's usage (either identity mode) measures at most this many entries... */
#define TREE_USAGE_MAX_ENTRIES 1000000u
/* ...for at most this long; past either the answer says `complete no`. A turn can make a tree
 * of any size, and an unbounded walk would hold the caller (a turn start, a host write) for as
 * long as the tree takes. */
#define TREE_USAGE_MAX_SECONDS 10u

enum tree_walk_mode {
  /* counts; does not enter a mount point found inside */
  TREE_MEASURE = 0,
  /* counts and removes every entry beneath the top (not the top itself); a mount point
   * found inside is refused (82), never entered nor unmounted */
  TREE_REMOVE
};

/* What a bounded walk may do beyond its mode, and what it found. */
struct tree_walk_options {
  /* remove: a directory the caller owns but may not read, search or change is given u+rwx
   * before it is entered (the caller owns the tree; nothing else it could not do itself) */
  bool restore_owner_access;
  /* measure: stop after this many entries (0: no bound) */
  uint64_t max_entries;
  /* measure: stop at this CLOCK_MONOTONIC time in nanoseconds (0: no deadline) */
  uint64_t deadline_ns;
  /* measure, out: a bound stopped the walk, or a directory could not be read: the totals are
   * a lower bound */
  bool incomplete;
};

struct tree_totals {
  uint64_t bytes; /* st_blocks * 512 of every entry */
  uint64_t files; /* entries that are not directories */
};

/* Adds the directory `top` itself (an open directory fd, borrowed) to `totals`, then
 * everything beneath it. Exit code 82 for a mount point inside in TREE_REMOVE; 76 when the tree
 * changes under the walk in a way it cannot follow safely, or on an I/O error. */
int tree_walk(int top, enum tree_walk_mode mode, struct tree_totals *totals, struct failure *f);

/* tree_walk with `options`; a bound or an unreadable directory in a measure ends or skips
 * the walk with `options->incomplete` set and exit code 0. */
int tree_walk_bounded(int top, enum tree_walk_mode mode, struct tree_walk_options *options,
                      struct tree_totals *totals, struct failure *f);

/* Options for a workspace usage measure: zeroed, then TREE_USAGE_MAX_ENTRIES and a deadline
 * TREE_USAGE_MAX_SECONDS from now. */
void tree_walk_usage_options(struct tree_walk_options *options);

/* Gives the directory `name` beneath `dirfd` u+rwx when the caller owns it and lacks any of
 * them: found without following a link, changed through an fd of exactly that directory.
 * Exit code 76 when it cannot. */
int tree_walk_restore_owner_access(int dirfd, const char *name, struct failure *f);

/* Whether two open directories lie on one mount (device, and mount id where the kernel gives
 * one): a directory on another mount than its parent is a mount point. */
bool tree_walk_same_mount(int dir_a, int dir_b);

#endif
