/* File-descriptor mount primitives for the worker's filesystem view. Every path is opened
 * without following a symbolic link in any component (openat2 RESOLVE_NO_SYMLINKS), and every
 * mount goes through file descriptors (open_tree, fsmount, move_mount, mount_setattr), so the
 * kernel never resolves a path a worker could have changed between the check and the mount.
 * Each function returns 0 or an errno value; callers turn it into a refusal. */
#ifndef IDENTITY_HELPER_MOUNTS_H
#define IDENTITY_HELPER_MOUNTS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "failure.h"

/* Filesystems the view created and may add mountpoints to: its /tmp, /run and /dev (or the
 * strict root and its /tmp), and one tmpfs per hidden path that has a kept path below it
 * (descriptor.h, DESCRIPTOR_MAX_HIDE). */
#define MOUNTS_MAX_OWNED 40

/* Records a kernel refusal of a view step (exit 71): "view: <step>: <ERRNO NAME> (<what it
 * means for a mount>)". The kernel's errno names are generic; a mount's ENOSPC, say, is the
 * namespace's mount limit, not a full disk, so the message says which. */
int mounts_failed(struct failure *f, int error, const char *step_format, ...)
    __attribute__((format(printf, 3, 4)));

/* Opens `path` (absolute, or relative and then strictly beneath `dirfd`) as O_PATH with no
 * symlink in any component, the last one included: a symlink anywhere answers ELOOP. */
int mounts_open_nofollow(int dirfd, const char *path, int *fd);

/* A detached copy of the mount at `source` (AT_RECURSIVE: with its submounts), with
 * `set` attributes set and `clear` attributes cleared on every copied mount. */
int mounts_clone(int source, bool recursive, uint64_t set, uint64_t clear, int *tree);

/* A new detached filesystem of `type`, configured with `options` (NULL-terminated key,
 * value pairs), mounted with `attributes`. */
int mounts_new_filesystem(const char *type, const char *const *options, uint64_t attributes,
                          int *mount_fd);

/* Attaches the detached `tree` on the object `target` refers to. */
int mounts_attach(int tree, int target);

/* Sets `set` on the mount `fd` refers to (and on every mount beneath it when recursive). */
int mounts_set_attributes(int fd, bool recursive, uint64_t set);

/* The filesystems the view created: only inside these may a missing mountpoint be made. */
struct owned_filesystems {
  size_t count;
  dev_t devices[MOUNTS_MAX_OWNED];
};

int mounts_own(struct owned_filesystems *owned, int fd);

enum mountpoint_kind { MOUNTPOINT_DIRECTORY, MOUNTPOINT_FILE };

/* Walks `path` (absolute) from `root` one component at a time without following symlinks;
 * a missing component is created (directories 0755, a final file 0444, root-owned) only
 * when its parent lies on an owned filesystem, never on the host's. The final object must
 * be a directory for MOUNTPOINT_DIRECTORY and must not be one for MOUNTPOINT_FILE (ENOTDIR,
 * EISDIR otherwise). */
int mounts_mountpoint(int root, const char *path, enum mountpoint_kind kind,
                      const struct owned_filesystems *owned, int *fd);

/* Creates the symlink `name` -> `target` in the directory `parent` unless it exists. */
int mounts_symlink(int parent, const char *name, const char *target);

#endif
