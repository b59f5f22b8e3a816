/*
 * Network: the turn's namespace has only `lo`; host loopback TCP, a host unix socket (by path
 * and abstract name) and the supervisor's own ports are unreachable; the egress proxy refuses
 * a denied host and says why. Controls: the same connections succeed outside.
 */
#include <errno.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <arpa/inet.h>
#include <unistd.h>

#include "battery.h"

/* 0 when connected; otherwise the errno. The socket is returned in *kept when asked for. */
static int connect_tcp(long port, int *kept) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  struct timeval limit = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  int err = connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0 ? 0 : errno;
  if (err == 0 && kept != NULL)
    *kept = fd;
  else
    close(fd);
  return err;
}

static int connect_unix(const char *name, int abstract) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  size_t len = strlen(name);
  if (len + 1 >= sizeof addr.sun_path) return close(fd), ENAMETOOLONG;
  memcpy(addr.sun_path + (abstract ? 1 : 0), name, len);
  /* An abstract name is the whole zero-padded sun_path, as Node (libuv) binds it. */
  socklen_t size =
      abstract ? (socklen_t)sizeof addr : (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
  int err = connect(fd, (struct sockaddr *)&addr, size) == 0 ? 0 : errno;
  close(fd);
  return err;
}

static void unreachable(int err, const char *what, struct outcome *out) {
  verdict(out, err != 0 ? VERDICT_PASS : VERDICT_FAIL, "%s: %s", what,
          err == 0 ? "connected" : errno_name(err));
}

static void reachable(int err, const char *what, struct outcome *out) {
  verdict(out, err == 0 ? VERDICT_PASS : VERDICT_FAIL, "%s outside: %s", what,
          err == 0 ? "connected" : errno_name(err));
}

static void interfaces_attack(const struct battery_args *args, struct outcome *out) {
  (void)args;
  struct if_nameindex *list = if_nameindex();
  if (list == NULL) return verdict(out, VERDICT_FAIL, "if_nameindex: %s", errno_name(errno));
  int only_lo = 1;
  char names[EVIDENCE_MAX] = "";
  for (struct if_nameindex *i = list; i->if_index != 0; i++) {
    if (strcmp(i->if_name, "lo") != 0) only_lo = 0;
    size_t used = strlen(names);
    snprintf(names + used, sizeof names - used, "%s%s", used ? "," : "", i->if_name);
  }
  if_freenameindex(list);
  verdict(out, only_lo ? VERDICT_PASS : VERDICT_FAIL, "interfaces: %s", names);
}

static void interfaces_control(const struct battery_args *args, struct outcome *out) {
  (void)args;
  struct if_nameindex *list = if_nameindex();
  if (list == NULL) return verdict(out, VERDICT_FAIL, "if_nameindex: %s", errno_name(errno));
  int others = 0;
  for (struct if_nameindex *i = list; i->if_index != 0; i++)
    others += strcmp(i->if_name, "lo") != 0;
  if_freenameindex(list);
  verdict(out, others > 0 ? VERDICT_PASS : VERDICT_FAIL, "%d interfaces besides lo outside%s",
          others, others > 0 ? "" : ": the host has none to hide");
}

static void tcp_attack(const struct battery_args *args, struct outcome *out) {
  if (args->tcp_port <= 0) return verdict(out, VERDICT_SKIP, "no tcp-port given");
  unreachable(connect_tcp(args->tcp_port, NULL), "127.0.0.1 host listener", out);
}
static void tcp_control(const struct battery_args *args, struct outcome *out) {
  if (args->tcp_port <= 0) return verdict(out, VERDICT_SKIP, "no tcp-port given");
  reachable(connect_tcp(args->tcp_port, NULL), "127.0.0.1 host listener", out);
}
static void unix_attack(const struct battery_args *args, struct outcome *out) {
  if (args->unix_path == NULL) return verdict(out, VERDICT_SKIP, "no unix-path given");
  unreachable(connect_unix(args->unix_path, 0), args->unix_path, out);
}
static void unix_control(const struct battery_args *args, struct outcome *out) {
  if (args->unix_path == NULL) return verdict(out, VERDICT_SKIP, "no unix-path given");
  reachable(connect_unix(args->unix_path, 0), args->unix_path, out);
}
static void abstract_attack(const struct battery_args *args, struct outcome *out) {
  if (args->abstract_name == NULL) return verdict(out, VERDICT_SKIP, "no abstract-name given");
  unreachable(connect_unix(args->abstract_name, 1), "abstract host socket", out);
}
static void abstract_control(const struct battery_args *args, struct outcome *out) {
  if (args->abstract_name == NULL) return verdict(out, VERDICT_SKIP, "no abstract-name given");
  reachable(connect_unix(args->abstract_name, 1), "abstract host socket", out);
}

