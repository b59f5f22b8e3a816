/* Prints what a process can observe about its own confinement, one `key value` line each;
 * the identity-helper tests run it as the worker. */
#define _GNU_SOURCE 1
#include <dirent.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

static void print_ids(void) {
  uid_t ruid, euid, suid;
  gid_t rgid, egid, sgid;
  getresuid(&ruid, &euid, &suid);
  getresgid(&rgid, &egid, &sgid);
  printf("uid %u %u %u\ngid %u %u %u\n", ruid, euid, suid, rgid, egid, sgid);
  gid_t groups[256];
  int count = getgroups(256, groups);
  printf("groups %d", count);
  for (int i = 0; i < count; i++) {
    printf(" %u", groups[i]);
  }
  printf("\n");
}

static void print_status_fields(void) {
  static const char *const wanted[] = {
      "NoNewPrivs:", "CapEff:", "CapPrm:", "CapBnd:", "CapAmb:", "Seccomp:"};
  FILE *status = fopen("/proc/self/status", "re");
  char line[512];
  while (status != NULL && fgets(line, sizeof line, status) != NULL) {
    for (size_t i = 0; i < sizeof wanted / sizeof wanted[0]; i++) {
      size_t len = strlen(wanted[i]);
      if (strncmp(line, wanted[i], len) == 0) {
        printf("status %.*s %s", (int)(len - 1), line, line + len + strspn(line + len, " \t"));
      }
    }
  }
  if (status != NULL) {
    fclose(status);
  }
}

static void print_fds(void) {
  DIR *dir = opendir("/proc/self/fd");
  struct dirent *entry;
  while (dir != NULL && (entry = readdir(dir)) != NULL) {
    if (entry->d_name[0] != '.' && atoi(entry->d_name) != dirfd(dir)) {
      printf("fd %s\n", entry->d_name);
    }
  }
  if (dir != NULL) {
    closedir(dir);
  }
}

static void print_interfaces(void) {
  FILE *dev = fopen("/proc/net/dev", "re");
  char line[512];
  int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  while (dev != NULL && fgets(line, sizeof line, dev) != NULL) {
    char *colon = strchr(line, ':');
    if (colon == NULL) {
      continue;
    }
    *colon = '\0';
    char *name = line + strspn(line, " ");
    struct ifreq request;
    memset(&request, 0, sizeof request);
    snprintf(request.ifr_name, sizeof request.ifr_name, "%s", name);
    int up =
        sock >= 0 && ioctl(sock, SIOCGIFFLAGS, &request) == 0 && (request.ifr_flags & IFF_UP) != 0;
    printf("netdev %s %s\n", name, up ? "up" : "down");
  }
  if (dev != NULL) {
    fclose(dev);
  }
  if (sock >= 0) {
    close(sock);
  }
}

static void print_file_lines(const char *path, const char *key) {
  FILE *file = fopen(path, "re");
  char line[1024];
  while (file != NULL && fgets(line, sizeof line, file) != NULL) {
    printf("%s %s", key, line);
  }
  if (file != NULL) {
    fclose(file);
  }
}

/* The turn's own leaf of a hierarchy as the view shows it (/sys/fs/cgroup/<name>): its inode,
 * for comparison with the host's leaf, and the processes it holds, in the turn's pid numbers. */
static void print_leaf(const char *name) {
  char path[128];
  struct stat st;
  snprintf(path, sizeof path, "/sys/fs/cgroup/%s", name);
  if (stat(path, &st) == 0) {
    printf("leaf %s %llu\n", name, (unsigned long long)st.st_ino);
  }
  char key[64];
  snprintf(path, sizeof path, "/sys/fs/cgroup/%s/cgroup.procs", name);
  snprintf(key, sizeof key, "leaf-proc %s", name);
  print_file_lines(path, key);
}

int main(void) {
  char hostname[256] = "";
  char cwd[4096] = "";
  print_ids();
  print_status_fields();
  print_fds();
  print_interfaces();
  gethostname(hostname, sizeof hostname - 1);
  printf("hostname %s\n", hostname);
  printf("cwd %s\n", getcwd(cwd, sizeof cwd) != NULL ? cwd : "?");
  print_file_lines("/proc/self/cgroup", "cgroup");
  printf("pid %d\n", (int)getpid());
  print_leaf("pids");
  print_leaf("memory");
  print_file_lines("/proc/self/limits", "limit");
  for (char **entry = environ; *entry != NULL; entry++) {
    printf("env %s\n", *entry);
  }
  return 0;
}
