/* JSON lines on stdout, one per case, flushed at once: a case that ends the turn loses nothing. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "battery.h"

void verdict(struct outcome *out, enum verdict v, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  out->verdict = v;
  vsnprintf(out->evidence, sizeof out->evidence, fmt, ap);
  va_end(ap);
}

const char *errno_name(int err) {
  static char other[32];
  switch (err) {
    case EPERM:
      return "EPERM";
    case ENOENT:
      return "ENOENT";
    case ESRCH:
      return "ESRCH";
    case EINTR:
      return "EINTR";
    case EIO:
      return "EIO";
    case EBADF:
      return "EBADF";
    case EAGAIN:
      return "EAGAIN";
    case ENOMEM:
      return "ENOMEM";
    case EACCES:
      return "EACCES";
    case EFAULT:
      return "EFAULT";
    case EEXIST:
      return "EEXIST";
    case ENOTDIR:
      return "ENOTDIR";
    case EISDIR:
      return "EISDIR";
    case EINVAL:
      return "EINVAL";
    case ENOTTY:
      return "ENOTTY";
    case ENODEV:
      return "ENODEV";
    case ENOKEY:
      return "ENOKEY";
    case ENAMETOOLONG:
      return "ENAMETOOLONG";
    case EFBIG:
      return "EFBIG";
    case ENOSPC:
      return "ENOSPC";
    case EROFS:
      return "EROFS";
    case ENOSYS:
      return "ENOSYS";
    case ENETUNREACH:
      return "ENETUNREACH";
    case ECONNREFUSED:
      return "ECONNREFUSED";
    case ECONNRESET:
      return "ECONNRESET";
    case EHOSTUNREACH:
      return "EHOSTUNREACH";
    case EADDRNOTAVAIL:
      return "EADDRNOTAVAIL";
    case EDQUOT:
      return "EDQUOT";
    case ETIMEDOUT:
      return "ETIMEDOUT";
    default:
      snprintf(other, sizeof other, "errno %d", err);
      return other;
  }
}

static void put_json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      fprintf(f, "\\%c", *p);
    else if (*p < 0x20 || *p >= 0x7f)
      fprintf(f, "\\u%04x", *p);
    else
      fputc(*p, f);
  }
  fputc('"', f);
}

void report_line(const char *name, const char *key, const char *value, const char *evidence) {
  fputs("{\"case\":", stdout);
  put_json_string(stdout, name);
  fprintf(stdout, ",\"%s\":", key);
  put_json_string(stdout, value);
  fputs(",\"evidence\":", stdout);
  put_json_string(stdout, evidence);
  fputs("}\n", stdout);
  fflush(stdout);
}
