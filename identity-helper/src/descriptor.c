#include "descriptor.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "syntax.h"

#define OP_BIT(op) (1u << (op))
#define LEASE_OPS \
  (OP_BIT(OP_LEASE) | OP_BIT(OP_RELEASE) | OP_BIT(OP_USAGE) | OP_BIT(OP_MKDIR) | OP_BIT(OP_IMAGE))
#define ALL_OPS                                                                           \
  (OP_BIT(OP_PROBE) | OP_BIT(OP_LAUNCH) | OP_BIT(OP_VIEW) | OP_BIT(OP_KILL) | LEASE_OPS | \
   OP_BIT(OP_IMAGE_PROBE))
/* release, usage, mkdir and image name their workspace by its lease only, image_probe its
 * workspace root: no uid to pick or check */
#define UID_OPS                                                                              \
  (ALL_OPS & ~(OP_BIT(OP_RELEASE) | OP_BIT(OP_USAGE) | OP_BIT(OP_MKDIR) | OP_BIT(OP_IMAGE) | \
               OP_BIT(OP_IMAGE_PROBE)))
#define MAX_ID 4294967294u /* (uid_t)-1 is "no change" to the kernel: never a valid id */
#define MAX_RLIMIT_VALUE 999999999999999999ull

static const char HEADER_PREFIX[] = "turnhost-descriptor ";

typedef int (*key_handler)(struct descriptor_parser *p, const char *value, struct failure *f);

struct key_rule {
  const char *name;
  bool repeatable;
  unsigned allowed_ops; /* OP_BIT mask */
  key_handler handle;
};

static const char *op_names[] = {
    [OP_NONE] = "none",
    [OP_PROBE] = "probe",
    [OP_LAUNCH] = "launch",
    [OP_VIEW] = "view",
    [OP_KILL] = "kill",
    [OP_LEASE] = "lease",
    [OP_RELEASE] = "release",
    [OP_USAGE] = "usage",
    [OP_MKDIR] = "mkdir",
    [OP_IMAGE] = "image",
    [OP_IMAGE_PROBE] = "image_probe",
};

static const char *rlimit_names[RLIMIT_SLOT_COUNT] = {
    [RLIMIT_SLOT_NPROC] = "nproc",
    [RLIMIT_SLOT_DATA] = "data",
    [RLIMIT_SLOT_FSIZE] = "fsize",
    [RLIMIT_SLOT_NOFILE] = "nofile",
};

const char *descriptor_op_name(enum descriptor_op op) {
  if ((size_t)op >= sizeof op_names / sizeof op_names[0]) {
    return "invalid";
  }
  return op_names[op];
}

static const char *arena_copy(struct descriptor_parser *p, const char *value) {
  size_t len = strlen(value) + 1;
  if (len > sizeof p->arena - p->arena_used) {
    return NULL; /* unreachable: the arena is as large as the whole descriptor */
  }
  char *copy = p->arena + p->arena_used;
  memcpy(copy, value, len);
  p->arena_used += len;
  return copy;
}

static int store_string(struct descriptor_parser *p, const char *key, const char *value,
                        const char **slot, struct failure *f) {
  *slot = arena_copy(p, value);
  if (*slot == NULL) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: %s: no room left", key);
  }
  return 0;
}

static int handle_op(struct descriptor_parser *p, const char *value, struct failure *f) {
  for (size_t op = OP_PROBE; op <= OP_IMAGE_PROBE; op++) {
    if (strcmp(value, op_names[op]) == 0) {
      p->result.op = (enum descriptor_op)op;
      return 0;
    }
  }
  return fail_with(f, EXIT_DESCRIPTOR_UNKNOWN,
                   "descriptor: op: unknown operation (expected probe, launch, view, kill, "
                   "lease, release, usage, mkdir, image or image_probe)");
}

static int parse_id(const char *key, const char *value, uint32_t *out, struct failure *f) {
  uint64_t parsed = 0;
  if (!parse_decimal(value, MAX_ID, &parsed)) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED,
                     "descriptor: %s: must be a decimal number from 0 to %u", key, MAX_ID);
  }
  *out = (uint32_t)parsed;
  return 0;
}

static int handle_uid(struct descriptor_parser *p, const char *value, struct failure *f) {
  p->result.has_uid = true;
  return parse_id("uid", value, &p->result.uid, f);
}