/* The proxy's port from HTTPS_PROXY (http://127.0.0.1:PORT), or 0. */
static long proxy_port(void) {
  const char *url = getenv("HTTPS_PROXY");
  const char *prefix = "http://127.0.0.1:";
  if (url == NULL || strncmp(url, prefix, strlen(prefix)) != 0) return 0;
  return strtol(url + strlen(prefix), NULL, 10);
}

/* Sends CONNECT target through the proxy; fills `status` and `denial` (X-Turnhost-Denial). */
static int proxy_connect(const char *target, int *status, char *denial, size_t size) {
  long port = proxy_port();
  if (port <= 0) return ENOENT;
  int fd = -1;
  int err = connect_tcp(port, &fd);
  if (err != 0) return err;
  char request[512];
  int n =
      snprintf(request, sizeof request, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target);
  if (write(fd, request, (size_t)n) != n) return err = errno, close(fd), err;
  char reply[2048];
  size_t got = 0;
  for (ssize_t r;
       got < sizeof reply - 1 && (r = read(fd, reply + got, sizeof reply - 1 - got)) > 0;) {
    got += (size_t)r;
    if (strstr(reply, "\r\n\r\n") != NULL) break;
  }
  close(fd);
  reply[got] = '\0';
  *status = 0;
  sscanf(reply, "HTTP/1.%*d %d", status);
  denial[0] = '\0';
  const char *header = strstr(reply, "X-Turnhost-Denial: ");
  if (header != NULL) sscanf(header + strlen("X-Turnhost-Denial: "), "%63[^\r\n]", denial);
  (void)size;
  return 0;
}

static void refused_by_proxy(const char *target, struct outcome *out) {
  int status = 0;
  char denial[64];
  int err = proxy_connect(target, &status, denial, sizeof denial);
  if (err == ENOENT) return verdict(out, VERDICT_FAIL, "no egress proxy in HTTPS_PROXY");
  if (err != 0) return verdict(out, VERDICT_FAIL, "proxy unreachable: %s", errno_name(err));
  int refused = status == 403 && denial[0] != '\0';
  verdict(out, refused ? VERDICT_PASS : VERDICT_FAIL, "CONNECT %s: status %d reason %s", target,
          status, denial[0] ? denial : "(none)");
}

static void denied_host_attack(const struct battery_args *args, struct outcome *out) {
  if (args->denied_host == NULL) return verdict(out, VERDICT_SKIP, "no denied-host given");
  char target[300];
  snprintf(target, sizeof target, "%s:443", args->denied_host);
  refused_by_proxy(target, out);
}

/* Outside there is no proxy to ask: the control is the refusal itself, which only the proxy's
 * policy can produce (a 403 carrying a denial reason); a tunnel or no answer is broken. */
static void denied_host_control(const struct battery_args *args, struct outcome *out) {
  if (args->denied_host == NULL) return verdict(out, VERDICT_SKIP, "no denied-host given");
  verdict(out, VERDICT_PASS, "the proxy's reasoned refusal is the evidence");
}

static void own_ports_attack(const struct battery_args *args, struct outcome *out) {
  if (args->own_port_count == 0) return verdict(out, VERDICT_SKIP, "no own-port given");
  for (size_t i = 0; i < args->own_port_count; i++) {
    int err = connect_tcp(args->own_ports[i], NULL);
    if (err == 0)
      return verdict(out, VERDICT_FAIL, "127.0.0.1:%ld connected directly", args->own_ports[i]);
    char target[64];
    snprintf(target, sizeof target, "127.0.0.1:%ld", args->own_ports[i]);
    refused_by_proxy(target, out);
    if (out->verdict != VERDICT_PASS) return;
  }
}

static void own_ports_control(const struct battery_args *args, struct outcome *out) {
  if (args->own_port_count == 0) return verdict(out, VERDICT_SKIP, "no own-port given");
  for (size_t i = 0; i < args->own_port_count; i++) {
    int err = connect_tcp(args->own_ports[i], NULL);
    if (err != 0) return reachable(err, "supervisor port", out);
  }
  verdict(out, VERDICT_PASS, "%zu supervisor ports connect outside", args->own_port_count);
}

const struct battery_case network_cases[] = {
    {"network.only_lo", interfaces_attack, interfaces_control, 0},
    {"network.host_loopback_tcp", tcp_attack, tcp_control, 0},
    {"network.host_unix_socket", unix_attack, unix_control, 0},
    {"network.host_abstract_socket", abstract_attack, abstract_control, 0},
    {"network.denied_host", denied_host_attack, denied_host_control, 0},
    {"network.supervisor_ports", own_ports_attack, own_ports_control, 0},
    {NULL, NULL, NULL, 0},
};
