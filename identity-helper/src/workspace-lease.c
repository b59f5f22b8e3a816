#include "workspace-lease.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fd-io.h"
#include "lease-record.h"
#include "policy.h"
#include "private-dir.h"
#include "procs.h"
#include "syntax.h"
#include "tree-walk.h"
#include "uid-lock.h"
#include "workspace-image.h"

#define WORKSPACE_MODE 02770

/* The fds an operation holds, closed together whatever happened. */
struct lease_context {
  int lock_dir;
  int guard;
  int lease_dir;
  int root;
};

static void context_init(struct lease_context *x) {
  x->lock_dir = -1;
  x->guard = -1;
  x->lease_dir = -1;
  x->root = -1;
}

static void close_if_open(int *fd) {
  if (*fd >= 0) {
    close(*fd);
    *fd = -1;
  }
}

static void context_close(struct lease_context *x) {
  close_if_open(&x->root);
  close_if_open(&x->lease_dir);
  close_if_open(&x->guard); /* ends the guard's flock */
  close_if_open(&x->lock_dir);
}

static int refuse_shared(const struct helper_config *c, const struct descriptor *d,
                         struct failure *f) {
  if (!c->shared) {
    return 0;
  }
  return fail_with(f, EXIT_CALLER_NOT_PERMITTED,
                   "%s: shared mode lends no privilege: workspace leases need the separate-uid "
                   "helper",
                   descriptor_op_name(d->op));
}

typedef int (*workspace_op)(const struct helper_config *c, const struct descriptor *d,
                            struct lease_context *x, struct failure *f);

/* What every lease operation does around its own step: refused in shared mode, its fds closed
 * whatever happened, its receipt flushed. */
static int run_workspace_op(const struct helper_config *c, const struct descriptor *d,
                            workspace_op op, struct failure *f) {
  int code = refuse_shared(c, d, f);
  if (code != 0) {
    return code;
  }
  struct lease_context x;
  context_init(&x);
  code = op(c, d, &x, f);
  context_close(&x);
  fflush(stdout);
  return code;
}

/* The workspace_root `workspace` is `<root>/<id>` of, or NULL. */
static const char *workspace_root_of(const struct helper_config *c, const char *workspace,
                                     const char *id) {
  size_t id_len = strlen(id);
  size_t workspace_len = strlen(workspace);
  for (size_t i = 0; i < c->workspace_root_count; i++) {
    const char *root = c->workspace_roots[i];
    size_t root_len = strlen(root);
    if (root_len + 1 + id_len == workspace_len && strncmp(workspace, root, root_len) == 0 &&
        workspace[root_len] == '/' && strcmp(workspace + root_len + 1, id) == 0) {
      return root;
    }
  }
  return NULL;
}

/* The workspace root of the descriptor's workspace, opened with no symlink in its path. */
static int open_workspace_root(const struct helper_config *c, const struct descriptor *d,
                               struct lease_context *x, struct failure *f) {
  const char *root = workspace_root_of(c, d->workspace, d->lease);
  if (root == NULL) {
    return fail_with(f, EXIT_LEASE_REFUSED,
                     "workspace %.128s must be <workspace_root>/%s for a configured "
                     "workspace_root%s",
                     d->workspace, d->lease,
                     c->workspace_root_count == 0 ? " (none is configured)" : "");
  }
  int error = private_dir_open_no_symlinks(root, &x->root);
  if (error != 0) {
    return fail_with(f, EXIT_LEASE_REFUSED,
                     "workspace_root %.128s: must be a directory reached through no symlink: %s",
                     root, strerror(error));
  }
  return 0;
}

/* Opens the lock directory and takes the lease guard. */
static int take_guard(const struct helper_config *c, int operation, struct lease_context *x,
                      struct failure *f) {
  int code = uid_lock_dir_open(c, &x->lock_dir, f);
  if (code == 0) code = uid_lock_guard(x->lock_dir, operation, &x->guard, f);
  return code;
}

/* The lease must be the descriptor's owner's: 83 for another owner's, and for one without an
 * owner (an older release's) unless this is its adoption. Checked before anything else of the
 * record is looked at or told: another supervisor's lease is not ours to learn about. */
