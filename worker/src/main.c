/* The turn worker: the first program that runs as the worker uid, pid 2 of the turn's pid
 * namespace. fd 0-2 are the command's stdio, fd 3 the protocol socket, fd 4 the listener
 * channel (docs/worker-protocol.md).
 *
 * Sequence: check inherited fds -> non-dumpable -> FD_CLOEXEC on fd 3 -> read the `seccomp`
 * message and install the supervisor's filter -> open the egress listener and send a copy on
 * fd 4 -> `ready` -> read `launch` (a prepared worker waits here) -> close the listener -> start
 * the command in a new session -> `started` -> forward until it exits -> `exit`, exit 0.
 * Any failure before the command starts answers `error` with a stable code and exits 1. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "worker.h"

#define PROXY_VARIABLES 8

static int refuse(struct channel *c, const char *code, const char *detail) {
  channel_send_error(c, code, detail);
  channel_finish(c);
  channel_discard(c);
  return 1;
}

/* The launch environment with the proxy variables (these win over same-named launch
 * variables) and TERM in pty mode (default xterm, as terminals expect one). */
static char **command_env(const struct launch_message *l, int port) {
  char **env = calloc(l->envc + PROXY_VARIABLES + 2, sizeof *env);
  if (env == NULL) return NULL;
  static const char *const PROXY_NAMES[PROXY_VARIABLES] = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                                                           "http_proxy", "https_proxy", "all_proxy",
                                                           "NO_PROXY",   "no_proxy"};
  size_t n = 0;
  bool has_term = false;
  for (size_t i = 0; i < l->envc; i++) {
    const char *entry = l->env[i];
    size_t name_len = strcspn(entry, "=");
    bool replaced = false;
    for (int p = 0; l->egress && p < PROXY_VARIABLES; p++) {
      replaced = replaced || (strlen(PROXY_NAMES[p]) == name_len &&
                              strncmp(entry, PROXY_NAMES[p], name_len) == 0);
    }
    has_term = has_term || (name_len == 4 && strncmp(entry, "TERM", 4) == 0);
    if (!replaced) env[n++] = l->env[i];
  }
  for (int p = 0; l->egress && p < PROXY_VARIABLES; p++) {
    char value[64];
    if (p < 6) {
      snprintf(value, sizeof value, "%s=http://127.0.0.1:%d", PROXY_NAMES[p], port);
    } else {
      snprintf(value, sizeof value, "%s=localhost,127.0.0.1", PROXY_NAMES[p]);
    }
    env[n++] = strdup(value);
  }
  if (l->has_tty && !has_term) env[n++] = strdup("TERM=xterm");
  for (size_t i = 0; i < n; i++) {
    if (env[i] == NULL) return NULL;
  }
  return env;
}

/* The first message: the supervisor's compiled filter, installed before anything else runs. */
static int install_filter(struct channel *c) {
  char detail[DETAIL_MAX];
  struct supervisor_message m;
  enum channel_event event = channel_next(c, &m, detail);
  if (event == CHANNEL_CLOSED) {
    char why[DETAIL_MAX + 64];
    snprintf(why, sizeof why, "protocol fd closed before the seccomp message: %s", detail);
    return refuse(c, "protocol_closed", why);
  }
  if (event == CHANNEL_INVALID) return refuse(c, "protocol_invalid", detail);
  if (m.type != MESSAGE_SECCOMP) {
    message_free(&m);
    return refuse(c, "protocol_invalid", "the first message must be seccomp");
  }
  bool installed = install_seccomp(m.program, m.program_len, detail);
  message_free(&m);
  return installed ? 0 : refuse(c, "seccomp_failed", detail);
}

static int expect_launch(struct channel *c, struct supervisor_message *m) {
  char detail[DETAIL_MAX];
  enum channel_event event = channel_next(c, m, detail);
  if (event == CHANNEL_CLOSED) {
    char why[DETAIL_MAX + 64];
    snprintf(why, sizeof why, "protocol fd closed before the launch message: %s", detail);
    return refuse(c, "protocol_closed", why);
  }
  if (event == CHANNEL_INVALID) return refuse(c, "protocol_invalid", detail);
  if (m->type != MESSAGE_LAUNCH) {
    static const char *const NAMES[] = {"seccomp", "launch", "resize", "signal"};
    snprintf(detail, DETAIL_MAX, "first message must be launch, got %s", NAMES[m->type]);
    message_free(m);
    return refuse(c, "protocol_invalid", detail);
  }
  return 0;
}

