/* Property tests of the dynamic context-parallel planner: random requests
 * over pools, size rules, alignments, caps, max_seqs and cost models, for
 * both algorithms, each plan checked against every rule (dcp_check.h) and
 * planned twice for determinism; idle GPUs only where no allowed group
 * could take them. */
#include "dcp_check.h"

static void check_same(const pk_dcp_plan_t *a, const pk_dcp_plan_t *b) {
  assert_int_equal(a->slots, b->slots);
  assert_int_equal(a->ngroups, b->ngroups);
  for (uint32_t r = 0; r < a->ngroups; r++) {
    assert_int_equal(a->groups[r].slot, b->groups[r].slot);
    assert_int_equal(a->groups[r].first, b->groups[r].first);
    assert_int_equal(a->groups[r].size, b->groups[r].size);
    assert_int_equal(a->groups[r].nseqs, b->groups[r].nseqs);
    assert_memory_equal(a->groups[r].seqs, b->groups[r].seqs,
                        a->groups[r].nseqs * sizeof *a->groups[r].seqs);
  }
}

/* Plans, checks and re-plans; returns the rc (a clear FAILED_PRECONDITION
 * is allowed for a sequence that fits nowhere). */
static int plan_and_check(const pk_dcp_request_t *req, pk_dcp_stats_t *stats) {
  pk_dcp_plan_t *a = NULL, *b = NULL;
  char err[512];
  int rc = pk_dcp_plan(req, NULL, &a, err, sizeof err);
  if (rc != 0) {
    assert_null(a);
    assert_int_equal(rc, PK_EPRECOND);
    assert_non_null(strstr(err, "lengths["));
    return rc;
  }
  check_dcp_plan(req, a);
  assert_int_equal(pk_dcp_plan(req, NULL, &b, err, sizeof err), 0);
  check_same(a, b);
  if (stats != NULL)
    *stats = a->stats;
  pk_dcp_plan_free(a);
  pk_dcp_plan_free(b);
  return 0;
}

static void random_request(test_rng_t *r, pk_dcp_request_t *req, uint32_t *lengths, uint32_t n) {
  static const uint32_t dps[] = {1, 2, 3, 4, 8, 16};
  static const uint64_t caps[] = {1024, 4096, 8192, 16384};
  static const dcp_test_draw_t draw = {dps, 6, caps, 4};
  dcp_test_random_request(r, &draw, req, lengths, n);
  req->algo = test_below(r, 2);
}

static void test_random_requests(void **state) {
  (void)state;
  test_rng_t r = {.s = 42};
  uint32_t lengths[600];
  uint32_t planned = 0;
  for (int t = 0; t < 1500; t++) {
    pk_dcp_request_t req;
    uint32_t n = 1 + test_below(&r, t % 10 == 0 ? 600 : 60);
    random_request(&r, &req, lengths, n);
    planned += plan_and_check(&req, NULL) == 0;
  }
  /* Most random requests are feasible: the test must not pass vacuously. */
  assert_true(planned > 1000);
}

/* With the pool a power of two and a cap that holds a doubled group's
 * alignment, every GPU of every slot has work (AUTO), whatever the batch. */
static void test_no_idle_gpu(void **state) {
  (void)state;
  test_rng_t r = {.s = 7};
  uint32_t lengths[300];
  for (int t = 0; t < 600; t++) {
    pk_dcp_request_t req;
    uint32_t n = 1 + test_below(&r, 300);
    random_request(&r, &req, lengths, n);
    static const uint32_t pools[] = {1, 2, 4, 8, 16, 32};
    req.dp = pools[test_below(&r, 6)];
    req.cp = 1;
    req.algo = PK_DCP_AUTO;
    req.max_seqs = 0;
    req.min_size = 0;
    pk_dcp_stats_t st;
    if (plan_and_check(&req, &st) == 0)
      assert_int_equal(st.idle_gpu_slots, 0);
  }
}

/* Equal sequences that exactly fill the pool at the bound's count, with a
 * per-micro-batch cost that makes every extra slot cost: the plan is at
 * both bounds. */
