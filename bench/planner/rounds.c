/* Round-robin timing (rounds.h). */
#include "rounds.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The clock bench_now_ms reads (bench_use_cpu_time). */
static clockid_t bench_clock = CLOCK_MONOTONIC;

void bench_use_cpu_time(void) {
  bench_clock = CLOCK_THREAD_CPUTIME_ID;
}

double bench_now_ms(void) {
  struct timespec ts;
  clock_gettime(bench_clock, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int bench_cmp_ms(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : (x > y ? 1 : 0);
}

int rounds_add(rounds_set_t *set, const char *label, const pk_request_t *req, double grid_ms) {
  if (set->count >= PK_ROUNDS_MAX_CONFIGS)
    return -1;
  rounds_config_t *c = &set->cfg[set->count];
  memset(c, 0, sizeof *c);
  size_t n = req->n ? req->n : 1;
  c->len = malloc(n * sizeof *c->len);
  c->loss = malloc(n * sizeof *c->loss);
  if (c->len == NULL || c->loss == NULL) {
    free(c->len);
    free(c->loss);
    return -1;
  }
  memcpy(c->len, req->lengths, req->n * sizeof *c->len);
  c->req = *req;
  c->req.lengths = c->len;
  if (req->loss_tokens != NULL && req->n_loss_tokens == req->n) {
    memcpy(c->loss, req->loss_tokens, req->n * sizeof *c->loss);
    c->req.loss_tokens = c->loss;
  } else {
    c->req.loss_tokens = NULL; /* Never the caller's buffer, which it reuses. */
    c->req.n_loss_tokens = 0;
  }
  snprintf(c->label, sizeof c->label, "%s", label);
  c->grid_ms = grid_ms;
  set->count++;
  return 0;
}

int rounds_run(rounds_set_t *set, int rounds) {
  if (rounds < 1)
    rounds = 1;
  if (rounds > PK_ROUNDS_MAX_ROUNDS)
    rounds = PK_ROUNDS_MAX_ROUNDS;
  static double t[PK_ROUNDS_MAX_CONFIGS][PK_ROUNDS_MAX_ROUNDS];
  char err[512];
  for (int r = 0; r < rounds; r++)
    for (uint32_t i = 0; i < set->count; i++) {
      pk_plan_t *plan = NULL;
      double t0 = bench_now_ms();
      int rc = pk_plan(&set->cfg[i].req, &plan, err, sizeof err);
      t[i][r] = bench_now_ms() - t0;
      pk_plan_free(plan);
      if (rc != 0) {
        fprintf(stderr, "bench_planner: round-robin timing of %s failed: %s\n", set->cfg[i].label,
                err);
        return -1;
      }
    }
  for (uint32_t i = 0; i < set->count; i++) {
    qsort(t[i], (size_t)rounds, sizeof t[i][0], bench_cmp_ms);
    rounds_config_t *c = &set->cfg[i];
    c->median_ms = rounds % 2 ? t[i][rounds / 2] : (t[i][rounds / 2 - 1] + t[i][rounds / 2]) / 2;
    c->min_ms = t[i][0];
    c->max_ms = t[i][rounds - 1];
  }
  return 0;
}

void rounds_free(rounds_set_t *set) {
  for (uint32_t i = 0; i < set->count; i++) {
    free(set->cfg[i].len);
    free(set->cfg[i].loss);
  }
  set->count = 0;
}
