#include "view.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mounts.h"
#include "sys-view.h"

/* Bindings a view can hold: system entries, /etc files, /dev nodes, view paths and the
 * workspace. */
#define VIEW_MAX_BINDINGS 48
#define VIEW_MAX_SYMLINKS 24

#define ATTR_FIXED (MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
#define ATTR_READ_ONLY (MOUNT_ATTR_RDONLY | ATTR_FIXED)

static const char *const run_options[] = {"size", "1m", "nr_inodes", "4096", "mode", "0755", NULL};
static const char *const root_options[] = {"size", "1m", "nr_inodes", "4096", "mode", "0755", NULL};
static const char *const mask_options[] = {"size", "4k", "nr_inodes", "8", "mode", "0755", NULL};
static const char *const proc_options[] = {"hidepid", "invisible", NULL};
static const char *const devpts_options[] = {"ptmxmode", "0666", "mode", "0620", NULL};
static const char *const dev_options[] = {"size", "64k", "nr_inodes", "64", "mode", "0755", NULL};

/* The turn's /tmp and /dev/shm: `tmp_size` bytes each (the descriptor's), an inode per 16 KiB
 * of it within bounds; their pages are charged to the memory cgroup of the processes that
 * write them, the turn's. Filled in by view_enter. */
static char tmp_size_text[24];
static char tmp_inodes_text[24];
static const char *const tmp_options[] = {"size", tmp_size_text, "nr_inodes", tmp_inodes_text,
                                          "mode", "1777",        NULL};

/* The strict profile's host entries, kept when they exist: directories (with submounts),
 * files and character devices. A host symlink is recreated as the same symlink, so it
 * resolves inside the view and never reaches past it. */
struct system_entry {
  const char *path;
  mode_t type;
  uint64_t attributes;
};

static const struct system_entry strict_entries[] = {
    {"/usr", S_IFDIR, ATTR_READ_ONLY},
    {"/bin", S_IFDIR, ATTR_READ_ONLY},
    {"/sbin", S_IFDIR, ATTR_READ_ONLY},
    {"/lib", S_IFDIR, ATTR_READ_ONLY},
    {"/lib64", S_IFDIR, ATTR_READ_ONLY},
    {"/lib32", S_IFDIR, ATTR_READ_ONLY},
    {"/etc/passwd", S_IFREG, ATTR_READ_ONLY | MOUNT_ATTR_NOEXEC},
    {"/etc/group", S_IFREG, ATTR_READ_ONLY | MOUNT_ATTR_NOEXEC},
    {"/etc/hosts", S_IFREG, ATTR_READ_ONLY | MOUNT_ATTR_NOEXEC},
    {"/etc/resolv.conf", S_IFREG, ATTR_READ_ONLY | MOUNT_ATTR_NOEXEC},
    {"/etc/nsswitch.conf", S_IFREG, ATTR_READ_ONLY | MOUNT_ATTR_NOEXEC},
    {"/etc/ld.so.cache", S_IFREG, ATTR_READ_ONLY | MOUNT_ATTR_NOEXEC},
    {"/etc/localtime", S_IFREG, ATTR_READ_ONLY | MOUNT_ATTR_NOEXEC},
    /* Devices stay usable (no nodev); writes to a character device ignore the read-only flag. */
    {"/dev/null", S_IFCHR, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC},
    {"/dev/zero", S_IFCHR, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC},
    {"/dev/full", S_IFCHR, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC},
    {"/dev/random", S_IFCHR, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC},
    {"/dev/urandom", S_IFCHR, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC},
    {"/dev/tty", S_IFCHR, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC},
};
#define STRICT_ENTRY_COUNT (sizeof strict_entries / sizeof strict_entries[0])

static const char *const strict_links[][2] = {
    {"/dev/ptmx", "pts/ptmx"},          {"/dev/fd", "/proc/self/fd"},
    {"/dev/stdin", "/proc/self/fd/0"},  {"/dev/stdout", "/proc/self/fd/1"},
    {"/dev/stderr", "/proc/self/fd/2"},
};
#define STRICT_LINK_COUNT (sizeof strict_links / sizeof strict_links[0])

/* An empty mask (file and directory) per hidden host path, cloned before the first mount. */
struct hide_masks {
  int file;
  int dir;
};

struct binding {
  const char *path; /* where it appears in the view: its own host path */
  int tree;         /* detached mount, attached at `path` */
  enum mountpoint_kind kind;
};

struct symlink_entry {
  const char *path;
  char target[PATH_MAX];
};

