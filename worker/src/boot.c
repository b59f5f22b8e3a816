/* What the worker does before it reports `ready`: the inherited-fd rule, non-dumpable, the
 * seccomp filter the supervisor compiled, the egress listener and its hand-over. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "worker.h"

/* Node's own default: connections wait here between the command's connect and the proxy's
 * accept. */
#define LISTEN_BACKLOG 511

static bool is_socket(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

static void append_fd(char *detail, int fd, bool *first) {
  char link[32];
  char target[256];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  if (n < 0) n = snprintf(target, sizeof target, "?");
  target[n] = '\0';
  size_t used = strlen(detail);
  snprintf(detail + used, DETAIL_MAX - used, "%s%d -> %s", *first ? "" : ", ", fd, target);
  *first = false;
}

/* A C program opens nothing before main, so the rule is by number: fds 0-2 anything, 3 (the
 * protocol socket) and 4 (the listener channel) sockets, nothing else. Any other fd is a host
 * object leaked past the identity helper (an open directory fd alone defeats the view). */
bool check_inherited_fds(char detail[DETAIL_MAX]) {
  DIR *dir = opendir("/proc/self/fd");
  if (dir == NULL) {
    snprintf(detail, DETAIL_MAX, "cannot list /proc/self/fd: %s", strerror(errno));
    return false;
  }
  int own = dirfd(dir);
  char unexpected[DETAIL_MAX] = "";
  bool first = true;
  bool seen_protocol = false;
  bool seen_channel = false;
  struct dirent *entry;
  while ((entry = readdir(dir)) != NULL) {
    if (entry->d_name[0] == '.') continue;
    int fd = atoi(entry->d_name);
    if (fd == own || fd <= 2) continue;
    if (fd == PROTOCOL_FD) seen_protocol = true;
    if (fd == LISTENER_CHANNEL_FD) seen_channel = true;
    if ((fd == PROTOCOL_FD || fd == LISTENER_CHANNEL_FD) && is_socket(fd)) continue;
    append_fd(unexpected, fd, &first);
  }
  closedir(dir);
  if (!seen_protocol) {
    snprintf(detail, DETAIL_MAX, "protocol fd %d is not open", PROTOCOL_FD);
    return false;
  }
  if (!seen_channel) {
    snprintf(detail, DETAIL_MAX, "listener channel fd %d is not open", LISTENER_CHANNEL_FD);
    return false;
  }
  if (!first) {
    snprintf(detail, DETAIL_MAX,
             "only fds 0-2, the protocol socket on fd 3 and the listener channel on fd 4 may be "
             "open; found %.880s",
             unexpected);
    return false;
  }
  return true;
}

/* The worker and its command share a uid, and without Yama any process of a uid may open
 * /proc/<pid>/mem (read-write), fd/ and environ of another dumpable process of that uid,
 * whatever seccomp says about ptrace. Non-dumpable, the worker's /proc files belong to root:
 * the command can neither forge its exit report nor take its protocol fd. */
bool make_undumpable(char detail[DETAIL_MAX]) {
  if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    snprintf(detail, DETAIL_MAX, "PR_SET_DUMPABLE: %s", strerror(errno));
    return false;
  }
  if (prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) != 0) {
    snprintf(detail, DETAIL_MAX, "the worker is still dumpable");
    return false;
  }
  return true;
}

bool set_cloexec(int fd, char detail[DETAIL_MAX]) {
  int flags = fcntl(fd, F_GETFD);
  if (flags < 0 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) != 0) {
    snprintf(detail, DETAIL_MAX, "FD_CLOEXEC on fd %d: %s", fd, strerror(errno));
    return false;
  }
  return true;
}

/* The kernel checks the program too; this check names what is wrong instead of EINVAL. */
static bool check_program(const struct sock_filter *insns, size_t count, char detail[DETAIL_MAX]) {
  for (size_t i = 0; i < count; i++) {
    uint16_t code = insns[i].code;
    if (BPF_CLASS(code) != BPF_JMP) continue;
    size_t rest = count - i - 1;
    bool in_range =
        BPF_OP(code) == BPF_JA ? insns[i].k < rest : insns[i].jt < rest && insns[i].jf < rest;
    if (!in_range) {
      snprintf(detail, DETAIL_MAX, "instruction %zu jumps past the end of the program", i);
      return false;
    }
  }
  if (BPF_CLASS(insns[count - 1].code) != BPF_RET) {
    snprintf(detail, DETAIL_MAX, "the last instruction is not a RET");
    return false;
  }
  return true;
}

