/* pk_limits_t, pk_plan_shape and the codec's size estimate
 * (pk_codec_plan_size_estimate, checked through pk_limits_t.admit): the
 * estimate covers the real encoded PlanResponse on random requests and
 * stays within a small factor of it, and a 16 Mi-sequence request is
 * refused before planning, quickly, with PK_ELIMIT. */
#include <time.h>

#include "codec.h"
#include "plan_check.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The codec's estimate of the request's plan; 0 when it is invalid. */
static uint64_t estimate(const pk_request_t *req) {
  pk_plan_shape_t shape;
  char err[64];
  return pk_plan_shape(req, &shape, err, sizeof err) == 0 ? pk_codec_plan_size_estimate(&shape) : 0;
}

/* The bytes the server would send for this plan. */
static size_t encoded_size(const pk_plan_t *plan) {
  Packd__V1__PlanResponse *resp = NULL;
  assert_int_equal(pk_codec_encode_plan(plan, "0123456789abcdef0123456789abcdef", &resp), 0);
  size_t s = packd__v1__plan_response__get_packed_size(resp);
  pk_codec_free_response(resp);
  return s;
}

static void test_estimate_covers_real_size(void **state) {
  (void)state;
  test_rng_t rng = {42};
  enum { N_MAX = 3000 };
  uint32_t *lengths = malloc(N_MAX * sizeof *lengths);
  assert_non_null(lengths);
  double worst_low = 1e9, worst_high = 0, compat_low = 1e9;
  int planned = 0;
  for (int it = 0; it < 400; it++) {
    pk_request_t req = {0};
    uint32_t n = 1 + test_below(&rng, N_MAX);
    uint32_t resp_cap = 256u << test_below(&rng, 6);
    for (uint32_t i = 0; i < n; i++)
      lengths[i] =
          test_below(&rng, 10) == 0 ? test_below(&rng, 64) : test_rl_length(&rng, resp_cap);
    req.lengths = lengths;
    req.n = n;
    req.parallel.dp = 1 + test_below(&rng, 8);
    req.parallel.tp = 1u << test_below(&rng, 3);
    req.parallel.cp = 1u << test_below(&rng, 3);
    req.parallel.sequence_parallel = test_below(&rng, 2);
    req.batching.mini_batches = 1 + test_below(&rng, 3);
    req.batching.mode = test_below(&rng, 4) == 0 ? PK_MODE_PADDED : PK_MODE_PACKED;
    req.batching.max_tokens = test_below(&rng, 5) == 0 ? 0 : (8192u << test_below(&rng, 4));
    req.batching.max_seqs = test_below(&rng, 4) == 0 ? 1 + test_below(&rng, 16) : 0;
    req.batching.min_micro_batches = test_below(&rng, 3) == 0 ? 1 + test_below(&rng, 4) : 0;
    if (test_below(&rng, 3) == 0) {
      /* A compatibility pair: counts may exceed the lower bound. */
      req.batching.dp_balance = 1 + test_below(&rng, 5);
      req.batching.micro_algo = 1 + test_below(&rng, 5);
    }
    uint64_t est = estimate(&req);
    pk_plan_t *plan = NULL;
    char err[512];
    if (pk_plan(&req, &plan, err, sizeof err) != 0) {
      /* Refused requests have no plan to compare with. */
      continue;
    }
    planned++;
    assert_true(est > 0);
    size_t real = encoded_size(plan);
    double ratio = (double)est / (double)real;
    bool compat = req.batching.dp_balance != PK_DP_AUTO;
    if (compat) {
      /* Compatibility algorithms may use many more micro-batches than the
       * bound the estimate counts; the answer-size check after planning
       * covers them. Only the low side is recorded. */
      compat_low = fmin(compat_low, ratio);
      pk_plan_free(plan);
      continue;
    }
    if (est < real)
      fail_msg("estimate %llu below the real %zu (n %u dp %u mode %u cap %llu seqs %u algo %u/%u "
               "micros %u lb %u)",
               (unsigned long long)est, real, n, req.parallel.dp, req.batching.mode,
               (unsigned long long)req.batching.max_tokens, req.batching.max_seqs,
               req.batching.dp_balance, req.batching.micro_algo, plan->stats.plan_micros,
               plan->stats.micro_batches_lower_bound);
    worst_low = fmin(worst_low, ratio);
    worst_high = fmax(worst_high, ratio);
    pk_plan_free(plan);
  }
  print_message("%d plans: estimate / real in [%.3f, %.3f] (AUTO), >= %.3f (compatibility)\n",
                planned, worst_low, worst_high, compat_low);
  assert_true(planned > 200);
  assert_true(worst_high < 3.0);
  free(lengths);
}