/* Static: a view is built once per process, and the link targets are large. */
static struct view_plan {
  size_t binding_count;
  struct binding bindings[VIEW_MAX_BINDINGS];
  size_t symlink_count;
  struct symlink_entry symlinks[VIEW_MAX_SYMLINKS];
  int mask_trees[DESCRIPTOR_MAX_PROTECT]; /* -1 for read_only rules */
  struct hide_masks hide_trees[DESCRIPTOR_MAX_HIDE];
  size_t nested_mask_count;
  int nested_masks[DESCRIPTOR_MAX_HIDE]; /* tmpfs over hidden paths above a kept path */
  int workspace_tree;
  struct owned_filesystems owned;
  struct sys_view sys; /* governed only: the strict root has no /sys */
} plan;

static int refuse_path(struct failure *f, const char *what, const char *path, int error) {
  if (error == ELOOP) {
    return fail_with(f, EXIT_VIEW_REFUSED, "view: %s %.128s is or passes through a symbolic link",
                     what, path);
  }
  return fail_with(f, EXIT_VIEW_REFUSED, "view: %s %.128s: %s", what, path, strerror(error));
}

static const char *base_name(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash == NULL ? path : slash + 1;
}

/* Opens a host path without following symlinks and checks its type (0: any but a symlink). */
static int open_host(const char *what, const char *path, mode_t type, int *fd, struct stat *st,
                     struct failure *f) {
  int error = mounts_open_nofollow(AT_FDCWD, path, fd);
  if (error != 0) {
    return refuse_path(f, what, path, error);
  }
  if (fstat(*fd, st) != 0) {
    error = errno;
    close(*fd);
    return refuse_path(f, what, path, error);
  }
  if (type != 0 && (st->st_mode & S_IFMT) != type) {
    close(*fd);
    return fail_with(f, EXIT_VIEW_REFUSED, "view: %s %.128s is not a %s", what, path,
                     type == S_IFDIR    ? "directory"
                     : type == S_IFSOCK ? "socket"
                                        : "file");
  }
  return 0;
}

static int add_binding(const char *path, int source, bool recursive, uint64_t set, uint64_t clear,
                       enum mountpoint_kind kind, struct failure *f) {
  if (plan.binding_count >= VIEW_MAX_BINDINGS) {
    return fail_with(f, EXIT_VIEW_REFUSED, "view: more than %d bindings", VIEW_MAX_BINDINGS);
  }
  int tree = -1;
  int error = mounts_clone(source, recursive, set, clear, &tree);
  if (error != 0) {
    return mounts_failed(f, error, "cloning %.128s", path);
  }
  plan.bindings[plan.binding_count++] = (struct binding){path, tree, kind};
  return 0;
}

static int bind_host(const char *what, const char *path, mode_t type, bool recursive, uint64_t set,
                     uint64_t clear, struct failure *f) {
  int fd = -1;
  struct stat st;
  int code = open_host(what, path, type, &fd, &st, f);
  if (code != 0) {
    return code;
  }
  enum mountpoint_kind kind = S_ISDIR(st.st_mode) ? MOUNTPOINT_DIRECTORY : MOUNTPOINT_FILE;
  code = add_binding(path, fd, recursive, set, clear, kind, f);
  close(fd);
  return code;
}

static int bind_view_paths(const struct helper_config *c, struct failure *f) {
  for (size_t i = 0; i < c->view_path_count; i++) {
    int code = bind_host("view_path", c->view_paths[i], 0, true, ATTR_READ_ONLY, 0, f);
    if (code != 0) {
      return code;
    }
  }
  return 0;
}

/* view_path entries, then the workspace: a later binding may lie beneath an earlier one.
 * Cloned before the host root turns read-only, so a writable binding keeps the host mount's
 * own flags (a read-only host mount stays read-only). The workspace is writable only in the
 * governed profile. */
static int plan_turn_bindings(const struct helper_config *c, const struct descriptor *d,
                              struct failure *f) {
  int code = bind_view_paths(c, f);
  bool writable = d->view_profile == PROFILE_GOVERNED;
  if (code == 0) {
    code = bind_host("workspace", d->workspace, S_IFDIR, false,
                     writable ? ATTR_FIXED : ATTR_READ_ONLY, 0, f);
  }
  if (code == 0) {
    plan.workspace_tree = plan.bindings[plan.binding_count - 1].tree;
  }
  return code;
}

static int add_symlink(const char *path, const char *target, size_t len, struct failure *f) {
  if (plan.symlink_count >= VIEW_MAX_SYMLINKS || len >= PATH_MAX) {
    return fail_with(f, EXIT_VIEW_REFUSED, "view: symlink %.128s: too many or too long", path);
  }
  struct symlink_entry *entry = &plan.symlinks[plan.symlink_count++];
  entry->path = path;
  memcpy(entry->target, target, len);
  entry->target[len] = '\0';
  return 0;
}

