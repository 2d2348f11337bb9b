/* bench_planner --trace FILE: after each AUTO configuration, the trace AUTO
 * keeps for its last plan (the winning candidate, the count, and each
 * stage's step cost before and after and its time), one CSV row per stage.
 * This reads an internal API of the planner on purpose: the plan's wire
 * format carries no trace. bench/planner/stages.py turns the file into the
 * README's table of what each stage pays. */
#include "trace.h"

#include "auto/auto.h"

void trace_header(FILE *f) {
  fprintf(f, "workload,n,dp,cap,mode,winner,m,step,stage,before,after,us\n");
}

void trace_rows(FILE *f, const char *workload, uint32_t n, uint32_t dp, uint64_t cap,
                const char *mode) {
  const pk_auto_trace_t *t = pk_auto_trace_last();
  for (uint32_t s = 0; s < t->nstages; s++) {
    const pk_auto_stage_rec_t *r = &t->stage[s];
    fprintf(f, "%s,%u,%u,%llu,%s,%s,%u,%.9g,%s,%.9g,%.9g,%.3f\n", workload, n, dp,
            (unsigned long long)cap, mode, t->winner != NULL ? t->winner : "", t->m, t->step,
            r->name, r->before, r->after, r->us);
  }
}
