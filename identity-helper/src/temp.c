#include "temp.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "policy.h"

#define TEMP_MODE 0700

/* Opens `path` (absolute) as a readable directory with no symlink in any component. */
static int open_temp_directory(const char *path, int *fd, struct stat *st, struct failure *f) {
  struct open_how how;
  memset(&how, 0, sizeof how);
  how.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  long opened = syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
  if (opened < 0) {
    return fail_with(f, EXIT_TEMP_REFUSED,
                     "temp %.128s: not a directory reachable without symlinks: %s", path,
                     strerror(errno));
  }
  *fd = (int)opened;
  if (fstat(*fd, st) != 0) {
    int saved = errno;
    close(*fd);
    return fail_with(f, EXIT_TEMP_REFUSED, "temp %.128s: %s", path, strerror(saved));
  }
  return 0;
}

static int refuse_outside_roots(const struct helper_config *c, const char *temp,
                                struct failure *f) {
  if (policy_temp_root_for(c, temp) == NULL) {
    return fail_with(f, EXIT_TEMP_REFUSED, "temp %.128s is not beneath a temp_root", temp);
  }
  return 0;
}

int temp_claim(const struct helper_config *c, const char *temp, uint32_t uid, struct failure *f) {
  int fd = -1;
  struct stat st;
  int code = open_temp_directory(temp, &fd, &st, f);
  if (code != 0) {
    return code;
  }
  if (st.st_uid == uid) {
    close(fd); /* already the worker's (a root supervisor chowned it): nothing to change */
    return 0;
  }
  code = refuse_outside_roots(c, temp, f);
  if (code == 0 && st.st_uid != getuid()) {
    code = fail_with(f, EXIT_TEMP_REFUSED, "temp %.128s must be owned by the caller (uid %u)", temp,
                     (unsigned)getuid());
  }
  if (code == 0 && (fchown(fd, uid, uid) != 0 || fchmod(fd, TEMP_MODE) != 0)) {
    code =
        fail_with(f, EXIT_TEMP_REFUSED, "temp %.128s: chown to %u: %s", temp, uid, strerror(errno));
  }
  close(fd);
  return code;
}

struct reclaim_walk {
  uint32_t worker_uid;
  uid_t owner_uid;
  gid_t owner_gid;
  unsigned long entries;
  unsigned long reclaimed;
  unsigned long skipped;
};

static int reclaim_directory(struct reclaim_walk *w, int dirfd, unsigned depth, struct failure *f);

/* The directory itself is given back after its contents, and made traversable for its new
 * owner (the worker could have left it 0000). */
static int reclaim_held_directory(struct reclaim_walk *w, int fd, const struct stat *st,
                                  unsigned depth, struct failure *f) {
  int code = reclaim_directory(w, fd, depth, f);
  if (code != 0 || st->st_uid != w->worker_uid) {
    return code;
  }
  if (fchown(fd, w->owner_uid, w->owner_gid) != 0 ||
      fchmod(fd, (st->st_mode & 07777) | S_IRWXU) != 0) {
    return fail_with(f, EXIT_INTERNAL, "reclaim: chown of a directory: %s", strerror(errno));
  }
  w->reclaimed++;
  return 0;
}

static int reclaim_subdirectory(struct reclaim_walk *w, int parent, const char *name,
                                const struct stat *seen, unsigned depth, struct failure *f) {
  if (depth >= TEMP_MAX_DEPTH) {
    w->skipped++;
    return 0;
  }
  int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0 || st.st_dev != seen->st_dev || st.st_ino != seen->st_ino) {
    if (fd >= 0) close(fd);
    w->skipped++; /* replaced since it was listed: left alone */
    return 0;
  }
  int code = reclaim_held_directory(w, fd, &st, depth + 1, f);
  close(fd);
  return code;
}

static int reclaim_entry(struct reclaim_walk *w, int dirfd, const char *name, unsigned depth,
                         struct failure *f) {
  struct stat st;
  if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return fail_with(f, EXIT_INTERNAL, "reclaim: stat: %s", strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) {
    return reclaim_subdirectory(w, dirfd, name, &st, depth, f);
  }
  if (st.st_uid != w->worker_uid) {
    return 0;
  }
  if (!S_ISLNK(st.st_mode) && st.st_nlink > 1) {
    w->skipped++; /* the inode may also be named outside the temp: its owner never changes */
    return 0;
  }
  if (fchownat(dirfd, name, w->owner_uid, w->owner_gid, AT_SYMLINK_NOFOLLOW) != 0) {
    return fail_with(f, EXIT_INTERNAL, "reclaim: chown: %s", strerror(errno));
  }
  w->reclaimed++;
  return 0;
}

static bool is_dot_entry(const char *name) {
  return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

static int reclaim_directory(struct reclaim_walk *w, int dirfd, unsigned depth, struct failure *f) {
  int listing = fcntl(dirfd, F_DUPFD_CLOEXEC, 0);
  DIR *dir = listing < 0 ? NULL : fdopendir(listing);
  if (dir == NULL) {
    if (listing >= 0) close(listing);
    return fail_with(f, EXIT_INTERNAL, "reclaim: listing a directory: %s", strerror(errno));
  }
  int code = 0;
  struct dirent *entry;
  while (code == 0 && (entry = readdir(dir)) != NULL) {
    if (is_dot_entry(entry->d_name)) {
      continue;
    }
    if (++w->entries > TEMP_MAX_ENTRIES) {
      code = fail_with(f, EXIT_TEMP_REFUSED, "reclaim: the temp holds more than %d entries",
                       TEMP_MAX_ENTRIES);
      break;
    }
    code = reclaim_entry(w, dirfd, entry->d_name, depth, f);
  }
  closedir(dir);
  return code;
}

int run_reclaim(const struct helper_config *c, const struct descriptor *d, struct failure *f) {
  uint32_t uid = 0;
  int code = policy_worker_uid(c, d, &uid, f);
  if (code == 0) code = refuse_outside_roots(c, d->temp, f);
  int fd = -1;
  struct stat st;
  if (code == 0) code = open_temp_directory(d->temp, &fd, &st, f);
  if (code != 0) {
    return code;
  }
  if (st.st_uid != uid && st.st_uid != getuid()) {
    close(fd);
    return fail_with(f, EXIT_TEMP_REFUSED,
                     "temp %.128s must be owned by the worker uid %u or the caller (uid %u)",
                     d->temp, uid, (unsigned)getuid());
  }
  struct reclaim_walk walk = {uid, getuid(), getgid(), 0, 0, 0};
  code = reclaim_held_directory(&walk, fd, &st, 0, f);
  close(fd);
  if (code != 0) {
    return code;
  }
  printf("worker_uid %u\nreclaimed %lu skipped %lu\n", uid, walk.reclaimed, walk.skipped);
  fflush(stdout);
  return 0;
}
