/* The worker's one poll loop once the command runs: control messages on fd 3, signals through
 * a signalfd (SIGCHLD, and SIGTERM/SIGINT/SIGHUP to the worker, passed on to the command's
 * group), and in pty mode input (fd 0 -> master, the end of input as VEOF after every byte
 * before it) and output (master -> fd 1, reading only when the previous chunk is written). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "worker.h"

#define CHUNK 65536
/* What the final drain reads at most: a pty holds 12-17 KiB; an orphan still writing to the
 * terminal must not keep the exit report waiting forever. */
#define MAX_PTY_DRAIN_BYTES (1024 * 1024)
/* The terminal's end-of-input character (^D, the default VEOF of a new pty). */
#define VEOF_CHAR '\x04'

struct buffer {
  char data[CHUNK];
  size_t start;
  size_t end;
};

struct session {
  struct channel *channel;
  struct command *cmd;
  int signal_fd;
  bool running;
  int status;
  /* pty mode */
  struct buffer input;
  struct buffer output;
  bool stdin_open;
  bool eof_pending;
  /* The last input byte written to the terminal ('\n' before any). */
  char last_input;
  bool master_open;
  bool stdout_open;
};

static void notice(struct session *s, const char *detail) {
  channel_send_error(s->channel, "protocol_invalid", detail);
}

static void on_message(struct session *s, struct supervisor_message *m) {
  if (m->type == MESSAGE_RESIZE) {
    struct winsize size = {.ws_row = m->rows, .ws_col = m->cols};
    /* Pipes mode has no terminal to resize: ignored, as documented. */
    if (s->cmd->master >= 0) ioctl(s->cmd->master, TIOCSWINSZ, &size);
  } else if (m->type == MESSAGE_SIGNAL) {
    signal_command(s->cmd, m->signal, s->running);
  } else {
    notice(s, m->type == MESSAGE_LAUNCH ? "launch was already received"
                                        : "seccomp was already received");
  }
}

static void on_channel(struct session *s) {
  char detail[DETAIL_MAX];
  if (!channel_fill(s->channel, detail)) {
    /* Nobody is left to report to or to take orders from: end the command. */
    signal_command(s->cmd, SIGKILL, s->running);
  }
  for (;;) {
    struct supervisor_message m;
    enum channel_event event = channel_take(s->channel, &m, detail);
    if (event == CHANNEL_NONE) return;
    if (event == CHANNEL_INVALID) {
      notice(s, detail);
      continue;
    }
    on_message(s, &m);
    message_free(&m);
  }
}

static void reap(struct session *s) {
  int status;
  pid_t pid;
  do {
    pid = waitpid(s->cmd->pid, &status, WNOHANG);
  } while (pid < 0 && errno == EINTR);
  if (pid == s->cmd->pid) {
    s->running = false;
    s->status = status;
  }
}

static void on_signals(struct session *s) {
  struct signalfd_siginfo info;
  while (read(s->signal_fd, &info, sizeof info) == (ssize_t)sizeof info) {
    if (info.ssi_signo == SIGCHLD) {
      reap(s);
    } else {
      signal_command(s->cmd, (int)info.ssi_signo, s->running);
    }
  }
}

static void read_input(struct session *s) {
  ssize_t n = read(STDIN_FILENO, s->input.data, CHUNK);
  if (n > 0) {
    s->input.start = 0;
    s->input.end = (size_t)n;
  } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    s->stdin_open = false;
    s->eof_pending = true;
  }
}

static void write_input(struct session *s) {
  if (s->input.end > s->input.start) {
    ssize_t n =
        write(s->cmd->master, s->input.data + s->input.start, s->input.end - s->input.start);
    if (n > 0) {
      s->input.start += (size_t)n;
      s->last_input = s->input.data[s->input.start - 1];
    }
    /* The terminal is gone: input nobody can read any more is dropped. */
    if (n < 0 && errno != EAGAIN && errno != EINTR) s->input.start = s->input.end;
    return;
  }
  if (s->eof_pending) {
    /* After a partial line the first VEOF only hands that line over, as on a terminal: a
     * second one ends the input. */
    char veof[2] = {VEOF_CHAR, VEOF_CHAR};
    size_t len = s->last_input == '\n' ? 1 : 2;
    ssize_t n = write(s->cmd->master, veof, len);
    if (n == (ssize_t)len || (n < 0 && errno != EAGAIN && errno != EINTR)) s->eof_pending = false;
  }
}

