/* The one message helper of packctl's parsers and fits: writes the
 * formatted message into err (when err has room) and returns code, so that
 * a parser ends with `return packctl_fail(err, errlen, PK_EINVAL, ...)`. */
#ifndef PACKCTL_FAIL_H
#define PACKCTL_FAIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

static inline int packctl_fail(char *err, size_t errlen, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static inline int packctl_fail(char *err, size_t errlen, int code, const char *fmt, ...) {
  if (err != NULL && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

#endif
