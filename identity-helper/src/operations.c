#include "operations.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fd-io.h"
#include "identity.h"
#include "policy.h"
#include "procs.h"
#include "sandbox.h"
#include "syntax.h"
#include "view.h"

#define KILL_MAX_PASSES 32

/* What a child running as the worker identity sends back: its failure (code 0 if none)
 * followed by an operation-specific payload. */
struct child_header {
  int32_t code;
  char reason[FAILURE_REASON_MAX];
};

typedef void (*worker_task)(const void *context, void *payload);

/* Runs in the child before the identity drop, with privilege (e.g. building a view). */
typedef int (*worker_prepare)(const struct helper_config *c, const void *context,
                              struct failure *f);

struct worker_steps {
  worker_prepare prepare; /* NULL: nothing before the drop */
  worker_task task;
};

/* A view is built, as a launch's is, by pid 1 of a pid namespace of its own: its /proc shows
 * that namespace, and a user namespace may mount a /proc only of a pid namespace it owns. The
 * process that forked it waits and exits with its status. */
static int enter_pid_namespace(int out, struct failure *f) {
  if (unshare(CLONE_NEWPID) != 0) {
    return fail_with(f, EXIT_NAMESPACE_FAILED, "unshare(pid): %s", strerror(errno));
  }
  pid_t child = fork();
  if (child < 0) {
    return fail_with(f, EXIT_INTERNAL, "fork into the pid namespace: %s", strerror(errno));
  }
  if (child > 0) {
    close(out);
    int status = 0;
    while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
    }
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : EXIT_INTERNAL);
  }
  return 0;
}

static _Noreturn void child_run_as_worker(const struct helper_config *c,
                                          const struct worker_identity *id,
                                          const struct worker_steps *steps, const void *context,
                                          void *payload, size_t payload_size, int out) {
  struct failure child_failure = {0, {0}};
  struct child_header header;
  memset(&header, 0, sizeof header);
  worker_task task = steps->task;
  int code = id->user_namespace ? identity_enter_user_namespace(id, &child_failure) : 0;
  if (code == 0 && steps->prepare != NULL) code = enter_pid_namespace(out, &child_failure);
  if (code == 0 && steps->prepare != NULL) code = steps->prepare(c, context, &child_failure);
  if (code == 0 && identity_drop(c, id, &child_failure) == 0) {
    task(context, payload);
  }
  header.code = child_failure.code;
  memcpy(header.reason, child_failure.reason, sizeof header.reason);
  bool sent = write_all(out, &header, sizeof header) &&
              (header.code != 0 || write_all(out, payload, payload_size));
  _exit(sent ? 0 : 1);
}

/* Forks, prepares and drops to `id` in the child, runs the task there and copies its payload
 * back. */
static int run_as_worker(const struct helper_config *c, const struct worker_identity *id,
                         const struct worker_steps *steps, const void *context, void *payload,
                         size_t payload_size, struct failure *f) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return fail_with(f, EXIT_INTERNAL, "pipe: %s", strerror(errno));
  }
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return fail_with(f, EXIT_INTERNAL, "fork: %s", strerror(errno));
  }
  if (pid == 0) {
    close(fds[0]);
    child_run_as_worker(c, id, steps, context, payload, payload_size, fds[1]);
  }
  close(fds[1]);
  struct child_header header;
  memset(&header, 0, sizeof header);
  size_t got_header = read_up_to(fds[0], &header, sizeof header);
  size_t got_payload = header.code == 0 ? read_up_to(fds[0], payload, payload_size) : 0;
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (got_header != sizeof header) {
    return fail_with(f, EXIT_INTERNAL, "worker-identity child sent no report");
  }
  if (header.code != 0) {
    header.reason[sizeof header.reason - 1] = '\0';
    return fail_with(f, header.code, "%s", header.reason);
  }
  if (got_payload != payload_size || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return fail_with(f, EXIT_INTERNAL, "worker-identity child failed");
  }
  return 0;
}

static void observe_task(const void *context, void *payload) {
  (void)context;
  identity_observe(payload);
}

static void print_probe_receipt(const struct helper_config *c, const struct worker_identity *id,
                                const struct identity_report *r) {
  printf("helper_version %s\n", HELPER_VERSION);
  printf("protocol_versions %d\n", DESCRIPTOR_PROTOCOL_VERSION);
  printf("identity %s\n", id->shared ? "shared" : "separate");
  if (!id->shared) {
    printf("uid_range %u %u\n", c->uid_first, c->uid_count);
  }
  printf("user_namespace %s\n", id->user_namespace ? "yes" : "no");
  printf("worker_uid %u\n", id->uid);
  printf("worker_ruid %u\nworker_euid %u\nworker_suid %u\n", r->ruid, r->euid, r->suid);
  printf("worker_rgid %u\nworker_egid %u\nworker_sgid %u\n", r->rgid, r->egid, r->sgid);
  printf("worker_groups %d\n", (int)r->group_count);
  printf("worker_no_new_privs %d\n", (int)r->no_new_privs);
  printf("worker_cap_bnd %016llx\n", (unsigned long long)r->cap_bnd);
  printf("worker_cap_eff %016llx\n", (unsigned long long)r->cap_eff);
  printf("worker_cap_prm %016llx\n", (unsigned long long)r->cap_prm);
  fflush(stdout);
}