static int handle_gid(struct descriptor_parser *p, const char *value, struct failure *f) {
  p->result.has_gid = true;
  return parse_id("gid", value, &p->result.gid, f);
}

static int handle_cgroup(struct descriptor_parser *p, const char *value, struct failure *f) {
  if (p->result.cgroup_count >= DESCRIPTOR_MAX_CGROUPS) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: cgroup: more than %d entries",
                     DESCRIPTOR_MAX_CGROUPS);
  }
  if (!is_canonical_absolute_path(value)) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED,
                     "descriptor: cgroup: must be a canonical absolute path");
  }
  return store_string(p, "cgroup", value, &p->result.cgroups[p->result.cgroup_count++], f);
}

static int rlimit_slot_named(const char *name, size_t name_len) {
  for (int slot = 0; slot < RLIMIT_SLOT_COUNT; slot++) {
    if (strlen(rlimit_names[slot]) == name_len &&
        strncmp(rlimit_names[slot], name, name_len) == 0) {
      return slot;
    }
  }
  return -1;
}

static int handle_rlimit(struct descriptor_parser *p, const char *value, struct failure *f) {
  const char *space = strchr(value, ' ');
  if (space == NULL) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: rlimit: expected 'NAME VALUE'");
  }
  int slot = rlimit_slot_named(value, (size_t)(space - value));
  if (slot < 0) {
    return fail_with(f, EXIT_DESCRIPTOR_UNKNOWN,
                     "descriptor: rlimit: unknown name (expected nproc, data, fsize or nofile)");
  }
  if (p->result.has_rlimit[slot]) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: rlimit: duplicate %s",
                     rlimit_names[slot]);
  }
  if (!parse_decimal(space + 1, MAX_RLIMIT_VALUE, &p->result.rlimit[slot])) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED,
                     "descriptor: rlimit %s: must be a decimal number below 10^18",
                     rlimit_names[slot]);
  }
  p->result.has_rlimit[slot] = true;
  return 0;
}

static bool is_hostname_byte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.';
}

static int handle_hostname(struct descriptor_parser *p, const char *value, struct failure *f) {
  size_t len = strlen(value);
  bool valid = len <= DESCRIPTOR_MAX_HOSTNAME && value[0] != '-';
  for (size_t i = 0; valid && i < len; i++) {
    valid = is_hostname_byte(value[i]);
  }
  if (!valid) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED,
                     "descriptor: hostname: 1-%d bytes of [A-Za-z0-9.-], not starting with '-'",
                     DESCRIPTOR_MAX_HOSTNAME);
  }
  return store_string(p, "hostname", value, &p->result.hostname, f);
}

static int handle_cwd(struct descriptor_parser *p, const char *value, struct failure *f) {
  if (!is_canonical_absolute_path(value)) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED,
                     "descriptor: cwd: must be a canonical absolute path");
  }
  return store_string(p, "cwd", value, &p->result.cwd, f);
}

static int handle_profile(struct descriptor_parser *p, const char *value, struct failure *f) {
  if (strcmp(value, "governed") == 0) {
    p->result.view_profile = PROFILE_GOVERNED;
  } else if (strcmp(value, "strict") == 0) {
    p->result.view_profile = PROFILE_STRICT;
  } else {
    return fail_with(f, EXIT_DESCRIPTOR_UNKNOWN,
                     "descriptor: profile: unknown profile (expected governed or strict)");
  }
  return store_string(p, "profile", value, &p->result.profile, f);
}

static int store_view_path(struct descriptor_parser *p, const char *key, const char *value,
                           const char **slot, struct failure *f) {
  if (!is_canonical_absolute_path(value) || strcmp(value, "/") == 0) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED,
                     "descriptor: %s: must be a canonical absolute path other than /", key);
  }
  return store_string(p, key, value, slot, f);
}

static int handle_workspace(struct descriptor_parser *p, const char *value, struct failure *f) {
  return store_view_path(p, "workspace", value, &p->result.workspace, f);
}

static int handle_uid_search(struct descriptor_parser *p, const char *value, struct failure *f) {
  if (strcmp(value, "yes") != 0) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: uid_search: the only value is yes");
  }
  p->result.uid_search = true;
  return 0;
}

static bool is_lease_id_byte(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '_';
}

