#include "tree-walk.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Who a directory is, to check that ".." leads back to the directory the walk came from. */
struct node {
  uint32_t dev_major;
  uint32_t dev_minor;
  uint64_t ino;
  uint64_t mnt_id;
  bool has_mnt_id;
};

struct level {
  struct node node;
  long cookie; /* measure: where to resume reading after the child (telldir) */
};

static struct level levels[TREE_WALK_MAX_DEPTH];

#define STATX_WANTED (STATX_BASIC_STATS | STATX_MNT_ID)

static int node_at(int dirfd, const char *name, int flags, struct statx *stx, struct node *node) {
  memset(node, 0, sizeof *node);
  if (statx(dirfd, name, flags | AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_WANTED, stx) != 0) {
    return errno;
  }
  node->dev_major = stx->stx_dev_major;
  node->dev_minor = stx->stx_dev_minor;
  node->ino = stx->stx_ino;
  node->has_mnt_id = (stx->stx_mask & STATX_MNT_ID) != 0;
  node->mnt_id = stx->stx_mnt_id;
  return 0;
}

static bool same_node(const struct node *a, const struct node *b) {
  return a->dev_major == b->dev_major && a->dev_minor == b->dev_minor && a->ino == b->ino;
}

static bool same_mount(const struct node *top, const struct node *entry) {
  if (top->dev_major != entry->dev_major || top->dev_minor != entry->dev_minor) {
    return false;
  }
  return !top->has_mnt_id || !entry->has_mnt_id || top->mnt_id == entry->mnt_id;
}

bool tree_walk_same_mount(int dir_a, int dir_b) {
  struct statx stx;
  struct node a;
  struct node b;
  return node_at(dir_a, "", AT_EMPTY_PATH, &stx, &a) == 0 &&
         node_at(dir_b, "", AT_EMPTY_PATH, &stx, &b) == 0 && same_mount(&a, &b);
}

static bool is_dot_or_dot_dot(const char *name) {
  return strcmp(name, ".") == 0 || strcmp(name, "..") == 0;
}

/* Removes the emptied directory `child` from `dir`, found by its identity (the walk keeps no
 * names); leaves `dir` rewound. */
static int remove_child_directory(DIR *dir, const struct node *child, struct failure *f) {
  rewinddir(dir);
  struct dirent *entry;
  errno = 0;
  while ((entry = readdir(dir)) != NULL) {
    struct statx stx;
    struct node node = {0, 0, 0, 0, false};
    if (is_dot_or_dot_dot(entry->d_name) ||
        node_at(dirfd(dir), entry->d_name, 0, &stx, &node) != 0 || !same_node(&node, child)) {
      continue;
    }
    int removed = unlinkat(dirfd(dir), entry->d_name, AT_REMOVEDIR);
    int error = errno;
    rewinddir(dir);
    return removed == 0 ? 0
                        : fail_with(f, EXIT_INTERNAL, "removing a directory: %s", strerror(error));
  }
  rewinddir(dir);
  return fail_with(f, EXIT_INTERNAL, "a directory moved while it was being removed");
}

struct walk {
  enum tree_walk_mode mode;
  struct node top;
  struct tree_totals *totals;
  struct tree_walk_options *options;
  uint64_t entries;
  bool stopped; /* a measure's bound was reached */
  DIR *dir;
  size_t depth;
  bool saw_entry; /* remove: this pass over the directory found something (rewind, read again) */
};

/* The deadline is read every this many entries: a clock read per entry would cost more than
 * the statx it guards. */
#define DEADLINE_CHECK_EVERY 1024

static uint64_t monotonic_ns(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
}

/* A measure past one of its bounds stops with what it counted so far. */
static bool past_bound(struct walk *w) {
  const struct tree_walk_options *o = w->options;
  w->entries++;
  if (w->mode != TREE_MEASURE) {
    return false;
  }
  bool past = (o->max_entries != 0 && w->entries > o->max_entries) ||
              (o->deadline_ns != 0 && w->entries % DEADLINE_CHECK_EVERY == 0 &&
               monotonic_ns() >= o->deadline_ns);
  if (past) {
    w->stopped = true;
    w->options->incomplete = true;
  }
  return past;
}