static int check_owner(const struct descriptor *d, const struct lease_record *record,
                       struct failure *f) {
  if (record->owner[0] == '\0' && !d->adopt) {
    return fail_with(f, EXIT_LEASE_OWNER_MISMATCH,
                     "lease %s has no owner (recorded by an older release): only the supervisor "
                     "whose records hold it may adopt it (lease with adopt and its exact uid)",
                     d->lease);
  }
  if (record->owner[0] != '\0' && strcmp(record->owner, d->owner) != 0) {
    return fail_with(f, EXIT_LEASE_OWNER_MISMATCH,
                     "lease %s is held by another owner (another supervisor instance): refused",
                     d->lease);
  }
  return 0;
}

/* The lease of `d->lease`, which must be `d->owner`'s (83) and name `d->workspace` (81). */
static int read_lease(const struct descriptor *d, struct lease_context *x,
                      struct lease_record *record, bool *found, struct failure *f) {
  int code = lease_record_read(x->lease_dir, d->lease, record, found, f);
  if (code != 0 || !*found) {
    return code;
  }
  code = check_owner(d, record, f);
  if (code != 0) {
    return code;
  }
  if (strcmp(record->workspace, d->workspace) != 0) {
    return fail_with(f, EXIT_LEASE_REFUSED, "lease %s belongs to workspace %.128s, not %.128s",
                     d->lease, record->workspace, d->workspace);
  }
  return 0;
}

/* An owner-less record (an older release's) takes the descriptor's owner when `uid` is exactly
 * its uid: the uid the adopting supervisor's own records hold for the workspace. */
static int adopt_record(const struct lease_context *x, const struct descriptor *d,
                        struct lease_record *record, struct failure *f) {
  if (record->owner[0] != '\0') {
    return 0; /* already the descriptor's owner's (read_lease checked) */
  }
  if (d->uid != record->uid) {
    return fail_with(f, EXIT_LEASE_OWNER_MISMATCH,
                     "adopt: lease %s's uid is not %u: only its supervisor may adopt it", d->lease,
                     d->uid);
  }
  snprintf(record->owner, sizeof record->owner, "%s", d->owner);
  return lease_record_write(x->lease_dir, d->lease, record, f);
}