/* A lease id or a lease owner: 1-64 bytes of [A-Za-z0-9_-]. */
static int store_lease_name(struct descriptor_parser *p, const char *key, const char *value,
                            const char **slot, struct failure *f) {
  size_t len = strlen(value);
  bool valid = len >= 1 && len <= DESCRIPTOR_MAX_LEASE_ID;
  for (size_t i = 0; valid && i < len; i++) {
    valid = is_lease_id_byte(value[i]);
  }
  if (!valid) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: %s: 1-%d bytes of [A-Za-z0-9_-]",
                     key, DESCRIPTOR_MAX_LEASE_ID);
  }
  return store_string(p, key, value, slot, f);
}

static int handle_lease(struct descriptor_parser *p, const char *value, struct failure *f) {
  return store_lease_name(p, "lease", value, &p->result.lease, f);
}

static int handle_owner(struct descriptor_parser *p, const char *value, struct failure *f) {
  return store_lease_name(p, "owner", value, &p->result.owner, f);
}

static int handle_adopt(struct descriptor_parser *p, const char *value, struct failure *f) {
  if (strcmp(value, "yes") != 0) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: adopt: the only value is yes");
  }
  p->result.adopt = true;
  return 0;
}

static int handle_dir(struct descriptor_parser *p, const char *value, struct failure *f) {
  if (!is_canonical_relative_path(value)) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED,
                     "descriptor: dir: must be relative to the workspace, with no empty, '.' or "
                     "'..' components");
  }
  return store_string(p, "dir", value, &p->result.dir, f);
}

/* image: at most 2^50 bytes and 2^32 files; the helper checks the lower bound of the size. */
static int store_image_count(const char *key, const char *value, uint64_t max, uint64_t *slot,
                             struct failure *f) {
  if (!parse_decimal(value, max, slot) || *slot == 0) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: %s: from 1 to %llu", key,
                     (unsigned long long)max);
  }
  return 0;
}

static int handle_max_bytes(struct descriptor_parser *p, const char *value, struct failure *f) {
  return store_image_count("max_bytes", value, 1ull << 50, &p->result.max_bytes, f);
}

static int handle_max_files(struct descriptor_parser *p, const char *value, struct failure *f) {
  return store_image_count("max_files", value, 1ull << 32, &p->result.max_files, f);
}

static int handle_tmp_size(struct descriptor_parser *p, const char *value, struct failure *f) {
  uint64_t size = 0;
  if (!parse_decimal(value, DESCRIPTOR_MAX_TMP_SIZE, &size) || size < DESCRIPTOR_MIN_TMP_SIZE) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: tmp_size: bytes from %llu to %llu",
                     (unsigned long long)DESCRIPTOR_MIN_TMP_SIZE,
                     (unsigned long long)DESCRIPTOR_MAX_TMP_SIZE);
  }
  p->result.tmp_size = size;
  return 0;
}

static int handle_hide(struct descriptor_parser *p, const char *value, struct failure *f) {
  if (p->result.hide_count >= DESCRIPTOR_MAX_HIDE) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: hide: more than %d entries",
                     DESCRIPTOR_MAX_HIDE);
  }
  return store_view_path(p, "hide", value, &p->result.hides[p->result.hide_count++], f);
}

static const char *protect_mode_names[] = {
    [PROTECT_READ_ONLY] = "read_only",
    [PROTECT_MASK_FILE] = "mask_file",
    [PROTECT_MASK_DIRECTORY] = "mask_directory",
};

const char *descriptor_protect_mode_name(enum protect_mode mode) {
  if ((size_t)mode >= sizeof protect_mode_names / sizeof protect_mode_names[0]) {
    return "invalid";
  }
  return protect_mode_names[mode];
}

static int protect_mode_named(const char *name, size_t name_len) {
  for (int mode = 0; mode <= PROTECT_MASK_DIRECTORY; mode++) {
    if (strlen(protect_mode_names[mode]) == name_len &&
        strncmp(protect_mode_names[mode], name, name_len) == 0) {
      return mode;
    }
  }
  return -1;
}

