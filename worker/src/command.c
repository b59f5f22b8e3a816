/* Starts the turn command in a new session: with the worker's own fds 0-2 (pipes mode: nothing
 * is copied through the worker, EOF and backpressure stay between the supervisor and the
 * command) or in a pty made on the turn's own devpts (pty mode). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "worker.h"

/* glibc execvp's search path when PATH is unset. */
#define DEFAULT_PATH "/bin:/usr/bin"

static bool is_executable_file(const char *file) {
  struct stat st;
  return access(file, X_OK) == 0 && stat(file, &st) == 0 && S_ISREG(st.st_mode);
}

static bool exists(const char *file) {
  struct stat st;
  return stat(file, &st) == 0;
}

static const char *env_value(char **env, const char *name) {
  size_t n = strlen(name);
  for (char **e = env; *e != NULL; e++) {
    if (strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  }
  return NULL;
}

/* `dir`/`name` against `cwd` for a relative dir; the empty dir is the cwd itself. */
static bool candidate(char *out, size_t cap, const char *cwd, const char *dir, size_t dir_len,
                      const char *name) {
  int n;
  if (dir_len > 0 && dir[0] == '/') {
    n = snprintf(out, cap, "%.*s/%s", (int)dir_len, dir, name);
  } else if (dir_len > 0) {
    n = snprintf(out, cap, "%s/%.*s/%s", cwd, (int)dir_len, dir, name);
  } else {
    n = snprintf(out, cap, "%s/%s", cwd, name);
  }
  return n > 0 && (size_t)n < cap;
}

/* execvp's lookup, done up front so both modes report a missing or unexecutable command as a
 * typed spawn error (exit 127 / 126, as shells say it) instead of a child that prints an error. */
static enum spawn_outcome resolve(const struct launch_message *l, char **env, char *file,
                                  size_t cap, char detail[DETAIL_MAX]) {
  struct stat st;
  if (stat(l->cwd, &st) != 0 || !S_ISDIR(st.st_mode)) {
    snprintf(detail, DETAIL_MAX, "cwd %s is not a directory this worker can reach", l->cwd);
    return SPAWN_FAILED;
  }
  const char *name = l->argv[0];
  char present[PATH_MAX] = "";
  size_t searched = 0;
  if (strchr(name, '/') != NULL) {
    searched = 1;
    bool fits = name[0] == '/' ? snprintf(file, cap, "%s", name) < (int)cap
                               : candidate(file, cap, l->cwd, "", 0, name);
    if (fits && is_executable_file(file)) return SPAWN_STARTED;
    if (fits && exists(file)) snprintf(present, sizeof present, "%s", file);
  } else {
    const char *path = env_value(env, "PATH");
    if (path == NULL) path = DEFAULT_PATH;
    for (const char *dir = path;; dir++) {
      const char *end = strchrnul(dir, ':');
      searched++;
      if (candidate(file, cap, l->cwd, dir, (size_t)(end - dir), name)) {
        if (is_executable_file(file)) return SPAWN_STARTED;
        if (present[0] == '\0' && exists(file)) snprintf(present, sizeof present, "%s", file);
      }
      if (*end == '\0') break;
      dir = end;
    }
  }
  if (present[0] != '\0') {
    /* Cut: a path may be longer than a detail. */
    snprintf(detail, DETAIL_MAX, "\"%.400s\": %.500s is not an executable file", name, present);
    return SPAWN_NOT_EXECUTABLE;
  }
  snprintf(detail, DETAIL_MAX, "\"%.900s\": command not found (searched %zu location(s))", name,
           searched);
  return SPAWN_NOT_FOUND;
}

/* What the child reports on its status pipe when it cannot exec: the step and errno. */
struct child_failure {
  int step;
  int error;
};
static const char *const CHILD_STEPS[] = {
    "setsid", "open the pty slave", "TIOCSCTTY", "dup2", "chdir", "execve"};

static void child_fail(int status_fd, int step) {
  struct child_failure f = {step, errno};
  ssize_t ignored = write(status_fd, &f, sizeof f);
  (void)ignored;
  _exit(127);
}

/* The child: a new session, the pty as its controlling terminal in pty mode, the worker's
 * signal mask and ignored signals undone, then exec. Only async-signal-safe calls. */
static void child_exec(const struct launch_message *l, char **env, const char *file,
                       const char *slave, int status_fd) {
  sigset_t none;
  sigemptyset(&none);
  signal(SIGPIPE, SIG_DFL);
  sigprocmask(SIG_SETMASK, &none, NULL);
  if (setsid() < 0) child_fail(status_fd, 0);
  if (slave != NULL) {
    int fd = open(slave, O_RDWR);
    if (fd < 0) child_fail(status_fd, 1);
    if (ioctl(fd, TIOCSCTTY, 0) != 0) child_fail(status_fd, 2);
    for (int target = 0; target <= 2; target++) {
      if (dup2(fd, target) < 0) child_fail(status_fd, 3);
    }
    if (fd > 2) close(fd);
  }
  if (chdir(l->cwd) != 0) child_fail(status_fd, 4);
  execve(file, l->argv, env);
  child_fail(status_fd, 5);
}

/* The turn's own /dev/ptmx (the view mounts its own devpts instance). */
static int open_pty(const struct launch_message *l, char *slave, size_t cap,
                    char detail[DETAIL_MAX]) {
  int master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (master < 0) {
    snprintf(detail, DETAIL_MAX, "posix_openpt: %s", strerror(errno));
    return -1;
  }
  struct winsize size = {.ws_row = l->rows, .ws_col = l->cols};
  const char *call = NULL;
  if (grantpt(master) != 0) {
    call = "grantpt";
  } else if (unlockpt(master) != 0) {
    call = "unlockpt";
  } else if (ptsname_r(master, slave, cap) != 0) {
    call = "ptsname_r";
  } else if (ioctl(master, TIOCSWINSZ, &size) != 0) {
    call = "TIOCSWINSZ";
  }
  if (call != NULL) {
    snprintf(detail, DETAIL_MAX, "%s: %s", call, strerror(errno));
    close(master);
    return -1;
  }
  return master;
}

/* Waits on the child's close-on-exec status pipe: EOF means exec succeeded, so the command is
 * running in its own session (and group) before the worker reports `started`. */
static bool await_exec(int status_fd, pid_t pid, char detail[DETAIL_MAX]) {
  struct child_failure f;
  ssize_t n;
  do {
    n = read(status_fd, &f, sizeof f);
  } while (n < 0 && errno == EINTR);
  close(status_fd);
  if (n == 0) return true;
  if (n == (ssize_t)sizeof f && f.step >= 0 && f.step <= 5) {
    snprintf(detail, DETAIL_MAX, "the command's %s failed: %s", CHILD_STEPS[f.step],
             strerror(f.error));
  } else {
    snprintf(detail, DETAIL_MAX, "the command's status pipe: %s", n < 0 ? strerror(errno) : "torn");
  }
  waitpid(pid, NULL, 0);
  return false;
}

enum spawn_outcome start_command(const struct launch_message *l, char **env, struct command *cmd,
                                 char detail[DETAIL_MAX]) {
  char file[PATH_MAX];
  enum spawn_outcome resolved = resolve(l, env, file, sizeof file, detail);
  if (resolved != SPAWN_STARTED) return resolved;
  char slave[64];
  cmd->master = -1;
  if (l->has_tty) {
    cmd->master = open_pty(l, slave, sizeof slave, detail);
    if (cmd->master < 0) return SPAWN_FAILED;
  }
  int status[2];
  if (pipe2(status, O_CLOEXEC) != 0) {
    snprintf(detail, DETAIL_MAX, "pipe2: %s", strerror(errno));
    return SPAWN_FAILED;
  }
  pid_t pid = fork();
  if (pid < 0) {
    snprintf(detail, DETAIL_MAX, "fork: %s", strerror(errno));
    close(status[0]);
    close(status[1]);
    return SPAWN_FAILED;
  }
  if (pid == 0) {
    close(status[0]);
    child_exec(l, env, file, l->has_tty ? slave : NULL, status[1]);
  }
  close(status[1]);
  if (!await_exec(status[0], pid, detail)) return SPAWN_FAILED;
  cmd->pid = pid;
  return SPAWN_STARTED;
}

/* The command leads its own group from before `started` (the child calls setsid() before
 * exec, and the worker waits for the exec). A group that is gone needs nothing; if the group is
 * gone while the command still runs (it cannot be, but a pid is cheap to check), the command. */
void signal_command(const struct command *cmd, int signal, bool running) {
  if (kill(-cmd->pid, signal) == 0 || !running) return;
  kill(cmd->pid, signal);
}
