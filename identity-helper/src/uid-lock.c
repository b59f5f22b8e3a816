#include "uid-lock.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "policy.h"
#include "procs.h"

#define LOCK_DIR_MODE 0700

/* Opens a directory path with no symlink in any component. */
static int open_directory(const char *path, int *fd) {
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

/* The lock directory, made (0700, root) when missing inside a parent only root can change. */
static int open_lock_dir(const char *path, int *dir, struct failure *f) {
  char parent_path[4096];
  snprintf(parent_path, sizeof parent_path, "%s", path);
  char *parent_name = dirname(parent_path);
  int parent = -1;
  struct stat st;
  int error = open_directory(parent_name, &parent);
  if (error != 0 || fstat(parent, &st) != 0 || !only_root_can_change(&st)) {
    if (parent >= 0) {
      close(parent);
    }
    return fail_with(f, EXIT_CONFIG_INVALID,
                     "uid_lock_dir %.128s: its parent must be a root-owned directory not "
                     "writable by group or others",
                     path);
  }
  const char *name = path + strlen(parent_name) + (strcmp(parent_name, "/") == 0 ? 0 : 1);
  if (mkdirat(parent, name, LOCK_DIR_MODE) != 0 && errno != EEXIST) {
    error = errno;
    close(parent);
    return fail_with(f, EXIT_CONFIG_INVALID, "uid_lock_dir %.128s: mkdir: %s", path,
                     strerror(error));
  }
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  error = errno;
  close(parent);
  if (fd < 0 || fstat(fd, &st) != 0 || !only_root_can_change(&st) || (st.st_mode & 0077) != 0) {
    if (fd >= 0) {
      close(fd);
    }
    return fail_with(f, EXIT_CONFIG_INVALID,
                     "uid_lock_dir %.128s must be a directory of root's with mode 0700%s%s", path,
                     fd < 0 ? ": " : "", fd < 0 ? strerror(error) : "");
  }
  *dir = fd;
  return 0;
}

/* 0 with the lock taken; EWOULDBLOCK when another worker holds it or a live process has the
 * uid; another errno on an error. */
static int try_uid(int dir, uint32_t uid, int *lock_fd) {
  char name[16];
  snprintf(name, sizeof name, "%u", uid);
  int fd = openat(dir, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return errno;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != 0) {
    close(fd);
    return EPERM;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int error = errno;
    close(fd);
    return error == EWOULDBLOCK ? EWOULDBLOCK : error;
  }
  /* Held by nobody now, but a worker whose monitor died may still run: never hand its uid on. */
  if (procs_uid_has_live_process(uid)) {
    close(fd);
    return EWOULDBLOCK;
  }
  *lock_fd = fd;
  return 0;
}

int uid_lock_take(const struct helper_config *c, uint32_t wanted, bool search, uint32_t *uid,
                  int *lock_fd, struct failure *f) {
  if (!policy_uid_in_range(c, wanted)) {
    return fail_with(f, EXIT_UID_OUT_OF_RANGE, "uid %u is outside the worker range %u+%u", wanted,
                     c->uid_first, c->uid_count);
  }
  int dir = -1;
  int code = open_lock_dir(c->uid_lock_dir, &dir, f);
  if (code != 0) {
    return code;
  }
  uint32_t tries = search ? c->uid_count : 1;
  uint32_t offset = wanted - c->uid_first;
  for (uint32_t i = 0; i < tries; i++) {
    uint32_t candidate = c->uid_first + (uint32_t)((offset + i) % c->uid_count);
    int error = try_uid(dir, candidate, lock_fd);
    if (error == 0) {
      close(dir);
      *uid = candidate;
      return 0;
    }
    if (error != EWOULDBLOCK) {
      close(dir);
      return fail_with(f, EXIT_INTERNAL, "uid lock %u: %s", candidate, strerror(error));
    }
  }
  close(dir);
  if (!search) {
    return fail_with(f, EXIT_UID_IN_USE, "uid %u is leased to another worker or has live processes",
                     wanted);
  }
  return fail_with(f, EXIT_UID_IN_USE,
                   "every uid of the range %u+%u is leased to another worker or has live processes",
                   c->uid_first, c->uid_count);
}
