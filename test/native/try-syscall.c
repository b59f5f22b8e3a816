/*
 * try-syscall NAME: performs one syscall and prints "NAME ok" or "NAME errno=<n>".
 * Used by test/escape/seccomp.test.ts under the worker's seccomp filter.
 *
 * Every call is made with arguments that are harmless even WITHOUT the filter and even as
 * root (missing paths, invalid magic numbers, bad fds, children that exit at once), so the
 * unfiltered baseline can be run and must answer something other than EPERM: that is what
 * proves an EPERM under the filter came from the filter.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NONEXISTENT "/nonexistent-turnhost-probe"

static long child_exits_at_once(long pid) {
  if (pid == 0) _exit(0);
  if (pid > 0) waitpid((pid_t)pid, NULL, 0);
  return pid < 0 ? -1 : 0;
}

static long try_clone(unsigned long flags) {
  return child_exits_at_once(syscall(SYS_clone, flags | SIGCHLD, 0, 0, 0, 0));
}

static long try_clone3(void) {
  uint64_t args[11];
  memset(args, 0, sizeof args);
  args[4] = SIGCHLD; /* exit_signal */
  return child_exits_at_once(syscall(435, args, 88));
}

/* A pty that becomes our controlling terminal, so TIOCSTI is allowed by the kernel. */
static int controlling_pty(void) {
  int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) return -1;
  setsid();
  return open(ptsname(master), O_RDWR);
}

static long try_ioctl(unsigned long cmd) {
  int tty = controlling_pty();
  if (tty < 0) return -1;
  char byte = 'x';
  return syscall(SYS_ioctl, tty, cmd, &byte);
}

static long try_process_vm_readv(void) {
  char src[8] = "probe", dst[8];
  struct iovec local = {dst, sizeof dst}, remote = {src, sizeof src};
  long n = syscall(SYS_process_vm_readv, getpid(), &local, 1, &remote, 1, 0);
  return n < 0 ? -1 : 0;
}

static long try_process_vm_writev(void) {
  char src[8] = "probe", dst[8];
  struct iovec local = {src, sizeof src}, remote = {dst, sizeof dst};
  long n = syscall(SYS_process_vm_writev, getpid(), &local, 1, &remote, 1, 0);
  return n < 0 ? -1 : 0;
}

static long try_socket(int domain, int type) {
  long fd = syscall(SYS_socket, domain, type, 0);
  if (fd >= 0) close((int)fd);
  return fd < 0 ? -1 : 0;
}

static long closing(long fd) {
  if (fd >= 0) close((int)fd);
  return fd < 0 ? -1 : 0;
}

static long try_i386_getpid(void) {
  long ret;
  /* int 0x80 enters the i386 syscall table: AUDIT_ARCH_I386 in seccomp_data.arch. */
  __asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L) : "memory");
  return ret < 0 ? (errno = (int)-ret, -1) : 0;
}

struct probe {
  const char *name;
  long (*run)(void);
};

#define PROBE(label, expr)          \
  static long probe_##label(void) { \
    return (expr);                  \
  }