/* A measure skips what the caller may not read (shared mode: a turn's chmod 000) and says its
 * totals are a lower bound; anything else fails the walk. */
static bool skipped_unreadable(struct walk *w, int error) {
  if (w->mode != TREE_MEASURE || (error != EACCES && error != EPERM)) {
    return false;
  }
  w->options->incomplete = true;
  return true;
}

int tree_walk_restore_owner_access(int dirfd, const char *name, struct failure *f) {
  struct statx stx;
  struct node expected = {0, 0, 0, 0, false};
  int error = node_at(dirfd, name, 0, &stx, &expected);
  if (error != 0) {
    return error == ENOENT ? 0 : fail_with(f, EXIT_INTERNAL, "statx: %s", strerror(error));
  }
  if (!S_ISDIR(stx.stx_mode) || stx.stx_uid != geteuid() || (stx.stx_mode & S_IRWXU) == S_IRWXU) {
    return 0;
  }
  /* O_PATH needs no permission on the directory itself; the chmod then goes through that fd's
   * /proc link, so a rename between the check and the change cannot redirect it. */
  int fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return errno == ENOENT
               ? 0
               : fail_with(f, EXIT_INTERNAL, "opening a directory to restore access: %s",
                           strerror(errno));
  }
  struct node held = {0, 0, 0, 0, false};
  char link[64];
  int code = 0;
  if (node_at(fd, "", AT_EMPTY_PATH, &stx, &held) != 0 || !same_node(&held, &expected)) {
    code = fail_with(f, EXIT_INTERNAL, "the tree changed under the walk (a directory replaced)");
  } else {
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    if (chmod(link, (mode_t)((stx.stx_mode & 07777) | S_IRWXU)) != 0) {
      code =
          fail_with(f, EXIT_INTERNAL, "restoring a directory's owner access: %s", strerror(errno));
    }
  }
  close(fd);
  return code;
}

static int open_directory_stream(struct walk *w, int fd, struct failure *f) {
  w->dir = fdopendir(fd);
  if (w->dir == NULL) {
    int error = errno;
    close(fd);
    return fail_with(f, EXIT_INTERNAL, "fdopendir: %s", strerror(error));
  }
  w->saw_entry = false;
  return 0;
}