static void test_count_at_bound(void **state) {
  (void)state;
  uint32_t lengths[64];
  for (uint32_t i = 0; i < 64; i++)
    lengths[i] = 4096;
  pk_dcp_request_t req = {.lengths = lengths, .n = 64, .dp = 8, .cp = 1, .max_tokens = 8192};
  req.cost.base.per_micro_batch = 100;
  pk_dcp_stats_t st;
  assert_int_equal(plan_and_check(&req, &st), 0);
  assert_int_equal(st.slots, 4);
  assert_int_equal(st.slots_lower_bound, 4);
  assert_true(st.step_cost <= st.step_cost_lower_bound * 1.000001);
}

/* A long sequence gets a group large enough for the cap, and a group
 * large enough to keep its slot level with the rest. */
static void test_long_sequence_spreads(void **state) {
  (void)state;
  uint32_t lengths[33];
  for (uint32_t i = 0; i < 32; i++)
    lengths[i] = 2000;
  lengths[32] = 60000;
  pk_dcp_request_t req = {.lengths = lengths, .n = 33, .dp = 8, .max_tokens = 16384};
  pk_dcp_plan_t *plan = NULL;
  char err[256];
  assert_int_equal(pk_dcp_plan(&req, NULL, &plan, err, sizeof err), 0);
  check_dcp_plan(&req, plan);
  for (uint32_t r = 0; r < plan->ngroups; r++)
    for (uint32_t k = 0; k < plan->groups[r].nseqs; k++)
      if (plan->groups[r].seqs[k] == 32)
        assert_true(plan->groups[r].size >= 4);
  assert_true(plan->stats.step_cost <= plan->stats.step_cost_lower_bound * 1.05);
  pk_dcp_plan_free(plan);
}

/* Bad fields are INVALID_ARGUMENT naming the field and value. */
static void test_invalid_fields(void **state) {
  (void)state;
  uint32_t lengths[3] = {100, 200, 300};
  const pk_dcp_request_t good = {.lengths = lengths, .n = 3, .dp = 4, .max_tokens = 1024};
  struct {
    pk_dcp_request_t req;
    const char *names;
  } cases[8];
  for (int c = 0; c < 8; c++)
    cases[c].req = good;
  cases[0].req.dp = 0, cases[0].names = "parallel.dp: 0";
  cases[1].req.max_tokens = 0, cases[1].names = "batching.max_tokens: 0";
  cases[2].req.sizes = 7, cases[2].names = "parallel.dynamic_cp.sizes: 7";
  cases[3].req.min_size = 3, cases[3].names = "parallel.dynamic_cp.min_size: 3";
  cases[4].req.min_size = 9, cases[4].names = "parallel.dynamic_cp.min_size: 9";
  cases[5].req.cost.cp_token = -1, cases[5].names = "cost.cp_token: -1";
  cases[6].req.algo = 5, cases[6].names = "parallel.dynamic_cp.algo: 5";
  lengths[1] = 200;
  uint32_t zero[2] = {5, 0};
  cases[7].req.lengths = zero, cases[7].req.n = 2, cases[7].names = "lengths[1]: 0";
  for (int c = 0; c < 8; c++) {
    pk_dcp_plan_t *plan = (pk_dcp_plan_t *)1;
    char err[256] = "";
    assert_int_equal(pk_dcp_plan(&cases[c].req, NULL, &plan, err, sizeof err), PK_EINVAL);
    assert_null(plan);
    if (strstr(err, cases[c].names) == NULL)
      fail_msg("case %d: '%s' does not name '%s'", c, err, cases[c].names);
  }
}

/* A sequence that fits no allowed group is FAILED_PRECONDITION naming its
 * index; one that fits only the largest group is planned. */
static void test_sequence_fits_nowhere(void **state) {
  (void)state;
  uint32_t lengths[3] = {100, 8 * 1024 + 1, 300};
  pk_dcp_request_t req = {.lengths = lengths, .n = 3, .dp = 8, .max_tokens = 1024};
  pk_dcp_plan_t *plan = NULL;
  char err[256];
  assert_int_equal(pk_dcp_plan(&req, NULL, &plan, err, sizeof err), PK_EPRECOND);
  assert_null(plan);
  assert_non_null(strstr(err, "lengths[1]: 8193"));
  lengths[1] = 8 * 1024 - 16; /* Aligned to 16 at 8 GPUs: fits the pool. */
  assert_int_equal(plan_and_check(&req, NULL), 0);
}

/* The stop callback is honoured. */
static int stop_now(void *arg) {
  (void)arg;
  return 1;
}

