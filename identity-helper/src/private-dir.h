/* Root's private directories (the uid locks, the workspace lease records): owned by root, mode
 * 0700, inside a parent only root can change, opened without following any symlink. */
#ifndef IDENTITY_HELPER_PRIVATE_DIR_H
#define IDENTITY_HELPER_PRIVATE_DIR_H

#include <stdbool.h>

#include "failure.h"

/* Opens `path` with no symlink in any component (openat2 RESOLVE_NO_SYMLINKS); errno or 0. */
int private_dir_open_no_symlinks(const char *path, int *fd);

/* Opens the private directory `path` (config key `key`, for the reason), creating it 0700 when
 * missing and `create` is set. Exit code 70 when it, or its parent, is not as described above;
 * with `create` unset, a missing directory sets `*fd` to -1 and succeeds. */
int private_dir_open(const char *path, const char *key, bool create, int *fd, struct failure *f);

#endif