/* One strict entry: absent → skipped; a symlink → recreated; otherwise bound read-only. */
static int plan_strict_entry(const struct system_entry *entry, struct failure *f) {
  struct stat st;
  if (fstatat(AT_FDCWD, entry->path, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? 0 : refuse_path(f, "system entry", entry->path, errno);
  }
  if (S_ISLNK(st.st_mode)) {
    char target[PATH_MAX];
    ssize_t len = readlinkat(AT_FDCWD, entry->path, target, sizeof target);
    if (len < 0 || (size_t)len >= sizeof target) {
      return refuse_path(f, "system entry", entry->path, len < 0 ? errno : ENAMETOOLONG);
    }
    return add_symlink(entry->path, target, (size_t)len, f);
  }
  if ((st.st_mode & S_IFMT) != entry->type) {
    return 0; /* not what the view expects there (e.g. a device that is a file): left out */
  }
  return bind_host("system entry", entry->path, entry->type, entry->type == S_IFDIR,
                   entry->attributes, 0, f);
}

/* The strict profile's system entries; with `devices_only`, just its /dev nodes and links: the
 * governed profile gets the same /dev instead of the host's (where sockets such as /dev/log
 * and every other device node would be reachable). */
static int plan_system(bool devices_only, struct failure *f) {
  for (size_t i = 0; i < STRICT_ENTRY_COUNT; i++) {
    if (devices_only && strict_entries[i].type != S_IFCHR) {
      continue;
    }
    int code = plan_strict_entry(&strict_entries[i], f);
    if (code != 0) {
      return code;
    }
  }
  for (size_t i = 0; i < STRICT_LINK_COUNT; i++) {
    int code = add_symlink(strict_links[i][0], strict_links[i][1], strlen(strict_links[i][1]), f);
    if (code != 0) {
      return code;
    }
  }
  return 0;
}

static bool has_masks(const struct descriptor *d) {
  if (d->hide_count > 0) {
    return true;
  }
  for (size_t i = 0; i < d->protect_count; i++) {
    if (d->protects[i].mode != PROTECT_READ_ONLY) {
      return true;
    }
  }
  return false;
}

static int clone_mask(int mask_fs, const char *name, const char *what, int *tree,
                      struct failure *f) {
  int item = -1;
  int error = mounts_open_nofollow(mask_fs, name, &item);
  if (error == 0) {
    error = mounts_clone(item, false, ATTR_READ_ONLY | MOUNT_ATTR_NOEXEC, 0, tree);
    close(item);
  }
  return error == 0 ? 0 : mounts_failed(f, error, "cloning the mask for %.128s", what);
}

static int clone_masks(const struct descriptor *d, int mask_fs, struct failure *f) {
  for (size_t i = 0; i < d->hide_count; i++) {
    int code = clone_mask(mask_fs, "file", d->hides[i], &plan.hide_trees[i].file, f);
    if (code == 0) code = clone_mask(mask_fs, "dir", d->hides[i], &plan.hide_trees[i].dir, f);
    if (code != 0) {
      return code;
    }
  }
  for (size_t i = 0; i < d->protect_count; i++) {
    if (d->protects[i].mode == PROTECT_READ_ONLY) {
      continue;
    }
    const char *name = d->protects[i].mode == PROTECT_MASK_FILE ? "file" : "dir";
    int item = -1;
    int error = mounts_open_nofollow(mask_fs, name, &item);
    if (error == 0) {
      error = mounts_clone(item, false, ATTR_READ_ONLY | MOUNT_ATTR_NOEXEC, 0, &plan.mask_trees[i]);
      close(item);
    }
    if (error != 0) {
      return mounts_failed(f, error, "cloning the mask for %.128s", d->protects[i].path);
    }
  }
  return 0;
}

/* umount2 takes only a path: the magic link of our own fd names exactly that mount. */
static int detach_mount(int fd, struct failure *f) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  if (umount2(path, MNT_DETACH) != 0) {
    return mounts_failed(f, errno, "detaching the mask filesystem");
  }
  return 0;
}

/* An empty read-only file and directory on a private tmpfs, cloned once per mask rule. The
 * kernel clones only attached mounts, so the tmpfs is attached at `staging` (the host /tmp
 * directory, in this private namespace) for the cloning and detached right after. */