static int verify_probe_report(const struct worker_identity *id, const struct identity_report *r,
                               struct failure *f) {
  uint32_t uid = id->uid;
  uint32_t gid = id->gid;
  bool ids = r->ruid == uid && r->euid == uid && r->suid == uid && r->rgid == gid &&
             r->egid == gid && r->sgid == gid;
  if (!ids) {
    return fail_with(f, EXIT_PROBE_MISMATCH, "probe: worker ids are not all %u", uid);
  }
  if (r->status_read != 1) {
    return fail_with(f, EXIT_PROBE_MISMATCH, "probe: worker could not read /proc/self/status");
  }
  /* In a user namespace the caller's groups stay (the kernel refuses setgroups there). */
  bool groups_ok = id->user_namespace || r->group_count == 0;
  if (!groups_ok || r->no_new_privs != 1) {
    return fail_with(f, EXIT_PROBE_MISMATCH, "probe: worker groups not empty or NoNewPrivs 0");
  }
  if (r->cap_bnd != 0 || r->cap_eff != 0 || r->cap_prm != 0) {
    return fail_with(f, EXIT_PROBE_MISMATCH, "probe: worker capability sets not empty");
  }
  return 0;
}

/* The identity a probe or a view runs its child as: the caller's own in shared mode; else the
 * descriptor's uid or the first of the range. No lease: the child runs our code for a moment
 * and may share its uid with a running worker, whose command lives in a pid namespace of its
 * own and cannot see it, let alone signal or trace it. */
static int operation_identity(const struct helper_config *c, const struct descriptor *d,
                              struct worker_identity *id, struct failure *f) {
  if (c->shared) {
    *id = identity_for(c, 0);
    return d->has_uid && d->uid != id->uid
               ? fail_with(f, EXIT_UID_OUT_OF_RANGE, "shared mode runs as the caller (uid %u)",
                           id->uid)
               : 0;
  }
  uint32_t uid = 0;
  int code = policy_worker_uid(c, d, &uid, f);
  if (code == 0) *id = identity_for(c, uid);
  return code;
}

int run_probe(const struct helper_config *c, const struct descriptor *d, struct failure *f) {
  struct worker_identity id;
  struct identity_report report;
  memset(&report, 0, sizeof report);
  int code = operation_identity(c, d, &id, f);
  if (code == 0) {
    static const struct worker_steps probe_steps = {NULL, observe_task};
    code = run_as_worker(c, &id, &probe_steps, NULL, &report, sizeof report, f);
  }
  if (code != 0) {
    return code;
  }
  print_probe_receipt(c, &id, &report);
  return verify_probe_report(&id, &report, f);
}

enum emptiness { EMPTINESS_NO = 0, EMPTINESS_YES, EMPTINESS_UNKNOWN };

struct view_answers {
  unsigned char readable[DESCRIPTOR_MAX_PATHS];
  unsigned char writable[DESCRIPTOR_MAX_PATHS];
  unsigned char exists[DESCRIPTOR_MAX_PATHS];
  unsigned char empty[DESCRIPTOR_MAX_PATHS];
};

static enum emptiness file_emptiness(const char *path) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    return EMPTINESS_UNKNOWN;
  }
  char byte;
  ssize_t n = read(fd, &byte, 1);
  close(fd);
  return n == 0 ? EMPTINESS_YES : n == 1 ? EMPTINESS_NO : EMPTINESS_UNKNOWN;
}

static enum emptiness directory_emptiness(const char *path) {
  DIR *dir = opendir(path);
  if (dir == NULL) {
    return EMPTINESS_UNKNOWN;
  }
  enum emptiness answer = EMPTINESS_YES;
  struct dirent *entry;
  while (answer == EMPTINESS_YES && (entry = readdir(dir)) != NULL) {
    if (strcmp(entry->d_name, ".") != 0 && strcmp(entry->d_name, "..") != 0) {
      answer = EMPTINESS_NO;
    }
  }
  closedir(dir);
  return answer;
}

/* Content as the worker would see it: a regular file with no bytes, a directory with no
 * entries; unknown when the worker cannot read it or it is neither. */
