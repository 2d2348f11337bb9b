/* The AUTO trace: which candidate packer won a mini-batch, what became of
 * every other candidate and what each stage gained. It is written into the
 * run's own struct and handed to the caller through pk_limits_t.trace, so
 * that bench_planner can read it without any change to the plan's wire
 * format. Recording costs a clock read per stage (a dozen per mini-batch),
 * nothing per item. */
#include <time.h>

#include "auto.h"

static const char *const fate_names[] = {"ran", "best", "worse", "no-fit", "skipped"};

void pk_auto_trace_add(pk_auto_trace_t *t, pk_auto_stage_rec_t rec) {
  if (t == NULL || t->nstages >= PK_AUTO_TRACE_STAGES)
    return;
  t->stage[t->nstages++] = rec;
}

const char *pk_auto_fate_name(pk_auto_fate_t fate) {
  return (unsigned)fate < sizeof fate_names / sizeof fate_names[0] ? fate_names[fate] : "?";
}

double pk_auto_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}
