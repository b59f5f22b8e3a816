#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <net/if.h>
#include <stdint.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "identity.h"
#include "policy.h"
#include "sandbox.h"
#include "view.h"
#include "workspace-lease.h"

/* The worker's fds: 0-2 stdio, 3 the protocol socket, 4 the listener channel. */
#define LISTENER_CHANNEL_FD 4
#define DEFAULT_HOSTNAME "turnhost"

/* Opens each component of `relative` (canonical, no "." or "..") beneath `dirfd` with
 * O_NOFOLLOW|O_DIRECTORY, so a symlink anywhere below the root fails (ENOTDIR/ELOOP).
 * Always consumes `dirfd`; on success `*leaf` is the last directory. */
static int open_beneath(int dirfd, const char *relative, int *leaf, struct failure *f) {
  char component[256];
  const char *cursor = relative;
  while (*cursor != '\0') {
    const char *slash = strchr(cursor, '/');
    size_t len = slash == NULL ? strlen(cursor) : (size_t)(slash - cursor);
    if (len == 0 || len >= sizeof component) {
      close(dirfd);
      return fail_with(f, EXIT_CGROUP_REFUSED, "cgroup: bad path component");
    }
    memcpy(component, cursor, len);
    component[len] = '\0';
    int next = openat(dirfd, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int saved = errno;
    close(dirfd);
    if (next < 0) {
      return fail_with(f, EXIT_CGROUP_REFUSED,
                       "cgroup: component '%.64s' is not a plain directory: %s", component,
                       strerror(saved));
    }
    dirfd = next;
    cursor += len;
    if (*cursor == '/') {
      cursor++;
    }
  }
  *leaf = dirfd;
  return 0;
}

static bool is_cgroup_filesystem(int fd) {
  struct statfs fs;
  return fstatfs(fd, &fs) == 0 &&
         (fs.f_type == CGROUP_SUPER_MAGIC || fs.f_type == CGROUP2_SUPER_MAGIC);
}

static int write_self_to_procs(int leaf, struct failure *f) {
  char pid_text[32];
  int len = snprintf(pid_text, sizeof pid_text, "%d\n", (int)getpid());
  int procs = openat(leaf, "cgroup.procs", O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
  if (procs < 0) {
    return fail_with(f, EXIT_CGROUP_REFUSED, "cgroup: cannot open cgroup.procs: %s",
                     strerror(errno));
  }
  ssize_t written = write(procs, pid_text, (size_t)len);
  int saved = errno;
  close(procs);
  if (written != len) {
    return fail_with(f, EXIT_CGROUP_REFUSED, "cgroup: writing cgroup.procs: %s", strerror(saved));
  }
  return 0;
}

int join_cgroup(const struct helper_config *c, const char *cgroup, struct failure *f) {
  const char *root = policy_cgroup_root_for(c, cgroup);
  if (root == NULL) {
    return fail_with(f, EXIT_CGROUP_REFUSED, "cgroup %.128s is not beneath a cgroup_root", cgroup);
  }
  int root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) {
    return fail_with(f, EXIT_CGROUP_REFUSED, "cgroup_root %.128s: %s", root, strerror(errno));
  }
  size_t root_len = strlen(root);
  const char *relative = cgroup + (root_len == 1 ? 1 : root_len + 1);
  int leaf = -1;
  int code = open_beneath(root_fd, relative, &leaf, f);
  if (code != 0) {
    return code;
  }
  if (!is_cgroup_filesystem(leaf)) {
    close(leaf);
    return fail_with(f, EXIT_CGROUP_REFUSED, "cgroup %.128s is not on a cgroup filesystem", cgroup);
  }
  code = write_self_to_procs(leaf, f);
  close(leaf);
  return code;
}

static const int rlimit_resources[RLIMIT_SLOT_COUNT] = {
    [RLIMIT_SLOT_NPROC] = RLIMIT_NPROC,
    [RLIMIT_SLOT_DATA] = RLIMIT_DATA,
    [RLIMIT_SLOT_FSIZE] = RLIMIT_FSIZE,
    [RLIMIT_SLOT_NOFILE] = RLIMIT_NOFILE,
};

/* Sets soft = hard = value. Refuses a value above the current hard limit: the helper never
 * raises a limit (a soft limit below it is the caller's own to raise anyway). */
static int lower_rlimits(const struct descriptor *d, struct failure *f) {
  for (int slot = 0; slot < RLIMIT_SLOT_COUNT; slot++) {
    if (!d->has_rlimit[slot]) {
      continue;
    }
    struct rlimit current;
    if (getrlimit(rlimit_resources[slot], &current) != 0) {
      return fail_with(f, EXIT_RLIMIT_REFUSED, "getrlimit: %s", strerror(errno));
    }
    rlim_t value = (rlim_t)d->rlimit[slot];
    if (current.rlim_max != RLIM_INFINITY && value > current.rlim_max) {
      return fail_with(f, EXIT_RLIMIT_REFUSED, "rlimit %d: %llu would raise the hard limit %llu",
                       slot, (unsigned long long)value, (unsigned long long)current.rlim_max);
    }
    struct rlimit lowered = {value, value};
    if (setrlimit(rlimit_resources[slot], &lowered) != 0) {
      return fail_with(f, EXIT_RLIMIT_REFUSED, "setrlimit: %s", strerror(errno));
    }
  }
  return 0;
}

static int bring_loopback_up(struct failure *f) {
  int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) {
    return fail_with(f, EXIT_NAMESPACE_FAILED, "socket for lo: %s", strerror(errno));
  }
  struct ifreq request;
  memset(&request, 0, sizeof request);
  memcpy(request.ifr_name, "lo", 3);
  int result = ioctl(sock, SIOCGIFFLAGS, &request);
  if (result == 0) {
    request.ifr_flags |= IFF_UP;
    result = ioctl(sock, SIOCSIFFLAGS, &request);
  }
  int saved = errno;
  close(sock);
  if (result != 0) {
    return fail_with(f, EXIT_NAMESPACE_FAILED, "bringing lo up: %s", strerror(saved));
  }
  return 0;
}

