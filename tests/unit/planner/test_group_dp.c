/* batching.groups_on_rank (group_dp.c): random GRPO-shaped batches, every
 * plan checked against the planner's rules (plan_check.h) and against the
 * option's own: every group on one rank and in one mini-batch, equal group
 * counts per rank with equal_count, mini-batches of equal group counts
 * (+-1), determinism, and rank balance at least as good as Karmarkar-Karp
 * over group costs (verl's get_group_balanced_partitions). Bad requests are
 * INVALID_ARGUMENT naming the field. */
#include "plan_check.h"

#include "compat_kk.h"

#define MAX_N 4096

typedef struct batch {
  uint32_t lengths[MAX_N];
  uint32_t loss[MAX_N];
  uint64_t groups[MAX_N];
  uint32_t n, ng;
} batch_t;

/* ng groups of `size` responses (0: 4 to 16 per group), each group sharing
 * a prompt of 64 to 2048 tokens, responses log-normal (median 1500) with 3 %
 * at resp_cap; group ids are random 64-bit values and, with `interleave`,
 * the sequences of different groups are mixed. */
static void grpo_batch(test_rng_t *r, batch_t *b, uint32_t ng, uint32_t size, uint32_t resp_cap,
                       bool interleave) {
  b->n = 0;
  b->ng = ng;
  for (uint32_t g = 0; g < ng; g++) {
    uint64_t id = test_next(r);
    uint32_t prompt = 64 + test_below(r, 1984);
    uint32_t k = size ? size : 4 + test_below(r, 13);
    for (uint32_t i = 0; i < k && b->n < MAX_N; i++) {
      double u1 = test_uniform(r) + 1e-12, u2 = test_uniform(r);
      double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
      double resp = exp(log(1500.0) + z);
      if (resp > resp_cap || test_uniform(r) < 0.03)
        resp = resp_cap;
      b->lengths[b->n] = prompt + (uint32_t)resp;
      b->loss[b->n] = (uint32_t)resp;
      b->groups[b->n] = id;
      b->n++;
    }
  }
  if (interleave)
    for (uint32_t i = b->n - 1; i > 0; i--) {
      uint32_t j = test_below(r, i + 1), t = b->lengths[i];
      b->lengths[i] = b->lengths[j];
      b->lengths[j] = t;
      t = b->loss[i];
      b->loss[i] = b->loss[j];
      b->loss[j] = t;
      uint64_t gt = b->groups[i];
      b->groups[i] = b->groups[j];
      b->groups[j] = gt;
    }
}

static void base_request(pk_request_t *req, const batch_t *b, uint32_t dp) {
  memset(req, 0, sizeof *req);
  req->lengths = b->lengths;
  req->n = b->n;
  req->loss_tokens = b->loss;
  req->n_loss_tokens = b->n;
  req->groups = b->groups;
  req->n_groups = b->n;
  req->parallel.dp = dp;
  req->batching.groups_on_rank = true;
}

/* The cost the planner gives a sequence (default cost model). */
static double seq_cost(const pk_request_t *req, uint32_t len) {
  double a = (double)test_round_up(len, pk_alignment(req));
  if (req->cost.linear == 0 && req->cost.quadratic == 0)
    return a + a * a / 24576.0;
  return req->cost.linear * a + req->cost.quadratic * a * a;
}

/* The dense group number of every sequence (ids compared by value). */
static uint32_t dense_groups(const pk_request_t *req, uint32_t *gnum) {
  uint32_t ng = 0;
  for (size_t i = 0; i < req->n; i++) {
    gnum[i] = UINT32_MAX;
    for (size_t j = 0; j < i; j++)
      if (req->groups[j] == req->groups[i]) {
        gnum[i] = gnum[j];
        break;
      }
    if (gnum[i] == UINT32_MAX)
      gnum[i] = ng++;
  }
  return ng;
}

