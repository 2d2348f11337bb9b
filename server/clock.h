/* Monotonic time for the server: seconds as a double. Header-only; nothing
 * to free. */
#ifndef PK_CLOCK_H
#define PK_CLOCK_H

#include <time.h>

static inline double pk_monotonic_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline double pk_wall_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