/* The command could not start, but the turn ran: its exit is the shell's 127 or 126. */
static int report_spawn_error(struct channel *c, enum spawn_outcome outcome, const char *detail) {
  struct exit_report r = {0};
  r.code_or_signal = outcome == SPAWN_NOT_FOUND ? 127 : 126;
  r.spawn_error = outcome == SPAWN_NOT_FOUND ? "not_found" : "not_executable";
  r.detail = detail;
  char line[PROTOCOL_DETAIL_MAX * 6 + 512];
  size_t len = encode_exit(line, sizeof line, &r);
  if (len > 0) channel_send(c, line, len);
  channel_finish(c);
  return 0;
}

static int64_t usec(struct timeval tv) {
  return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

static int report_exit(struct channel *c, struct exit_status status) {
  struct rusage usage;
  /* getrusage on a valid buffer cannot fail; if it did, zeros would be a false record. */
  if (getrusage(RUSAGE_CHILDREN, &usage) != 0) abort();
  struct exit_report r = {0};
  r.signaled = status.signaled;
  r.code_or_signal = status.code_or_signal;
  r.user_usec = usec(usage.ru_utime);
  r.system_usec = usec(usage.ru_stime);
  /* Linux reports ru_maxrss in KiB. */
  r.max_rss_kib = usage.ru_maxrss;
  char line[512];
  size_t len = encode_exit(line, sizeof line, &r);
  if (len > 0) channel_send(c, line, len);
  channel_finish(c);
  return 0;
}

/* Signals the worker handles through its signalfd; blocked from here on, unblocked in the
 * command's child before exec. */
static int block_signals(sigset_t *set) {
  sigemptyset(set);
  sigaddset(set, SIGCHLD);
  sigaddset(set, SIGTERM);
  sigaddset(set, SIGINT);
  sigaddset(set, SIGHUP);
  if (sigprocmask(SIG_BLOCK, set, NULL) != 0) return -1;
  return signalfd(-1, set, SFD_CLOEXEC | SFD_NONBLOCK);
}

static int run(struct channel *c, const struct launch_message *launch, int port, int signal_fd) {
  char detail[DETAIL_MAX];
  char **env = command_env(launch, port);
  if (env == NULL) return refuse(c, "spawn_failed", "out of memory for the environment");
  struct command cmd;
  enum spawn_outcome outcome = start_command(launch, env, &cmd, detail);
  if (outcome == SPAWN_NOT_FOUND || outcome == SPAWN_NOT_EXECUTABLE) {
    return report_spawn_error(c, outcome, detail);
  }
  if (outcome != SPAWN_STARTED) return refuse(c, "spawn_failed", detail);
  char line[64];
  size_t len = encode_started(line, sizeof line, cmd.pid);
  channel_send(c, line, len);
  return report_exit(c, run_session(c, &cmd, signal_fd));
}

int main(void) {
  char detail[DETAIL_MAX];
  /* Before the worker opens anything of its own. */
  bool fds_ok = check_inherited_fds(detail);
  /* Before the command can exist: out of its reach for the worker's whole life. */
  bool undumpable = fds_ok ? make_undumpable(detail) : false;
  bool cloexec = undumpable ? set_cloexec(PROTOCOL_FD, detail) : false;
  /* The worker's own writes to a closed fd 3 or fd 1 must not kill it before it reports. */
  signal(SIGPIPE, SIG_IGN);
  struct channel c;
  if (!channel_open(&c, PROTOCOL_FD)) return 1;
  if (!fds_ok) return refuse(&c, "unexpected_fds", detail);
  if (!undumpable) return refuse(&c, "undumpable_failed", detail);
  if (!cloexec) return refuse(&c, "unexpected_fds", detail);
  if (!set_cloexec(LISTENER_CHANNEL_FD, detail)) return refuse(&c, "unexpected_fds", detail);

  int failed = install_filter(&c);
  if (failed != 0) return failed;
  /* Connections wait in the listener's backlog until the proxy serves it; before the launch
   * no command exists that could make one. */
  int listener;
  int port;
  if (!open_egress_listener(&listener, &port, detail)) return refuse(&c, "egress_failed", detail);
  if (!hand_over_listener(listener, detail)) return refuse(&c, "egress_failed", detail);
  sigset_t handled;
  int signal_fd = block_signals(&handled);
  if (signal_fd < 0) return refuse(&c, "spawn_failed", "signalfd failed");
  char line[64];
  channel_send(&c, line, encode_ready(line, sizeof line));

  struct supervisor_message m;
  failed = expect_launch(&c, &m);
  /* The proxy holds its own copy by now (or none: no egress, and connections are refused). */
  close(listener);
  if (failed != 0) return failed;
  return run(&c, &m.launch, port, signal_fd);
}
