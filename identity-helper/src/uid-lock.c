#include "uid-lock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy.h"
#include "private-dir.h"
#include "procs.h"

#define GUARD_NAME "leases"

int uid_lock_dir_open(const struct helper_config *c, int *dir, struct failure *f) {
  return private_dir_open(c->uid_lock_dir, "uid_lock_dir", true, dir, f);
}

/* A root-owned regular file of the lock directory, made 0600 when missing. */
static int open_lock_file(int dir, const char *name) {
  int fd = openat(dir, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    return -errno;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != 0) {
    close(fd);
    return -EPERM;
  }
  return fd;
}

int uid_lock_guard(int dir, int operation, int *guard_fd, struct failure *f) {
  int fd = open_lock_file(dir, GUARD_NAME);
  if (fd < 0) {
    return fail_with(f, EXIT_INTERNAL, "uid lock guard: %s", strerror(-fd));
  }
  while (flock(fd, operation) != 0) {
    if (errno != EINTR) {
      int error = errno;
      close(fd);
      return fail_with(f, EXIT_INTERNAL, "uid lock guard: flock: %s", strerror(error));
    }
  }
  *guard_fd = fd;
  return 0;
}

int uid_lock_try(int dir, uint32_t uid, int operation, bool check_procs, int *lock_fd) {
  char name[16];
  snprintf(name, sizeof name, "%u", uid);
  int fd = open_lock_file(dir, name);
  if (fd < 0) {
    return -fd;
  }
  if (flock(fd, operation | LOCK_NB) != 0) {
    int error = errno;
    close(fd);
    return error == EWOULDBLOCK ? EWOULDBLOCK : error;
  }
  /* Held by nobody now, but a worker whose monitor died may still run: never hand its uid on. */
  if (check_procs && operation == LOCK_EX && procs_uid_has_live_process(uid)) {
    close(fd);
    return EWOULDBLOCK;
  }
  *lock_fd = fd;
  return 0;
}

int uid_lock_take(const struct helper_config *c, int dir, uint32_t wanted, bool search,
                  uid_lock_skip skip, const void *skip_context, uint32_t *uid, int *lock_fd,
                  struct failure *f) {
  if (!policy_uid_in_range(c, wanted)) {
    return fail_with(f, EXIT_UID_OUT_OF_RANGE, "uid %u is outside the worker range %u+%u", wanted,
                     c->uid_first, c->uid_count);
  }
  uint32_t tries = search ? c->uid_count : 1;
  uint32_t offset = wanted - c->uid_first;
  for (uint32_t i = 0; i < tries; i++) {
    uint32_t candidate = c->uid_first + (uint32_t)((offset + i) % c->uid_count);
    if (skip != NULL && skip(skip_context, candidate)) {
      continue;
    }
    int error = uid_lock_try(dir, candidate, LOCK_EX, true, lock_fd);
    if (error == 0) {
      *uid = candidate;
      return 0;
    }
    if (error != EWOULDBLOCK) {
      return fail_with(f, EXIT_INTERNAL, "uid lock %u: %s", candidate, strerror(error));
    }
  }
  if (!search) {
    return fail_with(f, EXIT_UID_IN_USE,
                     "uid %u is leased to another worker or workspace, or has live processes",
                     wanted);
  }
  return fail_with(f, EXIT_UID_IN_USE,
                   "every uid of the range %u+%u is leased to another worker or workspace, or "
                   "has live processes",
                   c->uid_first, c->uid_count);
}