static int prepare_masks(const struct descriptor *d, int staging, struct failure *f) {
  for (size_t i = 0; i < DESCRIPTOR_MAX_PROTECT; i++) {
    plan.mask_trees[i] = -1;
  }
  for (size_t i = 0; i < DESCRIPTOR_MAX_HIDE; i++) {
    plan.hide_trees[i] = (struct hide_masks){-1, -1};
  }
  if (!has_masks(d)) {
    return 0;
  }
  int mask_fs = -1;
  uint64_t attributes = ATTR_FIXED | MOUNT_ATTR_NOEXEC;
  int error = mounts_new_filesystem("tmpfs", mask_options, attributes, &mask_fs);
  if (error == 0 && mknodat(mask_fs, "file", S_IFREG | 0444, 0) != 0) error = errno;
  if (error == 0 && mkdirat(mask_fs, "dir", 0555) != 0) error = errno;
  if (error == 0) error = mounts_set_attributes(mask_fs, false, MOUNT_ATTR_RDONLY);
  if (error == 0) error = mounts_attach(mask_fs, staging);
  if (error != 0) {
    if (mask_fs >= 0) {
      close(mask_fs);
    }
    return mounts_failed(f, error, "preparing the mask filesystem");
  }
  int code = clone_masks(d, mask_fs, f);
  if (code == 0) {
    code = detach_mount(mask_fs, f);
  }
  close(mask_fs);
  return code;
}

/* A new filesystem attached at `path` beneath `root`; owned ones may receive mountpoints. */
static int attach_new_filesystem(int root, const char *path, const char *type,
                                 const char *const *options, uint64_t attributes, bool own,
                                 struct failure *f) {
  int fs = -1;
  int error = mounts_new_filesystem(type, options, attributes, &fs);
  if (error != 0) {
    return mounts_failed(f, error, "creating %.128s", path);
  }
  int target = -1;
  error = mounts_mountpoint(root, path, MOUNTPOINT_DIRECTORY, &plan.owned, &target);
  if (error != 0) {
    close(fs);
    return refuse_path(f, "mountpoint", path, error);
  }
  error = mounts_attach(fs, target);
  close(target);
  if (error == 0 && own) {
    error = mounts_own(&plan.owned, fs);
  }
  close(fs);
  return error == 0 ? 0 : mounts_failed(f, error, "attaching %.128s", path);
}

static int attach_bindings(int root, struct failure *f) {
  for (size_t i = 0; i < plan.binding_count; i++) {
    const struct binding *b = &plan.bindings[i];
    int target = -1;
    int error = mounts_mountpoint(root, b->path, b->kind, &plan.owned, &target);
    if (error != 0) {
      return refuse_path(f, "mountpoint", b->path, error);
    }
    error = mounts_attach(b->tree, target);
    close(target);
    if (b->tree != plan.workspace_tree) {
      close(b->tree); /* the workspace mount stays open: protected paths resolve beneath it */
    }
    if (error != 0) {
      return mounts_failed(f, error, "attaching %.128s", b->path);
    }
  }
  return 0;
}

static int create_symlinks(int root, struct failure *f) {
  for (size_t i = 0; i < plan.symlink_count; i++) {
    const struct symlink_entry *link = &plan.symlinks[i];
    char parent_path[PATH_MAX];
    size_t parent_len = (size_t)(base_name(link->path) - link->path);
    memcpy(parent_path, link->path, parent_len);
    parent_path[parent_len] = '\0';
    int parent = -1;
    int error = mounts_mountpoint(root, parent_path, MOUNTPOINT_DIRECTORY, &plan.owned, &parent);
    if (error == 0) {
      error = mounts_symlink(parent, base_name(link->path), link->target);
      close(parent);
    }
    if (error != 0) {
      return refuse_path(f, "symlink", link->path, error);
    }
  }
  return 0;
}

/* The kind a rule accepts at its target; a file masked while another name links it would
 * stay readable through that name. */
static int check_protect_target(const struct protect_rule *rule, const struct stat *st,
                                struct failure *f) {
  if (rule->mode == PROTECT_MASK_DIRECTORY && !S_ISDIR(st->st_mode)) {
    return fail_with(f, EXIT_VIEW_REFUSED, "view: protect mask_directory %.128s is not a directory",
                     rule->path);
  }
  if (rule->mode == PROTECT_MASK_FILE && S_ISDIR(st->st_mode)) {
    return fail_with(f, EXIT_VIEW_REFUSED, "view: protect mask_file %.128s is a directory",
                     rule->path);
  }
  if (rule->mode == PROTECT_MASK_FILE && S_ISREG(st->st_mode) && st->st_nlink > 1) {
    return fail_with(f, EXIT_VIEW_REFUSED,
                     "view: protect mask_file %.128s has %lu hard links; another name would "
                     "expose it",
                     rule->path, (unsigned long)st->st_nlink);
  }
  return 0;
}

