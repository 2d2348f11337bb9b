/* bench_stop: how soon AUTO stops on a large batch once the caller's stop
 * callback says stop (pk_limits_t.should_stop).
 *
 * A generated RL batch (the bench's rollout shape: prompt U[64, 1024] +
 * log-normal response, median 1500, truncated at 15360, 3 % at 15360) of
 * --n sequences (default 4,194,304) is planned by AUTO at DP 64, cap 32768,
 * PACKED and PADDED. First without a stop: the plan time, the largest gap
 * between two consecutive polls (the worst a stop can wait, plus the
 * unwinding), and the largest inside AUTO: between the third poll and the
 * last (pk_plan_limited polls before validation, before the mini-batch and
 * after it; the gap up to AUTO's first poll holds the planner's preparation
 * of the mini-batch, and the time after the last poll its layout). Then
 * stopped at 10, 30, 50, 70 and 90 % of that time: the
 * time from the callback's first "stop" to pk_plan_limited's return, which
 * must be PK_ECANCELED. Times from CLOCK_MONOTONIC; the callback reads the
 * clock, which costs about 20 ns a poll.
 *
 * Usage: bench_stop [--n N] [--dp DP] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <math.h>

#include "bench_rng.h"
#include "pk_planner.h"

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* The stop callback's state: when to say stop (ms, monotonic; infinity:
 * never), when it first did, and the polls and their largest gap. */
typedef struct watch {
  double stop_at, fired, last, max_gap;
  uint64_t polls;
  double *at; /* Every poll's time (up to cap), or NULL. */
  uint64_t cap;
} watch_t;

/* The largest gap between polls first .. last (indices into w->at). */
static double gap_between(const watch_t *w, uint64_t first, uint64_t last) {
  double g = 0;
  for (uint64_t i = first + 1; i <= last && i < w->cap; i++)
    g = w->at[i] - w->at[i - 1] > g ? w->at[i] - w->at[i - 1] : g;
  return g;
}

static int should_stop(void *arg) {
  watch_t *w = arg;
  double t = now_ms();
  if (w->polls > 0 && t - w->last > w->max_gap)
    w->max_gap = t - w->last;
  w->last = t;
  if (w->at != NULL && w->polls < w->cap)
    w->at[w->polls] = t;
  w->polls++;
  if (t < w->stop_at)
    return 0;
  if (w->fired == 0)
    w->fired = t;
  return 1;
}

int main(int argc, char **argv) {
  uint32_t n = 4194304, dp = 64;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
      n = (uint32_t)strtoul(argv[++i], NULL, 10);
    else if (strcmp(argv[i], "--dp") == 0 && i + 1 < argc)
      dp = (uint32_t)strtoul(argv[++i], NULL, 10);
    else {
      fprintf(stderr, "usage: bench_stop [--n N] [--dp DP]\n");
      return 2;
    }
  }
  uint32_t *len = malloc((size_t)n * sizeof *len);
  if (len == NULL)
    return 1;
  uint64_t s = 0x570b;
  for (uint32_t i = 0; i < n; i++) {
    double u1 = rng_unit(&s) + 1e-300, u2 = rng_unit(&s);
    double r = exp(log(1500.0) + sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    uint32_t resp = r >= 15360 || rng_unit(&s) < 0.03 ? 15360 : (uint32_t)r;
    len[i] = 64 + (uint32_t)(rng_next(&s) % 961) + resp;
  }
  printf("| mode | n | dp | plan ms | polls | largest gap ms (inside AUTO) | stopped at | stop -> "
         "return ms | rc |\n|---|---:|---:|---:|---:|---|---|---:|---|\n");
  for (int mode = 0; mode < 2; mode++) {
    pk_request_t req = {.lengths = len, .n = n};
    req.parallel.dp = dp;
    req.batching.max_tokens = 32768;
    req.batching.mode = mode ? PK_MODE_PADDED : PK_MODE_PACKED;
    req.batching.round = mode ? 128 : 0;
    const char *mname = mode ? "padded" : "packed";
    char err[512];
    watch_t w = {.stop_at = INFINITY, .cap = 1u << 22};
    w.at = malloc(w.cap * sizeof *w.at);
    if (w.at == NULL)
      return 1;
    pk_limits_t lim = {.should_stop = should_stop, .stop_arg = &w};
    pk_plan_t *plan = NULL;
    double t0 = now_ms();
    int rc = pk_plan_limited(&req, &lim, &plan, err, sizeof err);
    double total = now_ms() - t0;
    pk_plan_free(plan);
    if (rc != 0) {
      fprintf(stderr, "bench_stop: %s: %s\n", mname, err);
      return 1;
    }
    printf("| %s | %u | %u | %.1f | %llu | %.2f (%.2f) | never | - | 0 |\n", mname, n, dp, total,
           (unsigned long long)w.polls, w.max_gap,
           w.polls >= 4 ? gap_between(&w, 2, w.polls - 2) : 0.0);
    free(w.at);
    fflush(stdout);
    static const double at[] = {0.1, 0.3, 0.5, 0.7, 0.9};
    for (size_t a = 0; a < sizeof at / sizeof at[0]; a++) {
      watch_t ws = {0};
      lim.stop_arg = &ws;
      plan = NULL;
      t0 = now_ms();
      ws.stop_at = t0 + at[a] * total;
      rc = pk_plan_limited(&req, &lim, &plan, err, sizeof err);
      double end = now_ms();
      pk_plan_free(plan);
      if (ws.fired > 0)
        printf("| %s | %u | %u | - | %llu | %.2f | %.0f %% (%.1f ms) | %.2f | %s |\n", mname, n, dp,
               (unsigned long long)ws.polls, ws.max_gap, at[a] * 100, ws.fired - t0, end - ws.fired,
               rc == PK_ECANCELED ? "PK_ECANCELED" : "error");
      else /* The deadline fell after the last poll: the plan finished. */
        printf("| %s | %u | %u | - | %llu | %.2f | %.0f %% (after the last poll) | - | %s |\n",
               mname, n, dp, (unsigned long long)ws.polls, ws.max_gap, at[a] * 100,
               rc == 0 ? "0" : "error");
      fflush(stdout);
    }
  }
  free(len);
  return 0;
}