/* The mount namespace comes last: the view (docs/filesystem-view.md) is built inside it. */
static int enter_namespaces(const struct helper_config *c, const struct descriptor *d,
                            struct failure *f) {
  int code = sandbox_enter_turn_namespaces(f);
  if (code == 0) code = view_enter(c, d, f);
  if (code == 0) {
    code = bring_loopback_up(f);
  }
  if (code != 0) {
    return code;
  }
  const char *hostname = d->hostname != NULL ? d->hostname : DEFAULT_HOSTNAME;
  if (sethostname(hostname, strlen(hostname)) != 0) {
    return fail_with(f, EXIT_NAMESPACE_FAILED, "sethostname: %s", strerror(errno));
  }
  return 0;
}

/* The listener channel the supervisor gives the worker at fd 4 is a unix SOCK_SEQPACKET
 * socket; whatever else a caller left there is closed like any fd above it. */
static bool is_listener_channel(int fd) {
  int domain = 0;
  int type = 0;
  socklen_t length = sizeof(domain);
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &length) != 0 || length != sizeof(domain)) {
    return false;
  }
  length = sizeof(type);
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) != 0 || length != sizeof(type)) {
    return false;
  }
  return domain == AF_UNIX && type == SOCK_SEQPACKET;
}

/* Node (and other callers) may leave 0-2 close-on-exec; the worker needs 0-3 open, and 4 when
 * it is the listener channel (the worker refuses to run without one: not the helper's to judge). */
/* Keeps fds 0-3 and the listener channel, plus `*program` (the worker's program, moved to the
 * first fd above them and left close-on-exec: the exec itself closes it). */
static int keep_only_worker_fds(int *program, struct failure *f) {
  int first_closed =
      is_listener_channel(LISTENER_CHANNEL_FD) ? LISTENER_CHANNEL_FD + 1 : LISTENER_CHANNEL_FD;
  if (*program != first_closed) {
    if (dup3(*program, first_closed, O_CLOEXEC) < 0) {
      return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "moving the worker program fd: %s",
                       strerror(errno));
    }
    *program = first_closed;
  }
  if (close_range((unsigned int)first_closed + 1, ~0u, 0) != 0) {
    return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "close_range: %s", strerror(errno));
  }
  for (int fd = 0; fd < first_closed; fd++) {
    if (fcntl(fd, F_SETFD, 0) != 0) {
      return fail_with(f, EXIT_IDENTITY_DROP_FAILED, "clearing FD_CLOEXEC on %d: %s", fd,
                       strerror(errno));
    }
  }
  return 0;
}

/* A caller could leave signals ignored or blocked; both survive execve. */
static int reset_signals(struct failure *f) {
  for (int sig = 1; sig < NSIG; sig++) {
    if (sig != SIGKILL && sig != SIGSTOP) {
      signal(sig, SIG_DFL); /* fails harmlessly for numbers glibc reserves */
    }
  }
  sigset_t none;
  sigemptyset(&none);
  if (sigprocmask(SIG_SETMASK, &none, NULL) != 0) {
    return fail_with(f, EXIT_INTERNAL, "sigprocmask: %s", strerror(errno));
  }
  return 0;
}

static void build_worker_argv(const struct helper_config *c, char **argv) {
  argv[0] = (char *)c->worker_exec;
  for (size_t i = 0; i < c->worker_arg_count; i++) {
    argv[i + 1] = (char *)c->worker_args[i];
  }
  argv[c->worker_arg_count + 1] = NULL;
}

static int join_cgroups(const struct helper_config *c, const struct descriptor *d,
                        struct failure *f) {
  for (size_t i = 0; i < d->cgroup_count; i++) {
    int code = join_cgroup(c, d->cgroups[i], f);
    if (code != 0) {
      return code;
    }
  }
  return 0;
}

/* The uid a launch runs as: in shared mode the caller's own; else the descriptor's, locked for
 * the worker's life: a leased workspace's uid shared with its other turns, or an unleased uid
 * (with `uid_search`, the first free one of the range from it on) exclusively. */
