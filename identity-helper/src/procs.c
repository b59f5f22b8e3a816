#include "procs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "syntax.h"

static size_t read_all(int fd, char *buf, size_t cap) {
  size_t used = 0;
  while (used < cap) {
    ssize_t n = read(fd, buf + used, cap - used);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;
    }
    used += (size_t)n;
  }
  return used;
}

bool procs_live_real_uid(const char *pid_name, uint32_t *uid) {
  char path[64];
  char status[4096];
  snprintf(path, sizeof path, "/proc/%s/status", pid_name);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return false;
  }
  size_t len = read_all(fd, status, sizeof status - 1);
  close(fd);
  status[len] = '\0';
  const char *state = strstr(status, "\nState:\t");
  const char *line = strstr(status, "\nUid:\t");
  if (state == NULL || line == NULL) {
    return false;
  }
  char state_letter = state[strlen("\nState:\t")];
  if (state_letter == 'Z' || state_letter == 'X') {
    return false;
  }
  char number[16];
  const char *start = line + strlen("\nUid:\t");
  size_t digits = strspn(start, "0123456789");
  if (digits == 0 || digits >= sizeof number) {
    return false;
  }
  memcpy(number, start, digits);
  number[digits] = '\0';
  uint64_t value = 0;
  if (!parse_decimal(number, UINT32_MAX, &value)) {
    return false;
  }
  *uid = (uint32_t)value;
  return true;
}

bool procs_is_pid_name(const char *name) {
  return name[0] >= '1' && name[0] <= '9' && strspn(name, "0123456789") == strlen(name);
}

bool procs_uid_has_live_process(uint32_t uid) {
  DIR *proc = opendir("/proc");
  if (proc == NULL) {
    return true;
  }
  bool found = false;
  struct dirent *entry;
  while (!found && (entry = readdir(proc)) != NULL) {
    uint32_t owner = 0;
    found = procs_is_pid_name(entry->d_name) && procs_live_real_uid(entry->d_name, &owner) &&
            owner == uid;
  }
  closedir(proc);
  return found;
}
