/* bench_spike: AUTO's plan time at n = 4096, DP 64 on long-tailed RL
 * batches with a spike of responses at the length limit.
 *
 * Lengths: prompt U[64, 1024] + response log-normal (median 1500, sigma
 * 1) truncated at the limit, and a share of the responses (--spike, default
 * 0.1) set to the limit; the limit is cap - 1024, so the longest sequences
 * nearly fill a micro-batch alone. Caps 16384 and 32768, PACKED and PADDED
 * (rows rounded to 128), 8 batches (seeds) per setting; each batch is
 * planned --reps times (default 51) in rounds over the batches, and the
 * median per batch is reported with the median and the largest of those
 * medians. Prints Markdown.
 *
 * With --trace, each setting is followed by AUTO's stages (the internal
 * trace of server/planner/auto/auto.h, read after the first plan of each
 * batch): per stage, the batches it ran in, those where it lowered the
 * step cost by more than 0.01 %, and its mean time.
 *
 * Usage: bench_spike [--spike SHARE] [--reps R] [--n N] [--dp DP] [--trace]
 *                    [--cpu-time] */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auto/auto.h"
#include "bench_rng.h"
#include "pk_planner.h"

enum { BATCHES = 8, STAGES = 32 };

/* Per stage name: batches it ran in, won in, and its time summed. */
typedef struct stage_sum {
  const char *name;
  uint32_t ran, won;
  double us;
} stage_sum_t;

static void stage_add(stage_sum_t *sum, uint32_t *count, const pk_auto_trace_t *t) {
  for (uint32_t s = 0; s < t->nstages; s++) {
    const pk_auto_stage_rec_t *r = &t->stage[s];
    if (r->fate == PK_FATE_SKIPPED)
      continue;
    uint32_t i = 0;
    while (i < *count && strcmp(sum[i].name, r->name) != 0)
      i++;
    if (i == *count) {
      if (*count == STAGES)
        continue;
      sum[(*count)++] = (stage_sum_t){r->name, 0, 0, 0};
    }
    sum[i].ran++;
    sum[i].won += r->before > 0 && r->after > 0 && r->after < r->before * (1 - 1e-4);
    sum[i].us += r->us;
  }
}

/* Wall-clock time, or with --cpu-time the thread's CPU time (a machine
 * other jobs load moves it far less). */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(bench_clock, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  double spike = 0.1;
  int reps = 51;
  bool trace = false;
  uint32_t n = 4096, dp = 64;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--spike") == 0 && i + 1 < argc)
      spike = atof(argv[++i]);
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
      reps = atoi(argv[++i]);
    else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
      n = (uint32_t)strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--dp") == 0 && i + 1 < argc)
      dp = (uint32_t)strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--trace") == 0)
      trace = true;
    else if (strcmp(argv[i], "--cpu-time") == 0)
      bench_clock = CLOCK_THREAD_CPUTIME_ID;
    else {
      fprintf(stderr, "usage: bench_spike [--spike SHARE] [--reps R] [--n N] [--dp DP] [--trace] "
                      "[--cpu-time]\n");
      return 2;
    }
  }
  if (reps < 1 || !(spike >= 0 && spike <= 1)) {
    fprintf(stderr, "bench_spike: --reps must be >= 1 and --spike in [0, 1]\n");
    return 2;
  }
  uint32_t *len = malloc((size_t)BATCHES * n * sizeof *len);
  double *ms = malloc((size_t)BATCHES * reps * sizeof *ms);
  if (len == NULL || ms == NULL)
    return 1;
  printf("| cap | mode | spike | median ms (of batch medians) | worst batch median ms | eff "
         "mean |\n|---:|---|---:|---:|---:|---:|\n");
  static const uint32_t caps[] = {16384, 32768};
  for (int c = 0; c < 2; c++) {
    uint32_t limit = caps[c] - 1024;
    for (uint32_t b = 0; b < BATCHES; b++) {
      uint64_t s = 0x5b1e0000ull + b;
      for (uint32_t i = 0; i < n; i++) {
        double u1 = rng_unit(&s) + 1e-300, u2 = rng_unit(&s);
        double r = exp(log(1500.0) + sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
        uint32_t resp = r >= limit || rng_unit(&s) < spike ? limit : (uint32_t)r;
        len[(size_t)b * n + i] = 64 + (uint32_t)(rng_next(&s) % 961) + resp;
      }
    }
    for (int mode = 0; mode < 2; mode++) {
      double eff = 0;
      stage_sum_t sum[STAGES];
      uint32_t nsum = 0;
      for (int r = 0; r < reps; r++)
        for (uint32_t b = 0; b < BATCHES; b++) {
          pk_request_t req = {.lengths = len + (size_t)b * n, .n = n};
          req.parallel.dp = dp;
          req.batching.max_tokens = caps[c];
          req.batching.mode = mode ? PK_MODE_PADDED : PK_MODE_PACKED;
          req.batching.round = mode ? 128 : 0;
          pk_plan_t *plan = NULL;
          char err[512];
          pk_auto_trace_t last = {0};
          const pk_limits_t lim = {.trace = &last};
          double t0 = now_ms();
          int rc = pk_plan_limited(&req, &lim, &plan, err, sizeof err);
          ms[(size_t)b * reps + r] = now_ms() - t0;
          if (rc != 0) {
            fprintf(stderr, "bench_spike: %s\n", err);
            return 1;
          }
          if (r == 0) {
            eff += plan->stats.lockstep_efficiency / BATCHES;
            stage_add(sum, &nsum, &last);
          }
          pk_plan_free(plan);
        }
      double med[BATCHES], worst = 0;
      for (uint32_t b = 0; b < BATCHES; b++) {
        qsort(ms + (size_t)b * reps, (size_t)reps, sizeof *ms, cmp_double);
        med[b] = ms[(size_t)b * reps + reps / 2];
        worst = med[b] > worst ? med[b] : worst;
      }
      qsort(med, BATCHES, sizeof *med, cmp_double);
      printf("| %u | %s | %.2f | %.3f | %.3f | %.4f |\n", caps[c], mode ? "padded" : "packed",
             spike, (med[BATCHES / 2 - 1] + med[BATCHES / 2]) / 2, worst, eff);
      for (uint32_t i = 0; trace && i < nsum; i++)
        printf("|  | stage %s | ran %u | won %u | mean %.3f ms | |\n", sum[i].name, sum[i].ran,
               sum[i].won, sum[i].us / sum[i].ran / 1e3);
      fflush(stdout);
    }
  }
  free(len);
  free(ms);
  return 0;
}
