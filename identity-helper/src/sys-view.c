#include "sys-view.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "mounts.h"

#define ATTR_SEALED (MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC)

static const char *const no_options[] = {NULL};
static const char *const hierarchies_options[] = {"size", "4k",   "nr_inodes", "16",
                                                  "mode", "0755", NULL};

static int refuse_leaf(struct failure *f, const char *path, const char *why) {
  return fail_with(f, EXIT_VIEW_REFUSED, "view: cgroup %.128s: %s", path, why);
}

/* A hierarchy name as the view shows it: one plain path component the host used for the mount
 * (memory, pids, cpu,cpuacct, unified...), nothing that needs escaping. */
static bool is_plain_name(const char *name, size_t len) {
  if (len == 0 || len > SYS_VIEW_MAX_NAME || (name[0] == '.')) {
    return false;
  }
  for (size_t i = 0; i < len; i++) {
    char ch = name[i];
    bool plain = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
                 ch == '_' || ch == '-' || ch == ',' || ch == '=' || ch == '.';
    if (!plain) {
      return false;
    }
  }
  return true;
}

/* The basename of the mountpoint field (the fifth) of a mountinfo line, when the line's first
 * field is `mount_id`. */
static bool name_from_line(const char *line, unsigned long long mount_id, char *name) {
  char *end = NULL;
  unsigned long long id = strtoull(line, &end, 10);
  if (end == line || *end != ' ' || id != mount_id) {
    return false;
  }
  const char *field = end;
  for (int skipped = 1; skipped < 4 && field != NULL; skipped++) {
    field = strchr(field + 1, ' ');
  }
  if (field == NULL) {
    return false;
  }
  field++;
  const char *field_end = strchr(field, ' ');
  size_t field_len = field_end == NULL ? strlen(field) : (size_t)(field_end - field);
  const char *base = field;
  for (size_t i = 0; i < field_len; i++) {
    if (field[i] == '/') base = field + i + 1;
  }
  size_t len = field_len - (size_t)(base - field);
  if (!is_plain_name(base, len)) {
    return false;
  }
  memcpy(name, base, len);
  name[len] = '\0';
  return true;
}

/* The name of the host directory the leaf's hierarchy is mounted on, from the mount id. */
static int hierarchy_name(int leaf, const char *path, char *name, struct failure *f) {
  struct statx stx;
  if (statx(leaf, "", AT_EMPTY_PATH, STATX_MNT_ID, &stx) != 0 ||
      (stx.stx_mask & STATX_MNT_ID) == 0) {
    return refuse_leaf(f, path, "its mount id cannot be read");
  }
  FILE *mountinfo = fopen("/proc/self/mountinfo", "re");
  if (mountinfo == NULL) {
    return refuse_leaf(f, path, "/proc/self/mountinfo cannot be read");
  }
  static char line[4096];
  bool found = false;
  while (!found && fgets(line, sizeof line, mountinfo) != NULL) {
    found = name_from_line(line, stx.stx_mnt_id, name);
  }
  fclose(mountinfo);
  return found ? 0 : refuse_leaf(f, path, "its hierarchy's mountpoint has no plain name");
}

static int plan_leaf(const char *path, struct cgroup_leaf *leaf, struct failure *f) {
  int fd = -1;
  int error = mounts_open_nofollow(AT_FDCWD, path, &fd);
  if (error != 0) {
    return fail_with(f, EXIT_VIEW_REFUSED, "view: cgroup %.128s: %s", path,
                     error == ELOOP ? "is or passes through a symbolic link" : strerror(error));
  }
  struct statfs fs;
  struct stat st;
  int code = 0;
  if (fstatfs(fd, &fs) != 0 || fstat(fd, &st) != 0 || !S_ISDIR(st.st_mode)) {
    code = refuse_leaf(f, path, "not a directory");
  } else if (fs.f_type != CGROUP_SUPER_MAGIC && fs.f_type != CGROUP2_SUPER_MAGIC) {
    code = refuse_leaf(f, path, "not on a cgroup filesystem");
  }
  leaf->unified = fs.f_type == CGROUP2_SUPER_MAGIC;
  if (code == 0) code = hierarchy_name(fd, path, leaf->name, f);
  if (code == 0) {
    error = mounts_clone(fd, false, ATTR_SEALED, 0, &leaf->tree);
    code = error == 0 ? 0 : mounts_failed(f, error, "cloning %.128s", path);
  }
  close(fd);
  return code;
}

