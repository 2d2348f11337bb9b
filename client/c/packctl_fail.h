/* The one message helper of packctl's parsers, fits and subcommands.
 *
 * Two forms share it. A parser that reports to its caller writes the
 * message into a buffer and returns a code:
 *     return packctl_fail(err, errlen, PK_EINVAL, "--dp: ...");
 * A subcommand that meets a bad flag or argument prints the message to
 * stderr, prefixed with the subcommand and followed by the pointer to its
 * --help, and returns the usage exit status:
 *     return packctl_usage_fail("plan", "--timeout: ...");
 * so that every usage error of every subcommand reads the same way. */
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

/* Prints "packctl CMD: <message>" and "Run 'packctl CMD --help' for the
 * options." to stderr; returns 2, packctl's usage exit status
 * (PACKCTL_EXIT_USAGE in packctl.h). */
static inline int packctl_usage_fail(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static inline int packctl_usage_fail(const char *cmd, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "packctl %s: ", cmd);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\nRun 'packctl %s --help' for the options.\n", cmd);
  va_end(ap);
  return 2;
}

#endif