static int handle_protect(struct descriptor_parser *p, const char *value, struct failure *f) {
  if (p->result.protect_count >= DESCRIPTOR_MAX_PROTECT) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: protect: more than %d entries",
                     DESCRIPTOR_MAX_PROTECT);
  }
  const char *space = strchr(value, ' ');
  if (space == NULL) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: protect: expected 'MODE RELPATH'");
  }
  int mode = protect_mode_named(value, (size_t)(space - value));
  if (mode < 0) {
    return fail_with(f, EXIT_DESCRIPTOR_UNKNOWN,
                     "descriptor: protect: unknown mode (expected read_only, mask_file or "
                     "mask_directory)");
  }
  if (!is_canonical_relative_path(space + 1)) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED,
                     "descriptor: protect: path must be relative to the workspace, with no "
                     "empty, '.' or '..' components");
  }
  struct protect_rule *rule = &p->result.protects[p->result.protect_count];
  rule->mode = (enum protect_mode)mode;
  p->result.protect_count++;
  return store_string(p, "protect", space + 1, &rule->path, f);
}

static int handle_path(struct descriptor_parser *p, const char *value, struct failure *f) {
  if (p->result.path_count >= DESCRIPTOR_MAX_PATHS) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: path: more than %d entries",
                     DESCRIPTOR_MAX_PATHS);
  }
  if (!is_canonical_absolute_path(value)) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED,
                     "descriptor: path: must be a canonical absolute path");
  }
  return store_string(p, "path", value, &p->result.paths[p->result.path_count++], f);
}

static size_t env_name_length(const char *entry) {
  const char *equals = strchr(entry, '=');
  return equals == NULL ? 0 : (size_t)(equals - entry);
}

static bool is_env_name(const char *entry, size_t len) {
  if (len == 0 || len > DESCRIPTOR_MAX_ENV_NAME || (entry[0] >= '0' && entry[0] <= '9')) {
    return false;
  }
  for (size_t i = 0; i < len; i++) {
    char c = entry[i];
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) {
      return false;
    }
  }
  return true;
}

static bool env_name_already_present(const struct descriptor *d, const char *entry, size_t len) {
  for (size_t i = 0; i < d->env_count; i++) {
    if (env_name_length(d->env[i]) == len && strncmp(d->env[i], entry, len) == 0) {
      return true;
    }
  }
  return false;
}

static int handle_env(struct descriptor_parser *p, const char *value, struct failure *f) {
  if (p->result.env_count >= DESCRIPTOR_MAX_ENV) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: env: more than %d entries",
                     DESCRIPTOR_MAX_ENV);
  }
  size_t name_len = env_name_length(value);
  if (!is_env_name(value, name_len)) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED,
                     "descriptor: env: expected NAME=VALUE with NAME [A-Za-z_][A-Za-z0-9_]*");
  }
  if (env_name_already_present(&p->result, value, name_len)) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: env: duplicate name");
  }
  return store_string(p, "env", value, &p->result.env[p->result.env_count++], f);
}

#define LAUNCH_ONLY OP_BIT(OP_LAUNCH)
#define VIEW_ONLY OP_BIT(OP_VIEW)
#define LAUNCH_OR_VIEW (OP_BIT(OP_LAUNCH) | OP_BIT(OP_VIEW))
#define WORKSPACE_OPS (LAUNCH_OR_VIEW | LEASE_OPS | OP_BIT(OP_IMAGE_PROBE))

static const struct key_rule key_rules[] = {
    {"op", false, ALL_OPS, handle_op},
    {"uid", false, UID_OPS, handle_uid},
    {"gid", false, LAUNCH_ONLY, handle_gid},
    {"cgroup", true, LAUNCH_ONLY, handle_cgroup},
    {"rlimit", true, LAUNCH_ONLY, handle_rlimit},
    {"hostname", false, LAUNCH_ONLY, handle_hostname},
    {"cwd", false, LAUNCH_ONLY, handle_cwd},
    {"env", true, LAUNCH_ONLY, handle_env},
    {"path", true, VIEW_ONLY, handle_path},
    {"profile", false, LAUNCH_OR_VIEW, handle_profile},
    {"workspace", false, WORKSPACE_OPS, handle_workspace},
    {"uid_search", false, LAUNCH_ONLY | OP_BIT(OP_LEASE), handle_uid_search},
    {"lease", false, LAUNCH_ONLY | LEASE_OPS, handle_lease},
    {"owner", false, LAUNCH_ONLY | LEASE_OPS, handle_owner},
    {"adopt", false, OP_BIT(OP_LEASE), handle_adopt},
    {"dir", false, OP_BIT(OP_MKDIR), handle_dir},
    {"max_bytes", false, OP_BIT(OP_IMAGE), handle_max_bytes},
    {"max_files", false, OP_BIT(OP_IMAGE), handle_max_files},
    {"tmp_size", false, LAUNCH_OR_VIEW, handle_tmp_size},
    {"protect", true, LAUNCH_OR_VIEW, handle_protect},
    {"hide", true, LAUNCH_OR_VIEW, handle_hide},
};
#define KEY_RULE_COUNT (sizeof key_rules / sizeof key_rules[0])

