#include "mounts.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define RESOLVE_STRICT (RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)

/* What an errno means when the mount API (fsopen, fsmount, open_tree, move_mount,
 * mount_setattr) or a mountpoint walk returns it; NULL where strerror already says it. */
static const char *mount_errno_meaning(int error) {
  switch (error) {
    case ENOSPC:
      return "a mount limit (fs.mount-max, or the view's own table), not a full disk";
    case EPERM:
      return "not permitted to mount here (a user namespace's locked mount or flag)";
    case EINVAL:
      return "not a mount this namespace may change";
    case EBUSY:
      return "the target is busy";
    case EROFS:
      return "read-only: no mountpoint can be made there";
    case ENOENT:
      return "a path on the way does not exist";
    case ENODEV:
      return "no such filesystem type in this kernel";
    case EMFILE:
    case ENFILE:
      return "too many open files";
    default:
      return NULL;
  }
}

int mounts_failed(struct failure *f, int error, const char *step_format, ...) {
  char step[176];
  va_list args;
  va_start(args, step_format);
  vsnprintf(step, sizeof step, step_format, args);
  va_end(args);
  const char *name = strerrorname_np(error);
  const char *meaning = mount_errno_meaning(error);
  char unnamed[24];
  if (name == NULL) {
    snprintf(unnamed, sizeof unnamed, "errno %d", error);
    name = unnamed;
  }
  return fail_with(f, EXIT_NAMESPACE_FAILED, "view: %s: %s (%s)", step, name,
                   meaning != NULL ? meaning : strerror(error));
}

int mounts_open_nofollow(int dirfd, const char *path, int *fd) {
  struct open_how how;
  memset(&how, 0, sizeof how);
  /* No O_NOFOLLOW: with it, openat2 would hand back an fd of a trailing symlink itself (and a
   * mount could then land on the link); without it every symlink answers ELOOP. */
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_STRICT | (path[0] == '/' ? 0 : RESOLVE_BENEATH);
  long opened = syscall(SYS_openat2, path[0] == '/' ? AT_FDCWD : dirfd, path, &how, sizeof how);
  if (opened < 0) {
    return errno;
  }
  *fd = (int)opened;
  return 0;
}

int mounts_clone(int source, bool recursive, uint64_t set, uint64_t clear, int *tree) {
  unsigned flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH;
  int fd = open_tree(source, "", flags | (recursive ? AT_RECURSIVE : 0));
  if (fd < 0) {
    return errno;
  }
  struct mount_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.attr_set = set;
  attr.attr_clr = clear;
  if (mount_setattr(fd, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &attr, sizeof attr) !=
      0) {
    int saved = errno;
    close(fd);
    return saved;
  }
  *tree = fd;
  return 0;
}

int mounts_new_filesystem(const char *type, const char *const *options, uint64_t attributes,
                          int *mount_fd) {
  int context = fsopen(type, FSOPEN_CLOEXEC);
  if (context < 0) {
    return errno;
  }
  int result = 0;
  for (size_t i = 0; options[i] != NULL && result == 0; i += 2) {
    if (fsconfig(context, FSCONFIG_SET_STRING, options[i], options[i + 1], 0) != 0) {
      result = errno;
    }
  }
  if (result == 0 && fsconfig(context, FSCONFIG_CMD_CREATE, NULL, NULL, 0) != 0) {
    result = errno;
  }
  int fd = result == 0 ? fsmount(context, FSMOUNT_CLOEXEC, (unsigned)attributes) : -1;
  if (result == 0 && fd < 0) {
    result = errno;
  }
  close(context);
  if (result == 0) {
    *mount_fd = fd;
  }
  return result;
}

int mounts_attach(int tree, int target) {
  unsigned flags = MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH;
  return move_mount(tree, "", target, "", flags) == 0 ? 0 : errno;
}

int mounts_set_attributes(int fd, bool recursive, uint64_t set) {
  struct mount_attr attr;
  memset(&attr, 0, sizeof attr);
  attr.attr_set = set;
  unsigned flags = AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0);
  return mount_setattr(fd, "", flags, &attr, sizeof attr) == 0 ? 0 : errno;
}

int mounts_own(struct owned_filesystems *owned, int fd) {
  struct stat st;
  if (owned->count >= MOUNTS_MAX_OWNED) {
    return ENOSPC;
  }
  if (fstat(fd, &st) != 0) {
    return errno;
  }
  owned->devices[owned->count++] = st.st_dev;
  return 0;
}

static bool is_owned(const struct owned_filesystems *owned, int dirfd) {
  struct stat st;
  if (fstat(dirfd, &st) != 0) {
    return false;
  }
  for (size_t i = 0; i < owned->count; i++) {
    if (owned->devices[i] == st.st_dev) {
      return true;
    }
  }
  return false;
}

/* Creates `name` in `parent` (an owned filesystem only) as a directory or an empty file. */
static int create_component(int parent, const char *name, bool as_file,
                            const struct owned_filesystems *owned) {
  if (!is_owned(owned, parent)) {
    return ENOENT; /* never create anything on the host's filesystems */
  }
  if (!as_file) {
    return mkdirat(parent, name, 0755) == 0 ? 0 : errno;
  }
  /* mknodat makes the empty mountpoint file without opening it. */
  return mknodat(parent, name, S_IFREG | 0444, 0) == 0 ? 0 : errno;
}

static int open_component(int parent, const char *name, bool last, enum mountpoint_kind kind,
                          const struct owned_filesystems *owned, int *next) {
  int result = mounts_open_nofollow(parent, name, next);
  if (result == ENOENT) {
    result = create_component(parent, name, last && kind == MOUNTPOINT_FILE, owned);
    if (result == 0) {
      result = mounts_open_nofollow(parent, name, next);
    }
  }
  return result;
}

static int check_kind(int fd, bool last, enum mountpoint_kind kind) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return errno;
  }
  bool want_directory = !last || kind == MOUNTPOINT_DIRECTORY;
  if (want_directory && !S_ISDIR(st.st_mode)) {
    return ENOTDIR;
  }
  if (!want_directory && S_ISDIR(st.st_mode)) {
    return EISDIR;
  }
  return 0;
}

int mounts_mountpoint(int root, const char *path, enum mountpoint_kind kind,
                      const struct owned_filesystems *owned, int *fd) {
  char component[NAME_MAX + 1];
  int current = fcntl(root, F_DUPFD_CLOEXEC, 0);
  if (current < 0) {
    return errno;
  }
  const char *cursor = path[0] == '/' ? path + 1 : path;
  int result = 0;
  while (*cursor != '\0' && result == 0) {
    const char *slash = strchr(cursor, '/');
    size_t len = slash == NULL ? strlen(cursor) : (size_t)(slash - cursor);
    if (len == 0 || len > NAME_MAX) {
      result = ENAMETOOLONG;
      break;
    }
    memcpy(component, cursor, len);
    component[len] = '\0';
    cursor += len + (slash == NULL ? 0 : 1);
    bool last = *cursor == '\0';
    int next = -1;
    result = open_component(current, component, last, kind, owned, &next);
    if (result == 0) {
      result = check_kind(next, last, kind);
      close(current);
      current = next;
    }
  }
  if (result != 0) {
    close(current);
    return result;
  }
  *fd = current;
  return 0;
}

int mounts_symlink(int parent, const char *name, const char *target) {
  return symlinkat(target, parent, name) == 0 ? 0 : errno;
}
