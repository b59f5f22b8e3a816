/* Workspace images (docs/workspaces.md, "The byte and inode cap"): a workspace whose
 * supervisor sets a byte cap is its own ext4 filesystem, made in a sparse image file of exactly
 * the cap's size, attached to a loop device that clears itself when unmounted, and mounted
 * nosuid,nodev on the workspace directory. A write past the cap, or a file past the inode
 * count, then fails with ENOSPC inside the turn and on the host alike, and the host's disk never
 * holds more than the image's size.
 *
 * The images live in `<workspace_root>/.turnhost-images/<lease>.img`: a directory that must be
 * root's, mode 0700, reached through no symlink (a workspace id never starts with a dot, so no
 * workspace can be named so). Every step works on fds: the image is opened with O_NOFOLLOW and
 * must be a root-owned regular file with one link, mkfs writes it through /proc/self/fd, the
 * loop device is configured from the image fd, and the filesystem is mounted with
 * fsopen/fsmount and moved onto the workspace directory fd the helper holds. Only the caller
 * with real uid 0 or the setuid helper may do any of it. */
#ifndef IDENTITY_HELPER_WORKSPACE_IMAGE_H
#define IDENTITY_HELPER_WORKSPACE_IMAGE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "descriptor.h"
#include "failure.h"
#include "tree-walk.h"

#define WORKSPACE_IMAGE_DIR ".turnhost-images"
/* The smallest image mkfs.ext4 makes with room left for files. */
#define WORKSPACE_IMAGE_MIN_BYTES (1ull << 20)
#define WORKSPACE_IMAGE_MAX_BYTES (1ull << 50)
#define WORKSPACE_IMAGE_MAX_FILES (1ull << 32)

/* What an `image` request asks: with `max_bytes`, make the workspace's image (when it has none;
 * the workspace directory must then be empty) and mount it; without, mount an existing image
 * only (the boot path). */
struct workspace_image_request {
  const char *lease;
  const char *workspace;
  uint64_t max_bytes; /* 0: attach an existing image only */
  uint64_t max_files; /* 0: mkfs's own inode count */
};

/* Makes and mounts, or re-attaches, the image of `<root>/<lease>` (root: the workspace root,
 * held); the filesystem's root directory takes the workspace directory's owner, group and mode.
 * Receipt `image made|attached|mounted|none` (mounted: it already was; none: no image and none
 * asked for). */
int workspace_image_mount(int root, const struct workspace_image_request *r, struct failure *f);

/* When `top` (the workspace directory as opened from `root`) is the mount of its own image:
 * its usage from statfs (`*measured` true), bytes used and inodes used by files and
 * directories. A mount point that is not its image is refused (82), an image that is not
 * mounted (81): the directory beneath it is not the workspace. */
int workspace_image_measure(int root, const char *lease, int top, struct tree_totals *totals,
                            bool *measured, struct failure *f);

/* Before a release: unmounts the workspace's image (not lazily: a process holding a file in
 * it answers 82, and the release is retried later), adding what it held to `totals`. A
 * workspace with no image mounted is left as it is. */
int workspace_image_unmount(int root, const char *lease, const char *workspace,
                            struct tree_totals *totals, struct failure *f);

/* After the release removed the directory: removes the image file, if any. */
int workspace_image_remove(int root, const char *lease, struct failure *f);

/* Whether a workspace image is a bound on this host, proved rather than assumed: in a private
 * mount namespace, an image of 1 MiB, `<root_path>/.turnhost-images/.probe-<pid>.img`, is made ext4
 * by the same mke2fs run, attached to a free loop device and mounted with the same calls and flags
 * as a workspace's; a write past its size must fail with ENOSPC, and so must a file past its
 * inode count. Then it is unmounted, the loop device it attached detached and the image removed:
 * nothing outlives the call (a probe killed half way leaves only its image, which the next probe
 * removes once that process is gone). Receipt `image_probe enforced`; a refusal reads
 * `image_probe <step>: <detail>`, the step one of root, namespace, image, mkfs, loop_attach,
 * mount, bytes_bound, files_bound, cleanup. */
int workspace_image_probe(const char *root_path, struct failure *f);

/* op image_probe: the probe in the configured workspace_root the descriptor's `workspace` names
 * exactly (the caller picks which of the helper's roots, never a path of its own). The same in
 * both modes: in shared mode it needs a root supervisor, as its workspaces' images do. */
int run_image_probe(const struct helper_config *c, const struct descriptor *d, struct failure *f);

#endif
