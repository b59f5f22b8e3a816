/* The worker's process tree: a monitor outside the namespaces, an init as pid 1 of a pid
 * namespace of the turn's own, and the worker beneath it (docs/identity-helper-protocol.md,
 * "Processes of a launch"). */
#ifndef IDENTITY_HELPER_SANDBOX_H
#define IDENTITY_HELPER_SANDBOX_H

#include "failure.h"

/* unshare(CLONE_NEWPID) and fork. The parent becomes the monitor and never returns: it closes
 * every fd but `keep_fd` (the uid lease lock, or -1), waits for the child and exits with its
 * status (128 + the signal number when it was killed). Returns 0 in the child, pid 1 of the
 * new namespace, which dies when the monitor does. Exit code 76 on failure. */
int sandbox_fork_pid_namespace(int keep_fd, struct failure *f);

/* The turn's cgroup, network, ipc and uts namespaces, entered by pid 1 before the view (whose
 * /sys shows the first two). The cgroup namespace's root is the caller's cgroup in every
 * hierarchy: the turn's leaves in those the turn joined. Exit code 71 on failure. */
int sandbox_enter_turn_namespaces(struct failure *f);

/* In pid 1, once the view is built and the identity dropped (so that pid 1 never holds root
 * while the worker lives: the supervisor's attestation reads both): forks the worker and returns
 * 0 in it. In pid 1 it never returns: pid 1 closes every fd, makes itself undumpable and reaps
 * every process that ends in the namespace; when the worker ends, pid 1 exits with its status,
 * and the kernel kills whatever else is left in the namespace. Exit code 76 on failure. */
int sandbox_fork_worker(struct failure *f);

#endif
