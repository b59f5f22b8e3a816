/* identity-helper: validates a launch descriptor on fd 3 against its own root-owned config
 * and runs one operation (probe, launch, view, kill). See docs/identity-helper-protocol.md. */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "descriptor.h"
#include "failure.h"
#include "launch.h"
#include "operations.h"
#include "policy.h"
#include "temp.h"

#define PROTOCOL_FD 3

/* Static: both are large and the helper runs one request per process. */
static struct helper_config config;
static struct descriptor_parser parser;

static bool fds_0_to_3_open(void) {
  for (int fd = 0; fd <= PROTOCOL_FD; fd++) {
    if (fcntl(fd, F_GETFD) < 0) {
      return false;
    }
  }
  return true;
}

/* Accepts no arguments, or exactly `--config PATH` from a real-uid-0 caller. */
static int choose_config_path(int argc, char **argv, const char **path, struct failure *f) {
  *path = HELPER_CONFIG_PATH;
  if (argc == 1) {
    return 0;
  }
  if (argc != 3 || strcmp(argv[1], "--config") != 0) {
    return fail_with(f, EXIT_USAGE, "usage: identity-helper [--config PATH] 3<descriptor");
  }
  if (getuid() != 0) {
    return fail_with(f, EXIT_CALLER_NOT_PERMITTED, "--config requires real uid 0");
  }
  *path = argv[2];
  return 0;
}

static int dispatch(const struct descriptor *d, struct failure *f) {
  switch (d->op) {
    case OP_PROBE:
      return run_probe(&config, d, f);
    case OP_LAUNCH:
      return launch_worker(&config, d, f);
    case OP_VIEW:
      return run_view(&config, d, f);
    case OP_KILL:
      return run_kill(&config, d, f);
    case OP_RECLAIM:
      return run_reclaim(&config, d, f);
    case OP_NONE:
      break;
  }
  return fail_with(f, EXIT_DESCRIPTOR_MALFORMED, "descriptor: no operation");
}

static int run(int argc, char **argv, struct failure *f) {
  if (!fds_0_to_3_open()) {
    return fail_with(f, EXIT_USAGE, "fds 0-3 must be open (descriptor on fd 3)");
  }
  const char *config_path = NULL;
  int code = choose_config_path(argc, argv, &config_path, f);
  if (code == 0) code = config_load(config_path, &config, f);
  if (code == 0) code = policy_check_caller(&config, f);
  if (code == 0) {
    descriptor_parser_init(&parser);
    code = descriptor_read_fd(PROTOCOL_FD, &parser, f);
  }
  if (code != 0) {
    return code;
  }
  return dispatch(&parser.result, f);
}

int main(int argc, char **argv) {
  struct failure failure = {0, {0}};
  int code = run(argc, argv, &failure);
  if (code != 0) {
    fprintf(stderr, "identity-helper: %s\n", failure.reason);
  }
  return code;
}
