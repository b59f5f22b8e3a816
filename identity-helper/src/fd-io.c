#include "fd-io.h"

#include <errno.h>
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
