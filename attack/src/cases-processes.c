/*
 * Processes: no host process is visible or signalable from the turn (its own pid namespace),
 * and the worker that runs the command (its parent) keeps its memory closed to it
 * (non-dumpable). Controls: the host process answers outside; a same-uid child that stays
 * dumpable has its memory open to its parent.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "battery.h"

static void host_visible_attack(const struct battery_args *args, struct outcome *out) {
  if (args->host_pid < 0) return verdict(out, VERDICT_SKIP, "no host-pid given");
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld", args->host_pid);
  struct stat st;
  int visible = stat(path, &st) == 0;
  verdict(out, visible ? VERDICT_FAIL : VERDICT_PASS, "%s: %s", path,
          visible ? "visible" : errno_name(errno));
}

static void host_visible_control(const struct battery_args *args, struct outcome *out) {
  if (args->host_pid < 0) return verdict(out, VERDICT_SKIP, "no host-pid given");
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld", args->host_pid);
  struct stat st;
  int visible = stat(path, &st) == 0;
  verdict(out, visible ? VERDICT_PASS : VERDICT_FAIL, "%s: %s outside", path,
          visible ? "visible" : errno_name(errno));
}

static void signal_attack(const struct battery_args *args, struct outcome *out) {
  if (args->host_pid < 0) return verdict(out, VERDICT_SKIP, "no host-pid given");
  /* Signal 0 checks delivery without delivering anything. */
  int rc = kill((pid_t)args->host_pid, 0);
  int err = errno;
  if (rc != 0 && err == ESRCH)
    return verdict(out, VERDICT_PASS, "kill(%ld, 0): ESRCH", args->host_pid);
  verdict(out, VERDICT_FAIL, "kill(%ld, 0): %s", args->host_pid,
          rc == 0 ? "delivered" : errno_name(err));
}

static void signal_control(const struct battery_args *args, struct outcome *out) {
  if (args->host_pid < 0) return verdict(out, VERDICT_SKIP, "no host-pid given");
  int rc = kill((pid_t)args->host_pid, 0);
  /* EPERM outside still proves the process is there to be aimed at. */
  int reached = rc == 0 || errno == EPERM;
  verdict(out, reached ? VERDICT_PASS : VERDICT_FAIL, "kill(%ld, 0) outside: %s", args->host_pid,
          rc == 0 ? "delivered" : errno_name(errno));
}

static void open_mem(pid_t pid, int expect_open, struct outcome *out) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%ld/mem", (long)pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  int err = errno;
  if (fd >= 0) close(fd);
  int pass = expect_open ? fd >= 0 : fd < 0;
  verdict(out, pass ? VERDICT_PASS : VERDICT_FAIL, "%s: %s", path,
          fd >= 0 ? "opened" : errno_name(err));
}

static void worker_memory_attack(const struct battery_args *args, struct outcome *out) {
  (void)args;
  pid_t worker = getppid();
  if (worker <= 1)
    return verdict(out, VERDICT_FAIL, "parent pid %ld is not a worker", (long)worker);
  open_mem(worker, 0, out);
}

static void worker_memory_control(const struct battery_args *args, struct outcome *out) {
  (void)args;
  int fds[2];
  if (pipe(fds) != 0) return verdict(out, VERDICT_FAIL, "pipe: %s", errno_name(errno));
  pid_t child = fork();
  if (child == 0) {
    close(fds[1]);
    char byte;
    _exit(read(fds[0], &byte, 1) < 0);
  }
  close(fds[0]);
  if (child < 0) {
    close(fds[1]);
    return verdict(out, VERDICT_FAIL, "fork: %s", errno_name(errno));
  }
  open_mem(child, 1, out);
  close(fds[1]);
  waitpid(child, NULL, 0);
}

const struct battery_case process_cases[] = {
    {"processes.host_invisible", host_visible_attack, host_visible_control, 0},
    {"processes.signal_host", signal_attack, signal_control, 0},
    {"processes.worker_memory", worker_memory_attack, worker_memory_control, 0},
    {NULL, NULL, NULL, 0},
};