PROBE(getpid, syscall(SYS_getpid) > 0 ? 0 : -1)
PROBE(ptrace, syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0))
PROBE(process_vm_readv, try_process_vm_readv())
PROBE(process_vm_writev, try_process_vm_writev())
PROBE(keyctl, syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -2 /* process keyring */, 0) < 0 ? -1 : 0)
PROBE(add_key, syscall(SYS_add_key, "user", "turnhost-probe", "x", 1, -2) < 0 ? -1 : 0)
PROBE(request_key, syscall(SYS_request_key, "user", "turnhost-probe-missing", NULL, 0) < 0 ? -1 : 0)
PROBE(bpf, syscall(SYS_bpf, -1, NULL, 0))
PROBE(perf_event_open, syscall(SYS_perf_event_open, NULL, 0, -1, -1, 0))
PROBE(userfaultfd, closing(syscall(SYS_userfaultfd, O_CLOEXEC)))
PROBE(io_uring_setup, closing(syscall(425, 1, NULL)))
PROBE(io_uring_enter, syscall(426, -1, 0, 0, 0, NULL, 0))
PROBE(io_uring_register, syscall(427, -1, 0, NULL, 0))
PROBE(pidfd_getfd, syscall(438, -1, 0, 0))
PROBE(kexec_load, syscall(SYS_kexec_load, 0, 100000 /* > KEXEC_SEGMENT_MAX */, NULL, 0))
PROBE(kexec_file_load, syscall(SYS_kexec_file_load, -1, -1, 0, NULL, 0xffff0000UL))
PROBE(init_module, syscall(SYS_init_module, NULL, 0, ""))
PROBE(finit_module, syscall(SYS_finit_module, -1, "", 0))
PROBE(delete_module, syscall(SYS_delete_module, "turnhost_probe_missing", O_NONBLOCK))
PROBE(mount, syscall(SYS_mount, "none", NONEXISTENT, "tmpfs", 0, NULL))
PROBE(umount2, syscall(SYS_umount2, NONEXISTENT, 0))
PROBE(open_tree, closing(syscall(428, AT_FDCWD, NONEXISTENT, 0)))
PROBE(move_mount, syscall(429, -1, "", -1, "", 0))
PROBE(fsopen, closing(syscall(430, "turnhost-probe-nofs", 0)))
PROBE(fsconfig, syscall(431, -1, 0, NULL, NULL, 0))
PROBE(fsmount, closing(syscall(432, -1, 0, 0)))
PROBE(fspick, closing(syscall(433, AT_FDCWD, NONEXISTENT, 0)))
PROBE(mount_setattr, syscall(442, AT_FDCWD, NONEXISTENT, 0, NULL, 0))
PROBE(open_tree_attr, closing(syscall(467, AT_FDCWD, NONEXISTENT, 0, NULL, 0)))
PROBE(pivot_root, syscall(SYS_pivot_root, NONEXISTENT, NONEXISTENT))
PROBE(chroot, syscall(SYS_chroot, NONEXISTENT))
PROBE(unshare, syscall(SYS_unshare, 0))
PROBE(setns, syscall(SYS_setns, -1, 0))
PROBE(clone_newns, try_clone(CLONE_NEWNS))
PROBE(clone_newnet, try_clone(CLONE_NEWNET))
PROBE(clone_newuser, try_clone(CLONE_NEWUSER))
PROBE(clone_newpid, try_clone(CLONE_NEWPID))
PROBE(clone_plain, try_clone(0))
PROBE(clone3, try_clone3())
PROBE(fork, child_exits_at_once(fork()))
PROBE(ioctl_tiocsti, try_ioctl(0x5412))
PROBE(ioctl_tiocsti_high, try_ioctl(0x100005412UL))
PROBE(ioctl_tioclinux, try_ioctl(0x541C))
PROBE(ioctl_tiocgwinsz, try_ioctl(0x5413))
PROBE(personality, syscall(SYS_personality, 0x0040000 /* ADDR_NO_RANDOMIZE */) < 0 ? -1 : 0)
PROBE(personality_query, syscall(SYS_personality, 0xffffffffUL) < 0 ? -1 : 0)
PROBE(acct, syscall(SYS_acct, NONEXISTENT))
PROBE(swapon, syscall(SYS_swapon, NONEXISTENT, 0))
PROBE(swapoff, syscall(SYS_swapoff, NONEXISTENT))
PROBE(reboot, syscall(SYS_reboot, 0 /* wrong magic: EINVAL */, 0, 0, NULL))
PROBE(clock_settime, syscall(SYS_clock_settime, CLOCK_REALTIME, &(struct timespec){0, -1}))
PROBE(settimeofday, syscall(SYS_settimeofday, NULL, NULL))
PROBE(adjtimex, syscall(SYS_adjtimex, &(char[256]){0}) < 0 ? -1 : 0)
PROBE(clock_adjtime, syscall(SYS_clock_adjtime, CLOCK_REALTIME, &(char[256]){0}) < 0 ? -1 : 0)
PROBE(syslog, syscall(SYS_syslog, 10 /* SIZE_BUFFER */, NULL, 0) < 0 ? -1 : 0)
PROBE(quotactl, syscall(SYS_quotactl, 0x800005 /* Q_GETINFO */, NONEXISTENT, 0, NULL))
PROBE(quotactl_fd, syscall(443, -1, 0, 0, NULL))
PROBE(open_by_handle_at, syscall(SYS_open_by_handle_at, -1, NULL, 0))
PROBE(modify_ldt, syscall(SYS_modify_ldt, 0 /* read */, &(char[16]){0}, 0) < 0 ? -1 : 0)
PROBE(move_pages, syscall(SYS_move_pages, 0, 0UL, NULL, NULL, NULL, 0))
PROBE(migrate_pages, syscall(SYS_migrate_pages, 0, 0UL, NULL, NULL) < 0 ? -1 : 0)
PROBE(mbind, syscall(SYS_mbind, NULL, 0UL, 0 /* MPOL_DEFAULT */, NULL, 0UL, 0U))
PROBE(set_mempolicy, syscall(SYS_set_mempolicy, 0 /* MPOL_DEFAULT */, NULL, 0UL))
PROBE(get_mempolicy, syscall(SYS_get_mempolicy, &(int){0}, NULL, 0UL, NULL, 0UL))
PROBE(socket_netlink_route, try_socket(AF_NETLINK, SOCK_RAW))
PROBE(socket_packet, try_socket(17, SOCK_RAW))
PROBE(socket_vsock, try_socket(40, SOCK_STREAM))
PROBE(socket_inet, try_socket(AF_INET, SOCK_STREAM))
PROBE(socket_unix, try_socket(AF_UNIX, SOCK_STREAM))
PROBE(x32_getpid, syscall(0x40000000L | 39))
PROBE(i386_getpid, try_i386_getpid())

