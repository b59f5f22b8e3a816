/* identity-helper: the only privileged code of turnhost (docs/identity-helper-protocol.md).
 *
 * Theory of operation
 * -------------------
 * Who runs it: the supervisor, as user `turnhost` through the setuid-root bit (4750
 * root:turnhost), or directly when the supervisor itself is root. The caller is trusted for
 * nothing: it may ask, and the root-owned config (uid range, cgroup roots, workspace roots, view
 * paths, the worker program, the caller group) decides. No environment variable is read.
 * `--shared --config PATH` is accepted from anyone: the setuid identity is given up first, and
 * the caller's own config (uid: the caller's own) builds the same boundary with no privilege.
 *
 * Its fds: 0-2 become the worker's stdio; 3 carries the descriptor (`key value` lines up to
 * `end`), read one byte at a time so the rest of the socket stays unread for the worker's
 * protocol; 4, when it is a unix SOCK_SEQPACKET socket, is the worker's listener channel.
 *
 * Every run, in this order: fds 0-3 open → argv (none, `--config PATH` from real uid 0, or
 * `--shared --config PATH`) → config loaded and validated → caller in `caller_group` (not in
 * shared mode) → descriptor parsed (every key checked for the op) → one operation:
 *
 *   probe    fork a child that takes the worker identity, report what it holds (ids, groups,
 *            capabilities, no_new_privs): the receipt of a separate uid.
 *   launch   `launch_worker` (launch.c), one named step each: the worker uid (a lease of the
 *            range, or the workspace's) → join the turn cgroup leaves → lower the rlimits →
 *            (shared mode, non-root caller) a user namespace → fork into a new pid namespace,
 *            this process staying outside as the monitor (sandbox.c) → in pid 1: new cgroup,
 *            net, ipc, uts and mount namespaces, the filesystem view (view.c, sys-view.c), lo
 *            up, the hostname → the launch report on fd 4 (the uid, the turn's /tmp) → fork
 *            the worker → drop to the worker uid/gid with no groups, no capabilities (bounding
 *            set too), no_new_privs → keep fds 0-3, and 4 only when it is the listener
 *            channel → reset signals → chdir → execve the configured worker. From the exec on
 *            the process is the worker and nothing of the helper remains.
 *   view     the same view in a forked child, then access(2) as the worker for each path: the
 *            probe's proof that the view holds.
 *   kill     SIGKILL every process whose real uid is the worker uid (a fallback; the cgroup
 *            kill is exact).
 *   lease    (workspace-lease.c) give a workspace a uid of the range for its whole life,
 *            recorded in the lease directory, and make its directory owned by that uid.
 *   release  remove a leased workspace's tree (no link followed, no mount crossed), then its
 *            lease; refused while a turn or a process holds its uid.
 *   usage    measure a leased workspace's tree (no link followed).
 *   image    (workspace-image.c) make and mount, or re-attach at boot, the workspace's own
 *            ext4 image on a loop device: the byte and inode cap. Needs root (in shared mode,
 *            a root supervisor); release unmounts and removes it, usage reads its statfs.
 *   image_probe  (workspace-image.c) prove that an image bounds here: a throwaway 1 MiB image
 *            in a private mount namespace, made, attached and mounted as a workspace's, filled
 *            until ENOSPC (bytes, then files), then unmounted, detached and gone. Needs root.
 *   In shared mode release, usage and image act on the caller's own `<workspace_root>/<lease>`
 *   (shared-tree.c): no lease, no uid lock, the caller's privilege only.
 *   mkdir    make a directory and its missing parents beneath a leased workspace, one held fd
 *            per level, no link followed, each new one owned by the lease's uid.
 *
 * Any refusal prints one `identity-helper: <reason>` line on stderr and exits with the code
 * of its reason (failure.h); nothing is half-done that outlives the process. */
#include <errno.h>
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
#include "shared-tree.h"
#include "workspace-image.h"
#include "workspace-lease.h"

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

#define USAGE                                                                                     \
  "usage: identity-helper [--config PATH] 3<descriptor | identity-helper --shared --config PATH " \
  "3<descriptor"

/* Shared mode gives up what the setuid bit lent before anything else happens: from here on
 * the helper can do only what its caller could do itself. */
static int give_up_setuid(struct failure *f) {
  gid_t gid = getgid();
  uid_t uid = getuid();
  if (setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "shared mode: dropping the setuid identity: %s",
                     strerror(errno));
  }
  return 0;
}

/* No arguments, `--config PATH` from a real-uid-0 caller, or `--shared --config PATH` from
 * anyone (shared mode runs with the caller's own privilege only). */
static int parse_arguments(int argc, char **argv, bool *shared, const char **path,
                           struct failure *f) {
  *shared = argc == 4 && strcmp(argv[1], "--shared") == 0;
  *path = HELPER_CONFIG_PATH;
  if (argc == 1) {
    return 0;
  }
  int first = *shared ? 2 : 1;
  if (argc != first + 2 || strcmp(argv[first], "--config") != 0) {
    return fail_with(f, EXIT_USAGE, USAGE);
  }
  if (*shared) {
    *path = argv[first + 1];
    return give_up_setuid(f);
  }
  if (getuid() != 0) {
    return fail_with(f, EXIT_CALLER_NOT_PERMITTED, "--config requires real uid 0");
  }
  *path = argv[first + 1];
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
    case OP_LEASE:
      return run_lease(&config, d, f);
    case OP_RELEASE:
      return config.shared ? run_shared_release(&config, d, f) : run_release(&config, d, f);
    case OP_USAGE:
      return config.shared ? run_shared_usage(&config, d, f) : run_usage(&config, d, f);
    case OP_MKDIR:
      return run_mkdir(&config, d, f);
    case OP_IMAGE:
      return config.shared ? run_shared_image(&config, d, f) : run_image(&config, d, f);
    case OP_IMAGE_PROBE:
      return run_image_probe(&config, d, f);
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
  bool shared = false;
  int code = parse_arguments(argc, argv, &shared, &config_path, f);
  if (code == 0) code = config_load(config_path, shared, &config, f);
  if (code == 0 && !shared) code = policy_check_caller(&config, f);
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
