/* The helper's own config: a root-owned file at a compiled-in path (only a real-uid-0 caller
 * may name another). The descriptor never chooses the program, the uid range or the roots.
 * In shared mode (`--shared`, the caller's own uid, no privilege) the caller names a config of
 * its own, which may not hold the separate-uid keys. */
#ifndef IDENTITY_HELPER_CONFIG_H
#define IDENTITY_HELPER_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "failure.h"

#ifndef HELPER_CONFIG_PATH
#define HELPER_CONFIG_PATH "/etc/turnhost/identity-helper.conf"
#endif
#ifndef HELPER_SUBUID_PATH
#define HELPER_SUBUID_PATH "/etc/subuid"
#endif
#ifndef HELPER_UID_LOCK_DIR
#define HELPER_UID_LOCK_DIR "/run/turnhost-uid-locks"
#endif

#ifndef HELPER_UID_LEASE_DIR
#define HELPER_UID_LEASE_DIR "/var/lib/turnhost-uid-leases"
#endif

#define CONFIG_MAX_BYTES 65536
#define CONFIG_MAX_WORKSPACE_ROOTS 16
#define CONFIG_MAX_CGROUP_ROOTS 32
#define CONFIG_MAX_WORKER_ARGS 32
#define CONFIG_MAX_VIEW_PATHS 16

struct helper_config {
  /* Shared mode: workers keep the caller's uid; no range, caller group or uid locks. */
  bool shared;
  uint32_t uid_first;
  uint32_t uid_count;
  gid_t caller_gid;
  size_t cgroup_root_count;
  const char *cgroup_roots[CONFIG_MAX_CGROUP_ROOTS];
  /* Where the uid lease locks live (uid-lock.h); a root-owned directory. */
  const char *uid_lock_dir;
  /* Where the workspace uid lease records live (lease-record.h); a root-owned directory. */
  const char *uid_lease_dir;
  /* The directories whose entries `<root>/<lease id>` may be leased workspaces. */
  size_t workspace_root_count;
  const char *workspace_roots[CONFIG_MAX_WORKSPACE_ROOTS];
  const char *worker_exec;
  size_t worker_arg_count;
  const char *worker_args[CONFIG_MAX_WORKER_ARGS];
  /* Read-only paths every filesystem view keeps at their own place (the worker's program). */
  size_t view_path_count;
  const char *view_paths[CONFIG_MAX_VIEW_PATHS];
  /* Unresolved names, looked up after parsing. */
  const char *caller_group_name;
  const char *subuid_user;
  size_t arena_used;
  char arena[CONFIG_MAX_BYTES];
};

/* Parses config text (no file or name-service access). Exit code 70 on any problem. */
int config_parse(const char *text, size_t len, bool shared, struct helper_config *c,
                 struct failure *f);

/* Opens `path` (no symlink), requires a regular file owned by root (or, in shared mode, by the
 * caller's real uid) and not writable by group or other, parses it and, for separate uids,
 * resolves the group name and the /etc/subuid entry. */
int config_load(const char *path, bool shared, struct helper_config *c, struct failure *f);

/* Reads a regular file owned by root or `owner`, not group/other-writable, of at most
 * `cap - 1` bytes. */
int read_trusted_file(const char *path, uid_t owner, char *buf, size_t cap, size_t *len,
                      int failure_code, struct failure *f);

#endif