/* Keys each op must carry; "path" counts as present once it has at least one entry. */
static const char *const required_keys[][7] = {
    [OP_PROBE] = {NULL},
    [OP_LAUNCH] = {"cwd", "profile", "workspace", NULL},
    [OP_VIEW] = {"profile", "path", NULL},
    [OP_KILL] = {"uid", NULL},
    [OP_LEASE] = {"uid", "lease", "owner", "workspace", NULL},
    [OP_RELEASE] = {"lease", "owner", "workspace", NULL},
    [OP_USAGE] = {"lease", "owner", "workspace", NULL},
    [OP_MKDIR] = {"lease", "owner", "workspace", "dir", NULL},
    [OP_IMAGE] = {"lease", "owner", "workspace", NULL},
    [OP_IMAGE_PROBE] = {"workspace", NULL},
};

static int key_index(const char *name) {
  for (size_t i = 0; i < KEY_RULE_COUNT; i++) {
    if (strcmp(key_rules[i].name, name) == 0) {
      return (int)i;
    }
  }
  return -1;
}

static bool is_key_name(const char *key) {
  if (key[0] == '\0') {
    return false;
  }
  for (const char *c = key; *c != '\0'; c++) {
    if (!((*c >= 'a' && *c <= 'z') || *c == '_')) {
      return false;
    }
  }
  return true;
}

void descriptor_parser_init(struct descriptor_parser *p) {
  memset(p, 0, sizeof *p);
  p->state = PARSER_EXPECT_HEADER;
}

static int process_header(struct descriptor_parser *p, struct failure *f) {
  size_t prefix_len = sizeof HEADER_PREFIX - 1;
  if (strncmp(p->line, HEADER_PREFIX, prefix_len) != 0) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED,
                     "descriptor: first line must be 'turnhost-descriptor %d'",
                     DESCRIPTOR_PROTOCOL_VERSION);
  }
  uint64_t version = 0;
  if (!parse_decimal(p->line + prefix_len, UINT32_MAX, &version)) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: version must be decimal");
  }
  if (version != DESCRIPTOR_PROTOCOL_VERSION) {
    return fail_with(f, EXIT_DESCRIPTOR_UNKNOWN,
                     "descriptor: unknown protocol version %llu (supported: %d)",
                     (unsigned long long)version, DESCRIPTOR_PROTOCOL_VERSION);
  }
  p->state = PARSER_BODY;
  return 0;
}

static int check_keys_allowed_for_op(const struct descriptor_parser *p, struct failure *f) {
  unsigned op_bit = OP_BIT(p->result.op);
  for (size_t i = 0; i < KEY_RULE_COUNT; i++) {
    if ((p->keys_seen & (1u << i)) != 0 && (key_rules[i].allowed_ops & op_bit) == 0) {
      return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: key '%s' not valid for op %s",
                       key_rules[i].name, descriptor_op_name(p->result.op));
    }
  }
  return 0;
}

static int check_required_keys(const struct descriptor_parser *p, struct failure *f) {
  const char *const *required = required_keys[p->result.op];
  for (size_t i = 0; required[i] != NULL; i++) {
    int index = key_index(required[i]);
    if (index < 0 || (p->keys_seen & (1u << index)) == 0) {
      return fail_with(f, EXIT_DESCRIPTOR_MALFORMED,
                       "descriptor: missing required key '%s' for op %s", required[i],
                       descriptor_op_name(p->result.op));
    }
  }
  return 0;
}

