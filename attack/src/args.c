/* key=value arguments: every key known, every number a number; anything else refuses the run. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "battery.h"

static int parse_long(const char *text, long *out) {
  char *end = NULL;
  errno = 0;
  long value = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || value < 0) return -1;
  *out = value;
  return 0;
}

static int add_to_list(const char **list, size_t *count, const char *value) {
  if (*count >= MAX_LIST) return -1;
  list[(*count)++] = value;
  return 0;
}

struct string_key {
  const char *key;
  size_t offset;
};

struct number_key {
  const char *key;
  size_t offset;
};

#define STRING_KEY(k, field) \
  { k, offsetof(struct battery_args, field) }
static const struct string_key string_keys[] = {
    STRING_KEY("write-target", write_target),
    STRING_KEY("host-tmp", host_tmp),
    STRING_KEY("host-shm", host_shm),
    STRING_KEY("protected", protected_path),
    STRING_KEY("protected-mode", protected_mode),
    STRING_KEY("unix-path", unix_path),
    STRING_KEY("abstract-name", abstract_name),
    STRING_KEY("denied-host", denied_host),
    STRING_KEY("setuid-probe", setuid_probe),
    STRING_KEY("tmp-dir", tmp_dir),
    STRING_KEY("other-workspace", other_workspace),
};
static const struct number_key number_keys[] = {
    STRING_KEY("uid-first", uid_first), STRING_KEY("uid-count", uid_count),
    STRING_KEY("host-pid", host_pid),   STRING_KEY("tcp-port", tcp_port),
    STRING_KEY("pids", pids),           STRING_KEY("memory", memory),
    STRING_KEY("tmp-size", tmp_size),   STRING_KEY("workspace-cap", workspace_cap),
};

static int parse_one(const char *key, const char *value, struct battery_args *args) {
  for (size_t i = 0; i < sizeof string_keys / sizeof string_keys[0]; i++)
    if (strcmp(key, string_keys[i].key) == 0) {
      *(const char **)((char *)args + string_keys[i].offset) = value;
      return 0;
    }
  for (size_t i = 0; i < sizeof number_keys / sizeof number_keys[0]; i++)
    if (strcmp(key, number_keys[i].key) == 0)
      return parse_long(value, (long *)((char *)args + number_keys[i].offset));
  if (strcmp(key, "hidden") == 0) return add_to_list(args->hidden, &args->hidden_count, value);
  if (strcmp(key, "own-port") == 0) {
    long port;
    if (parse_long(value, &port) != 0 || args->own_port_count >= MAX_LIST) return -1;
    args->own_ports[args->own_port_count++] = port;
    return 0;
  }
  return -1;
}

int parse_args(int argc, char **argv, int first, struct battery_args *args, char *problem,
               size_t problem_size) {
  memset(args, 0, sizeof *args);
  args->uid_first = -1;
  args->host_pid = -1;
  for (int i = first; i < argc; i++) {
    char *eq = strchr(argv[i], '=');
    if (eq == NULL) {
      snprintf(problem, problem_size, "argument %s: expected key=value", argv[i]);
      return -1;
    }
    *eq = '\0';
    if (parse_one(argv[i], eq + 1, args) != 0) {
      snprintf(problem, problem_size, "argument %s: unknown key, bad value or too many", argv[i]);
      return -1;
    }
  }
  return 0;
}