/* The option's rules; returns the max / min rank cost of mini-batch 0 in
 * *ratio (PACKED: rank cost = the sum of its sequences' costs) and checks it
 * against KK over group costs when there is one mini-batch. */
static void check_groups(const pk_request_t *req, const pk_plan_t *plan) {
  uint32_t dp = req->parallel.dp, nmini = plan->mini_batches;
  uint32_t *gnum = malloc(req->n * sizeof *gnum);
  assert_non_null(gnum);
  uint32_t ng = dense_groups(req, gnum);
  uint32_t *grank = malloc(ng * sizeof *grank), *gmini = malloc(ng * sizeof *gmini);
  uint32_t *count = calloc((size_t)dp * nmini, sizeof *count);
  uint32_t *per_mini = calloc(nmini, sizeof *per_mini);
  double *rank_cost = calloc(dp, sizeof *rank_cost);
  double *gcost = calloc(ng, sizeof *gcost);
  assert_non_null(grank);
  assert_non_null(gmini);
  assert_non_null(count);
  assert_non_null(per_mini);
  assert_non_null(rank_cost);
  assert_non_null(gcost);
  for (uint32_t g = 0; g < ng; g++)
    grank[g] = UINT32_MAX;
  for (uint32_t m = 0; m < nmini; m++)
    for (uint32_t r = 0; r < dp; r++) {
      const pk_cell_t *cell = pk_plan_cell(plan, r, m);
      for (uint32_t j = 0; j < cell->nmicros; j++)
        for (uint32_t q = 0; q < cell->micros[j].nseqs; q++) {
          uint32_t s = cell->micros[j].seqs[q], g = gnum[s];
          if (grank[g] == UINT32_MAX) {
            grank[g] = r;
            gmini[g] = m;
            count[(size_t)r * nmini + m]++;
            per_mini[m]++;
          }
          /* Every group on one rank, in one mini-batch. */
          assert_int_equal(grank[g], r);
          assert_int_equal(gmini[g], m);
          gcost[g] += seq_cost(req, req->lengths[s]);
          if (m == 0)
            rank_cost[r] += seq_cost(req, req->lengths[s]);
        }
    }
  uint32_t lo = UINT32_MAX, hi = 0;
  for (uint32_t m = 0; m < nmini; m++) {
    lo = per_mini[m] < lo ? per_mini[m] : lo;
    hi = per_mini[m] > hi ? per_mini[m] : hi;
    for (uint32_t r = 0; r < dp; r++) {
      assert_true(count[(size_t)r * nmini + m] >= 1);
      if (req->batching.equal_count)
        assert_int_equal(count[(size_t)r * nmini + m], count[m]);
    }
  }
  assert_true(hi - lo <= 1);
  if (nmini == 1 && req->batching.mode == PK_MODE_PACKED && req->layout.total_multiple <= 1 &&
      !req->layout.fixed_shape) {
    uint32_t *part = malloc(ng * sizeof *part);
    double *kk = calloc(dp, sizeof *kk);
    assert_non_null(part);
    assert_non_null(kk);
    assert_int_equal(pk_kk_partition(gcost, ng, dp, req->batching.equal_count, part), 0);
    for (uint32_t g = 0; g < ng; g++)
      kk[part[g]] += gcost[g];
    double kmax = 0, kmin = INFINITY, pmax = 0, pmin = INFINITY;
    for (uint32_t r = 0; r < dp; r++) {
      kmax = fmax(kmax, kk[r]);
      kmin = fmin(kmin, kk[r]);
      pmax = fmax(pmax, rank_cost[r]);
      pmin = fmin(pmin, rank_cost[r]);
    }
    /* KK over the same groups is the start the search improves on. */
    if (kk[0] > 0 && !(pmax <= kmax * (1 + 1e-9)))
      fail_msg("max rank cost %.1f above KK's %.1f (dp %u, %u groups)", pmax, kmax, dp, ng);
    if (kmin > 0 && pmax / pmin > kmax / kmin * (1 + 1e-9) && pmax == kmax)
      fail_msg("max/min %.4f above KK's %.4f", pmax / pmin, kmax / kmin);
    free(part);
    free(kk);
  }
  free(gnum);
  free(grank);
  free(gmini);
  free(count);
  free(per_mini);
  free(rank_cost);
  free(gcost);
}

