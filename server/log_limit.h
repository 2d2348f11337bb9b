/* Rate limits for repeated log lines: at most one line per cause and
 * interval, the next one carrying the count of those left out. A client
 * that sends thousands of refused calls a second (no token, over a limit,
 * a deadline of 1 ms) therefore writes a few lines a minute, not one per
 * call; /metrics still counts every call.
 *
 * Causes are small integers below PK_LOG_LIMIT_CAUSES (the server uses the
 * gRPC status code). A plain struct of atomics: initialize it with
 * pk_log_limit_init; it owns no memory. Thread-safe. */
#ifndef PK_LOG_LIMIT_H
#define PK_LOG_LIMIT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define PK_LOG_LIMIT_CAUSES 32

typedef struct pk_log_limit {
  double interval; /* Seconds between lines of one cause; 0: every line. */
  struct {
    atomic_uint_fast64_t next_ns; /* Monotonic time the next line may be written. */
    atomic_uint_fast64_t held;    /* Lines left out since the last one written. */
  } cause[PK_LOG_LIMIT_CAUSES];
} pk_log_limit_t;

void pk_log_limit_init(pk_log_limit_t *l, double interval);

/* Whether a line of `cause` may be written at monotonic time `now`
 * (seconds). When it may, *held gets the count of lines of that cause left
 * out since the last one written; when not, this one is counted. A cause
 * out of range is always written. */
bool pk_log_limit_admit(pk_log_limit_t *l, int cause, double now, uint64_t *held);

#endif