static enum emptiness path_emptiness(const char *path, const struct stat *st) {
  if (S_ISREG(st->st_mode)) {
    return file_emptiness(path);
  }
  if (S_ISDIR(st->st_mode)) {
    return directory_emptiness(path);
  }
  return EMPTINESS_UNKNOWN;
}

/* access(2) checks the real ids, which after the drop are the worker's. Paths resolve as the
 * worker's would (symlinks followed), inside the view when one was built. */
static void view_task(const void *context, void *payload) {
  const struct descriptor *d = context;
  struct view_answers *answers = payload;
  for (size_t i = 0; i < d->path_count; i++) {
    struct stat st;
    answers->readable[i] = access(d->paths[i], R_OK) == 0;
    answers->writable[i] = access(d->paths[i], W_OK) == 0;
    answers->exists[i] = stat(d->paths[i], &st) == 0;
    answers->empty[i] =
        answers->exists[i] ? (unsigned char)path_emptiness(d->paths[i], &st) : EMPTINESS_UNKNOWN;
  }
}

/* With a workspace the child builds the launch view first, in namespaces of its own as a
 * launch's pid 1 does (the view's /sys shows its network and cgroup namespaces). */
static int view_prepare(const struct helper_config *c, const void *context, struct failure *f) {
  const struct descriptor *d = context;
  if (d->workspace == NULL) {
    return 0;
  }
  int code = sandbox_enter_turn_namespaces(f);
  return code == 0 ? view_enter(c, d, f) : code;
}

static const char *yes_no(unsigned char value) {
  return value ? "yes" : "no";
}

static const char *emptiness_name(unsigned char value) {
  return value == EMPTINESS_YES ? "yes" : value == EMPTINESS_NO ? "no" : "unknown";
}

int run_view(const struct helper_config *c, const struct descriptor *d, struct failure *f) {
  struct worker_identity id;
  struct view_answers answers;
  memset(&answers, 0, sizeof answers);
  int code = operation_identity(c, d, &id, f);
  if (code == 0) {
    static const struct worker_steps view_steps = {view_prepare, view_task};
    code = run_as_worker(c, &id, &view_steps, d, &answers, sizeof answers, f);
  }
  if (code != 0) {
    return code;
  }
  printf("worker_uid %u\nprofile %s\nview %s\n", id.uid, d->profile,
         d->workspace == NULL ? "host" : "built");
  for (size_t i = 0; i < d->path_count; i++) {
    printf("path %s read %s write %s exists %s empty %s\n", d->paths[i],
           yes_no(answers.readable[i]), yes_no(answers.writable[i]), yes_no(answers.exists[i]),
           emptiness_name(answers.empty[i]));
  }
  fflush(stdout);
  return 0;
}

/* pidfd first, uid check second, signal through the pidfd: if the pid is reused after the
 * pidfd was opened, the signal goes to the (dead) original and fails with ESRCH instead of
 * reaching the newcomer. */
static bool kill_if_worker(const char *pid_name, uint32_t uid) {
  uint64_t pid = 0;
  if (!parse_decimal(pid_name, INT32_MAX, &pid)) {
    return false;
  }
  int pidfd = pidfd_open((pid_t)pid, 0);
  if (pidfd < 0) {
    return false;
  }
  uint32_t owner = 0;
  bool killed = procs_live_real_uid(pid_name, &owner) && owner == uid &&
                pidfd_send_signal(pidfd, SIGKILL, NULL, 0) == 0;
  close(pidfd);
  return killed;
}

static int kill_pass(uint32_t uid, unsigned *killed, struct failure *f) {
  DIR *proc = opendir("/proc");
  if (proc == NULL) {
    return fail_with(f, EXIT_INTERNAL, "opendir /proc: %s", strerror(errno));
  }
  struct dirent *entry;
  while ((entry = readdir(proc)) != NULL) {
    if (procs_is_pid_name(entry->d_name) && kill_if_worker(entry->d_name, uid)) {
      (*killed)++;
    }
  }
  closedir(proc);
  return 0;
}

int run_kill(const struct helper_config *c, const struct descriptor *d, struct failure *f) {
  if (c->shared) {
    return fail_with(
        f, EXIT_CALLER_NOT_PERMITTED,
        "kill: shared-mode workers run as the caller; only their cgroup kill is exact");
  }
  uint32_t uid = 0;
  int code = policy_worker_uid(c, d, &uid, f);
  unsigned total = 0;
  for (int pass = 0; code == 0 && pass < KILL_MAX_PASSES; pass++) {
    unsigned killed = 0;
    code = kill_pass(uid, &killed, f);
    total += killed;
    if (killed == 0) {
      break;
    }
  }
  if (code != 0) {
    return code;
  }
  printf("worker_uid %u\nkilled %u\n", uid, total);
  fflush(stdout);
  return 0;
}