static bool is_mount_root(int fd) {
  struct statx stx;
  return statx(fd, "", AT_EMPTY_PATH, STATX_TYPE, &stx) == 0 &&
         (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) != 0 &&
         (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
}

/* Binds one directory over itself (keeping its flags) unless it already is a mount root: a
 * mountpoint cannot be renamed or removed. */
static int pin_directory(const char *relative, int *skip, struct failure *f) {
  int fd = -1;
  int error = mounts_open_nofollow(plan.workspace_tree, relative, &fd);
  if (error == ENOENT) {
    *skip = 1;
    return 0;
  }
  if (error != 0) {
    return refuse_path(f, "protected path parent", relative, error);
  }
  int tree = -1;
  error = is_mount_root(fd) ? 0 : mounts_clone(fd, true, ATTR_FIXED, 0, &tree);
  if (error == 0 && tree >= 0) {
    error = mounts_attach(tree, fd);
    close(tree);
  }
  close(fd);
  return error == 0 ? 0 : mounts_failed(f, error, "pinning %.128s", relative);
}

/* Pins every directory between the workspace and a protected path. Without the pins a worker
 * could rename a parent away: the mask follows the renamed directory for this turn, but the
 * next turn would find the protected name absent and the content unmasked at the new name. */
static int pin_ancestors(const char *path, int *skip, struct failure *f) {
  char prefix[PATH_MAX];
  size_t len = strlen(path);
  if (len >= sizeof prefix) {
    return fail_with(f, EXIT_VIEW_REFUSED, "view: protected path too long");
  }
  for (size_t i = 0; i < len && *skip == 0; i++) {
    if (path[i] != '/') {
      continue;
    }
    memcpy(prefix, path, i);
    prefix[i] = '\0';
    int code = pin_directory(prefix, skip, f);
    if (code != 0) {
      return code;
    }
  }
  return 0;
}

/* Resolved beneath the workspace mount with no symlink in any component. An absent path is
 * left alone; a symlink refuses the view (see docs/filesystem-view.md). */
static int apply_protect(const struct protect_rule *rule, int mask_tree, struct failure *f) {
  int skip = 0;
  int code = pin_ancestors(rule->path, &skip, f);
  int target = -1;
  int error = ENOENT;
  if (code == 0 && skip == 0) {
    error = mounts_open_nofollow(plan.workspace_tree, rule->path, &target);
  }
  if (code != 0 || error == ENOENT) {
    if (mask_tree >= 0) {
      close(mask_tree);
    }
    return code;
  }
  if (error != 0) {
    return refuse_path(f, descriptor_protect_mode_name(rule->mode), rule->path, error);
  }
  struct stat st;
  code = fstat(target, &st) == 0 ? check_protect_target(rule, &st, f)
                                 : refuse_path(f, "protect", rule->path, errno);
  int tree = mask_tree;
  if (code == 0 && rule->mode == PROTECT_READ_ONLY) {
    error = mounts_clone(target, true, ATTR_READ_ONLY, 0, &tree);
    code = error == 0 ? 0 : mounts_failed(f, error, "cloning %.128s", rule->path);
  }
  if (code == 0) {
    error = mounts_attach(tree, target);
    code = error == 0 ? 0 : mounts_failed(f, error, "protecting %.128s", rule->path);
  }
  if (tree >= 0) {
    close(tree);
  }
  close(target);
  return code;
}

static int apply_protects(const struct descriptor *d, struct failure *f) {
  for (size_t i = 0; i < d->protect_count; i++) {
    int code = apply_protect(&d->protects[i], plan.mask_trees[i], f);
    if (code != 0) {
      return code;
    }
  }
  return 0;
}

static int open_root(int *root, struct failure *f) {
  *root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  return *root >= 0 ? 0 : mounts_failed(f, errno, "opening /");
}

/* The turn's /tmp also at /var/tmp, where the host has one: one tmpfs, one bound. */
static int share_tmp_at_var_tmp(int root, struct failure *f) {
  int tmp = -1;
  int target = -1;
  int error = mounts_open_nofollow(root, "tmp", &tmp);
  if (error != 0) {
    return mounts_failed(f, error, "opening /tmp");
  }
  error = mounts_mountpoint(root, "/var/tmp", MOUNTPOINT_DIRECTORY, &plan.owned, &target);
  if (error != 0) {
    close(tmp);
    return error == ENOENT ? 0 : refuse_path(f, "mountpoint", "/var/tmp", error);
  }
  int tree = -1;
  error = mounts_clone(tmp, false, 0, 0, &tree);
  if (error == 0) {
    error = mounts_attach(tree, target);
    close(tree);
  }
  close(target);
  close(tmp);
  return error == 0 ? 0 : mounts_failed(f, error, "attaching /var/tmp");
}

/* A /dev of its own, in both profiles: the device nodes of the system entries, a new devpts
 * and the turn's /dev/shm. The host's /dev would show every device node and its sockets
 * (/dev/log), and its /dev/shm is shared with every host process. */
static int build_dev(int root, bool own_dev_filesystem, struct failure *f) {
  int code = own_dev_filesystem ? attach_new_filesystem(root, "/dev", "tmpfs", dev_options,
                                                        ATTR_FIXED | MOUNT_ATTR_NOEXEC, true, f)
                                : 0;
  if (code == 0) {
    code = attach_new_filesystem(root, "/dev/pts", "devpts", devpts_options,
                                 MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false, f);
  }
  if (code == 0) {
    code = attach_new_filesystem(root, "/dev/shm", "tmpfs", tmp_options,
                                 ATTR_FIXED | MOUNT_ATTR_NOEXEC, false, f);
  }
  return code;
}

/* The kernel-wide controls a fresh procfs still exposes to a worker the file mode lets in
 * (uid 0 in shared mode: root owns them): sysctls (core_pattern runs a program as root on the
 * next crash), the SysRq trigger, IRQ affinity and bus devices, as bubblewrap covers them, and
 * the filesystem, ACPI, driver and pressure-stall entries besides. Each is bound read-only
 * over itself; a missing one (no SysRq in this kernel) needs no cover. */
static const char *const proc_covered[] = {"sys", "sysrq-trigger", "irq",      "bus",
                                           "fs",  "acpi",          "pressure", "driver"};

static int cover_proc(int root, struct failure *f) {
  int proc = -1;
  int error = mounts_open_nofollow(root, "proc", &proc);
  if (error != 0) {
    return mounts_failed(f, error, "opening /proc");
  }
  for (size_t i = 0; i < sizeof proc_covered / sizeof proc_covered[0] && error == 0; i++) {
    int target = -1;
    error = mounts_open_nofollow(proc, proc_covered[i], &target);
    if (error == ENOENT) {
      error = 0;
      continue;
    }
    int tree = -1;
    if (error == 0)
      error = mounts_clone(target, true, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, 0, &tree);
    if (error == 0) error = mounts_attach(tree, target);
    if (tree >= 0) close(tree);
    if (target >= 0) close(target);
    if (error != 0) {
      close(proc);
      char path[32];
      snprintf(path, sizeof path, "/proc/%s", proc_covered[i]);
      return mounts_failed(f, error, "covering read-only %.128s", path);
    }
  }
  close(proc);
  return 0;
}

/* Whether `path` lies strictly beneath the directory `above`. */
static bool lies_beneath(const char *path, const char *above) {
  size_t length = strlen(above);
  return strncmp(above, path, length) == 0 && path[length] == '/';
}

/* Whether the hidden path `hidden` lies strictly above a path the view must show: the workspace
 * or a view_path (the worker's program and its modules). A mask there would cover the kept path
 * too, so such a path gets a nested mask instead: the governed view puts a fresh tmpfs of its own
 * over it before the bindings, and each kept path's mountpoint is then made inside it (root's
 * 0755 directories, nothing else of the hidden tree); the strict root never shows it. A
 * workspaces root is hidden this way from its own workspaces' turns: each sees its own workspace
 * and none of its siblings, whatever uid it runs as. */
static bool hides_above_kept(const struct helper_config *c, const struct descriptor *d,
                             const char *hidden) {
  if (lies_beneath(d->workspace, hidden)) return true;
  for (size_t i = 0; i < c->view_path_count; i++) {
    if (lies_beneath(c->view_paths[i], hidden)) return true;
  }
  return false;
}

/* One nested mask: a root-owned tmpfs (0755, nosuid nodev noexec) over `hidden`, kept open so it
 * turns read-only once the kept paths' mountpoints are made in it. */
static int attach_nested_mask(int root, const char *hidden, struct failure *f) {
  int fs = -1;
  int error = mounts_new_filesystem("tmpfs", run_options, ATTR_FIXED | MOUNT_ATTR_NOEXEC, &fs);
  if (error != 0) {
    return mounts_failed(f, error, "creating the tmpfs that hides %.100s", hidden);
  }
  int target = -1;
  error = mounts_mountpoint(root, hidden, MOUNTPOINT_DIRECTORY, &plan.owned, &target);
  if (error != 0) {
    close(fs);
    return refuse_path(f, "hide", hidden, error);
  }
  error = mounts_attach(fs, target);
  close(target);
  if (error == 0) error = mounts_own(&plan.owned, fs);
  if (error != 0) {
    close(fs);
    return mounts_failed(f, error, "mounting a tmpfs over %.128s to hide it", hidden);
  }
  plan.nested_masks[plan.nested_mask_count++] = fs;
  return 0;
}

/* The nested masks, shallowest first: a deeper one's mountpoint is then made inside the tmpfs
 * of the one above it, never on the host tree beneath a mask. */
static int attach_nested_masks(int root, const struct helper_config *c, const struct descriptor *d,
                               struct failure *f) {
  size_t order[DESCRIPTOR_MAX_HIDE];
  size_t count = 0;
  for (size_t i = 0; i < d->hide_count; i++) {
    if (!hides_above_kept(c, d, d->hides[i])) continue;
    size_t at = count++;
    while (at > 0 && strlen(d->hides[order[at - 1]]) > strlen(d->hides[i])) {
      order[at] = order[at - 1];
      at--;
    }
    order[at] = i;
  }
  for (size_t i = 0; i < count; i++) {
    int code = attach_nested_mask(root, d->hides[order[i]], f);
    if (code != 0) return code;
  }
  return 0;
}

/* After the bindings: no worker may add anything to a nested mask (uid 0 in shared mode owns
 * its root directory). */
static int seal_nested_masks(struct failure *f) {
  for (size_t i = 0; i < plan.nested_mask_count; i++) {
    int error = mounts_set_attributes(plan.nested_masks[i], false, MOUNT_ATTR_RDONLY);
    close(plan.nested_masks[i]);
    plan.nested_masks[i] = -1;
    if (error != 0) {
      for (size_t j = i + 1; j < plan.nested_mask_count; j++)
        close(plan.nested_masks[j]);
      plan.nested_mask_count = 0;
      return mounts_failed(f, error, "making a hiding tmpfs read-only");
    }
  }
  plan.nested_mask_count = 0;
  return 0;
}

/* Host root read-only (every mount, recursively); fresh /tmp (also at /var/tmp), /run, /dev,
 * /proc and /sys (with the turn's own cgroup leaves only); nested masks over hidden paths above
 * a kept path; the bindings (then the nested masks turn read-only) and the protected paths on
 * top. /run, /tmp and /var/tmp are replaced
 * because a read-only mount still lets a worker connect to the unix sockets host daemons keep
 * there. */
static int build_governed(int root, const struct helper_config *c, const struct descriptor *d,
                          struct failure *f) {
  int error = mounts_set_attributes(root, true, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID);
  if (error != 0) {
    return mounts_failed(f, error, "making read-only /");
  }
  int code = attach_new_filesystem(root, "/tmp", "tmpfs", tmp_options, ATTR_FIXED, true, f);
  if (code == 0) code = share_tmp_at_var_tmp(root, f);
  if (code == 0) {
    code = attach_new_filesystem(root, "/run", "tmpfs", run_options, ATTR_FIXED | MOUNT_ATTR_NOEXEC,
                                 true, f);
  }
  if (code == 0) code = build_dev(root, true, f);
  if (code == 0) {
    code = attach_new_filesystem(root, "/proc", "proc", proc_options,
                                 ATTR_FIXED | MOUNT_ATTR_NOEXEC, false, f);
  }
  if (code == 0) code = cover_proc(root, f);
  if (code == 0) code = sys_view_build(root, &plan.sys, f);
  if (code == 0) code = create_symlinks(root, f);
  if (code == 0) code = attach_nested_masks(root, c, d, f);
  if (code == 0) code = attach_bindings(root, f);
  if (code == 0) code = seal_nested_masks(f);
  return code;
}

static int pivot_into(int new_root, struct failure *f) {
  if (fchdir(new_root) != 0) {
    return mounts_failed(f, errno, "entering the new root");
  }
  if (syscall(SYS_pivot_root, ".", ".") != 0) {
    return mounts_failed(f, errno, "pivot_root into the new root");
  }
  if (umount2(".", MNT_DETACH) != 0) {
    return mounts_failed(f, errno, "detaching the old root");
  }
  if (chdir("/") != 0) {
    return mounts_failed(f, errno, "chdir /");
  }
  return 0;
}

/* A new empty root attached at `staging`: fresh /tmp, /proc and /dev, the system entries,
 * view paths and the workspace (read-only). */
static int build_strict(int staging, int *new_root, struct failure *f) {
  int error = mounts_new_filesystem("tmpfs", root_options, ATTR_FIXED, new_root);
  if (error == 0) error = mounts_attach(*new_root, staging);
  if (error == 0) error = mounts_own(&plan.owned, *new_root);
  if (error != 0) {
    return mounts_failed(f, error, "creating the new root");
  }
  int code = attach_new_filesystem(*new_root, "/tmp", "tmpfs", tmp_options, ATTR_FIXED, true, f);
  if (code == 0) {
    code = attach_new_filesystem(*new_root, "/proc", "proc", proc_options,
                                 ATTR_FIXED | MOUNT_ATTR_NOEXEC, false, f);
  }
  if (code == 0) code = cover_proc(*new_root, f);
  if (code == 0) code = build_dev(*new_root, false, f);
  if (code == 0) code = create_symlinks(*new_root, f);
  if (code == 0) code = attach_bindings(*new_root, f);
  return code;
}

/* After pivot_root the new root's own tmpfs (mountpoints only) turns read-only too. */
static int enter_strict_root(int new_root, struct failure *f) {
  int code = pivot_into(new_root, f);
  int root = -1;
  if (code == 0) {
    code = open_root(&root, f);
  }
  if (code == 0) {
    int error = mounts_set_attributes(root, false, ATTR_READ_ONLY);
    close(root);
    code = error == 0 ? 0 : mounts_failed(f, error, "making read-only the new root");
  }
  return code;
}

static int enter_private_namespace(struct failure *f) {
  if (unshare(CLONE_NEWNS) != 0) {
    return fail_with(f, EXIT_NAMESPACE_FAILED, "unshare(mount): %s", strerror(errno));
  }
  if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
    return fail_with(f, EXIT_NAMESPACE_FAILED, "making / rec-private: %s", strerror(errno));
  }
  return 0;
}

