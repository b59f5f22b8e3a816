#include "failure.h"

#include <stdarg.h>
#include <stdio.h>

int fail_with(struct failure *f, int code, const char *fmt, ...) {
  if (f->code != 0) {
    return f->code;
  }
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(f->reason, sizeof f->reason, fmt, ap);
  va_end(ap);
  f->code = code;
  return code;
}