/* Back to the parent through "..", which must be the directory the walk came down from. */
static int walk_up(struct walk *w, struct failure *f) {
  struct node child = levels[w->depth].node;
  int up = openat(dirfd(w->dir), "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  int error = errno;
  closedir(w->dir);
  w->dir = NULL;
  struct statx stx;
  struct node node = {0, 0, 0, 0, false};
  if (up < 0) {
    return fail_with(f, EXIT_INTERNAL, "walking back up: %s", strerror(error));
  }
  if (node_at(up, "", AT_EMPTY_PATH, &stx, &node) != 0 ||
      !same_node(&node, &levels[w->depth - 1].node)) {
    close(up);
    return fail_with(f, EXIT_INTERNAL, "the tree changed under the walk (a directory moved)");
  }
  w->depth--;
  int code = open_directory_stream(w, up, f);
  if (code != 0) {
    return code;
  }
  if (w->mode == TREE_REMOVE) {
    return remove_child_directory(w->dir, &child, f);
  }
  seekdir(w->dir, levels[w->depth].cookie);
  return 0;
}

static int walk_down(struct walk *w, const char *name, const struct node *expected,
                     struct failure *f) {
  if (w->depth + 1 >= TREE_WALK_MAX_DEPTH) {
    return fail_with(f, EXIT_INTERNAL, "the tree is deeper than %d levels", TREE_WALK_MAX_DEPTH);
  }
  long cookie = telldir(w->dir);
  int child = openat(dirfd(w->dir), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (child < 0) {
    return errno == ENOENT || skipped_unreadable(w, errno)
               ? 0
               : fail_with(f, EXIT_INTERNAL, "opening a directory: %s", strerror(errno));
  }
  struct statx stx;
  struct node node = {0, 0, 0, 0, false};
  if (node_at(child, "", AT_EMPTY_PATH, &stx, &node) != 0 || !same_node(&node, expected)) {
    close(child);
    return fail_with(f, EXIT_INTERNAL, "the tree changed under the walk (a directory replaced)");
  }
  levels[w->depth].cookie = cookie;
  closedir(w->dir);
  w->dir = NULL;
  w->depth++;
  levels[w->depth].node = node;
  return open_directory_stream(w, child, f);
}

static int visit_entry(struct walk *w, const char *name, struct failure *f) {
  struct statx stx;
  struct node node = {0, 0, 0, 0, false};
  int error = node_at(dirfd(w->dir), name, 0, &stx, &node);
  if (error == ENOENT || skipped_unreadable(w, error)) {
    return 0; /* gone since it was listed, or not the caller's to read */
  }
  if (error != 0) {
    return fail_with(f, EXIT_INTERNAL, "statx: %s", strerror(error));
  }
  if (past_bound(w)) {
    return 0;
  }
  if (!same_mount(&w->top, &node)) {
    if (w->mode == TREE_REMOVE) {
      return fail_with(f, EXIT_WORKSPACE_BUSY,
                       "a mount point is inside the workspace: it is never entered nor unmounted");
    }
    return 0;
  }
  w->totals->bytes += stx.stx_blocks * 512;
  if (S_ISDIR(stx.stx_mode)) {
    int code = w->mode == TREE_REMOVE && w->options->restore_owner_access
                   ? tree_walk_restore_owner_access(dirfd(w->dir), name, f)
                   : 0;
    return code != 0 ? code : walk_down(w, name, &node, f);
  }
  w->totals->files++;
  if (w->mode == TREE_REMOVE && unlinkat(dirfd(w->dir), name, 0) != 0 && errno != ENOENT) {
    return fail_with(f, EXIT_INTERNAL, "removing a file: %s", strerror(errno));
  }
  return 0;
}

/* One step: the next entry of the current directory, or, at its end, back up a level. */
static int walk_step(struct walk *w, bool *done, struct failure *f) {
  errno = 0;
  struct dirent *entry = readdir(w->dir);
  if (entry == NULL) {
    if (errno != 0) {
      return fail_with(f, EXIT_INTERNAL, "readdir: %s", strerror(errno));
    }
    if (w->mode == TREE_REMOVE && w->saw_entry) {
      rewinddir(w->dir); /* entries removed during a pass may hide others: read until empty */
      w->saw_entry = false;
      return 0;
    }
    if (w->depth == 0) {
      *done = true;
      return 0;
    }
    return walk_up(w, f);
  }
  if (is_dot_or_dot_dot(entry->d_name)) {
    return 0;
  }
  w->saw_entry = true;
  return visit_entry(w, entry->d_name, f);
}

int tree_walk(int top, enum tree_walk_mode mode, struct tree_totals *totals, struct failure *f) {
  struct tree_walk_options none;
  memset(&none, 0, sizeof none);
  return tree_walk_bounded(top, mode, &none, totals, f);
}

void tree_walk_usage_options(struct tree_walk_options *options) {
  memset(options, 0, sizeof *options);
  options->max_entries = TREE_USAGE_MAX_ENTRIES;
  options->deadline_ns = monotonic_ns() + (uint64_t)TREE_USAGE_MAX_SECONDS * 1000000000u;
}

int tree_walk_bounded(int top, enum tree_walk_mode mode, struct tree_walk_options *options,
                      struct tree_totals *totals, struct failure *f) {
  struct walk w;
  memset(&w, 0, sizeof w);
  w.mode = mode;
  w.totals = totals;
  w.options = options;
  struct statx stx;
  if (node_at(top, "", AT_EMPTY_PATH, &stx, &w.top) != 0 || !S_ISDIR(stx.stx_mode)) {
    return fail_with(f, EXIT_INTERNAL, "the walk's top is not a directory");
  }
  totals->bytes += stx.stx_blocks * 512;
  levels[0].node = w.top;
  /* A fresh open file description: the walk's reading position is its own. */
  int fd = openat(top, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return fail_with(f, EXIT_INTERNAL, "opening the walk's top: %s", strerror(errno));
  }
  int code = open_directory_stream(&w, fd, f);
  bool done = false;
  while (code == 0 && !done && !w.stopped) {
    code = walk_step(&w, &done, f);
  }
  if (w.dir != NULL) {
    closedir(w.dir);
  }
  return code;
}
