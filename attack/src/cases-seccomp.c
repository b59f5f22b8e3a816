/*
 * Seccomp: one denied call of each class answers EPERM inside the turn, and a foreign syscall
 * ABI (x32, i386) kills the caller. Arguments are harmless even unfiltered and as root (missing
 * paths, invalid ids, children that exit at once), so the control, the same call outside the
 * sandbox, answers something other than EPERM; a non-root control first enters a user namespace
 * of its own, where mount and namespace calls are the kernel's to judge, not a privilege check.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "battery.h"

#define NONEXISTENT "/nonexistent-turnhost-attack"

struct denied_call {
  long (*run)(void);
  /* The kernel checks a privilege first: a non-root control makes the call in a user namespace
   * of its own. Not for unshare(CLONE_NEWUSER): a namespace without a uid map may not nest one. */
  int needs_userns;
};

static int errno_of(long ret) {
  return ret < 0 ? errno : 0;
}

static long closing(long fd) {
  if (fd >= 0) close((int)fd);
  return fd < 0 ? -1 : 0;
}

static long try_ptrace(void) {
  return syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0);
}
static long try_mount(void) {
  return syscall(SYS_mount, "none", NONEXISTENT, "tmpfs", 0, NULL);
}
static long try_fsopen(void) {
  return closing(syscall(430, "turnhost-attack-nofs", 0));
}
static long try_open_tree(void) {
  return closing(syscall(428, AT_FDCWD, NONEXISTENT, 0));
}
static long try_unshare_user(void) {
  return syscall(SYS_unshare, CLONE_NEWUSER);
}
static long try_clone_newnet(void) {
  long pid = syscall(SYS_clone, CLONE_NEWNET | SIGCHLD, 0, 0, 0, 0);
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid((pid_t)pid, NULL, 0);
  return pid < 0 ? -1 : 0;
}
static long try_keyctl(void) {
  return syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -2 /* process keyring */, 0) < 0 ? -1 : 0;
}
static long try_bpf(void) {
  return syscall(SYS_bpf, -1, NULL, 0);
}
static long try_io_uring_setup(void) {
  return closing(syscall(425, 1, NULL));
}

/* A pty that becomes the child's controlling terminal, so the kernel itself allows TIOCSTI. */
static long try_ioctl(unsigned long cmd) {
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) return -1;
  setsid();
  int tty = open(ptsname(master), O_RDWR);
  if (tty < 0) return -1;
  char byte = 'x';
  return syscall(SYS_ioctl, tty, cmd, &byte);
}
static long try_tiocsti(void) {
  return try_ioctl(0x5412);
}
/* The same command with bits above 32 set: the kernel truncates it, so must the filter. */
static long try_tiocsti_high(void) {
  return try_ioctl(0x100005412UL);
}

static long try_x32(void) {
  return syscall(0x40000000L | 39 /* getpid */);
}
static long try_i386(void) {
  long ret;
  /* int 0x80 enters the i386 syscall table: AUDIT_ARCH_I386 in seccomp_data.arch. */
  __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L /* getpid */) : "memory");
  return ret < 0 ? (errno = (int)-ret, -1) : 0;
}

static int attempt(const void *arg) {
  const struct denied_call *call = arg;
  return errno_of(call->run());
}

static int attempt_in_own_userns(const void *arg) {
  const struct denied_call *call = arg;
  /* Best effort: without a user namespace a privileged call answers EPERM and the control fails. */
  if (call->needs_userns && geteuid() != 0) (void)unshare(CLONE_NEWUSER | CLONE_NEWNS);
  return attempt(arg);
}

static void denied_attack(const struct denied_call *call, struct outcome *out) {
  struct child_result r = in_child(attempt, call);
  verdict(out, r.exited && r.code == EPERM ? VERDICT_PASS : VERDICT_FAIL, "%s", child_text(r));
}

static void denied_control(const struct denied_call *call, struct outcome *out) {
  struct child_result r = in_child(attempt_in_own_userns, call);
  verdict(out, r.exited && r.code != EPERM ? VERDICT_PASS : VERDICT_FAIL, "%s outside",
          child_text(r));
}

static void killed_attack(const struct denied_call *call, struct outcome *out) {
  struct child_result r = in_child(attempt, call);
  verdict(out, r.signal == SIGSYS ? VERDICT_PASS : VERDICT_FAIL, "%s", child_text(r));
}

/* A kernel without IA32 emulation or x32 faults the entry before seccomp sees it. */
static void killed_control(const struct denied_call *call, struct outcome *out) {
  struct child_result r = in_child(attempt, call);
  verdict(out, r.exited ? VERDICT_PASS : VERDICT_FAIL, "%s outside%s", child_text(r),
          r.exited ? "" : ": the kernel does not serve this syscall ABI");
}

#define DENIED(label, fn, userns)                                                \
  static const struct denied_call call_##label = {fn, userns};                   \
  static void label##_attack(const struct battery_args *a, struct outcome *o) {  \
    (void)a;                                                                     \
    denied_attack(&call_##label, o);                                             \
  }                                                                              \
  static void label##_control(const struct battery_args *a, struct outcome *o) { \
    (void)a;                                                                     \
    denied_control(&call_##label, o);                                            \
  }
#define KILLED(label, fn)                                                        \
  static const struct denied_call call_##label = {fn, 0};                        \
  static void label##_attack(const struct battery_args *a, struct outcome *o) {  \
    (void)a;                                                                     \
    killed_attack(&call_##label, o);                                             \
  }                                                                              \
  static void label##_control(const struct battery_args *a, struct outcome *o) { \
    (void)a;                                                                     \
    killed_control(&call_##label, o);                                            \
  }

DENIED(ptrace, try_ptrace, 0)
DENIED(mount, try_mount, 1)
DENIED(fsopen, try_fsopen, 1)
DENIED(open_tree, try_open_tree, 1)
DENIED(unshare_user, try_unshare_user, 0)
DENIED(clone_newnet, try_clone_newnet, 1)
DENIED(keyctl, try_keyctl, 0)
DENIED(bpf, try_bpf, 0)
DENIED(io_uring_setup, try_io_uring_setup, 0)
DENIED(tiocsti, try_tiocsti, 0)
DENIED(tiocsti_high, try_tiocsti_high, 0)
KILLED(x32, try_x32)
KILLED(i386, try_i386)

#define CASE(name, label) \
  { name, label##_attack, label##_control, 0 }
const struct battery_case seccomp_cases[] = {
    CASE("seccomp.ptrace", ptrace),
    CASE("seccomp.mount", mount),
    CASE("seccomp.fsopen", fsopen),
    CASE("seccomp.open_tree", open_tree),
    CASE("seccomp.unshare_user", unshare_user),
    CASE("seccomp.clone_newnet", clone_newnet),
    CASE("seccomp.keyctl", keyctl),
    CASE("seccomp.bpf", bpf),
    CASE("seccomp.io_uring_setup", io_uring_setup),
    CASE("seccomp.tiocsti", tiocsti),
    CASE("seccomp.tiocsti_high", tiocsti_high),
    CASE("seccomp.x32_entry", x32),
    CASE("seccomp.i386_entry", i386),
    {NULL, NULL, NULL, 0},
};