/* 16 Mi sequences: refused on max_sequences, and with that limit off on the
 * size estimate, without planning: the planner's stop callback, polled from
 * the first mini-batch on, is never reached. (How fast the refusal is, is
 * measured by bench/limits/refuse_16m.py, not asserted here.) */
static void test_16m_refused_early(void **state) {
  (void)state;
  const size_t n = 16u << 20;
  uint32_t *lengths = malloc(n * sizeof *lengths);
  assert_non_null(lengths);
  test_rng_t rng = {7};
  for (size_t i = 0; i < n; i++)
    lengths[i] = 64 + test_below(&rng, 4000);
  pk_request_t req = {.lengths = lengths, .n = n};
  req.parallel.dp = 64;
  req.batching.max_tokens = 16384;
  stop_counter_t never = {0, UINT64_MAX};
  pk_limits_t lim = {.max_sequences = PK_DEFAULT_MAX_SEQUENCES,
                     .max_plan_bytes = PK_DEFAULT_MAX_PLAN_BYTES,
                     .admit = pk_codec_admit_size,
                     .should_stop = stop_at,
                     .stop_arg = &never};
  lim.admit_arg = &lim;
  pk_plan_t *plan = (pk_plan_t *)0x1;
  char err[512] = "";
  double t0 = now_s();
  int rc = pk_plan_limited(&req, &lim, &plan, err, sizeof err);
  double t1 = now_s();
  assert_int_equal(rc, PK_ELIMIT);
  assert_null(plan);
  assert_int_equal(pk_status_from_error(rc), 8); /* RESOURCE_EXHAUSTED */
  if (strstr(err, "max_sequences") == NULL || strstr(err, "16777216") == NULL)
    fail_msg("message \"%s\"", err);
  lim.max_sequences = 0;
  rc = pk_plan_limited(&req, &lim, &plan, err, sizeof err);
  double t2 = now_s();
  assert_int_equal(rc, PK_ELIMIT);
  if (strstr(err, "max_plan_bytes") == NULL || strstr(err, "estimated") == NULL)
    fail_msg("message \"%s\"", err);
  print_message("refused in %.3f s (max_sequences) and %.3f s (estimate): %s\n", t1 - t0, t2 - t1,
                err);
  assert_int_equal(never.calls, 0);
  free(lengths);
}

/* Limits at the boundary: exactly max_sequences is planned; a plan at its
 * estimate is not refused by it. */
static void test_limits_boundary(void **state) {
  (void)state;
  uint32_t lengths[16];
  for (int i = 0; i < 16; i++)
    lengths[i] = 100 + 10 * (uint32_t)i;
  pk_request_t req = {.lengths = lengths, .n = 16};
  req.parallel.dp = 2;
  req.batching.max_tokens = 1000;
  uint64_t est = estimate(&req);
  pk_limits_t lim = {.max_sequences = 16, .max_plan_bytes = est, .admit = pk_codec_admit_size};
  lim.admit_arg = &lim;
  pk_plan_t *plan = NULL;
  char err[512];
  assert_int_equal(pk_plan_limited(&req, &lim, &plan, err, sizeof err), 0);
  pk_plan_free(plan);
  lim.max_sequences = 15;
  assert_int_equal(pk_plan_limited(&req, &lim, &plan, err, sizeof err), PK_ELIMIT);
  assert_non_null(strstr(err, "max_sequences = 15"));
  lim.max_sequences = 0;
  lim.max_plan_bytes = est - 1;
  assert_int_equal(pk_plan_limited(&req, &lim, &plan, err, sizeof err), PK_ELIMIT);
  assert_non_null(strstr(err, "max_plan_bytes"));
  /* Invalid fields are still INVALID_ARGUMENT, not refused on size. */
  req.parallel.dp = 0;
  assert_int_equal(pk_plan_limited(&req, &lim, &plan, err, sizeof err), PK_EINVAL);
  assert_int_equal(estimate(&req), 0);
}

