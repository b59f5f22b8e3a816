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
