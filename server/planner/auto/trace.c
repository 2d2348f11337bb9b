/* The AUTO trace: which candidate packer won a mini-batch and what each
 * stage gained, kept per thread so that bench_planner can read it after a
 * plan without any change to the plan's wire format. Recording costs a
 * clock read per stage (a dozen per mini-batch), nothing per item. */
#include <string.h>
#include <time.h>

#include "auto.h"

static _Thread_local pk_auto_trace_t last;

pk_auto_trace_t *pk_auto_trace_last(void) {
  return &last;
}

void pk_auto_trace_add(const char *name, double before, double after, double us) {
  if (last.nstages >= PK_AUTO_TRACE_STAGES)
    return;
  last.stage[last.nstages++] =
      (pk_auto_stage_rec_t){.name = name, .before = before, .after = after, .us = us};
}

double pk_auto_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}
