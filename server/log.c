/* Levelled logging to stderr (see log.h). */
#include "log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "pk_error.h"

static atomic_int g_level = PK_LOG_INFO;

static const char *const k_names[] = {"debug", "info", "warn", "error", "off"};

void pk_log_set_level(pk_log_level_t level) {
  atomic_store(&g_level, (int)level);
}

pk_log_level_t pk_log_get_level(void) {
  return (pk_log_level_t)atomic_load(&g_level);
}

bool pk_log_enabled(pk_log_level_t level) {
  return (int)level >= atomic_load(&g_level) && level < PK_LOG_OFF;
}

int pk_log_level_parse(const char *s, pk_log_level_t *level) {
  if (s == NULL)
    return PK_EINVAL;
  for (int i = 0; i <= PK_LOG_OFF; i++) {
    if (strcasecmp(s, k_names[i]) == 0) {
      *level = (pk_log_level_t)i;
      return PK_OK;
    }
  }
  if (strcasecmp(s, "warning") == 0) {
    *level = PK_LOG_WARN;
    return PK_OK;
  }
  return PK_EINVAL;
}

const char *pk_log_level_name(pk_log_level_t level) {
  if ((int)level < 0 || level > PK_LOG_OFF)
    return "unknown";
  return k_names[level];
}

void pk_log(pk_log_level_t level, const char *fmt, ...) {
  if (!pk_log_enabled(level))
    return;
  char line[2048];
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  struct tm tm;
  gmtime_r(&ts.tv_sec, &tm);
  int off = snprintf(line, sizeof line,
                     "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %-5s packd: ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000L, pk_log_level_name(level));
  if (off < 0)
    return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line + off, sizeof line - (size_t)off, fmt, ap);
  va_end(ap);
  size_t len = (size_t)off + (n < 0 ? 0 : (size_t)n);
  if (len > sizeof line - 2)
    len = sizeof line - 2; /* A truncated line still ends with a newline. */
  line[len++] = '\n';
  /* One write(2) per line keeps lines whole when threads log at once. */
  ssize_t w = write(STDERR_FILENO, line, len);
  (void)w;
}
