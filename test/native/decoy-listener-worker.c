/* A worker that first hands the supervisor a decoy (/dev/null) on its listener channel (fd 4),
 * then execs the real worker (argv[1]), which sends its own listener second: too late, the
 * supervisor takes one message. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: decoy-listener-worker WORKER\n");
    return 2;
  }
  int decoy = open("/dev/null", O_RDONLY | O_CLOEXEC);
  char payload[] = "egress-listener";
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
  memcpy(CMSG_DATA(cmsg), &decoy, sizeof decoy);
  if (decoy < 0 || sendmsg(4, &msg, MSG_NOSIGNAL) < 0) {
    perror("decoy hand-over");
    return 1;
  }
  close(decoy);
  execv(argv[1], argv + 1);
  perror("execv");
  return 1;
}
