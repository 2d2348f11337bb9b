/* Levelled logging for the packd server: one line per event on stderr, with
 * a UTC timestamp, the level and the message. Safe to call from any thread;
 * every line is written with a single locked write so lines never mix.
 *
 * Nothing here allocates memory that the caller must free. */
#ifndef PK_LOG_H
#define PK_LOG_H

#include <stdbool.h>

typedef enum {
  PK_LOG_DEBUG = 0,
  PK_LOG_INFO = 1,
  PK_LOG_WARN = 2,
  PK_LOG_ERROR = 3,
  PK_LOG_OFF = 4,
} pk_log_level_t;

/* Sets the lowest level that is written (default PK_LOG_INFO). */
void pk_log_set_level(pk_log_level_t level);
pk_log_level_t pk_log_get_level(void);

/* Whether a message at `level` would be written; lets callers skip work that
 * only feeds a debug line. */
bool pk_log_enabled(pk_log_level_t level);

/* Parses "debug", "info", "warn" (or "warning"), "error" or "off" (any case)
 * into *level. Returns 0, or PK_EINVAL for anything else. */
int pk_log_level_parse(const char *s, pk_log_level_t *level);

/* The lowercase name of a level, e.g. "warn". Never NULL. */
const char *pk_log_level_name(pk_log_level_t level);

/* Writes one line when `level` is enabled. The format is printf's. */
void pk_log(pk_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define PK_LOG_DEBUG(...) pk_log(PK_LOG_DEBUG, __VA_ARGS__)
#define PK_LOG_INFO(...) pk_log(PK_LOG_INFO, __VA_ARGS__)
#define PK_LOG_WARN(...) pk_log(PK_LOG_WARN, __VA_ARGS__)
#define PK_LOG_ERROR(...) pk_log(PK_LOG_ERROR, __VA_ARGS__)

#endif