/* check_plan's equal_count rule is equal sequence counts; with
 * groups_on_rank it is equal group counts (check_groups). */
static void check_all(const pk_request_t *req, const pk_plan_t *plan) {
  pk_request_t plain = *req;
  plain.batching.equal_count = false;
  check_plan(&plain, plan);
  check_groups(req, plan);
}

static int plan_twice(const pk_request_t *req, pk_plan_t **out, char *err, size_t errlen) {
  pk_plan_t *a = NULL, *b = NULL;
  int rc = pk_plan(req, &a, err, errlen);
  if (rc != 0) {
    assert_null(a);
    return rc;
  }
  check_all(req, a);
  assert_int_equal(pk_plan(req, &b, err, errlen), 0);
  check_same_plan(a, b);
  pk_plan_free(b);
  *out = a;
  return 0;
}

static void test_random_grpo_batches(void **state) {
  (void)state;
  static batch_t b;
  test_rng_t r = {.s = 0x67727030};
  static const uint32_t sizes[] = {0, 4, 8, 16};
  uint32_t planned = 0, refused = 0;
  for (int t = 0; t < 400; t++) {
    uint32_t dp = 2 + test_below(&r, 15);
    uint32_t nb = test_below(&r, 3) == 0 ? 1 + test_below(&r, 3) : 1;
    bool equal = test_below(&r, 2);
    uint32_t size = sizes[test_below(&r, 4)];
    uint32_t per = 1 + test_below(&r, 6); /* groups per rank and mini-batch */
    uint32_t ng = equal ? nb * dp * per : nb * dp + test_below(&r, 4 * dp);
    while ((size ? size : 16) * ng > MAX_N)
      ng = equal ? ng - nb * dp : ng - 1;
    if (ng < nb * dp)
      continue;
    uint32_t resp_cap = test_below(&r, 2) ? 8192 : 15000;
    grpo_batch(&r, &b, ng, size, resp_cap, test_below(&r, 2));
    pk_request_t req;
    base_request(&req, &b, dp);
    req.batching.mini_batches = nb;
    req.batching.equal_count = equal;
    req.batching.shuffle = test_below(&r, 3) == 0;
    req.batching.mode = test_below(&r, 4) == 0 ? PK_MODE_PADDED : PK_MODE_PACKED;
    if (req.batching.mode == PK_MODE_PADDED)
      req.batching.round = 128;
    uint32_t capk = test_below(&r, 3);
    req.batching.max_tokens = capk == 0 ? 0 : capk == 1 ? 17408 : 32768;
    if (test_below(&r, 5) == 0)
      req.batching.max_seqs = 2 + test_below(&r, 6);
    if (test_below(&r, 5) == 0)
      req.batching.min_micro_batches = 1 + test_below(&r, 4);
    if (test_below(&r, 5) == 0) {
      static const uint32_t algos[] = {PK_MICRO_FFD, PK_MICRO_KK_COUNT, PK_MICRO_NEXT_FIT};
      req.batching.micro_algo = algos[test_below(&r, 3)];
    }
    if (test_below(&r, 4) == 0)
      req.parallel.cp = 2;
    if (test_below(&r, 6) == 0) {
      req.parallel.pp = 2;
      req.parallel.vpp = 2;
    }
    req.batching.order = test_below(&r, PK_ORDER_COUNT);
    req.seed = test_next(&r);
    pk_plan_t *plan = NULL;
    char err[512];
    int rc = plan_twice(&req, &plan, err, sizeof err);
    if (rc != 0) {
      /* Only a rank whose whole groups are too few for the common count. */
      assert_int_equal(rc, PK_EPRECOND);
      assert_non_null(strstr(err, "groups_on_rank"));
      refused++;
      continue;
    }
    planned++;
    pk_plan_free(plan);
  }
  assert_true(planned > 300);
  assert_true(refused < 20);
}

