#include "fd-io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

bool write_all(int fd, const void *data, size_t len) {
  const char *cursor = data;
  while (len > 0) {
    ssize_t n = write(fd, cursor, len);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    cursor += n;
    len -= (size_t)n;
  }
  return true;
}

size_t read_up_to(int fd, void *data, size_t len) {
  char *cursor = data;
  size_t used = 0;
  while (used < len) {
    ssize_t n = read(fd, cursor + used, len - used);
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

bool directory_is_empty(int fd) {
  int scan = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR *dir = scan < 0 ? NULL : fdopendir(scan);
  if (dir == NULL) {
    if (scan >= 0) close(scan);
    return false;
  }
  bool empty = true;
  struct dirent *entry;
  while (empty && (entry = readdir(dir)) != NULL) {
    empty = strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0;
  }
  closedir(dir);
  return empty;
}
