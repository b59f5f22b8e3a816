#include "syntax.h"

#include <limits.h>
#include <string.h>

bool parse_decimal(const char *text, uint64_t max, uint64_t *out) {
  size_t len = strlen(text);
  if (len == 0 || len > 20 || (len > 1 && text[0] == '0')) {
    return false;
  }
  uint64_t value = 0;
  for (size_t i = 0; i < len; i++) {
    if (text[i] < '0' || text[i] > '9') {
      return false;
    }
    uint64_t digit = (uint64_t)(text[i] - '0');
    if (value > (max - digit) / 10) {
      return false;
    }
    value = value * 10 + digit;
  }
  *out = value;
  return true;
}

static bool component_is_acceptable(const char *start, size_t len) {
  if (len == 0) {
    return false;
  }
  if (len == 1 && start[0] == '.') {
    return false;
  }
  if (len == 2 && start[0] == '.' && start[1] == '.') {
    return false;
  }
  return true;
}

bool is_canonical_absolute_path(const char *path) {
  size_t len = strlen(path);
  if (len == 0 || len >= PATH_MAX || path[0] != '/') {
    return false;
  }
  if (len == 1) {
    return true;
  }
  const char *component = path + 1;
  for (size_t i = 1; i <= len; i++) {
    if (path[i] == '/' || path[i] == '\0') {
      if (!component_is_acceptable(component, (size_t)(path + i - component))) {
        return false;
      }
      component = path + i + 1;
    }
  }
  return true;
}

bool is_canonical_relative_path(const char *path) {
  char absolute[PATH_MAX];
  size_t len = strlen(path);
  if (len == 0 || len + 1 >= sizeof absolute || path[0] == '/') {
    return false;
  }
  absolute[0] = '/';
  memcpy(absolute + 1, path, len + 1);
  return is_canonical_absolute_path(absolute);
}

bool path_is_strictly_beneath(const char *path, const char *root) {
  size_t root_len = strlen(root);
  if (root_len == 1) {
    return path[0] == '/' && path[1] != '\0';
  }
  return strncmp(path, root, root_len) == 0 && path[root_len] == '/' && path[root_len + 1] != '\0';
}
