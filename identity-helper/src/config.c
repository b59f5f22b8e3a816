#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "syntax.h"

#define MAX_ID 4294967294ull

static const char *config_copy(struct helper_config *c, const char *text, size_t len) {
  if (len + 1 > sizeof c->arena - c->arena_used) {
    return NULL; /* unreachable: the arena is as large as the whole file */
  }
  char *copy = c->arena + c->arena_used;
  memcpy(copy, text, len);
  copy[len] = '\0';
  c->arena_used += len + 1;
  return copy;
}

static int set_uid_range(struct helper_config *c, const char *value, size_t line,
                         struct failure *f) {
  char first_text[24];
  const char *space = strchr(value, ' ');
  size_t first_len = space == NULL ? 0 : (size_t)(space - value);
  uint64_t first = 0;
  uint64_t count = 0;
  if (first_len == 0 || first_len >= sizeof first_text) {
    return fail_with(f, EXIT_CONFIG_INVALID, "config line %zu: uid_range FIRST COUNT", line);
  }
  memcpy(first_text, value, first_len);
  first_text[first_len] = '\0';
  if (!parse_decimal(first_text, MAX_ID, &first) || !parse_decimal(space + 1, MAX_ID, &count) ||
      first == 0 || count == 0 || first + count - 1 > MAX_ID) {
    return fail_with(f, EXIT_CONFIG_INVALID,
                     "config line %zu: uid_range needs FIRST >= 1, COUNT >= 1, last <= %llu", line,
                     MAX_ID);
  }
  c->uid_first = (uint32_t)first;
  c->uid_count = (uint32_t)count;
  return 0;
}

/* A directory the helper keeps state in (uid locks, lease records): set once, canonical,
 * absolute, never `/`. */
static int set_state_dir(const char **slot, const char *key, const char *value, size_t line,
                         struct failure *f) {
  if (*slot != NULL || !is_canonical_absolute_path(value) || strcmp(value, "/") == 0) {
    return fail_with(f, EXIT_CONFIG_INVALID,
                     "config line %zu: %s: one canonical absolute path other than /", line, key);
  }
  *slot = value;
  return 0;
}

static int apply_config_line(struct helper_config *c, const char *key, const char *value,
                             size_t line, struct failure *f) {
  const char *copy = config_copy(c, value, strlen(value));
  if (copy == NULL) {
    return fail_with(f, EXIT_CONFIG_INVALID, "config: no room left");
  }
  bool separate_only = strcmp(key, "uid_range") == 0 || strcmp(key, "uid_range_subuid") == 0 ||
                       strcmp(key, "caller_group") == 0 || strcmp(key, "uid_lock_dir") == 0 ||
                       strcmp(key, "uid_lease_dir") == 0;
  if (c->shared && separate_only) {
    return fail_with(f, EXIT_CONFIG_INVALID,
                     "config line %zu: %s is a separate-uid key, not valid in shared mode", line,
                     key);
  }
  bool has_range = c->uid_count != 0 || c->subuid_user != NULL;
  if (strcmp(key, "uid_range") == 0 || strcmp(key, "uid_range_subuid") == 0) {
    if (has_range) {
      return fail_with(f, EXIT_CONFIG_INVALID, "config line %zu: uid range given twice", line);
    }
    if (strcmp(key, "uid_range_subuid") == 0) {
      c->subuid_user = copy;
      return 0;
    }
    return set_uid_range(c, copy, line, f);
  }
  if (strcmp(key, "caller_group") == 0) {
    if (c->caller_group_name != NULL) {
      return fail_with(f, EXIT_CONFIG_INVALID, "config line %zu: duplicate caller_group", line);
    }
    c->caller_group_name = copy;
    return 0;
  }
  if (strcmp(key, "cgroup_root") == 0) {
    if (c->cgroup_root_count >= CONFIG_MAX_CGROUP_ROOTS || !is_canonical_absolute_path(copy)) {
      return fail_with(f, EXIT_CONFIG_INVALID,
                       "config line %zu: cgroup_root: canonical absolute path, at most %d", line,
                       CONFIG_MAX_CGROUP_ROOTS);
    }
    c->cgroup_roots[c->cgroup_root_count++] = copy;
    return 0;
  }
  if (strcmp(key, "temp_root") == 0) {
    /* Obsolete: the turn temp is a tmpfs in the worker's view, not a host directory. Accepted
     * so that a config kept across an upgrade still loads; it grants nothing. */
    return 0;
  }
  if (strcmp(key, "uid_lock_dir") == 0) {
    return set_state_dir(&c->uid_lock_dir, key, copy, line, f);
  }
  if (strcmp(key, "uid_lease_dir") == 0) {
    return set_state_dir(&c->uid_lease_dir, key, copy, line, f);
  }
  if (strcmp(key, "workspace_root") == 0) {
    if (c->workspace_root_count >= CONFIG_MAX_WORKSPACE_ROOTS ||
        !is_canonical_absolute_path(copy) || strcmp(copy, "/") == 0) {
      return fail_with(f, EXIT_CONFIG_INVALID,
                       "config line %zu: workspace_root: canonical absolute path other than /, at "
                       "most %d",
                       line, CONFIG_MAX_WORKSPACE_ROOTS);
    }
    c->workspace_roots[c->workspace_root_count++] = copy;
    return 0;
  }
  if (strcmp(key, "worker_exec") == 0) {
    if (c->worker_exec != NULL || !is_canonical_absolute_path(copy)) {
      return fail_with(f, EXIT_CONFIG_INVALID,
                       "config line %zu: worker_exec: one canonical absolute path", line);
    }
    c->worker_exec = copy;
    return 0;
  }
  if (strcmp(key, "worker_arg") == 0) {
    if (c->worker_arg_count >= CONFIG_MAX_WORKER_ARGS) {
      return fail_with(f, EXIT_CONFIG_INVALID, "config line %zu: more than %d worker_arg", line,
                       CONFIG_MAX_WORKER_ARGS);
    }
    c->worker_args[c->worker_arg_count++] = copy;
    return 0;
  }
  if (strcmp(key, "view_path") == 0) {
    if (c->view_path_count >= CONFIG_MAX_VIEW_PATHS || !is_canonical_absolute_path(copy) ||
        strcmp(copy, "/") == 0) {
      return fail_with(f, EXIT_CONFIG_INVALID,
                       "config line %zu: view_path: canonical absolute path other than /, at "
                       "most %d",
                       line, CONFIG_MAX_VIEW_PATHS);
    }
    c->view_paths[c->view_path_count++] = copy;
    return 0;
  }
  return fail_with(f, EXIT_CONFIG_INVALID, "config line %zu: unknown key '%.32s'", line, key);
}