#define ENTRY(label) \
  { #label, probe_##label }
static const struct probe probes[] = {
    ENTRY(getpid),
    ENTRY(ptrace),
    ENTRY(process_vm_readv),
    ENTRY(process_vm_writev),
    ENTRY(keyctl),
    ENTRY(add_key),
    ENTRY(request_key),
    ENTRY(bpf),
    ENTRY(perf_event_open),
    ENTRY(userfaultfd),
    ENTRY(io_uring_setup),
    ENTRY(io_uring_enter),
    ENTRY(io_uring_register),
    ENTRY(pidfd_getfd),
    ENTRY(kexec_load),
    ENTRY(kexec_file_load),
    ENTRY(init_module),
    ENTRY(finit_module),
    ENTRY(delete_module),
    ENTRY(mount),
    ENTRY(umount2),
    ENTRY(open_tree),
    ENTRY(move_mount),
    ENTRY(fsopen),
    ENTRY(fsconfig),
    ENTRY(fsmount),
    ENTRY(fspick),
    ENTRY(mount_setattr),
    ENTRY(open_tree_attr),
    ENTRY(pivot_root),
    ENTRY(chroot),
    ENTRY(unshare),
    ENTRY(setns),
    ENTRY(clone_newns),
    ENTRY(clone_newnet),
    ENTRY(clone_newuser),
    ENTRY(clone_newpid),
    ENTRY(clone_plain),
    ENTRY(clone3),
    ENTRY(fork),
    ENTRY(ioctl_tiocsti),
    ENTRY(ioctl_tiocsti_high),
    ENTRY(ioctl_tioclinux),
    ENTRY(ioctl_tiocgwinsz),
    ENTRY(personality),
    ENTRY(personality_query),
    ENTRY(acct),
    ENTRY(swapon),
    ENTRY(swapoff),
    ENTRY(reboot),
    ENTRY(clock_settime),
    ENTRY(settimeofday),
    ENTRY(adjtimex),
    ENTRY(clock_adjtime),
    ENTRY(syslog),
    ENTRY(quotactl),
    ENTRY(quotactl_fd),
    ENTRY(open_by_handle_at),
    ENTRY(modify_ldt),
    ENTRY(move_pages),
    ENTRY(migrate_pages),
    ENTRY(mbind),
    ENTRY(set_mempolicy),
    ENTRY(get_mempolicy),
    ENTRY(socket_netlink_route),
    ENTRY(socket_packet),
    ENTRY(socket_vsock),
    ENTRY(socket_inet),
    ENTRY(socket_unix),
    ENTRY(x32_getpid),
    ENTRY(i386_getpid),
};

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: try-syscall NAME | --list\n");
    return 2;
  }
  for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++) {
    if (strcmp(argv[1], "--list") == 0) {
      printf("%s\n", probes[i].name);
      continue;
    }
    if (strcmp(argv[1], probes[i].name) != 0) continue;
    errno = 0;
    long ret = probes[i].run();
    if (ret < 0)
      printf("%s errno=%d\n", probes[i].name, errno);
    else
      printf("%s ok\n", probes[i].name);
    return 0;
  }
  if (strcmp(argv[1], "--list") == 0) return 0;
  fprintf(stderr, "try-syscall: unknown probe %s\n", argv[1]);
  return 2;
}