/* GRPO batches as verl's balancer sees them: equal group sizes, equal group
 * counts, one mini-batch, no cap. packd's max rank cost is never above KK's
 * (checked in check_groups) and here the max / mean is tight. */
static void test_balance_against_kk(void **state) {
  (void)state;
  static batch_t b;
  test_rng_t r = {.s = 0x6b6b};
  static const uint32_t dps[] = {4, 8, 16};
  static const uint32_t sizes[] = {4, 8, 16};
  for (int t = 0; t < 27; t++) {
    uint32_t dp = dps[t % 3], size = sizes[(t / 3) % 3];
    uint32_t ng = 2048 / size / dp * dp;
    grpo_batch(&r, &b, ng, size, 15000, false);
    pk_request_t req;
    base_request(&req, &b, dp);
    req.batching.equal_count = true;
    req.batching.max_tokens = 32768;
    pk_plan_t *plan = NULL;
    char err[512];
    assert_int_equal(plan_twice(&req, &plan, err, sizeof err), 0);
    assert_true(plan->stats.dp_imbalance < 1.02);
    pk_plan_free(plan);
  }
}

/* Free counts let a rank take fewer groups; an equal count that needs more
 * micro-batches on one rank raises every rank's count. */
static void test_common_count(void **state) {
  (void)state;
  /* Group 7: four long sequences; group 9: eight short ones; max_seqs 2
   * forces 4 micro-batches on the short group's rank. */
  uint32_t lengths[12] = {9000, 9000, 9000, 9000, 10, 10, 10, 10, 10, 10, 10, 10};
  uint64_t groups[12] = {7, 7, 7, 7, 9, 9, 9, 9, 9, 9, 9, 9};
  pk_request_t req = {0};
  req.lengths = lengths;
  req.n = 12;
  req.groups = groups;
  req.n_groups = 12;
  req.parallel.dp = 2;
  req.batching.groups_on_rank = true;
  req.batching.max_seqs = 2;
  pk_plan_t *plan = NULL;
  char err[512];
  assert_int_equal(plan_twice(&req, &plan, err, sizeof err), 0);
  assert_int_equal(pk_plan_cell(plan, 0, 0)->nmicros, 4);
  pk_plan_free(plan);
  /* max_seqs 1: the short group's rank needs 8, the long one holds 4. */
  req.batching.max_seqs = 1;
  assert_int_equal(pk_plan(&req, &plan, err, sizeof err), PK_EPRECOND);
  assert_null(plan);
  assert_non_null(strstr(err, "batching.groups_on_rank"));
}

static void expect_einval(const pk_request_t *req, const char *needle) {
  pk_plan_t *plan = NULL;
  char err[512];
  int rc = pk_plan(req, &plan, err, sizeof err);
  assert_null(plan);
  if (rc != PK_EINVAL || strstr(err, needle) == NULL)
    fail_msg("rc %d, message '%s' (wanted INVALID_ARGUMENT naming '%s')", rc, err, needle);
}

