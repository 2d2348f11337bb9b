/* bench_planner --trace: AUTO's trace (server/planner/auto/auto.h) after
 * each configuration, as CSV (trace.c). */
#ifndef PK_BENCH_TRACE_H
#define PK_BENCH_TRACE_H

#include <stdint.h>
#include <stdio.h>

void trace_header(FILE *f);
/* One row per stage of the last AUTO plan of this thread. */
void trace_rows(FILE *f, const char *workload, uint32_t n, uint32_t dp, uint64_t cap,
                const char *mode);

#endif