/* False once the master has nothing more to give now (EAGAIN) or ever (EIO: every slave fd is
 * closed and the pty is empty). */
static bool read_output(struct session *s) {
  ssize_t n = read(s->cmd->master, s->output.data, CHUNK);
  if (n > 0) {
    s->output.start = 0;
    s->output.end = s->stdout_open ? (size_t)n : 0;
    return true;
  }
  if (n == 0 || (errno != EAGAIN && errno != EINTR)) s->master_open = false;
  return false;
}

static void write_output(struct session *s) {
  ssize_t n =
      write(STDOUT_FILENO, s->output.data + s->output.start, s->output.end - s->output.start);
  if (n > 0) s->output.start += (size_t)n;
  if (n < 0 && errno != EAGAIN && errno != EINTR) {
    /* Nobody reads the output any more: it is dropped, the command still gets its exit. */
    s->stdout_open = false;
    s->output.start = s->output.end;
  }
}

static bool output_pending(const struct session *s) {
  return s->output.end > s->output.start;
}

static bool input_pending(const struct session *s) {
  return s->input.end > s->input.start || s->eof_pending;
}

static void poll_once(struct session *s) {
  struct pollfd fds[5] = {
      {s->channel->closed ? -1 : s->channel->fd, POLLIN, 0},
      {s->signal_fd, POLLIN, 0},
      {-1, POLLIN, 0},
      {-1, 0, 0},
      {-1, POLLOUT, 0},
  };
  bool pty = s->cmd->master >= 0;
  if (pty && s->stdin_open && !input_pending(s)) fds[2].fd = STDIN_FILENO;
  if (pty && s->master_open) {
    fds[3].events = (short)((output_pending(s) ? 0 : POLLIN) | (input_pending(s) ? POLLOUT : 0));
    /* A master without slaves reports POLLHUP whatever is asked: poll it only when needed. */
    if (fds[3].events != 0) fds[3].fd = s->cmd->master;
  }
  if (pty && output_pending(s)) fds[4].fd = STDOUT_FILENO;
  if (poll(fds, 5, -1) < 0) return;
  if (fds[0].revents != 0) on_channel(s);
  if (fds[1].revents != 0) on_signals(s);
  if (fds[2].revents != 0) read_input(s);
  if ((fds[3].revents & POLLOUT) != 0) write_input(s);
  if ((fds[3].revents & (POLLIN | POLLHUP | POLLERR)) != 0 && !output_pending(s)) read_output(s);
  if (fds[4].revents != 0) write_output(s);
}

/* Writes out what is buffered, waiting for fd 1 as long as it takes (the exit report waits for
 * the output: the supervisor reads both). */
static void flush_output(struct session *s) {
  while (output_pending(s)) {
    struct pollfd out = {STDOUT_FILENO, POLLOUT, 0};
    if (poll(&out, 1, -1) < 0 && errno != EINTR) return;
    write_output(s);
  }
}

/* After the command's exit, what is left in the pty is read until EIO (every slave closed and
 * the pty empty) or EAGAIN (an orphan still holds the terminal), bounded regardless. */
static void drain_pty(struct session *s) {
  flush_output(s);
  for (size_t drained = 0; s->master_open && drained < MAX_PTY_DRAIN_BYTES;) {
    if (!read_output(s)) return;
    drained += s->output.end;
    flush_output(s);
  }
}

static void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

struct exit_status run_session(struct channel *c, struct command *cmd, int signal_fd) {
  struct session s = {0};
  s.channel = c;
  s.cmd = cmd;
  s.signal_fd = signal_fd;
  s.running = true;
  bool pty = cmd->master >= 0;
  s.stdin_open = pty;
  s.master_open = pty;
  s.stdout_open = true;
  s.last_input = '\n';
  if (pty) {
    /* The worker is the only holder of its fds 0 and 1 in pty mode. */
    set_nonblocking(STDIN_FILENO);
    set_nonblocking(STDOUT_FILENO);
    set_nonblocking(cmd->master);
  }
  /* A SIGCHLD that arrived before the loop is still pending on the signalfd; reap anyway. */
  reap(&s);
  while (s.running)
    poll_once(&s);
  if (pty) {
    drain_pty(&s);
    close(cmd->master);
    cmd->master = -1;
  }
  struct exit_status status = {false, 0};
  if (WIFSIGNALED(s.status)) {
    status.signaled = true;
    status.code_or_signal = WTERMSIG(s.status);
  } else {
    status.code_or_signal = WEXITSTATUS(s.status);
  }
  return status;
}
