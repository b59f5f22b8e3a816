/* The worker's side of the supervisor <-> worker protocol on fd 3 (docs/worker-protocol.md):
 * newline-delimited JSON, one message per line of at most PROTOCOL_MAX_LINE_BYTES. Parsing is
 * as strict as the supervisor's (supervisor/turns/worker-protocol.ts): an unknown type, an
 * unknown field, a missing or mistyped field is refused, the detail naming the field. */
#ifndef TURNHOST_WORKER_PROTOCOL_H
#define TURNHOST_WORKER_PROTOCOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROTOCOL_FD 3
#define LISTENER_CHANNEL_FD 4
#define LISTENER_HANDOVER_PAYLOAD "egress-listener"
#define PROTOCOL_MAX_LINE_BYTES (1024 * 1024)
#define PROTOCOL_MAX_ARGV 4096
#define PROTOCOL_MAX_ENV 4096
/* A classic BPF program of at most this many struct sock_filter entries (BPF_MAXINSNS). */
#define PROTOCOL_MAX_FILTER_INSTRUCTIONS 4096
#define PROTOCOL_DETAIL_MAX 1000

enum message_type { MESSAGE_SECCOMP, MESSAGE_LAUNCH, MESSAGE_RESIZE, MESSAGE_SIGNAL };

enum parse_outcome { PARSE_OK, PARSE_INVALID_JSON, PARSE_INVALID_MESSAGE, PARSE_UNKNOWN_TYPE };

struct launch_message {
  size_t argc;
  char **argv; /* argc entries + NULL */
  char *cwd;
  size_t envc;
  char **env; /* "NAME=value", envc entries + NULL */
  bool has_tty;
  uint16_t cols;
  uint16_t rows;
  bool egress;
};

struct supervisor_message {
  enum message_type type;
  /* seccomp */
  unsigned char *program;
  size_t program_len;
  /* launch */
  struct launch_message launch;
  /* resize */
  uint16_t cols;
  uint16_t rows;
  /* signal */
  int signal;
};

/* Parses one line (without its newline). On anything but PARSE_OK, `detail` says why as
 * "<reason>: <why>" (reason: invalid_json, invalid_message or unknown_type). On PARSE_OK the
 * message owns memory: release it with message_free. */
enum parse_outcome parse_supervisor_message(const char *line, size_t len,
                                            struct supervisor_message *m,
                                            char detail[PROTOCOL_DETAIL_MAX + 1]);
void message_free(struct supervisor_message *m);

/* Decodes standard base64 (with padding); false if `text` is not canonical base64. `out`
 * must hold len / 4 * 3 bytes. */
bool base64_decode(const char *text, size_t len, unsigned char *out, size_t *out_len);

/* Appends `text` (len bytes) as a JSON string, at most `max_bytes` of it, to `out` (capacity
 * `cap`, `*used` bytes used). Invalid UTF-8 becomes U+FFFD. False if it does not fit. */
bool json_append_string(char *out, size_t cap, size_t *used, const char *text, size_t len,
                        size_t max_bytes);

/* The worker's messages, newline included; 0 if the buffer is too small. */
size_t encode_ready(char *out, size_t cap);
size_t encode_started(char *out, size_t cap, int pid);
size_t encode_error(char *out, size_t cap, const char *code, const char *detail);

struct exit_report {
  bool signaled;
  int code_or_signal;
  int64_t user_usec;
  int64_t system_usec;
  int64_t max_rss_kib;
  /* NULL, or "not_found" / "not_executable" (exit code 127 / 126) with `detail`. */
  const char *spawn_error;
  const char *detail;
};
size_t encode_exit(char *out, size_t cap, const struct exit_report *r);

/* 15 for "SIGTERM"; 0 for a name that is not a forwardable signal. */
int forwardable_signal(const char *name, size_t len);
/* "SIGSEGV" for 11, "SIG<n>" for a number without a name. */
void signal_name(int number, char out[16]);

#endif
