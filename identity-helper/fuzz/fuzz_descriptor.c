/* libFuzzer target: the descriptor parser, fed byte by byte exactly as from fd 3. */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "../src/descriptor.h"
#include "../src/syntax.h"

static struct descriptor_parser parser;

/* A launch always names its view; protected paths are canonical and relative, and need a
 * workspace to resolve beneath; hidden paths are canonical and absolute; the tmpfs size is in
 * bounds. */
static void check_view_invariants(const struct descriptor *d) {
  if (d->op == OP_LAUNCH && (d->view_profile == PROFILE_NONE || d->workspace == NULL)) {
    __builtin_trap();
  }
  if (d->tmp_size < DESCRIPTOR_MIN_TMP_SIZE || d->tmp_size > DESCRIPTOR_MAX_TMP_SIZE) {
    __builtin_trap();
  }
  if (d->hide_count > DESCRIPTOR_MAX_HIDE || (d->hide_count > 0 && d->workspace == NULL)) {
    __builtin_trap();
  }
  for (size_t i = 0; i < d->hide_count; i++) {
    if (!is_canonical_absolute_path(d->hides[i]) || strcmp(d->hides[i], "/") == 0) {
      __builtin_trap();
    }
  }
  if (d->protect_count > DESCRIPTOR_MAX_PROTECT || (d->protect_count > 0 && d->workspace == NULL)) {
    __builtin_trap();
  }
  for (size_t i = 0; i < d->protect_count; i++) {
    if (!is_canonical_relative_path(d->protects[i].path) ||
        d->protects[i].mode > PROTECT_MASK_DIRECTORY) {
      __builtin_trap();
    }
  }
}

/* The lease ops always name their lease and workspace; a lease id is 1-64 of [A-Za-z0-9_-];
 * a leased launch never searches. */
static void check_lease_invariants(const struct descriptor *d) {
  bool lease_op = d->op == OP_LEASE || d->op == OP_RELEASE || d->op == OP_USAGE;
  if (lease_op && (d->lease == NULL || d->workspace == NULL)) {
    __builtin_trap();
  }
  if (d->lease != NULL) {
    size_t len = strlen(d->lease);
    if (len == 0 || len > DESCRIPTOR_MAX_LEASE_ID ||
        strspn(d->lease, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") !=
            len) {
      __builtin_trap();
    }
  }
  if (d->op == OP_LAUNCH && d->lease != NULL && d->uid_search) {
    __builtin_trap();
  }
  if ((d->op == OP_RELEASE || d->op == OP_USAGE) && d->has_uid) {
    __builtin_trap();
  }
}

static void check_done_invariants(const struct descriptor *d) {
  if (d->op == OP_NONE || d->cgroup_count > DESCRIPTOR_MAX_CGROUPS ||
      d->env_count > DESCRIPTOR_MAX_ENV || d->path_count > DESCRIPTOR_MAX_PATHS ||
      d->env[d->env_count] != NULL) {
    __builtin_trap();
  }
  for (size_t i = 0; i < d->env_count; i++) {
    if (strchr(d->env[i], '=') == NULL) {
      __builtin_trap();
    }
  }
  check_view_invariants(d);
  check_lease_invariants(d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  struct failure failure = {0, {0}};
  descriptor_parser_init(&parser);
  for (size_t i = 0; i < size; i++) {
    enum feed_result result = descriptor_feed(&parser, data[i], &failure);
    if (result == FEED_DONE) {
      check_done_invariants(&parser.result);
      return 0;
    }
    if (result == FEED_FAILED) {
      if (failure.code != EXIT_DESCRIPTOR_MALFORMED && failure.code != EXIT_DESCRIPTOR_UNKNOWN) {
        __builtin_trap();
      }
      return 0;
    }
  }
  return 0;
}