static bool line_has_control_bytes(const char *line, size_t len) {
  for (size_t i = 0; i < len; i++) {
    unsigned char byte = (unsigned char)line[i];
    if (byte < 0x20 || byte == 0x7f) {
      return true;
    }
  }
  return false;
}

static int parse_config_line(struct helper_config *c, const char *start, size_t len, size_t line,
                             struct failure *f) {
  char buf[4096];
  if (len == 0 || start[0] == '#') {
    return 0;
  }
  if (len >= sizeof buf || line_has_control_bytes(start, len)) {
    return fail_with(f, EXIT_CONFIG_INVALID,
                     "config line %zu: longer than 4095 bytes or has control bytes", line);
  }
  memcpy(buf, start, len);
  buf[len] = '\0';
  char *space = strchr(buf, ' ');
  if (space == NULL || space[1] == '\0') {
    return fail_with(f, EXIT_CONFIG_INVALID, "config line %zu: expected 'key value'", line);
  }
  *space = '\0';
  return apply_config_line(c, buf, space + 1, line, f);
}

static int check_required(struct helper_config *c, struct failure *f) {
  if (c->worker_exec == NULL) {
    return fail_with(f, EXIT_CONFIG_INVALID, "config: worker_exec required");
  }
  if (c->shared) {
    return 0;
  }
  if (c->uid_lock_dir == NULL) {
    c->uid_lock_dir = HELPER_UID_LOCK_DIR;
  }
  if (c->uid_lease_dir == NULL) {
    c->uid_lease_dir = HELPER_UID_LEASE_DIR;
  }
  if (c->uid_count == 0 && c->subuid_user == NULL) {
    return fail_with(f, EXIT_CONFIG_INVALID, "config: uid_range or uid_range_subuid required");
  }
  if (c->caller_group_name == NULL) {
    return fail_with(f, EXIT_CONFIG_INVALID, "config: caller_group required");
  }
  return 0;
}

