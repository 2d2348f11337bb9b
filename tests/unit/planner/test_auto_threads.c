/* The planner keeps no state outside the caller's structs: two threads
 * planning different batches at the same time get the same plans and the
 * same AUTO traces (candidates, fates, counts, step costs) as one thread
 * planning them one after the other. A trace kept anywhere but in the
 * caller's pk_limits_t.trace (a global, a thread-local read back by the
 * wrong call) would mix the two threads' records or leave one empty. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "plan_check.h"

#include "auto/auto.h"
#include "pk_planner.h"

#define ROUNDS 6

typedef struct job {
  pk_request_t req;
  uint32_t *len;
  double step[ROUNDS];
  pk_auto_trace_t trace[ROUNDS];
  int rc;
} job_t;

static void job_init(job_t *j, uint32_t n, uint32_t dp, uint32_t cap, pk_mode_t mode,
                     uint64_t seed) {
  memset(j, 0, sizeof *j);
  test_rng_t rng = {seed};
  j->len = malloc((size_t)n * sizeof *j->len);
  assert_non_null(j->len);
  for (uint32_t i = 0; i < n; i++)
    j->len[i] = test_rl_length(&rng, cap / 2);
  j->req = (pk_request_t){.lengths = j->len, .n = n};
  j->req.parallel.dp = dp;
  j->req.batching.max_tokens = cap;
  j->req.batching.mode = mode;
}

/* Plans the job's request ROUNDS times, each with its own trace. */
static void *job_run(void *arg) {
  job_t *j = arg;
  for (int r = 0; r < ROUNDS && j->rc == 0; r++) {
    pk_limits_t lim = {.trace = &j->trace[r]};
    pk_plan_t *plan = NULL;
    char err[256];
    j->rc = pk_plan_limited(&j->req, &lim, &plan, err, sizeof err);
    if (j->rc == 0)
      j->step[r] = plan->stats.step_cost;
    pk_plan_free(plan);
  }
  return NULL;
}

/* Two traces tell the same story (times aside). */
static void assert_same_trace(const pk_auto_trace_t *a, const pk_auto_trace_t *b) {
  assert_non_null(a->winner);
  assert_string_equal(a->winner, b->winner);
  assert_int_equal(a->m, b->m);
  assert_true(a->step == b->step);
  assert_int_equal(a->nstages, b->nstages);
  for (uint32_t s = 0; s < a->nstages; s++) {
    const pk_auto_stage_rec_t *x = &a->stage[s], *y = &b->stage[s];
    assert_string_equal(x->name, y->name);
    assert_int_equal(x->fate, y->fate);
    assert_int_equal(x->m, y->m);
    assert_true(x->before == y->before && x->after == y->after);
  }
}

static void test_two_threads_trace_alone(void **state) {
  (void)state;
  job_t *alone = calloc(2, sizeof *alone), *both = calloc(2, sizeof *both);
  assert_non_null(alone);
  assert_non_null(both);
  /* A PACKED and a PADDED batch: different candidates, different traces. */
  for (int k = 0; k < 2; k++) {
    job_t *set = k == 0 ? alone : both;
    job_init(&set[0], 4096, 8, 16384, PK_MODE_PACKED, 11);
    job_init(&set[1], 2048, 16, 32768, PK_MODE_PADDED, 12);
  }
  job_run(&alone[0]);
  job_run(&alone[1]);
  pthread_t t[2];
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_create(&t[i], NULL, job_run, &both[i]), 0);
  for (int i = 0; i < 2; i++)
    assert_int_equal(pthread_join(t[i], NULL), 0);
  for (int i = 0; i < 2; i++) {
    assert_int_equal(alone[i].rc, 0);
    assert_int_equal(both[i].rc, 0);
    for (int r = 0; r < ROUNDS; r++) {
      assert_true(both[i].step[r] == alone[i].step[r]);
      assert_same_trace(&both[i].trace[r], &alone[i].trace[0]);
    }
  }
  /* The two batches' traces differ: each thread read its own. */
  assert_string_not_equal(alone[0].trace[0].winner, alone[1].trace[0].winner);
  for (int i = 0; i < 2; i++) {
    free(alone[i].len);
    free(both[i].len);
  }
  free(alone);
  free(both);
}

/* Without a trace in the limits the planner writes none. */
static void test_no_trace_no_write(void **state) {
  (void)state;
  job_t j;
  job_init(&j, 512, 4, 16384, PK_MODE_PACKED, 3);
  pk_plan_t *plan = NULL;
  char err[256];
  assert_int_equal(pk_plan(&j.req, &plan, err, sizeof err), 0);
  pk_plan_free(plan);
  for (int r = 0; r < ROUNDS; r++)
    assert_int_equal(j.trace[r].nstages, 0);
  free(j.len);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_two_threads_trace_alone),
      cmocka_unit_test(test_no_trace_no_write),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