/* Every host object is opened and cloned before the first mount changes what paths mean. */
static int plan_view(const struct helper_config *c, const struct descriptor *d, int staging,
                     struct failure *f) {
  memset(&plan, 0, sizeof plan);
  plan.workspace_tree = -1;
  int code = prepare_masks(d, staging, f);
  if (code == 0 && d->view_profile == PROFILE_GOVERNED) code = sys_view_plan(d, &plan.sys, f);
  if (code == 0) code = plan_system(d->view_profile == PROFILE_GOVERNED, f);
  if (code == 0) code = plan_turn_bindings(c, d, f);
  return code;
}

/* A hidden host path, as the view shows it beneath `root`: absent → nothing to hide; a symlink
 * on its way → refused (like a protected path); else an empty read-only directory or file over
 * it. */
static int apply_hide(int root, const char *path, struct hide_masks *masks, struct failure *f) {
  int target = -1;
  int error = mounts_open_nofollow(root, path + 1, &target);
  struct stat st;
  if (error == 0 && fstat(target, &st) != 0) error = errno;
  int chosen = error == 0 ? (S_ISDIR(st.st_mode) ? masks->dir : masks->file) : -1;
  if (error == 0) error = mounts_attach(chosen, target);
  if (target >= 0) close(target);
  close(masks->dir);
  close(masks->file);
  if (error == ENOENT) {
    return 0;
  }
  return error == 0 ? 0 : refuse_path(f, "hide", path, error);
}

