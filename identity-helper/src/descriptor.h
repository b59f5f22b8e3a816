/* The launch descriptor (protocol version 2): strict, line-based, fed one byte at a time so
 * the reader never consumes a byte past the final "end\n" of fd 3. */
#ifndef IDENTITY_HELPER_DESCRIPTOR_H
#define IDENTITY_HELPER_DESCRIPTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "failure.h"

#define DESCRIPTOR_PROTOCOL_VERSION 2
#define DESCRIPTOR_MAX_BYTES 65536
#define DESCRIPTOR_MAX_LINE 4096 /* including the newline */
#define DESCRIPTOR_MAX_CGROUPS 8
#define DESCRIPTOR_MAX_ENV 256
#define DESCRIPTOR_MAX_PATHS 64
#define DESCRIPTOR_MAX_HOSTNAME 64
#define DESCRIPTOR_MAX_ENV_NAME 255
#define DESCRIPTOR_MAX_PROTECT 64
#define DESCRIPTOR_MAX_HIDE 32
#define DESCRIPTOR_MAX_LEASE_ID 64
/* The turn's /tmp (and /dev/shm): 1 MiB to 1 TiB, default 512 MiB (the supervisor's default too).
 */
#define DESCRIPTOR_MIN_TMP_SIZE (1ull << 20)
#define DESCRIPTOR_MAX_TMP_SIZE (1ull << 40)
#define DESCRIPTOR_DEFAULT_TMP_SIZE (512ull << 20)

enum descriptor_op {
  OP_NONE = 0,
  OP_PROBE,
  OP_LAUNCH,
  OP_VIEW,
  OP_KILL,
  OP_LEASE,
  OP_RELEASE,
  OP_USAGE,
  OP_MKDIR,
  OP_IMAGE,
  /* `workspace` names a configured workspace_root (not a workspace): where the probe's
   * throwaway image is made */
  OP_IMAGE_PROBE
};

enum view_profile { PROFILE_NONE = 0, PROFILE_GOVERNED, PROFILE_STRICT };

enum protect_mode { PROTECT_READ_ONLY = 0, PROTECT_MASK_FILE, PROTECT_MASK_DIRECTORY };

/* A protected path inside the workspace: canonical, relative, no "." or ".." components. */
struct protect_rule {
  enum protect_mode mode;
  const char *path;
};

enum rlimit_slot {
  RLIMIT_SLOT_NPROC = 0,
  RLIMIT_SLOT_DATA,
  RLIMIT_SLOT_FSIZE,
  RLIMIT_SLOT_NOFILE,
  RLIMIT_SLOT_COUNT
};

struct descriptor {
  enum descriptor_op op;
  bool has_uid;
  uint32_t uid;
  bool has_gid;
  uint32_t gid;
  /* launch, lease: `uid` is where the search for a free uid of the range starts, not a demand */
  bool uid_search;
  /* A workspace lease id ([A-Za-z0-9_-], 1-64): lease, release and usage name it; a launch
   * with it runs as the uid leased to it. */
  const char *lease;
  /* Who holds the lease ([A-Za-z0-9_-], 1-64): the supervisor instance. Lease, release, usage and
   * a leased launch must name the lease's own owner. */
  const char *owner;
  /* lease: a record without an owner (written by an older release) takes `owner`, when `uid` is
   * exactly its uid. */
  bool adopt;
  /* image: the size of a new workspace image in bytes (0: attach an existing one only) and its
   * inode count for files (0: mkfs's own) */
  uint64_t max_bytes;
  uint64_t max_files;
  /* mkdir: the directory to make beneath the leased workspace (canonical, relative) */
  const char *dir;
  size_t cgroup_count;
  const char *cgroups[DESCRIPTOR_MAX_CGROUPS];
  bool has_rlimit[RLIMIT_SLOT_COUNT];
  uint64_t rlimit[RLIMIT_SLOT_COUNT];
  const char *hostname;
  const char *cwd;
  const char *profile;
  enum view_profile view_profile;
  const char *workspace;
  uint64_t tmp_size;
  size_t protect_count;
  struct protect_rule protects[DESCRIPTOR_MAX_PROTECT];
  /* Host paths the view never shows (absolute, canonical): masked where the view has them. */
  size_t hide_count;
  const char *hides[DESCRIPTOR_MAX_HIDE];
  size_t env_count;
  const char *env[DESCRIPTOR_MAX_ENV + 1]; /* NULL-terminated, ready for execve */
  size_t path_count;
  const char *paths[DESCRIPTOR_MAX_PATHS];
};

enum parser_state { PARSER_EXPECT_HEADER = 0, PARSER_BODY, PARSER_DONE, PARSER_FAILED };

enum feed_result { FEED_MORE = 0, FEED_DONE, FEED_FAILED };

/* All strings of the descriptor live in `arena`; nothing is heap-allocated. */
struct descriptor_parser {
  enum parser_state state;
  size_t total_bytes;
  size_t line_number;
  size_t line_len;
  char line[DESCRIPTOR_MAX_LINE];
  uint32_t keys_seen; /* bit per key index */
  size_t arena_used;
  char arena[DESCRIPTOR_MAX_BYTES];
  struct descriptor result;
};

void descriptor_parser_init(struct descriptor_parser *p);

/* Feeds one byte. FEED_DONE exactly after the "end\n" line of a complete, valid descriptor. */
enum feed_result descriptor_feed(struct descriptor_parser *p, unsigned char byte,
                                 struct failure *f);

/* Reads fd one byte at a time until FEED_DONE or a failure; EOF before "end\n" fails. */
int descriptor_read_fd(int fd, struct descriptor_parser *p, struct failure *f);

const char *descriptor_op_name(enum descriptor_op op);

const char *descriptor_protect_mode_name(enum protect_mode mode);

#endif