static void test_bad_requests(void **state) {
  (void)state;
  static batch_t b;
  test_rng_t r = {.s = 5};
  grpo_batch(&r, &b, 6, 4, 4000, false);
  pk_request_t req;
  base_request(&req, &b, 4);

  pk_request_t x = req;
  x.groups = NULL;
  x.n_groups = 0;
  expect_einval(&x, "batching.groups_on_rank: set, but groups is empty");
  x = req;
  x.n_groups = b.n - 1;
  expect_einval(&x, "groups: 23 entries for 24 lengths");
  x = req;
  x.parallel.dp = 7;
  expect_einval(&x, "groups holds 6 distinct ids, fewer than batching.mini_batches 1 x "
                    "parallel.dp 7");
  x = req;
  x.batching.mini_batches = 2;
  expect_einval(&x, "fewer than batching.mini_batches 2 x parallel.dp 4");
  x = req;
  x.batching.equal_count = true;
  expect_einval(&x, "groups holds 6 distinct ids, not a multiple of batching.mini_batches 1 x "
                    "parallel.dp 4");
  x = req;
  x.batching.mode = PK_MODE_FIXED;
  x.batching.micro_batch_size = 1;
  expect_einval(&x, "batching.groups_on_rank: not available with batching.mode FIXED");
  x = req;
  x.batching.dp_balance = PK_DP_KK_EQUAL;
  expect_einval(&x, "batching.groups_on_rank: set with batching.dp_balance kk_equal");

  /* The same request plans with dp 3 and equal counts (6 = 2 x 3 groups). */
  x = req;
  x.parallel.dp = 3;
  x.batching.equal_count = true;
  pk_plan_t *plan = NULL;
  char err[512];
  assert_int_equal(plan_twice(&x, &plan, err, sizeof err), 0);
  pk_plan_free(plan);
}

/* Groups of one sequence each make groups_on_rank plain sequence balancing:
 * every rule holds and the plan is as balanced as KK on sequences. */
static void test_singleton_groups(void **state) {
  (void)state;
  static batch_t b;
  test_rng_t r = {.s = 11};
  grpo_batch(&r, &b, 512, 1, 8192, false);
  pk_request_t req;
  base_request(&req, &b, 8);
  req.batching.max_tokens = 16384;
  pk_plan_t *plan = NULL;
  char err[512];
  assert_int_equal(plan_twice(&req, &plan, err, sizeof err), 0);
  pk_plan_free(plan);
}

/* Zero-length sequences and whole zero-cost groups: every micro-batch
 * still holds a sequence (LPT fills empty micro-batches first). */
static void test_zero_lengths(void **state) {
  (void)state;
  static batch_t b;
  test_rng_t r = {.s = 23};
  grpo_batch(&r, &b, 16, 4, 4000, false);
  uint32_t zeros = 0;
  for (uint32_t i = 0; i < b.n; i++)
    if (i < 24 || i % 3 == 0) {
      b.lengths[i] = b.loss[i] = 0;
      zeros++;
    }
  for (uint32_t mode = PK_MODE_PACKED; mode <= PK_MODE_PADDED; mode++)
    for (uint32_t dp = 2; dp <= 8; dp *= 2) {
      pk_request_t req;
      base_request(&req, &b, dp);
      req.batching.mode = mode;
      req.batching.min_micro_batches = 2;
      req.batching.equal_count = dp != 8 || mode == PK_MODE_PACKED;
      pk_plan_t *plan = NULL;
      char err[512];
      assert_int_equal(plan_twice(&req, &plan, err, sizeof err), 0);
      assert_int_equal(plan->stats.zero_length, zeros);
      pk_plan_free(plan);
    }
  /* Every sequence of length 0. */
  for (uint32_t i = 0; i < b.n; i++)
    b.lengths[i] = b.loss[i] = 0;
  pk_request_t req;
  base_request(&req, &b, 4);
  req.batching.min_micro_batches = 3;
  pk_plan_t *plan = NULL;
  char err[512];
  assert_int_equal(plan_twice(&req, &plan, err, sizeof err), 0);
  assert_int_equal(pk_plan_cell(plan, 0, 0)->nmicros, 3);
  pk_plan_free(plan);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_grpo_batches), cmocka_unit_test(test_balance_against_kk),
      cmocka_unit_test(test_common_count),        cmocka_unit_test(test_bad_requests),
      cmocka_unit_test(test_singleton_groups),    cmocka_unit_test(test_zero_lengths),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
