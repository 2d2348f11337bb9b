/* bench_planner --trace FILE: after each AUTO configuration, the trace AUTO
 * records through pk_limits_t.trace for its last mini-batch (the winning
 * candidate, the count, and each stage's fate, step cost before and after
 * and time), one CSV row per stage.
 * This reads an internal API of the planner on purpose: the plan's wire
 * format carries no trace. bench/planner/stages.py turns the file into the
 * README's table of what each stage pays. */
#include "trace.h"

#include <stdlib.h>

#include "auto/auto.h"

struct pk_auto_trace *trace_alloc(void) {
  return calloc(1, sizeof(pk_auto_trace_t));
}

void trace_header(FILE *f) {
  fprintf(f, "workload,n,dp,cap,mode,winner,m,step,stage,fate,why,before,after,us\n");
}

void trace_rows(FILE *f, const struct pk_auto_trace *t, const char *workload, uint32_t n,
                uint32_t dp, uint64_t cap, const char *mode) {
  for (uint32_t s = 0; s < t->nstages; s++) {
    const pk_auto_stage_rec_t *r = &t->stage[s];
    fprintf(f, "%s,%u,%u,%llu,%s,%s,%u,%.9g,%s,%s,\"%s\",%.9g,%.9g,%.3f\n", workload, n, dp,
            (unsigned long long)cap, mode, t->winner != NULL ? t->winner : "", t->m, t->step,
            r->name, pk_auto_fate_name(r->fate), r->why != NULL ? r->why : "", r->before, r->after,
            r->us);
  }
}