static int apply_hides(int root, const struct helper_config *c, const struct descriptor *d,
                       struct failure *f) {
  for (size_t i = 0; i < d->hide_count; i++) {
    if (hides_above_kept(c, d, d->hides[i])) {
      close(plan.hide_trees[i].dir);
      close(plan.hide_trees[i].file);
      continue; /* a nested mask before the bindings (governed) or never shown (strict) */
    }
    int code = apply_hide(root, d->hides[i], &plan.hide_trees[i], f);
    if (code != 0) {
      return code;
    }
  }
  return 0;
}

static void format_tmp_options(uint64_t size) {
  uint64_t inodes = size / (16 * 1024);
  inodes = inodes < 65536 ? 65536 : inodes > 4194304 ? 4194304 : inodes;
  snprintf(tmp_size_text, sizeof tmp_size_text, "%llu", (unsigned long long)size);
  snprintf(tmp_inodes_text, sizeof tmp_inodes_text, "%llu", (unsigned long long)inodes);
}

int view_enter(const struct helper_config *c, const struct descriptor *d, struct failure *f) {
  if (d->workspace == NULL || d->view_profile == PROFILE_NONE) {
    return fail_with(f, EXIT_VIEW_REFUSED, "view: a profile and a workspace are required");
  }
  format_tmp_options(d->tmp_size);
  int root = -1;
  int staging = -1;
  int code = enter_private_namespace(f);
  if (code == 0) code = open_root(&root, f);
  if (code == 0) {
    int error = mounts_mountpoint(root, "/tmp", MOUNTPOINT_DIRECTORY, &plan.owned, &staging);
    code = error == 0 ? 0 : refuse_path(f, "staging directory", "/tmp", error);
  }
  if (code == 0) code = plan_view(c, d, staging, f);
  int new_root = -1;
  if (code == 0 && d->view_profile == PROFILE_GOVERNED) {
    code = build_governed(root, c, d, f);
  } else if (code == 0) {
    code = build_strict(staging, &new_root, f);
  }
  if (code == 0) code = apply_protects(d, f);
  if (code == 0) code = apply_hides(new_root >= 0 ? new_root : root, c, d, f);
  if (code == 0 && new_root >= 0) code = enter_strict_root(new_root, f);
  if (new_root >= 0) close(new_root);
  if (staging >= 0) close(staging);
  if (root >= 0) close(root);
  return code;
}
