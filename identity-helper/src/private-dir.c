#include "private-dir.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PRIVATE_DIR_MODE 0700

int private_dir_open_no_symlinks(const char *path, int *fd) {
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long opened = syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
  if (opened < 0) {
    return errno;
  }
  *fd = (int)opened;
  return 0;
}

static bool only_root_can_change(const struct stat *st) {
  return S_ISDIR(st->st_mode) && st->st_uid == 0 && (st->st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

int private_dir_open(const char *path, const char *key, bool create, int *dir, struct failure *f) {
  char parent_path[4096];
  snprintf(parent_path, sizeof parent_path, "%s", path);
  char *parent_name = dirname(parent_path);
  int parent = -1;
  struct stat st;
  int error = private_dir_open_no_symlinks(parent_name, &parent);
  if (error != 0 || fstat(parent, &st) != 0 || !only_root_can_change(&st)) {
    if (parent >= 0) {
      close(parent);
    }
    return fail_with(f, EXIT_CONFIG_INVALID,
                     "%s %.128s: its parent must be a root-owned directory not writable by group "
                     "or others",
                     key, path);
  }
  const char *name = path + strlen(parent_name) + (strcmp(parent_name, "/") == 0 ? 0 : 1);
  if (create && mkdirat(parent, name, PRIVATE_DIR_MODE) != 0 && errno != EEXIST) {
    error = errno;
    close(parent);
    return fail_with(f, EXIT_CONFIG_INVALID, "%s %.128s: mkdir: %s", key, path, strerror(error));
  }
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  error = errno;
  close(parent);
  if (fd < 0 && error == ENOENT && !create) {
    *dir = -1;
    return 0;
  }
  if (fd < 0 || fstat(fd, &st) != 0 || !only_root_can_change(&st) || (st.st_mode & 0077) != 0) {
    if (fd >= 0) {
      close(fd);
    }
    return fail_with(f, EXIT_CONFIG_INVALID,
                     "%s %.128s must be a directory of root's with mode 0700%s%s", key, path,
                     fd < 0 ? ": " : "", fd < 0 ? strerror(error) : "");
  }
  *dir = fd;
  return 0;
}
