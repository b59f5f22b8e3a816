#include "shared-tree.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "private-dir.h"
#include "tree-walk.h"
#include "workspace-image.h"

/* Opens the configured workspace_root that `workspace` is `<root>/<lease>` of (no symlink in
 * its path). Exit code 81 otherwise. */
static int open_root_of(const struct helper_config *c, const struct descriptor *d, int *root_fd,
                        struct failure *f) {
  size_t lease_len = strlen(d->lease);
  size_t workspace_len = strlen(d->workspace);
  for (size_t i = 0; i < c->workspace_root_count; i++) {
    const char *root = c->workspace_roots[i];
    size_t root_len = strlen(root);
    if (root_len + 1 + lease_len != workspace_len || strncmp(d->workspace, root, root_len) != 0 ||
        d->workspace[root_len] != '/' || strcmp(d->workspace + root_len + 1, d->lease) != 0) {
      continue;
    }
    int error = private_dir_open_no_symlinks(root, root_fd);
    return error == 0 ? 0
                      : fail_with(f, EXIT_LEASE_REFUSED,
                                  "workspace_root %.128s: must be a directory reached through no "
                                  "symlink: %s",
                                  root, strerror(error));
  }
  return fail_with(f, EXIT_LEASE_REFUSED,
                   "workspace %.128s must be <workspace_root>/%s for a configured "
                   "workspace_root%s",
                   d->workspace, d->lease,
                   c->workspace_root_count == 0 ? " (none is configured)" : "");
}

/* The workspace directory beneath its root: no symlink, and no mount point unless it is the
 * workspace's own image (then `*image_totals` holds its statfs usage and `*on_image` is set).
 * `*top` is -1 when it does not exist. */
static int open_workspace(int root, const struct descriptor *d, int *top,
                          struct tree_totals *image_totals, bool *on_image, struct failure *f) {
  *on_image = false;
  *top = openat(root, d->lease, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (*top < 0 && errno == ENOENT) {
    return 0;
  }
  if (*top < 0) {
    return fail_with(f, EXIT_LEASE_REFUSED,
                     "workspace %.128s: must be a directory, not a symlink: %s", d->workspace,
                     strerror(errno));
  }
  int code = workspace_image_measure(root, d->lease, *top, image_totals, on_image, f);
  if (code != 0 || (!*on_image && !tree_walk_same_mount(root, *top))) {
    close(*top);
    *top = -1;
    return code != 0 ? code
                     : fail_with(f, EXIT_WORKSPACE_BUSY,
                                 "workspace %.128s is a mount point: it is never entered nor "
                                 "unmounted",
                                 d->workspace);
  }
  return 0;
}

int run_shared_image(const struct helper_config *c, const struct descriptor *d, struct failure *f) {
  int root = -1;
  int code = open_root_of(c, d, &root, f);
  struct workspace_image_request request = {d->lease, d->workspace, d->max_bytes, d->max_files};
  if (code == 0) code = workspace_image_mount(root, &request, f);
  fflush(stdout);
  if (root >= 0) close(root);
  return code;
}

int run_shared_usage(const struct helper_config *c, const struct descriptor *d, struct failure *f) {
  int root = -1;
  int top = -1;
  int code = open_root_of(c, d, &root, f);
  struct tree_totals totals = {0, 0};
  bool on_image = false;
  if (code == 0) code = open_workspace(root, d, &top, &totals, &on_image, f);
  if (code == 0 && top < 0) {
    code = fail_with(f, EXIT_LEASE_REFUSED, "usage: workspace %.128s does not exist", d->workspace);
  }
  struct tree_walk_options options;
  tree_walk_usage_options(&options);
  if (code == 0 && !on_image) code = tree_walk_bounded(top, TREE_MEASURE, &options, &totals, f);
  if (code == 0) {
    printf("bytes %llu\nfiles %llu\ncomplete %s\nimage %s\n", (unsigned long long)totals.bytes,
           (unsigned long long)totals.files, options.incomplete ? "no" : "yes",
           on_image ? "yes" : "no");
    fflush(stdout);
  }
  if (top >= 0) close(top);
  if (root >= 0) close(root);
  return code;
}

int run_shared_release(const struct helper_config *c, const struct descriptor *d,
                       struct failure *f) {
  int root = -1;
  int top = -1;
  int code = open_root_of(c, d, &root, f);
  /* The workspace itself may be the one a turn made unreadable. */
  struct tree_totals totals = {0, 0};
  /* A root supervisor's workspace may be an image: unmounted (never lazily) before the walk. */
  if (code == 0 && geteuid() == 0)
    code = workspace_image_unmount(root, d->lease, d->workspace, &totals, f);
  /* The image goes first: what it held is gone with it, and the directory beneath is then an
   * ordinary one for the walk. */
  if (code == 0 && geteuid() == 0) code = workspace_image_remove(root, d->lease, f);
  if (code == 0) code = tree_walk_restore_owner_access(root, d->lease, f);
  bool on_image = false;
  struct tree_totals ignored = {0, 0};
  if (code == 0) code = open_workspace(root, d, &top, &ignored, &on_image, f);
  struct tree_walk_options options;
  memset(&options, 0, sizeof options);
  options.restore_owner_access = true;
  if (code == 0 && top >= 0) code = tree_walk_bounded(top, TREE_REMOVE, &options, &totals, f);
  if (code == 0 && top >= 0 && unlinkat(root, d->lease, AT_REMOVEDIR) != 0 && errno != ENOENT) {
    code =
        fail_with(f, EXIT_INTERNAL, "workspace %.128s: rmdir: %s", d->workspace, strerror(errno));
  }
  if (code == 0) {
    printf("removed_bytes %llu\nremoved_files %llu\n", (unsigned long long)totals.bytes,
           (unsigned long long)totals.files);
    fflush(stdout);
  }
  if (top >= 0) close(top);
  if (root >= 0) close(root);
  return code;
}