int sys_view_plan(const struct descriptor *d, struct sys_view *v, struct failure *f) {
  memset(v, 0, sizeof *v);
  for (size_t i = 0; i < d->cgroup_count; i++) {
    struct cgroup_leaf *leaf = &v->leaves[i];
    leaf->tree = -1;
    int code = plan_leaf(d->cgroups[i], leaf, f);
    if (code != 0) {
      return code;
    }
    for (size_t j = 0; j < i; j++) {
      if (strcmp(v->leaves[j].name, leaf->name) == 0) {
        return refuse_leaf(f, d->cgroups[i], "a second leaf in the same hierarchy");
      }
    }
    v->leaf_count = i + 1;
  }
  return 0;
}

/* Attaches `tree` on `path` beneath `dirfd` (an existing directory: sysfs and this view's own
 * tmpfs have every mountpoint already), then closes the tree. */
static int attach_at(int dirfd, const char *path, const char *shown, int tree, struct failure *f) {
  int target = -1;
  int error = mounts_open_nofollow(dirfd, path, &target);
  if (error != 0) {
    close(tree);
    return fail_with(f, EXIT_VIEW_REFUSED, "view: mountpoint %.128s: %s", shown, strerror(error));
  }
  error = mounts_attach(tree, target);
  close(target);
  close(tree);
  return error == 0 ? 0 : mounts_failed(f, error, "attaching %.128s", shown);
}

/* A read-only tmpfs holding one empty directory per leaf's hierarchy, each leaf bound on its
 * own. The directories are made while the tmpfs is detached and nothing else can reach it. */
static int attach_hierarchies(int sys, struct sys_view *v, struct failure *f) {
  int fs = -1;
  int error =
      mounts_new_filesystem("tmpfs", hierarchies_options, ATTR_SEALED & ~MOUNT_ATTR_RDONLY, &fs);
  for (size_t i = 0; i < v->leaf_count && error == 0; i++) {
    if (mkdirat(fs, v->leaves[i].name, 0555) != 0) error = errno;
  }
  if (error == 0) error = mounts_set_attributes(fs, false, MOUNT_ATTR_RDONLY);
  if (error != 0) {
    if (fs >= 0) close(fs);
    return mounts_failed(f, error, "creating /sys/fs/cgroup");
  }
  int cgroup = fcntl(fs, F_DUPFD_CLOEXEC, 0);
  if (cgroup < 0) {
    error = errno;
    close(fs);
    return mounts_failed(f, error, "holding /sys/fs/cgroup");
  }
  int code = attach_at(sys, "fs/cgroup", "/sys/fs/cgroup", fs, f);
  for (size_t i = 0; i < v->leaf_count && code == 0; i++) {
    code = attach_at(cgroup, v->leaves[i].name, v->leaves[i].name, v->leaves[i].tree, f);
    v->leaves[i].tree = -1;
  }
  close(cgroup);
  return code;
}

int sys_view_build(int root, struct sys_view *v, struct failure *f) {
  int fs = -1;
  int error = mounts_new_filesystem("sysfs", no_options, ATTR_SEALED, &fs);
  if (error != 0) {
    return mounts_failed(f, error, "creating /sys");
  }
  int sys = fcntl(fs, F_DUPFD_CLOEXEC, 0);
  if (sys < 0) {
    error = errno;
    close(fs);
    return mounts_failed(f, error, "holding /sys");
  }
  int code = attach_at(root, "sys", "/sys", fs, f);
  if (code == 0 && v->leaf_count == 1 && v->leaves[0].unified) {
    code = attach_at(sys, "fs/cgroup", "/sys/fs/cgroup", v->leaves[0].tree, f);
    v->leaves[0].tree = -1;
  } else if (code == 0 && v->leaf_count > 0) {
    code = attach_hierarchies(sys, v, f);
  }
  close(sys);
  return code;
}
