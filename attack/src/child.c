/* Runs one attempt in a forked child, so an attempt that is killed (SIGSYS, the OOM killer) or
 * that changes the process (a new session for a pty) leaves the battery itself untouched. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "battery.h"

struct child_result in_child(attempt_fn attempt, const void *arg) {
  struct child_result result = {0, 0, 0};
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) {
    result.signal = -1;
    result.code = errno;
    return result;
  }
  if (pid == 0) _exit(attempt(arg) & 0xff);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) {
      result.signal = -1;
      result.code = errno;
      return result;
    }
  if (WIFEXITED(status)) {
    result.exited = 1;
    result.code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    result.signal = WTERMSIG(status);
  }
  return result;
}

const char *child_text(struct child_result r) {
  static char text[64];
  if (r.exited)
    snprintf(text, sizeof text, "%s", r.code == 0 ? "succeeded" : errno_name(r.code));
  else if (r.signal > 0)
    snprintf(text, sizeof text, "killed by signal %d", r.signal);
  else
    snprintf(text, sizeof text, "fork failed: %s", errno_name(r.code));
  return text;
}