/* Fails unless the workspace entry is absent or a real directory (never a symlink). */
static int check_workspace_entry(const struct lease_context *x, const struct descriptor *d,
                                 struct failure *f) {
  struct stat st;
  if (fstatat(x->root, d->lease, &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? 0
                           : fail_with(f, EXIT_LEASE_REFUSED, "workspace %.128s: %s", d->workspace,
                                       strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return fail_with(f, EXIT_LEASE_REFUSED,
                     "workspace %.128s exists and is not a directory (a symlink is refused)",
                     d->workspace);
  }
  return 0;
}

/* The workspace directory, made when missing, owned by the uid, group the caller's, 02770. A
 * new lease adopts only an empty directory (one left by a lease interrupted before its end). */
static int make_workspace(const struct lease_context *x, const struct descriptor *d, uint32_t uid,
                          bool new_lease, struct failure *f) {
  bool existed = mkdirat(x->root, d->lease, 0700) != 0;
  if (existed && errno != EEXIST) {
    return fail_with(f, EXIT_LEASE_REFUSED, "workspace %.128s: mkdir: %s", d->workspace,
                     strerror(errno));
  }
  int fd = openat(x->root, d->lease, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return fail_with(f, EXIT_LEASE_REFUSED,
                     "workspace %.128s: must be a directory, not a symlink: %s", d->workspace,
                     strerror(errno));
  }
  if (existed && new_lease && !directory_is_empty(fd)) {
    close(fd);
    return fail_with(f, EXIT_LEASE_REFUSED,
                     "workspace %.128s exists, is not empty and has no lease: refused",
                     d->workspace);
  }
  bool owned = fchown(fd, uid, getgid()) == 0 && fchmod(fd, WORKSPACE_MODE) == 0;
  int error = errno;
  close(fd);
  if (!owned) {
    return fail_with(f, EXIT_LEASE_REFUSED, "workspace %.128s: chown/chmod: %s", d->workspace,
                     strerror(error));
  }
  return 0;
}

static bool uid_is_leased(const void *context, uint32_t uid) {
  return lease_uids_contain(context, uid);
}

/* The first uid from `d->uid` on (with uid_search, every uid of the range once) that no
 * workspace holds, no turn holds and no live process has: the launch's own search, with the
 * lock let go at once because the record, written under the guard, keeps the uid from now on. */
static int pick_free_uid(const struct helper_config *c, const struct descriptor *d,
                         const struct lease_context *x, uint32_t *uid, struct failure *f) {
  static struct lease_uids leased;
  int code = lease_uids_read(x->lease_dir, &leased, f);
  int lock = -1;
  if (code == 0) {
    code =
        uid_lock_take(c, x->lock_dir, d->uid, d->uid_search, uid_is_leased, &leased, uid, &lock, f);
  }
  close_if_open(&lock);
  return code;
}

static int lease_in_context(const struct helper_config *c, const struct descriptor *d,
                            struct lease_context *x, struct failure *f) {
  int code = open_workspace_root(c, d, x, f);
  if (code == 0) code = take_guard(c, LOCK_EX, x, f);
  if (code == 0) code = lease_dir_open(c, true, &x->lease_dir, f);
  struct lease_record record;
  bool found = false;
  if (code == 0) code = read_lease(d, x, &record, &found, f);
  if (code != 0) {
    return code;
  }
  if (found) {
    if (d->adopt) code = adopt_record(x, d, &record, f);
    if (code == 0) code = make_workspace(x, d, record.uid, false, f);
    if (code == 0) printf("leased %u\nlease existing\n", record.uid);
    return code;
  }
  if (d->adopt) {
    return fail_with(f, EXIT_LEASE_REFUSED, "adopt: no lease %s", d->lease);
  }
  memset(&record, 0, sizeof record);
  snprintf(record.owner, sizeof record.owner, "%s", d->owner);
  snprintf(record.workspace, sizeof record.workspace, "%s", d->workspace);
  code = check_workspace_entry(x, d, f);
  if (code == 0) code = pick_free_uid(c, d, x, &record.uid, f);
  /* The record first: a crash after it leaves a lease whose next request makes the directory. */
  if (code == 0) code = lease_record_write(x->lease_dir, d->lease, &record, f);
  if (code != 0) {
    return code;
  }
  code = make_workspace(x, d, record.uid, true, f);
  if (code != 0) {
    struct failure ignored = {0, {0}};
    lease_record_remove(x->lease_dir, d->lease, &ignored);
    return code;
  }
  printf("leased %u\nlease new\n", record.uid);
  return 0;
}

int run_lease(const struct helper_config *c, const struct descriptor *d, struct failure *f) {
  return run_workspace_op(c, d, lease_in_context, f);
}

/* Holds the uid's lock exclusively for the release: 82 while a turn holds it or a process of
 * the uid lives. */
static int hold_idle_uid(const struct lease_context *x, const struct descriptor *d, uint32_t uid,
                         int *lock, struct failure *f) {
  int error = uid_lock_try(x->lock_dir, uid, LOCK_EX, false, lock);
  if (error == EWOULDBLOCK) {
    return fail_with(f, EXIT_WORKSPACE_BUSY, "workspace %s: a turn holds its uid %u", d->lease,
                     uid);
  }
  if (error != 0) {
    return fail_with(f, EXIT_INTERNAL, "uid lock %u: %s", uid, strerror(error));
  }
  if (procs_uid_has_live_process(uid)) {
    return fail_with(f, EXIT_WORKSPACE_BUSY, "workspace %s: a process of its uid %u lives",
                     d->lease, uid);
  }
  return 0;
}

/* Undoes the octal escapes (\040 for a space) mountinfo writes in a path, in place. */
static void unescape_mount_path(char *path) {
  char *out = path;
  for (const char *in = path; *in != '\0'; out++) {
    bool octal = in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' &&
                 in[3] >= '0' && in[3] <= '7';
    if (octal) {
      *out = (char)(((in[1] - '0') << 6) | ((in[2] - '0') << 3) | (in[3] - '0'));
      in += 4;
    } else {
      *out = *in++;
    }
  }
  *out = '\0';
}

/* Whether a mount point of this mount namespace is the workspace or lies beneath it, checked
 * before anything is removed (the walk refuses one too, as a backstop against a race). A
 * mountinfo that cannot be read counts as yes. */
static bool has_mount_inside(const char *workspace) {
  static char line[8192];
  FILE *mounts = fopen("/proc/self/mountinfo", "re");
  if (mounts == NULL) {
    return true;
  }
  bool found = false;
  while (!found && fgets(line, sizeof line, mounts) != NULL) {
    /* mount id, parent id, major:minor, root, mount point, ... */
    char *field = line;
    for (int skip = 0; skip < 4 && field != NULL; skip++) {
      field = strchr(field, ' ');
      field = field == NULL ? NULL : field + 1;
    }
    char *end = field == NULL ? NULL : strchr(field, ' ');
    if (end == NULL) {
      found = true; /* a line longer than the buffer or not in the format: fail closed */
      break;
    }
    *end = '\0';
    unescape_mount_path(field);
    found = strcmp(field, workspace) == 0 || path_is_strictly_beneath(field, workspace);
  }
  fclose(mounts);
  return found;
}

/* Removes the workspace tree and the workspace directory; an absent one (a release that ended
 * before its record went) counts nothing. */
static int remove_workspace(const struct lease_context *x, const struct descriptor *d,
                            struct tree_totals *totals, struct failure *f) {
  if (has_mount_inside(d->workspace)) {
    return fail_with(f, EXIT_WORKSPACE_BUSY,
                     "workspace %.128s has a mount point inside: it is never entered nor "
                     "unmounted",
                     d->workspace);
  }
  int top = openat(x->root, d->lease, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (top < 0 && errno == ENOENT) {
    return 0;
  }
  if (top < 0) {
    return fail_with(f, EXIT_LEASE_REFUSED,
                     "workspace %.128s: must be a directory, not a symlink: %s", d->workspace,
                     strerror(errno));
  }
  if (!tree_walk_same_mount(x->root, top)) {
    close(top);
    return fail_with(f, EXIT_WORKSPACE_BUSY,
                     "workspace %.128s is a mount point: it is never entered nor unmounted",
                     d->workspace);
  }
  int code = tree_walk(top, TREE_REMOVE, totals, f);
  close(top);
  if (code == 0 && unlinkat(x->root, d->lease, AT_REMOVEDIR) != 0 && errno != ENOENT) {
    code =
        fail_with(f, EXIT_INTERNAL, "workspace %.128s: rmdir: %s", d->workspace, strerror(errno));
  }
  return code;
}

static int release_in_context(const struct helper_config *c, const struct descriptor *d,
                              struct lease_context *x, struct failure *f) {
  int code = open_workspace_root(c, d, x, f);
  /* The guard stays taken to the end: no lease of this id, and no launch, meets a half-removed
   * workspace. */
  if (code == 0) code = take_guard(c, LOCK_EX, x, f);
  if (code == 0) code = lease_dir_open(c, false, &x->lease_dir, f);
  struct lease_record record;
  bool found = false;
  if (code == 0) code = read_lease(d, x, &record, &found, f);
  if (code == 0 && !found) {
    code = fail_with(f, EXIT_LEASE_REFUSED, "release: no lease %s", d->lease);
  }
  int lock = -1;
  if (code == 0) code = hold_idle_uid(x, d, record.uid, &lock, f);
  struct tree_totals totals = {0, 0};
  if (code == 0) code = workspace_image_unmount(x->root, d->lease, d->workspace, &totals, f);
  if (code == 0) code = remove_workspace(x, d, &totals, f);
  if (code == 0) code = workspace_image_remove(x->root, d->lease, f);
  if (code == 0) code = lease_record_remove(x->lease_dir, d->lease, f);
  close_if_open(&lock);
  if (code == 0) {
    printf("released %u\nremoved_bytes %llu\nremoved_files %llu\n", record.uid,
           (unsigned long long)totals.bytes, (unsigned long long)totals.files);
  }
  return code;
}

int run_release(const struct helper_config *c, const struct descriptor *d, struct failure *f) {
  return run_workspace_op(c, d, release_in_context, f);
}

static int usage_in_context(const struct helper_config *c, const struct descriptor *d,
                            struct lease_context *x, struct failure *f) {
  int code = open_workspace_root(c, d, x, f);
  if (code == 0) code = lease_dir_open(c, false, &x->lease_dir, f);
  struct lease_record record;
  bool found = false;
  if (code == 0) code = read_lease(d, x, &record, &found, f);
  if (code == 0 && !found) {
    code = fail_with(f, EXIT_LEASE_REFUSED, "usage: no lease %s", d->lease);
  }
  if (code != 0) {
    return code;
  }
  int top = openat(x->root, d->lease, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (top < 0) {
    return fail_with(f, EXIT_LEASE_REFUSED,
                     "workspace %.128s: must be a directory, not a symlink: %s", d->workspace,
                     strerror(errno));
  }
  struct tree_totals totals = {0, 0};
  struct tree_walk_options options;
  tree_walk_usage_options(&options);
  bool measured = false;
  code = workspace_image_measure(x->root, d->lease, top, &totals, &measured, f);
  if (code == 0 && !measured) code = tree_walk_bounded(top, TREE_MEASURE, &options, &totals, f);
  close(top);
  if (code == 0) {
    printf("bytes %llu\nfiles %llu\ncomplete %s\nimage %s\n", (unsigned long long)totals.bytes,
           (unsigned long long)totals.files, options.incomplete ? "no" : "yes",
           measured ? "yes" : "no");
  }
  return code;
}

int run_usage(const struct helper_config *c, const struct descriptor *d, struct failure *f) {
  return run_workspace_op(c, d, usage_in_context, f);
}

static int image_in_context(const struct helper_config *c, const struct descriptor *d,
                            struct lease_context *x, struct failure *f) {
  int code = open_workspace_root(c, d, x, f);
  /* Exclusive: a release of the same lease never meets a half-mounted image. */
  if (code == 0) code = take_guard(c, LOCK_EX, x, f);
  if (code == 0) code = lease_dir_open(c, false, &x->lease_dir, f);
  struct lease_record record;
  bool found = false;
  if (code == 0) code = read_lease(d, x, &record, &found, f);
  if (code == 0 && !found) {
    code = fail_with(f, EXIT_LEASE_REFUSED, "image: no lease %s", d->lease);
  }
  if (code != 0) {
    return code;
  }
  struct workspace_image_request request = {d->lease, d->workspace, d->max_bytes, d->max_files};
  return workspace_image_mount(x->root, &request, f);
}

int run_image(const struct helper_config *c, const struct descriptor *d, struct failure *f) {
  return run_workspace_op(c, d, image_in_context, f);
}

/* One component of `dir` beneath the held `parent`: made when missing (then handed to the uid),
 * opened without following a link. The new fd replaces `*parent`. */
static int make_component(int *parent, const char *name, uint32_t uid, unsigned *made,
                          const struct descriptor *d, struct failure *f) {
  bool created = mkdirat(*parent, name, 0700) == 0;
  if (!created && errno != EEXIST) {
    return fail_with(f, EXIT_LEASE_REFUSED, "mkdir %.128s: %s: %s", d->dir, name, strerror(errno));
  }
  int next = openat(*parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (next < 0) {
    int error = errno;
    struct stat st;
    const char *what = fstatat(*parent, name, &st, AT_SYMLINK_NOFOLLOW) != 0 ? strerror(error)
                       : S_ISLNK(st.st_mode)                                 ? "is a symlink"
                       : S_ISREG(st.st_mode)                                 ? "is not a directory"
                                                                             : "is a special file";
    return fail_with(f, EXIT_LEASE_REFUSED, "mkdir %.128s: component %s %s (never followed)",
                     d->dir, name, what);
  }
  close(*parent);
  *parent = next;
  if (!created) {
    return 0;
  }
  /* Only what this call made changes owner: a turn that swapped in its own directory meanwhile
   * gets its own directory handed to its own uid, nothing else. */
  if (fchown(next, uid, getgid()) != 0 || fchmod(next, WORKSPACE_MODE) != 0) {
    return fail_with(f, EXIT_LEASE_REFUSED, "mkdir %.128s: %s: chown/chmod: %s", d->dir, name,
                     strerror(errno));
  }
  (*made)++;
  return 0;
}

static int mkdir_in_context(const struct helper_config *c, const struct descriptor *d,
                            struct lease_context *x, struct failure *f) {
  int code = open_workspace_root(c, d, x, f);
  if (code == 0) code = lease_dir_open(c, false, &x->lease_dir, f);
  struct lease_record record;
  bool found = false;
  if (code == 0) code = read_lease(d, x, &record, &found, f);
  if (code == 0 && !found) {
    code = fail_with(f, EXIT_LEASE_REFUSED, "mkdir: no lease %s", d->lease);
  }
  if (code != 0) {
    return code;
  }
  int dir = openat(x->root, d->lease, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0) {
    return fail_with(f, EXIT_LEASE_REFUSED,
                     "workspace %.128s: must be a directory, not a symlink: %s", d->workspace,
                     strerror(errno));
  }
  char path[DESCRIPTOR_MAX_LINE];
  snprintf(path, sizeof path, "%s", d->dir);
  unsigned made = 0;
  char *rest = path;
  for (char *name = strsep(&rest, "/"); code == 0 && name != NULL; name = strsep(&rest, "/")) {
    code = make_component(&dir, name, record.uid, &made, d, f);
  }
  close(dir);
  if (code == 0) {
    printf("made %u\n", made);
  }
  return code;
}

int run_mkdir(const struct helper_config *c, const struct descriptor *d, struct failure *f) {
  return run_workspace_op(c, d, mkdir_in_context, f);
}

static int leased_launch_uid(const struct helper_config *c, const struct descriptor *d,
                             struct lease_context *x, uint32_t *uid, int *lock_fd,
                             struct failure *f) {
  struct lease_record record;
  bool found = false;
  int code = lease_dir_open(c, false, &x->lease_dir, f);
  if (code == 0) code = lease_record_read(x->lease_dir, d->lease, &record, &found, f);
  if (code == 0 && !found) {
    code = fail_with(f, EXIT_LEASE_REFUSED, "launch: no lease %s", d->lease);
  }
  if (code == 0) code = check_owner(d, &record, f);
  if (code != 0) {
    return code;
  }
  if (strcmp(d->workspace, record.workspace) != 0 &&
      !path_is_strictly_beneath(d->workspace, record.workspace)) {
    return fail_with(f, EXIT_LEASE_REFUSED,
                     "launch: workspace %.128s is not lease %s's workspace %.128s or beneath it",
                     d->workspace, d->lease, record.workspace);
  }
  uint32_t wanted = 0;
  code = policy_worker_uid(c, d, &wanted, f);
  if (code != 0) {
    return code;
  }
  if (!d->has_uid || wanted != record.uid) {
    return fail_with(f, EXIT_UID_OUT_OF_RANGE,
                     "launch: lease %s runs as its uid %u: uid must be %u", d->lease, record.uid,
                     record.uid);
  }
  int error = uid_lock_try(x->lock_dir, record.uid, LOCK_SH, false, lock_fd);
  if (error == EWOULDBLOCK) {
    return fail_with(f, EXIT_UID_IN_USE, "launch: uid %u of lease %s is held exclusively",
                     record.uid, d->lease);
  }
  if (error != 0) {
    return fail_with(f, EXIT_INTERNAL, "uid lock %u: %s", record.uid, strerror(error));
  }
  *uid = record.uid;
  return 0;
}

static int unleased_launch_uid(const struct helper_config *c, const struct descriptor *d,
                               struct lease_context *x, uint32_t *uid, int *lock_fd,
                               struct failure *f) {
  static struct lease_uids leased;
  uint32_t wanted = 0;
  int code = policy_worker_uid(c, d, &wanted, f);
  if (code == 0) code = lease_dir_open(c, false, &x->lease_dir, f);
  if (code == 0) code = lease_uids_read(x->lease_dir, &leased, f);
  if (code == 0) {
    code = uid_lock_take(c, x->lock_dir, wanted, d->uid_search, uid_is_leased, &leased, uid,
                         lock_fd, f);
  }
  return code;
}

int workspace_lease_launch_uid(const struct helper_config *c, const struct descriptor *d,
                               uint32_t *uid, int *lock_fd, struct failure *f) {
  struct lease_context x;
  context_init(&x);
  int code = take_guard(c, LOCK_SH, &x, f);
  if (code == 0) {
    code = d->lease != NULL ? leased_launch_uid(c, d, &x, uid, lock_fd, f)
                            : unleased_launch_uid(c, d, &x, uid, lock_fd, f);
  }
  context_close(&x);
  return code;
}