int config_parse(const char *text, size_t len, bool shared, struct helper_config *c,
                 struct failure *f) {
  memset(c, 0, sizeof *c);
  c->shared = shared;
  if (len > CONFIG_MAX_BYTES) {
    return fail_with(f, EXIT_CONFIG_INVALID, "config: larger than %d bytes", CONFIG_MAX_BYTES);
  }
  size_t line = 0;
  size_t start = 0;
  for (size_t i = 0; i < len; i++) {
    if (text[i] != '\n') {
      continue;
    }
    line++;
    int code = parse_config_line(c, text + start, i - start, line, f);
    if (code != 0) {
      return code;
    }
    start = i + 1;
  }
  if (start != len) {
    return fail_with(f, EXIT_CONFIG_INVALID, "config: last line must end with a newline");
  }
  return check_required(c, f);
}

int read_trusted_file(const char *path, uid_t owner, char *buf, size_t cap, size_t *len,
                      int failure_code, struct failure *f) {
  int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    return fail_with(f, failure_code, "%s: cannot open: %s", path, strerror(errno));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (st.st_uid != 0 && st.st_uid != owner) ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    close(fd);
    return fail_with(f, failure_code,
                     "%s: must be a regular file owned by %s, not group/other-writable", path,
                     owner == 0 ? "root" : "root or the caller");
  }
  size_t used = 0;
  for (;;) {
    ssize_t n = read(fd, buf + used, cap - used);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      close(fd);
      if (n < 0) {
        return fail_with(f, failure_code, "%s: read failed: %s", path, strerror(errno));
      }
      break;
    }
    used += (size_t)n;
    if (used == cap) {
      close(fd);
      return fail_with(f, failure_code, "%s: larger than %zu bytes", path, cap - 1);
    }
  }
  *len = used;
  return 0;
}

static int resolve_caller_group(struct helper_config *c, struct failure *f) {
  uint64_t gid = 0;
  if (parse_decimal(c->caller_group_name, MAX_ID, &gid)) {
    c->caller_gid = (gid_t)gid;
    return 0;
  }
  struct group *group = getgrnam(c->caller_group_name);
  if (group == NULL) {
    return fail_with(f, EXIT_CONFIG_INVALID, "config: caller_group '%.64s' does not exist",
                     c->caller_group_name);
  }
  c->caller_gid = group->gr_gid;
  return 0;
}

/* One "name:first:count" line; returns true and fills first/count when it names `user`. */
static bool subuid_line_matches(const char *line, size_t len, const char *user, uint64_t *first,
                                uint64_t *count) {
  char buf[512];
  if (len >= sizeof buf) {
    return false;
  }
  memcpy(buf, line, len);
  buf[len] = '\0';
  char *first_text = strchr(buf, ':');
  if (first_text == NULL) {
    return false;
  }
  *first_text++ = '\0';
  char *count_text = strchr(first_text, ':');
  if (count_text == NULL || strcmp(buf, user) != 0) {
    return false;
  }
  *count_text++ = '\0';
  return parse_decimal(first_text, MAX_ID, first) && parse_decimal(count_text, MAX_ID, count);
}

static int resolve_subuid_range(struct helper_config *c, struct failure *f) {
  static char text[CONFIG_MAX_BYTES];
  size_t len = 0;
  int code =
      read_trusted_file(HELPER_SUBUID_PATH, 0, text, sizeof text, &len, EXIT_CONFIG_INVALID, f);
  if (code != 0) {
    return code;
  }
  size_t start = 0;
  for (size_t i = 0; i <= len; i++) {
    if (i < len && text[i] != '\n') {
      continue;
    }
    uint64_t first = 0;
    uint64_t count = 0;
    if (subuid_line_matches(text + start, i - start, c->subuid_user, &first, &count)) {
      if (first == 0 || count == 0 || first + count - 1 > MAX_ID) {
        break;
      }
      c->uid_first = (uint32_t)first;
      c->uid_count = (uint32_t)count;
      return 0;
    }
    start = i + 1;
  }
  return fail_with(f, EXIT_CONFIG_INVALID, "%s: no valid entry for user '%.64s'",
                   HELPER_SUBUID_PATH, c->subuid_user);
}

int config_load(const char *path, bool shared, struct helper_config *c, struct failure *f) {
  static char text[CONFIG_MAX_BYTES + 1];
  size_t len = 0;
  uid_t owner = shared ? getuid() : 0;
  int code = read_trusted_file(path, owner, text, sizeof text, &len, EXIT_CONFIG_INVALID, f);
  if (code == 0) {
    code = config_parse(text, len, shared, c, f);
  }
  if (code == 0 && !shared) {
    code = resolve_caller_group(c, f);
  }
  if (code == 0 && c->subuid_user != NULL) {
    code = resolve_subuid_range(c, f);
  }
  return code;
}
