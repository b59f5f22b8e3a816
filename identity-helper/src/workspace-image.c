#include "workspace-image.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <sched.h>
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
#include "private-dir.h"

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
 * is gone. A refusal names the call that failed (LOOP_CTL_GET_FREE, the device's open,
 * LOOP_CONFIGURE): a probe's requirement must say which facility the host lacks. */
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
  const char *call = "LOOP_CONFIGURE";
  for (int attempt = 0; attempt < LOOP_ATTEMPTS && error == EBUSY; attempt++) {
    long number = ioctl(control, LOOP_CTL_GET_FREE);
    if (number < 0) {
      error = errno;
      call = "LOOP_CTL_GET_FREE";
      break;
    }
    snprintf(device, 32, "/dev/loop%ld", number);
    *loop = open(device, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    struct stat st;
    if (*loop < 0 || fstat(*loop, &st) != 0 || !S_ISBLK(st.st_mode) ||
        major(st.st_rdev) != LOOP_MAJOR) {
      error = *loop < 0 ? errno : ENOTBLK;
      call = device;
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
    return fail_with(f, EXIT_INTERNAL, "image: attaching a loop device: %s: %s", call,
                     strerror(error));
  }
  return 0;
}

/* The one way a workspace image is mounted, for a workspace and for the probe alike: ext4 from
 * the loop device `source` (named so mountinfo shows which device a workspace holds; /dev is
 * root's) on the held directory `top` itself, nosuid and nodev. Not noexec: turns run programs
 * they build in their workspace. */
static int mount_loop(const char *source, int top, const char *what, struct failure *f) {
  char target[64];
  fd_path(target, sizeof target, top, NULL);
  if (mount(source, target, "ext4", MS_NOSUID | MS_NODEV, "") != 0) {
    return fail_with(f, EXIT_INTERNAL, "image %s: mount: %s", what, strerror(errno));
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
  code = mount_loop(source, top, r->lease, f);
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

/* The probe's throwaway image: the smallest mkfs accepts, with few inodes, so that filling it
 * (bytes, then files) is quick. */
#define PROBE_IMAGE_BYTES WORKSPACE_IMAGE_MIN_BYTES
#define PROBE_IMAGE_FILES 16
#define PROBE_WRITE_CHUNK 65536
/* A bound that let this much through is no bound: twice the image's bytes, or more files than
 * the inodes mkfs was asked for. */
#define PROBE_WRITE_LIMIT (2 * PROBE_IMAGE_BYTES)
#define PROBE_FILE_LIMIT (PROBE_IMAGE_FILES + EXT4_RESERVED_INODES + INODE_ROUNDING)

/* What the probe holds, released by probe_release whatever step it reached. */
struct image_probe {
  int dir;   /* the images directory (the mount point of the probe's filesystem) */
  int image; /* the image file, `name` in the images directory while `named` */
  int loop;  /* the loop device it attached: kept, so that it detaches it itself */
  int top;   /* the mounted filesystem's root */
  bool mounted;
  bool named;
  char name[32];
  char source[32];
  char target[64];
  uint64_t written;
  unsigned files;
};

/* Records the failure of probe step `step` from what the step itself reported. */
static int probe_failed(struct failure *f, const char *step, const struct failure *inner) {
  return fail_with(f, inner->code, "image_probe %s: %s", step, inner->reason);
}

/* A private mount namespace whose mounts propagate nowhere: a probe killed half way leaves no
 * mount behind (the namespace dies with it, and autoclear then detaches its loop device). */
static int probe_enter_namespace(struct failure *f) {
  struct failure inner = {0, {0}};
  if (unshare(CLONE_NEWNS) != 0) {
    fail_with(&inner, EXIT_NAMESPACE_FAILED, "unshare(mount): %s", strerror(errno));
  } else if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
    fail_with(&inner, EXIT_NAMESPACE_FAILED, "making mounts private: %s", strerror(errno));
  }
  return inner.code == 0 ? 0 : probe_failed(f, "namespace", &inner);
}

#define PROBE_NAME_PREFIX ".probe-"
#define PROBE_NAME_SUFFIX ".img"

/* Removes the images of probes killed before their cleanup: `.probe-<pid>.img` whose process is
 * gone. The name is one no lease can have (leases never start with a dot). */
static void probe_remove_stale(int dir) {
  int copy = fcntl(dir, F_DUPFD_CLOEXEC, 0);
  DIR *listing = copy < 0 ? NULL : fdopendir(copy);
  if (listing == NULL) {
    close_fd(&copy);
    return;
  }
  struct dirent *entry;
  while ((entry = readdir(listing)) != NULL) {
    char *end = NULL;
    if (strncmp(entry->d_name, PROBE_NAME_PREFIX, strlen(PROBE_NAME_PREFIX)) != 0) continue;
    long pid = strtol(entry->d_name + strlen(PROBE_NAME_PREFIX), &end, 10);
    if (pid <= 0 || end == NULL || strcmp(end, PROBE_NAME_SUFFIX) != 0) continue;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) unlinkat(dir, entry->d_name, 0);
  }
  closedir(listing);
}

/* The probe's image: a named file in the images directory, as a workspace's image is, made
 * exclusively and removed by probe_release once it is detached. Not an unnamed (O_TMPFILE or
 * unlinked) file: on some filesystems an open file whose name is gone cannot be truncated or
 * written (9p resolves those by path: ENOENT), where named images work. */
static int probe_open_image(int dir, char *name, size_t size) {
  probe_remove_stale(dir);
  snprintf(name, size, PROBE_NAME_PREFIX "%ld" PROBE_NAME_SUFFIX, (long)getpid());
  unlinkat(dir, name, 0);
  return openat(dir, name, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
}

/* The probe's image in the images directory (the filesystem real images live on), of the
 * probe's size, made ext4 by the same mkfs run a workspace's gets. */
static int probe_make_image(int root, struct image_probe *p, struct failure *f) {
  struct failure inner = {0, {0}};
  int code = open_image_dir(root, true, &p->dir, &inner);
  if (code == 0) {
    p->image = probe_open_image(p->dir, p->name, sizeof p->name);
    p->named = p->image >= 0;
    if (p->image < 0 || ftruncate(p->image, (off_t)PROBE_IMAGE_BYTES) != 0) {
      code = fail_with(&inner, EXIT_INTERNAL, "%s: the probe's image file: %s", WORKSPACE_IMAGE_DIR,
                       strerror(errno));
    }
  }
  if (code != 0) {
    return probe_failed(f, "image", &inner);
  }
  code = make_filesystem(p->image, PROBE_IMAGE_FILES, &inner);
  return code == 0 ? 0 : probe_failed(f, "mkfs", &inner);
}

/* Attaches and mounts the image as a workspace's is (attach_loop, mount_loop), over the images
 * directory of this private namespace, then opens the mounted root by name (which crosses into
 * the mount) and makes sure it is this image's filesystem, not the directory beneath. */
static int probe_mount(int root, struct image_probe *p, struct failure *f) {
  struct failure inner = {0, {0}};
  if (attach_loop(p->image, &p->loop, p->source, &inner) != 0) {
    return probe_failed(f, "loop_attach", &inner);
  }
  if (mount_loop(p->source, p->dir, "probe", &inner) != 0) {
    return probe_failed(f, "mount", &inner);
  }
  p->mounted = true;
  fd_path(p->target, sizeof p->target, root, WORKSPACE_IMAGE_DIR);
  p->top = openat(root, WORKSPACE_IMAGE_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat top_st;
  struct stat loop_st;
  struct statfs fs;
  bool ours = p->top >= 0 && fstat(p->top, &top_st) == 0 && fstat(p->loop, &loop_st) == 0 &&
              fstatfs(p->top, &fs) == 0 && fs.f_type == EXT4_MAGIC &&
              top_st.st_dev == loop_st.st_rdev;
  if (!ours) {
    fail_with(&inner, EXIT_INTERNAL, "the mounted root is not the image's filesystem");
    return probe_failed(f, "mount", &inner);
  }
  return 0;
}

/* Writes into the image until it refuses: ENOSPC before the image's size is passed twice over
 * is the byte bound; then, with the bytes freed, empty files until ENOSPC is the inode bound. */
static int probe_fill(struct image_probe *p, struct failure *f) {
  struct failure inner = {0, {0}};
  static const char zeros[PROBE_WRITE_CHUNK];
  int file = openat(p->top, "fill", O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  int error = file < 0 ? errno : 0;
  while (error == 0 && p->written < PROBE_WRITE_LIMIT) {
    ssize_t n = write(file, zeros, sizeof zeros);
    if (n < 0) error = errno;
    if (n > 0) p->written += (uint64_t)n;
  }
  close_fd(&file);
  if (error == 0) {
    fail_with(&inner, EXIT_INTERNAL, "%llu bytes went into an image of %llu bytes: no bound",
              (unsigned long long)p->written, PROBE_IMAGE_BYTES);
  } else if (error != ENOSPC) {
    fail_with(&inner, EXIT_INTERNAL, "writing after %llu bytes: %s", (unsigned long long)p->written,
              strerror(error));
  }
  if (inner.code != 0) {
    return probe_failed(f, "bytes_bound", &inner);
  }
  unlinkat(p->top, "fill", 0);
  char name[16];
  error = 0;
  while (error == 0 && p->files < PROBE_FILE_LIMIT) {
    snprintf(name, sizeof name, "f%u", p->files);
    int made = openat(p->top, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (made < 0) error = errno;
    if (made >= 0) p->files++;
    close_fd(&made);
  }
  if (error == 0) {
    fail_with(&inner, EXIT_INTERNAL, "%u files went into an image made for %u: no bound", p->files,
              PROBE_IMAGE_FILES);
  } else if (error != ENOSPC) {
    fail_with(&inner, EXIT_INTERNAL, "making file %u: %s", p->files, strerror(error));
  }
  if (inner.code != 0) {
    return probe_failed(f, "files_bound", &inner);
  }
  return 0;
}

/* Unmounts (lazily only when a plain unmount failed: the namespace is ours alone), detaches the
 * loop device this probe attached (it still holds it, so it is never another's) and removes
 * the image file. Answers the first failure as the step `cleanup`, after releasing the rest. */
static int probe_release(struct image_probe *p, struct failure *f) {
  struct failure inner = {0, {0}};
  close_fd(&p->top);
  if (p->mounted && umount2(p->target, UMOUNT_NOFOLLOW) != 0) {
    fail_with(&inner, EXIT_INTERNAL, "unmount: %s", strerror(errno));
    umount2(p->target, UMOUNT_NOFOLLOW | MNT_DETACH);
  }
  p->mounted = false;
  if (p->loop >= 0 && ioctl(p->loop, LOOP_CLR_FD) != 0) {
    fail_with(&inner, EXIT_INTERNAL, "%s: LOOP_CLR_FD: %s", p->source, strerror(errno));
  }
  close_fd(&p->loop);
  close_fd(&p->image);
  if (p->named && unlinkat(p->dir, p->name, 0) != 0 && inner.code == 0) {
    fail_with(&inner, EXIT_INTERNAL, "%s/%s: unlink: %s", WORKSPACE_IMAGE_DIR, p->name,
              strerror(errno));
  }
  p->named = false;
  close_fd(&p->dir);
  return inner.code == 0 ? 0 : probe_failed(f, "cleanup", &inner);
}

/* The configured root, opened only once inside the private namespace: a mount on a directory
 * reached from an fd of the caller's namespace would be refused (EINVAL). */
static int probe_open_root(const char *root_path, int *root, struct failure *f) {
  int error = private_dir_open_no_symlinks(root_path, root);
  if (error != 0) {
    return fail_with(f, EXIT_LEASE_REFUSED,
                     "image_probe workspace_root: %.128s: must be a directory reached through no "
                     "symlink: %s",
                     root_path, strerror(error));
  }
  return 0;
}

int workspace_image_probe(const char *root_path, struct failure *f) {
  if (geteuid() != 0) {
    return fail_with(f, EXIT_CALLER_NOT_PERMITTED,
                     "image_probe root: a workspace image needs root (the setuid helper, or a "
                     "root supervisor): loop devices and mounts");
  }
  struct image_probe p = {-1, -1, -1, -1, false, false, {0}, {0}, {0}, 0, 0};
  int root = -1;
  int code = probe_enter_namespace(f);
  if (code == 0) code = probe_open_root(root_path, &root, f);
  if (code == 0) code = probe_make_image(root, &p, f);
  if (code == 0) code = probe_mount(root, &p, f);
  if (code == 0) code = probe_fill(&p, f);
  int released = probe_release(&p, f);
  if (code == 0) code = released;
  if (root >= 0) close(root);
  if (code == 0) {
    printf("image_probe enforced\nimage_bytes %llu\nbytes_written %llu\nfiles_made %u\n",
           PROBE_IMAGE_BYTES, (unsigned long long)p.written, p.files);
    fflush(stdout);
  }
  return code;
}

int run_image_probe(const struct helper_config *c, const struct descriptor *d, struct failure *f) {
  for (size_t i = 0; i < c->workspace_root_count; i++) {
    if (strcmp(c->workspace_roots[i], d->workspace) == 0) {
      return workspace_image_probe(c->workspace_roots[i], f);
    }
  }
  return fail_with(f, EXIT_LEASE_REFUSED,
                   "image_probe workspace_root: %.128s is not a configured workspace_root%s",
                   d->workspace, c->workspace_root_count == 0 ? " (none is configured)" : "");
}
