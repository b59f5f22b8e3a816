#include "sandbox.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static int status_to_exit_code(int status) {
  if (WIFEXITED(status)) {
    return WEXITSTATUS(status);
  }
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

static _Noreturn void wait_and_exit(pid_t child) {
  int status = 0;
  for (;;) {
    pid_t done = waitpid(child, &status, 0);
    if (done == child) {
      _exit(status_to_exit_code(status));
    }
    if (done < 0 && errno != EINTR) {
      _exit(EXIT_INTERNAL);
    }
  }
}

/* Only `keep_fd` stays: the worker's stdio and protocol socket must end when the worker does,
 * not when the monitor does. */
static void close_all_but(int keep_fd) {
  if (keep_fd < 0) {
    close_range(0, ~0u, 0);
    return;
  }
  if (keep_fd > 0) {
    close_range(0, (unsigned)keep_fd - 1, 0);
  }
  close_range((unsigned)keep_fd + 1, ~0u, 0);
}

/* The cgroup namespace is rooted at the cgroup of the calling process: it must already be in the
 * turn's leaves (the helper joined them before forking into the pid namespace). */
int sandbox_enter_turn_namespaces(struct failure *f) {
  if (unshare(CLONE_NEWCGROUP | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS) != 0) {
    return fail_with(f, EXIT_NAMESPACE_FAILED, "unshare(cgroup, net, ipc, uts): %s",
                     strerror(errno));
  }
  return 0;
}

int sandbox_fork_pid_namespace(int keep_fd, struct failure *f) {
  if (unshare(CLONE_NEWPID) != 0) {
    return fail_with(f, EXIT_NAMESPACE_FAILED, "unshare(pid): %s", strerror(errno));
  }
  pid_t child = fork();
  if (child < 0) {
    return fail_with(f, EXIT_INTERNAL, "fork into the pid namespace: %s", strerror(errno));
  }
  if (child > 0) {
    close_all_but(keep_fd);
    wait_and_exit(child);
  }
  /* Pid 1 dies with the monitor, and the namespace with pid 1. (A monitor killed before this
   * line leaves pid 1 running in the turn cgroup, which the cgroup kill ends.) */
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) {
    _exit(EXIT_INTERNAL);
  }
  if (keep_fd >= 0) {
    close(keep_fd);
  }
  return 0;
}

static _Noreturn void run_init(pid_t worker) {
  for (;;) {
    int status = 0;
    pid_t done = waitpid(-1, &status, 0);
    if (done == worker) {
      _exit(status_to_exit_code(status));
    }
    if (done < 0 && errno != EINTR) {
      _exit(EXIT_INTERNAL);
    }
  }
}

int sandbox_fork_worker(struct failure *f) {
  pid_t worker = fork();
  if (worker < 0) {
    return fail_with(f, EXIT_INTERNAL, "fork of the worker: %s", strerror(errno));
  }
  if (worker == 0) {
    return 0;
  }
  /* pid 1 holds nothing a command could use: the worker's identity (dropped before the fork), no
   * fds, no core, no ptrace access for anyone but root of the host. Signals from inside the
   * namespace do not reach it: it has no handlers, and the kernel drops them for a namespace's
   * init. */
  close_range(0, ~0u, 0);
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  /* A change of credentials clears the parent-death signal: armed again. */
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  run_init(worker);
}
