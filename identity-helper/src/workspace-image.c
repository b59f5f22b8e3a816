#include "workspace-image.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "descriptor.h"
#include "fd-io.h"

#define LOOP_MAJOR 7
#define EXT4_MAGIC 0xEF53
/* Inodes 1-10 are ext4's own (the root directory is inode 2): never a workspace's file. */
#define EXT4_RESERVED_INODES 10
/* mke2fs fits the inode count to whole inode-table blocks (16 inodes of 256 bytes in 4 KiB). */
#define INODE_ROUNDING 16
/* LOOP_CTL_GET_FREE may hand two callers the same device; the loser asks again. */
#define LOOP_ATTEMPTS 16
/* mke2fs at fixed paths (merged /usr first), never through PATH. */
static const char *const MKE2FS_PATHS[] = {"/usr/sbin/mke2fs", "/sbin/mke2fs"};

static void close_fd(int *fd) {
  if (*fd >= 0) {
    close(*fd);
    *fd = -1;
  }
}

/* `/proc/self/fd/<fd>[/<name>]`: a path the kernel resolves from a held fd, not from a name. */
static void fd_path(char *out, size_t size, int fd, const char *name) {
  snprintf(out, size, "/proc/self/fd/%d%s%s", fd, name == NULL ? "" : "/",
           name == NULL ? "" : name);
}

static int require_root(const struct workspace_image_request *r, struct failure *f) {
  if (geteuid() == 0) {
    return 0;
  }
  return fail_with(f, EXIT_CALLER_NOT_PERMITTED,
                   "image %s: a workspace image needs root (the setuid helper, or a root "
                   "supervisor): loop devices and mounts",
                   r->lease);
}

/* The images directory beneath the workspace root: root's, 0700, no link. `*dir` is -1 when it
 * is missing and `create` is unset. */