static int lease_identity(const struct helper_config *c, const struct descriptor *d,
                          struct worker_identity *id, int *lock, struct failure *f) {
  if (c->shared) {
    if (d->lease != NULL) {
      return fail_with(f, EXIT_CALLER_NOT_PERMITTED,
                       "launch: shared mode has no workspace leases (workers run as the caller)");
    }
    *id = identity_for(c, 0);
    bool mismatch = (d->has_uid && d->uid != id->uid) || (d->has_gid && d->gid != id->gid);
    if (mismatch) {
      return fail_with(f, EXIT_UID_OUT_OF_RANGE,
                       "shared mode runs workers as the caller (uid %u, gid %u)", id->uid, id->gid);
    }
    return 0;
  }
  uint32_t uid = 0;
  int code = workspace_lease_launch_uid(c, d, &uid, lock, f);
  if (code == 0) *id = identity_for(c, uid);
  return code;
}

/* Tells the supervisor, on the listener channel and before the worker exists, which uid the
 * worker got, and hands it the view's /tmp (the turn's own tmpfs) for host writes into it and
 * its measure at the end: payload `launched <uid>`, the tmpfs root as SCM_RIGHTS. */
static int report_launch(uint32_t uid, struct failure *f) {
  if (!is_listener_channel(LISTENER_CHANNEL_FD)) {
    return 0;
  }
  int tmp = open("/tmp", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct statfs fs;
  if (tmp < 0 || fstatfs(tmp, &fs) != 0 || fs.f_type != TMPFS_MAGIC) {
    if (tmp >= 0) {
      close(tmp);
    }
    return fail_with(f, EXIT_NAMESPACE_FAILED, "the view's /tmp is not a tmpfs of its own");
  }
  char payload[32];
  int len = snprintf(payload, sizeof payload, "launched %u", uid);
  char control[CMSG_SPACE(sizeof(int))];
  memset(control, 0, sizeof control);
  struct iovec iov = {payload, (size_t)len};
  struct msghdr message;
  memset(&message, 0, sizeof message);
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  struct cmsghdr *header = CMSG_FIRSTHDR(&message);
  header->cmsg_level = SOL_SOCKET;
  header->cmsg_type = SCM_RIGHTS;
  header->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(header), &tmp, sizeof(int));
  ssize_t sent = sendmsg(LISTENER_CHANNEL_FD, &message, MSG_NOSIGNAL);
  int saved = errno;
  close(tmp);
  if (sent != len) {
    return fail_with(f, EXIT_NAMESPACE_FAILED, "reporting the launch: %s", strerror(saved));
  }
  return 0;
}

/* The worker's program, opened before the view exists: the worker is executed from this fd, so
 * no path to it (a checkout, a package directory) needs to be visible in the view. */
static int open_worker_program(const struct helper_config *c, int *program, struct failure *f) {
  *program = open(c->worker_exec, O_PATH | O_CLOEXEC);
  if (*program < 0) {
    return fail_with(f, EXIT_EXEC_FAILED, "open %.128s: %s", c->worker_exec, strerror(errno));
  }
  return 0;
}

/* In order (docs/identity-helper-protocol.md, "Processes of a launch"): the worker program opened
 * -> the uid and its lease
 * -> the turn cgroup -> the rlimits -> [shared without root: a user namespace] -> a pid
 * namespace: this process stays outside as the monitor holding the lease, pid 1 goes on ->
 * cgroup, net, ipc, uts and mount namespaces with the view -> the launch report -> pid 1 drops
 * its identity -> pid 1 forks the worker and becomes the namespace's init -> the worker keeps
 * fds 0-4 and execs the program from its fd. */
int launch_worker(const struct helper_config *c, const struct descriptor *d, struct failure *f) {
  struct worker_identity id;
  int lock = -1;
  int program = -1;
  int code = open_worker_program(c, &program, f);
  if (code == 0) code = lease_identity(c, d, &id, &lock, f);
  if (code == 0) code = join_cgroups(c, d, f);
  if (code == 0) code = lower_rlimits(d, f);
  if (code == 0 && id.user_namespace) code = identity_enter_user_namespace(&id, f);
  if (code == 0) code = sandbox_fork_pid_namespace(lock, f);
  if (code == 0) code = enter_namespaces(c, d, f);
  if (code == 0) code = report_launch(id.uid, f);
  if (code == 0) code = identity_drop(c, &id, f);
  if (code == 0) code = sandbox_fork_worker(f);
  if (code == 0) code = keep_only_worker_fds(&program, f);
  if (code == 0) code = reset_signals(f);
  if (code != 0) {
    return code;
  }
  if (chdir(d->cwd) != 0) {
    return fail_with(f, EXIT_CWD_UNUSABLE, "cwd %.128s: %s", d->cwd, strerror(errno));
  }
  char *argv[CONFIG_MAX_WORKER_ARGS + 2];
  build_worker_argv(c, argv);
  execveat(program, "", argv, (char *const *)d->env, AT_EMPTY_PATH);
  return fail_with(f, EXIT_EXEC_FAILED, "execveat %.128s: %s", c->worker_exec, strerror(errno));
}
