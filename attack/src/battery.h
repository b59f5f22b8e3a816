/*
 * The attack battery's shared shapes. Every case is a pair: `attack` runs inside the turn and
 * says whether the protection held; `control` runs the same action outside the sandbox, against
 * something the protection does not cover, and must succeed, so a case cannot pass by being
 * broken itself (the supervisor pairs the two, docs/probes.md "Attack battery").
 */
#ifndef TURNHOST_ATTACK_BATTERY_H
#define TURNHOST_ATTACK_BATTERY_H

#include <stddef.h>

#define MAX_LIST 8
#define EVIDENCE_MAX 240

/* What the supervisor tells the battery about this host (key=value arguments). */
struct battery_args {
  long uid_first, uid_count;
  const char *write_target;
  const char *hidden[MAX_LIST];
  size_t hidden_count;
  const char *host_tmp, *host_shm;
  const char *protected_path, *protected_mode;
  long host_pid;
  long tcp_port;
  const char *unix_path, *abstract_name;
  const char *denied_host;
  long own_ports[MAX_LIST];
  size_t own_port_count;
  const char *setuid_probe;
  long pids;
  long memory;
  long tmp_size;
  const char *tmp_dir;
  const char *other_workspace;
  long workspace_cap;
};

/* held / ok: the protection stopped the attack (attack) or the action worked (control). */
enum verdict { VERDICT_PASS, VERDICT_FAIL, VERDICT_SKIP };

struct outcome {
  enum verdict verdict;
  char evidence[EVIDENCE_MAX];
};

typedef void (*case_fn)(const struct battery_args *args, struct outcome *out);

struct battery_case {
  const char *name;
  case_fn attack;
  case_fn control;
  /* The case can end the whole turn (an OOM kill of the turn's group): run it last, announced. */
  int ends_turn;
};

/* Each group's cases; the lists end with a case whose name is NULL. */
extern const struct battery_case identity_cases[];
extern const struct battery_case seccomp_cases[];
extern const struct battery_case view_cases[];
extern const struct battery_case process_cases[];
extern const struct battery_case network_cases[];
extern const struct battery_case limit_cases[];
extern const struct battery_case workspace_cases[];

/* One attempt in a forked child: it returns 0 for success or an errno (below 256). */
typedef int (*attempt_fn)(const void *arg);
struct child_result {
  int exited;
  /* The attempt's return when it exited; the fork's errno when signal is -1. */
  int code;
  /* The signal that ended it, 0 when it exited, -1 when no child could be made. */
  int signal;
};
struct child_result in_child(attempt_fn attempt, const void *arg);
/* "succeeded", "EPERM", "killed by signal 31", ... */
const char *child_text(struct child_result r);
/* Reads a "Key:\tvalue" line of /proc/self/status into `value`; 0 when found. */
int status_field(const char *key, char *value, size_t size);

/* Sets `out` with a printf-style evidence string. */
void verdict(struct outcome *out, enum verdict v, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* "EPERM", "ENOENT", ... or "errno N". */
const char *errno_name(int err);
/* Writes one JSON line for a case and flushes it. */
void report_line(const char *name, const char *key, const char *value, const char *evidence);

int parse_args(int argc, char **argv, int first, struct battery_args *args, char *problem,
               size_t problem_size);

#endif