static int finish(struct descriptor_parser *p, struct failure *f) {
  if (p->result.op == OP_NONE) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: missing required key 'op'");
  }
  int code = check_keys_allowed_for_op(p, f);
  if (code != 0) {
    return code;
  }
  code = check_required_keys(p, f);
  if (code != 0) {
    return code;
  }
  bool needs_view =
      p->result.protect_count > 0 || p->result.hide_count > 0 || p->result.tmp_size != 0;
  if (needs_view && p->result.workspace == NULL) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED,
                     "descriptor: protect, hide and tmp_size need a workspace (the view is built "
                     "from it)");
  }
  if (p->result.op == OP_LAUNCH && p->result.lease != NULL && p->result.uid_search) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED,
                     "descriptor: uid_search: a leased launch runs as its lease's uid");
  }
  if (p->result.op == OP_LAUNCH && (p->result.lease == NULL) != (p->result.owner == NULL)) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED,
                     "descriptor: a launch names lease and owner together or neither (missing "
                     "required key '%s')",
                     p->result.lease == NULL ? "lease" : "owner");
  }
  if (p->result.adopt && p->result.uid_search) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED,
                     "descriptor: adopt: names the record's exact uid, not with uid_search");
  }
  if (p->result.tmp_size == 0) {
    p->result.tmp_size = DESCRIPTOR_DEFAULT_TMP_SIZE;
  }
  p->result.env[p->result.env_count] = NULL;
  p->state = PARSER_DONE;
  return 0;
}

static int process_body_line(struct descriptor_parser *p, struct failure *f) {
  if (strcmp(p->line, "end") == 0) {
    return finish(p, f);
  }
  char *space = strchr(p->line, ' ');
  if (space == NULL || space[1] == '\0') {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: line %zu: expected 'key value'",
                     p->line_number);
  }
  *space = '\0';
  const char *key = p->line;
  if (!is_key_name(key)) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: line %zu: key must be [a-z_]+",
                     p->line_number);
  }
  int index = key_index(key);
  if (index < 0) {
    return fail_with(f, EXIT_DESCRIPTOR_UNKNOWN, "descriptor: unknown key '%.32s'", key);
  }
  const struct key_rule *rule = &key_rules[index];
  if (!rule->repeatable && (p->keys_seen & (1u << index)) != 0) {
    return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: duplicate key '%s'", rule->name);
  }
  p->keys_seen |= 1u << index;
  return rule->handle(p, space + 1, f);
}

static enum feed_result fail_feed(struct descriptor_parser *p) {
  p->state = PARSER_FAILED;
  return FEED_FAILED;
}

static enum feed_result end_of_line(struct descriptor_parser *p, struct failure *f) {
  p->line[p->line_len] = '\0';
  p->line_number++;
  int code = p->state == PARSER_EXPECT_HEADER ? process_header(p, f) : process_body_line(p, f);
  p->line_len = 0;
  if (code != 0) {
    return fail_feed(p);
  }
  return p->state == PARSER_DONE ? FEED_DONE : FEED_MORE;
}

enum feed_result descriptor_feed(struct descriptor_parser *p, unsigned char byte,
                                 struct failure *f) {
  if (p->state == PARSER_DONE || p->state == PARSER_FAILED) {
    fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: bytes after the end");
    return fail_feed(p);
  }
  p->total_bytes++;
  if (p->total_bytes > DESCRIPTOR_MAX_BYTES) {
    fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: larger than %d bytes",
              DESCRIPTOR_MAX_BYTES);
    return fail_feed(p);
  }
  if (byte == '\n') {
    return end_of_line(p, f);
  }
  if (byte < 0x20 || byte == 0x7f) {
    fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: line %zu: control byte 0x%02x",
              p->line_number + 1, byte);
    return fail_feed(p);
  }
  if (p->line_len + 1 >= DESCRIPTOR_MAX_LINE) {
    fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: line %zu: longer than %d bytes",
              p->line_number + 1, DESCRIPTOR_MAX_LINE);
    return fail_feed(p);
  }
  p->line[p->line_len++] = (char)byte;
  return FEED_MORE;
}

int descriptor_read_fd(int fd, struct descriptor_parser *p, struct failure *f) {
  for (;;) {
    unsigned char byte = 0;
    ssize_t n = read(fd, &byte, 1);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: read from fd %d failed: %s", fd,
                       strerror(errno));
    }
    if (n == 0) {
      return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: end of input before 'end'");
    }
    enum feed_result result = descriptor_feed(p, byte, f);
    if (result == FEED_DONE) {
      return 0;
    }
    if (result == FEED_FAILED) {
      return f->code;
    }
  }
}