static bool status_field_is(const char *status, const char *field, const char *value) {
  const char *line = strstr(status, field);
  if (line == NULL) return false;
  line += strlen(field);
  while (*line == ' ' || *line == '\t')
    line++;
  size_t n = strlen(value);
  return strncmp(line, value, n) == 0 && (line[n] == '\n' || line[n] == '\0');
}

static bool verify_seccomp(char detail[DETAIL_MAX]) {
  char status[4096];
  int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd < 0 ? -1 : read(fd, status, sizeof status - 1);
  if (fd >= 0) close(fd);
  if (n <= 0) {
    snprintf(detail, DETAIL_MAX, "cannot read /proc/self/status: %s", strerror(errno));
    return false;
  }
  status[n] = '\0';
  if (!status_field_is(status, "\nSeccomp:", "2")) {
    snprintf(detail, DETAIL_MAX, "the worker does not report Seccomp: 2 after the install");
    return false;
  }
  if (!status_field_is(status, "\nNoNewPrivs:", "1")) {
    snprintf(detail, DETAIL_MAX, "the worker does not report NoNewPrivs: 1 after the install");
    return false;
  }
  return true;
}

bool install_seccomp(const unsigned char *program, size_t len, char detail[DETAIL_MAX]) {
  size_t count = len / sizeof(struct sock_filter);
  if (len % sizeof(struct sock_filter) != 0 || count < 1 ||
      count > PROTOCOL_MAX_FILTER_INSTRUCTIONS) {
    snprintf(detail, DETAIL_MAX, "a program of %zu bytes is not 1..%d sock_filter entries", len,
             PROTOCOL_MAX_FILTER_INSTRUCTIONS);
    return false;
  }
  struct sock_filter *insns = malloc(len);
  if (insns == NULL) {
    snprintf(detail, DETAIL_MAX, "out of memory");
    return false;
  }
  /* The wire format is the x86_64 in-memory layout: u16 code, u8 jt, u8 jf, u32 k (LE). */
  memcpy(insns, program, len);
  bool valid = check_program(insns, count, detail);
  if (valid && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    snprintf(detail, DETAIL_MAX, "prctl(PR_SET_NO_NEW_PRIVS): %s", strerror(errno));
    valid = false;
  }
  if (valid) {
    struct sock_fprog prog = {(unsigned short)count, insns};
    /* TSYNC: a worker has one thread, but the flag keeps that an invariant, not a hope. */
    long r = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog);
    if (r != 0) {
      snprintf(detail, DETAIL_MAX, "seccomp(SET_MODE_FILTER, TSYNC): %s",
               r > 0 ? "a thread could not be synchronised" : strerror(errno));
      valid = false;
    }
  }
  free(insns);
  return valid && verify_seccomp(detail);
}

bool open_egress_listener(int *fd, int *port, char detail[DETAIL_MAX]) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    snprintf(detail, DETAIL_MAX, "socket(AF_INET) failed: %s", strerror(errno));
    return false;
  }
  struct sockaddr_in address = {0};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const char *call = NULL;
  if (bind(s, (struct sockaddr *)&address, sizeof address) != 0) {
    call = "bind";
  } else if (listen(s, LISTEN_BACKLOG) != 0) {
    call = "listen";
  } else if (getsockname(s, (struct sockaddr *)&address, &length) != 0) {
    call = "getsockname";
  }
  if (call != NULL) {
    snprintf(detail, DETAIL_MAX, "%s on 127.0.0.1:0 failed: %s", call, strerror(errno));
    close(s);
    return false;
  }
  *fd = s;
  *port = ntohs(address.sin_port);
  return true;
}

bool hand_over_listener(int listener, char detail[DETAIL_MAX]) {
  char payload[] = LISTENER_HANDOVER_PAYLOAD;
  struct iovec iov = {payload, sizeof payload - 1};
  union {
    char buffer[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } control;
  memset(&control, 0, sizeof control);
  struct msghdr msg = {0};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.buffer;
  msg.msg_controllen = sizeof control.buffer;
  struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
  cmsg->cmsg_level = SOL_SOCKET;
  cmsg->cmsg_type = SCM_RIGHTS;
  cmsg->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(cmsg), &listener, sizeof listener);
  ssize_t sent = sendmsg(LISTENER_CHANNEL_FD, &msg, MSG_NOSIGNAL);
  int error = errno;
  /* There is one hand-over. */
  close(LISTENER_CHANNEL_FD);
  if (sent != (ssize_t)iov.iov_len) {
    snprintf(detail, DETAIL_MAX, "the listener channel (fd %d): sendmsg: %s", LISTENER_CHANNEL_FD,
             sent < 0 ? strerror(error) : "short write");
    return false;
  }
  return true;
}