/* Stopping at every poll the planner makes (the first 300, then a sample)
 * returns PK_ECANCELED with no plan and nothing leaked (ASan), for AUTO,
 * PADDED, compatibility pairs (also past PK_STOP_EVERY sequences, where
 * the loops poll), groups_on_rank and several mini-batches; the callback is
 * not asked again after it said stop; a callback that never fires changes
 * nothing. */
static void test_stop_at_every_poll(void **state) {
  (void)state;
  test_rng_t rng = {11};
  enum { N = 2000, N_LONG = 20000 };
  uint32_t *lengths = malloc(N_LONG * sizeof *lengths);
  uint64_t *groups = malloc(N * sizeof *groups);
  assert_non_null(lengths);
  assert_non_null(groups);
  for (uint32_t i = 0; i < N_LONG; i++)
    lengths[i] = test_rl_length(&rng, 4096);
  for (uint32_t i = 0; i < N; i++)
    groups[i] = i / 8;
  /* Variants 4 to 6 have more sequences than PK_STOP_EVERY, so that the
   * polls inside long loops (size pass, LPT, first fit, layout) fire too. */
  for (int variant = 0; variant < 7; variant++) {
    pk_request_t req = {.lengths = lengths, .n = variant >= 4 ? N_LONG : N};
    if (variant == 4) {
      req.batching.dp_balance = PK_DP_LPT;
      req.batching.micro_algo = PK_MICRO_FFD;
    }
    if (variant == 6) {
      req.groups = groups;
      req.n_groups = N;
      req.n = N;
      req.batching.groups_on_rank = true;
    }
    req.parallel.dp = 8;
    req.batching.max_tokens = 16384;
    req.batching.mini_batches = variant == 3 ? 4 : 1;
    if (variant == 5) {
      req.batching.dp_balance = PK_DP_KK;
      req.batching.micro_algo = PK_MICRO_MFFD;
    }
    if (variant == 1)
      req.batching.mode = PK_MODE_PADDED;
    if (variant == 2) {
      req.batching.dp_balance = PK_DP_KK;
      req.batching.micro_algo = PK_MICRO_FFD;
    }
    stop_counter_t never = {0, UINT64_MAX};
    pk_limits_t lim = {.should_stop = stop_at, .stop_arg = &never};
    pk_plan_t *plan = NULL;
    char err[512];
    assert_int_equal(pk_plan_limited(&req, &lim, &plan, err, sizeof err), 0);
    uint64_t polls = never.calls;
    assert_true(polls >= 2);
    pk_plan_t *plain = NULL;
    assert_int_equal(pk_plan(&req, &plain, err, sizeof err), 0);
    assert_true(plan->stats.step_cost == plain->stats.step_cost);
    pk_plan_free(plain);
    pk_plan_free(plan);
    for (uint64_t at = 1; at <= polls; at += at < 300 ? 1 : 1 + test_below(&rng, 97)) {
      stop_counter_t c = {0, at};
      lim.stop_arg = &c;
      plan = (pk_plan_t *)0x1;
      err[0] = '\0';
      int rc = pk_plan_limited(&req, &lim, &plan, err, sizeof err);
      assert_int_equal(rc, PK_ECANCELED);
      assert_null(plan);
      assert_non_null(strstr(err, "stopped"));
      assert_int_equal(c.calls, at);
    }
  }
  free(lengths);
  free(groups);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_limits_boundary),
      cmocka_unit_test(test_estimate_covers_real_size),
      cmocka_unit_test(test_16m_refused_early),
      cmocka_unit_test(test_stop_at_every_poll),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
