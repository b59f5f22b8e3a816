/* The worker's mechanisms (docs/worker-protocol.md, "Worker sequence"); main.c runs them in
 * order. Every step that can fail writes why into a `detail` buffer of DETAIL_MAX bytes. */
#ifndef TURNHOST_WORKER_WORKER_H
#define TURNHOST_WORKER_WORKER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "protocol.h"

#define DETAIL_MAX (PROTOCOL_DETAIL_MAX + 1)

/* ---- boot checks (boot.c) ---- */

/* fds 0-2 anything, 3 and 4 sockets, nothing else open (listed from /proc/self/fd). */
bool check_inherited_fds(char detail[DETAIL_MAX]);
/* PR_SET_DUMPABLE 0, checked with PR_GET_DUMPABLE. */
bool make_undumpable(char detail[DETAIL_MAX]);
bool set_cloexec(int fd, char detail[DETAIL_MAX]);
/* Checks a classic BPF program (whole sock_filter entries, 1..4096 of them, jumps in range, a
 * RET last), then PR_SET_NO_NEW_PRIVS, seccomp(SET_MODE_FILTER, TSYNC) and /proc/self/status. */
bool install_seccomp(const unsigned char *program, size_t len, char detail[DETAIL_MAX]);
/* A TCP listener on 127.0.0.1:<ephemeral>; its fd and port. */
bool open_egress_listener(int *fd, int *port, char detail[DETAIL_MAX]);
/* Sends a copy of `listener` on the listener channel (fd 4) and closes the channel. */
bool hand_over_listener(int listener, char detail[DETAIL_MAX]);

/* ---- the protocol fd (channel.c) ---- */

enum channel_event { CHANNEL_MESSAGE, CHANNEL_INVALID, CHANNEL_CLOSED, CHANNEL_NONE };

struct channel {
  int fd;
  char *buffer;
  size_t used;
  bool closed;
};

bool channel_open(struct channel *c, int fd);
/* One framed line; an unwritable channel is not an error here (the supervisor is gone). */
void channel_send(struct channel *c, const char *line, size_t len);
void channel_send_error(struct channel *c, const char *code, const char *detail);
/* Half-closes the worker's side: the supervisor reads the end of the reports. */
void channel_finish(struct channel *c);
/* Reads and drops what the supervisor already sent: a socket closed with unread data resets
 * the connection, and the supervisor would see ECONNRESET instead of the refusal. */
void channel_discard(struct channel *c);
/* Reads what is available once (blocking if nothing is); false once closed. */
bool channel_fill(struct channel *c, char detail[DETAIL_MAX]);
/* The next complete line as an event: CHANNEL_NONE when no whole line is buffered. */
enum channel_event channel_take(struct channel *c, struct supervisor_message *m,
                                char detail[DETAIL_MAX]);
/* Blocks until a whole line or the end of the channel. */
enum channel_event channel_next(struct channel *c, struct supervisor_message *m,
                                char detail[DETAIL_MAX]);

/* ---- the command (command.c) ---- */

enum spawn_outcome { SPAWN_STARTED, SPAWN_NOT_FOUND, SPAWN_NOT_EXECUTABLE, SPAWN_FAILED };

struct command {
  pid_t pid;
  /* Pty mode: the master; -1 in pipes mode. */
  int master;
};

/* Resolves argv[0] like execvp over the launch PATH and starts it in a new session, in a pty
 * when the launch asks for one. Signals in `blocked` are unblocked in the child. */
enum spawn_outcome start_command(const struct launch_message *launch, char **env,
                                 struct command *cmd, char detail[DETAIL_MAX]);
/* Signals the command's process group (the command alone if it has no group yet). */
void signal_command(const struct command *cmd, int signal, bool running);

/* ---- after the start (session.c) ---- */

struct exit_status {
  bool signaled;
  int code_or_signal;
};

/* Forwards control messages, signals and (pty mode) input and output until the command has
 * exited and its output is drained. */
struct exit_status run_session(struct channel *c, struct command *cmd, int signal_fd);

#endif
