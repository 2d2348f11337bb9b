/* bench_planner --trace: AUTO's trace (server/planner/auto/auto.h) after
 * each configuration, as CSV (trace.c). */
#ifndef PK_BENCH_TRACE_H
#define PK_BENCH_TRACE_H

#include <stdint.h>
#include <stdio.h>

#include "pk_planner.h"

/* A trace for pk_limits_t.trace (free with free()); NULL: out of memory. */
struct pk_auto_trace *trace_alloc(void);
void trace_header(FILE *f);
/* One row per stage of the trace t (the last AUTO mini-batch planned). */
void trace_rows(FILE *f, const struct pk_auto_trace *t, const char *workload, uint32_t n,
                uint32_t dp, uint64_t cap, const char *mode);

#endif