static void test_stop(void **state) {
  (void)state;
  uint32_t lengths[2000];
  test_rng_t r = {.s = 3};
  for (uint32_t i = 0; i < 2000; i++)
    lengths[i] = test_rl_length(&r, 16384);
  pk_dcp_request_t req = {.lengths = lengths, .n = 2000, .dp = 16, .max_tokens = 16384};
  pk_limits_t limits = {.should_stop = stop_now};
  for (uint32_t algo = 0; algo < PK_DCP_ALGO_COUNT; algo++) {
    req.algo = algo;
    pk_dcp_plan_t *plan = NULL;
    char err[128];
    assert_int_equal(pk_dcp_plan(&req, &limits, &plan, err, sizeof err), PK_ECANCELED);
    assert_null(plan);
  }
}

/* A plan of more (slot, GPU) pairs than the planner builds is refused
 * naming the figures: 1,100 sequences that each need the whole pool of
 * 65,536 GPUs. */
static void test_gpu_slots_limit(void **state) {
  (void)state;
  static uint32_t lengths[1100];
  for (uint32_t i = 0; i < 1100; i++)
    lengths[i] = 100000; /* Over 32,768 GPUs x 2 tokens: the whole pool each. */
  pk_dcp_request_t req = {.lengths = lengths, .n = 1100, .dp = 65536, .max_tokens = 2};
  pk_dcp_plan_t *plan = NULL;
  char err[256];
  assert_int_equal(pk_dcp_plan(&req, NULL, &plan, err, sizeof err), PK_ELIMIT);
  assert_null(plan);
  assert_non_null(strstr(err, "1100 slots x 65536 GPUs"));
}

#define PK_TEST_MIN(a, b) ((a) < (b) ? (a) : (b))

/* A stop at a poll of a plan (every one on a small batch) returns
 * PK_ECANCELED with nothing built (ASan checks the unwinding
 * of every stage); past the last poll the plan is the one planned without
 * a stop. */
static void test_stop_at_every_poll(void **state) {
  (void)state;
  test_rng_t r = {.s = 11};
  uint32_t lengths[6000];
  for (uint32_t i = 0; i < 6000; i++)
    lengths[i] = test_rl_length(&r, 30000);
  for (uint32_t algo = 0; algo < PK_DCP_ALGO_COUNT; algo++) {
    for (uint32_t n = 300; n <= 6000; n += 5700) {
      pk_dcp_request_t req = {.lengths = lengths, .n = n, .dp = 16, .max_tokens = 8192};
      req.cost.cp_token = 0.25;
      req.algo = algo;
      stop_counter_t never = {.at = UINT64_MAX};
      pk_limits_t lim = {.should_stop = stop_at, .stop_arg = &never};
      pk_dcp_plan_t *ref = NULL;
      char err[256];
      assert_int_equal(pk_dcp_plan(&req, &lim, &ref, err, sizeof err), 0);
      uint64_t polls = never.calls;
      assert_true(polls >= 1);
      /* Every poll of the small batch; of the large one (above the class
       * plans' limit) the powers of two and the last two. */
      for (uint64_t at = 1; at <= polls + 1;
           at = n < 1024 || at >= polls ? at + 1 : PK_TEST_MIN(2 * at, polls)) {
        stop_counter_t c = {.at = at};
        lim.stop_arg = &c;
        pk_dcp_plan_t *p = NULL;
        int rc = pk_dcp_plan(&req, &lim, &p, err, sizeof err);
        if (at <= polls) {
          assert_int_equal(rc, PK_ECANCELED);
          assert_null(p);
          assert_non_null(strstr(err, "stopped"));
        } else {
          assert_int_equal(rc, 0);
          assert_int_equal(p->slots, ref->slots);
          assert_true(p->stats.step_cost == ref->stats.step_cost);
          pk_dcp_plan_free(p);
        }
      }
      pk_dcp_plan_free(ref);
    }
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_requests),
      cmocka_unit_test(test_no_idle_gpu),
      cmocka_unit_test(test_count_at_bound),
      cmocka_unit_test(test_long_sequence_spreads),
      cmocka_unit_test(test_invalid_fields),
      cmocka_unit_test(test_sequence_fits_nowhere),
      cmocka_unit_test(test_stop),
      cmocka_unit_test(test_stop_at_every_poll),
      cmocka_unit_test(test_gpu_slots_limit),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