static int open_image_dir(int root, bool create, int *dir, struct failure *f) {
  if (create && mkdirat(root, WORKSPACE_IMAGE_DIR, 0700) != 0 && errno != EEXIST) {
    return fail_with(f, EXIT_INTERNAL, "%s: mkdir: %s", WORKSPACE_IMAGE_DIR, strerror(errno));
  }
  *dir = openat(root, WORKSPACE_IMAGE_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (*dir < 0) {
    if (errno == ENOENT && !create) {
      return 0;
    }
    return fail_with(f, EXIT_LEASE_REFUSED, "%s: must be a directory, not a symlink: %s",
                     WORKSPACE_IMAGE_DIR, strerror(errno));
  }
  struct stat st;
  if (fstat(*dir, &st) != 0 || st.st_uid != 0 || (st.st_mode & 07777) != 0700) {
    close_fd(dir);
    return fail_with(f, EXIT_LEASE_REFUSED, "%s: must be root's with mode 0700",
                     WORKSPACE_IMAGE_DIR);
  }
  return 0;
}

static void image_name(char *out, size_t size, const char *lease) {
  snprintf(out, size, "%s.img", lease);
}

/* The lease's image, opened read-write with no link followed: a root-owned regular file with one
 * link and no access for anyone else. `*image` is -1 when there is none. */
static int open_image(int dir, const char *lease, int *image, struct failure *f) {
  char name[DESCRIPTOR_MAX_LEASE_ID + 8];
  image_name(name, sizeof name, lease);
  *image = dir < 0 ? -1 : openat(dir, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (*image < 0) {
    return dir < 0 || errno == ENOENT
               ? 0
               : fail_with(f, EXIT_LEASE_REFUSED, "image %s: %s", name, strerror(errno));
  }
  struct stat st;
  if (fstat(*image, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 || st.st_nlink != 1 ||
      (st.st_mode & 077) != 0) {
    close_fd(image);
    return fail_with(f, EXIT_LEASE_REFUSED,
                     "image %s: must be a root-owned regular file, one link, mode 0600", name);
  }
  return 0;
}

/* Runs mke2fs on the image fd with an empty environment and its output discarded (fd 1 is the
 * receipt). No journal: the cap's slack stays the inode tables and bitmaps alone. */
static int make_filesystem(int image, uint64_t max_files, struct failure *f) {
  char target[64];
  char inodes[32];
  fd_path(target, sizeof target, image, NULL);
  /* Inodes 1-10 are the filesystem's own; ask for the workspace's files on top of them, and a
   * margin, since mke2fs rounds the count to whole blocks of its inode table (up or down). */
  snprintf(inodes, sizeof inodes, "%llu",
           (unsigned long long)(max_files + EXT4_RESERVED_INODES + INODE_ROUNDING));
  pid_t pid = fork();
  if (pid < 0) {
    return fail_with(f, EXIT_INTERNAL, "image: fork: %s", strerror(errno));
  }
  if (pid == 0) {
    int null = open("/dev/null", O_RDWR);
    if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0) _exit(127);
    if (fcntl(image, F_SETFD, 0) != 0) _exit(127);
    char *const env[] = {NULL};
    for (size_t i = 0; i < sizeof MKE2FS_PATHS / sizeof MKE2FS_PATHS[0]; i++) {
      if (max_files == 0) {
        char *const argv[] = {"mke2fs", "-t",           "ext4", "-q",        "-F",   "-m", "0",
                              "-O",     "^has_journal", "-E",   "nodiscard", target, NULL};
        execve(MKE2FS_PATHS[i], argv, env);
      } else {
        char *const argv[] = {"mke2fs", "-t", "ext4",         "-q", "-F",        "-m",   "0", "-N",
                              inodes,   "-O", "^has_journal", "-E", "nodiscard", target, NULL};
        execve(MKE2FS_PATHS[i], argv, env);
      }
    }
    _exit(127);
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      return fail_with(f, EXIT_INTERNAL, "image: waitpid: %s", strerror(errno));
    }
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return fail_with(f, EXIT_INTERNAL,
                     "image: mke2fs failed (status %d; it must be at /usr/sbin or /sbin)",
                     WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  }
  return 0;
}

/* A new sparse image of exactly `r->max_bytes`, made a filesystem. */
static int create_image(int dir, const struct workspace_image_request *r, int *image,
                        struct failure *f) {
  char name[DESCRIPTOR_MAX_LEASE_ID + 8];
  image_name(name, sizeof name, r->lease);
  *image = openat(dir, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (*image < 0) {
    return fail_with(f, EXIT_INTERNAL, "image %s: create: %s", name, strerror(errno));
  }
  int code = 0;
  if (fchown(*image, 0, 0) != 0 || ftruncate(*image, (off_t)r->max_bytes) != 0) {
    code = fail_with(f, EXIT_INTERNAL, "image %s: size: %s", name, strerror(errno));
  }
  if (code == 0) code = make_filesystem(*image, r->max_files, f);
  if (code != 0) {
    close_fd(image);
    unlinkat(dir, name, 0);
  }
  return code;
}

/* Whether the loop device `number` is configured over `image`. */
static bool loop_backs(long number, const struct stat *image_st) {
  char device[32];
  snprintf(device, sizeof device, "/dev/loop%ld", number);
  int loop = open(device, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  struct loop_info64 info;
  bool backs = loop >= 0 && ioctl(loop, LOOP_GET_STATUS64, &info) == 0 &&
               info.lo_inode == image_st->st_ino && info.lo_device == image_st->st_dev;
  close_fd(&loop);
  return backs;
}

/* The loop device already configured over `image`, or -1: an image still mounted in another
 * mount namespace (a supervisor that restarted in a new one) is mounted from the same device,
 * never from a second one (two devices over one ext4 image would corrupt it). */
static long attached_loop(int image) {
  struct stat image_st;
  DIR *block = opendir("/sys/block");
  if (block == NULL || fstat(image, &image_st) != 0) {
    if (block != NULL) closedir(block);
    return -1;
  }
  long found = -1;
  struct dirent *entry;
  while (found < 0 && (entry = readdir(block)) != NULL) {
    char *end = NULL;
    if (strncmp(entry->d_name, "loop", 4) != 0) continue;
    long number = strtol(entry->d_name + 4, &end, 10);
    if (end != entry->d_name + 4 && *end == '\0' && loop_backs(number, &image_st)) found = number;
  }
  closedir(block);
  return found;
}

/* A free loop device configured over `image`, clearing itself once its last user (the mount)
 * is gone. */
static int attach_loop(int image, int *loop, char device[32], struct failure *f) {
  long attached = attached_loop(image);
  if (attached >= 0) {
    snprintf(device, 32, "/dev/loop%ld", attached);
    *loop = open(device, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    return *loop >= 0 ? 0 : fail_with(f, EXIT_INTERNAL, "image: %s: %s", device, strerror(errno));
  }
  int control = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
  if (control < 0) {
    return fail_with(f, EXIT_INTERNAL, "image: /dev/loop-control: %s", strerror(errno));
  }
  int error = EBUSY;
  for (int attempt = 0; attempt < LOOP_ATTEMPTS && error == EBUSY; attempt++) {
    long number = ioctl(control, LOOP_CTL_GET_FREE);
    if (number < 0) {
      error = errno;
      break;
    }
    snprintf(device, 32, "/dev/loop%ld", number);
    *loop = open(device, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (*loop < 0 || fstat(*loop, &st) != 0 || !S_ISBLK(st.st_mode) ||
        major(st.st_rdev) != LOOP_MAJOR) {
      error = *loop < 0 ? errno : ENOTBLK;
      close_fd(loop);
      break;
    }
    struct loop_config config;
    memset(&config, 0, sizeof config);
    config.fd = (unsigned)image;
    config.info.lo_flags = LO_FLAGS_AUTOCLEAR;
    error = ioctl(*loop, LOOP_CONFIGURE, &config) == 0 ? 0 : errno;
    if (error != 0) close_fd(loop);
  }
  close(control);
  if (error != 0) {
    return fail_with(f, EXIT_INTERNAL, "image: attaching a loop device: %s", strerror(error));
  }
  return 0;
}

/* Whether the directory `top` is the root of a mount of the lease's own image: not a mount
 * point at all (false), the image's (true), or anything else (82: never touched). */
static int image_mounted_at(int root, int image, int top, bool *mounted, struct failure *f) {
  struct stat root_st;
  struct stat top_st;
  if (fstat(root, &root_st) != 0 || fstat(top, &top_st) != 0) {
    return fail_with(f, EXIT_INTERNAL, "image: fstat: %s", strerror(errno));
  }
  *mounted = false;
  if (top_st.st_dev == root_st.st_dev) {
    return 0;
  }
  struct stat image_st;
  struct statfs fs;
  bool ours = image >= 0 && major(top_st.st_dev) == LOOP_MAJOR && fstatfs(top, &fs) == 0 &&
              fs.f_type == EXT4_MAGIC && fstat(image, &image_st) == 0;
  if (ours) ours = loop_backs((long)minor(top_st.st_dev), &image_st);
  if (!ours) {
    return fail_with(f, EXIT_WORKSPACE_BUSY,
                     "workspace is a mount point that is not its own image: never touched");
  }
  *mounted = true;
  return 0;
}

/* The new filesystem's root takes the workspace directory's owner, group and mode; the
 * lost+found mke2fs made goes (the workspace starts empty). */
static int adopt_directory(int root, const char *lease, const struct stat *was, struct failure *f) {
  int top = openat(root, lease, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  bool done = top >= 0 && fchown(top, was->st_uid, was->st_gid) == 0 &&
              fchmod(top, was->st_mode & 07777) == 0;
  int error = errno;
  if (done && unlinkat(top, "lost+found", AT_REMOVEDIR) != 0 && errno != ENOENT) {
    done = false;
    error = errno;
  }
  close_fd(&top);
  return done ? 0 : fail_with(f, EXIT_INTERNAL, "image %s: its root: %s", lease, strerror(error));
}

static int mount_image(int root, int top, int image, const struct workspace_image_request *r,
                       struct failure *f) {
  struct stat was;
  if (fstat(top, &was) != 0) {
    return fail_with(f, EXIT_INTERNAL, "image: fstat: %s", strerror(errno));
  }
  int loop = -1;
  char source[32];
  int code = attach_loop(image, &loop, source, f);
  if (code != 0) {
    return code;
  }
  /* The target is the held directory itself; the source is the device just configured (/dev
   * is root's), named so mountinfo shows which loop device a workspace holds. */
  char target[64];
  fd_path(target, sizeof target, top, NULL);
  /* Not noexec: turns run programs they build in their workspace. */
  if (mount(source, target, "ext4", MS_NOSUID | MS_NODEV, "") != 0) {
    code = fail_with(f, EXIT_INTERNAL, "image %s: mount: %s", r->lease, strerror(errno));
  }
  close_fd(&loop); /* the mount holds the device now; without it autoclear detaches it */
  if (code == 0) code = adopt_directory(root, r->lease, &was, f);
  return code;
}

int workspace_image_mount(int root, const struct workspace_image_request *r, struct failure *f) {
  int code = require_root(r, f);
  if (code != 0) {
    return code;
  }
  if (r->max_bytes != 0 &&
      (r->max_bytes < WORKSPACE_IMAGE_MIN_BYTES || r->max_bytes > WORKSPACE_IMAGE_MAX_BYTES)) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "image: max_bytes: from %llu to %llu",
                     WORKSPACE_IMAGE_MIN_BYTES, WORKSPACE_IMAGE_MAX_BYTES);
  }
  int dir = -1;
  int image = -1;
  int top = openat(root, r->lease, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (top < 0) {
    return fail_with(f, EXIT_LEASE_REFUSED, "workspace %.128s: must be a directory: %s",
                     r->workspace, strerror(errno));
  }
  code = open_image_dir(root, r->max_bytes != 0, &dir, f);
  if (code == 0) code = open_image(dir, r->lease, &image, f);
  bool mounted = false;
  if (code == 0) code = image_mounted_at(root, image, top, &mounted, f);
  const char *receipt = mounted ? "mounted" : image >= 0 ? "attached" : "none";
  if (code == 0 && !mounted && image < 0 && r->max_bytes != 0) {
    /* A new image would hide what the directory holds: only an empty workspace gets one. */
    code = directory_is_empty(top)
               ? 0
               : fail_with(f, EXIT_LEASE_REFUSED,
                           "image: workspace %.128s is not empty: an image is made only for a new "
                           "workspace",
                           r->workspace);
    if (code == 0) code = create_image(dir, r, &image, f);
    receipt = "made";
  }
  if (code == 0 && !mounted && image >= 0) code = mount_image(root, top, image, r, f);
  if (code == 0) printf("image %s\n", receipt);
  close_fd(&top);
  close_fd(&image);
  close_fd(&dir);
  return code;
}

/* Bytes and inodes the image's filesystem holds for the workspace (its own metadata apart). */
static int statfs_totals(int top, struct tree_totals *totals, struct failure *f) {
  struct statfs fs;
  if (fstatfs(top, &fs) != 0) {
    return fail_with(f, EXIT_INTERNAL, "image: statfs: %s", strerror(errno));
  }
  uint64_t inodes = fs.f_files - fs.f_ffree;
  totals->bytes += (uint64_t)(fs.f_blocks - fs.f_bfree) * (uint64_t)fs.f_bsize;
  totals->files += inodes > EXT4_RESERVED_INODES ? inodes - EXT4_RESERVED_INODES : 0;
  return 0;
}

/* What workspace_image_measure does, with `*has_image` telling whether the lease has an image
 * at all (mounted or not). */
static int measure_image(int root, const char *lease, int top, struct tree_totals *totals,
                         bool *measured, bool *has_image, struct failure *f) {
  *measured = false;
  int dir = -1;
  int image = -1;
  int code = open_image_dir(root, false, &dir, f);
  if (code == 0) code = open_image(dir, lease, &image, f);
  *has_image = image >= 0;
  if (code == 0) code = image_mounted_at(root, image, top, measured, f);
  if (code == 0 && *measured) code = statfs_totals(top, totals, f);
  close_fd(&image);
  close_fd(&dir);
  return code;
}

int workspace_image_measure(int root, const char *lease, int top, struct tree_totals *totals,
                            bool *measured, struct failure *f) {
  bool has_image = false;
  int code = measure_image(root, lease, top, totals, measured, &has_image, f);
  if (code == 0 && has_image && !*measured) {
    /* The directory beneath an unmounted image is no workspace: a write there would meet the
     * host's disk, not the cap. */
    return fail_with(f, EXIT_LEASE_REFUSED,
                     "workspace %s: its image is not attached (re-attach it: op image)", lease);
  }
  return code;
}

int workspace_image_unmount(int root, const char *lease, const char *workspace,
                            struct tree_totals *totals, struct failure *f) {
  int top = openat(root, lease, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (top < 0) {
    return 0; /* no directory: nothing mounted on it (the release reports the rest) */
  }
  bool mounted = false;
  bool has_image = false;
  int code = measure_image(root, lease, top, totals, &mounted, &has_image, f);
  close_fd(&top); /* an fd inside the mount would keep it busy */
  if (code != 0 || !mounted) {
    return code;
  }
  char target[DESCRIPTOR_MAX_LEASE_ID + 48];
  fd_path(target, sizeof target, root, lease);
  if (umount2(target, UMOUNT_NOFOLLOW) != 0) {
    return fail_with(f, errno == EBUSY ? EXIT_WORKSPACE_BUSY : EXIT_INTERNAL,
                     "workspace %.128s: unmounting its image: %s%s", workspace, strerror(errno),
                     errno == EBUSY ? " (a process holds a file in it; retried later)" : "");
  }
  return 0;
}

int workspace_image_remove(int root, const char *lease, struct failure *f) {
  int dir = -1;
  int code = open_image_dir(root, false, &dir, f);
  if (code != 0 || dir < 0) {
    return code;
  }
  char name[DESCRIPTOR_MAX_LEASE_ID + 8];
  image_name(name, sizeof name, lease);
  if (unlinkat(dir, name, 0) != 0 && errno != ENOENT) {
    code = fail_with(f, EXIT_INTERNAL, "image %s: unlink: %s", name, strerror(errno));
  }
  close_fd(&dir);
  return code;
}
