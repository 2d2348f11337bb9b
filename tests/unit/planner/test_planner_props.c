/* Property tests of the whole planner: random requests over every algorithm
 * and mode, and real workloads, each plan checked against every rule a plan
 * must keep (plan_check.h), planned twice for determinism. */
#include "plan_check.h"

/* Plans, checks and re-plans; returns the rc so callers may accept a clear
 * FAILED_PRECONDITION for infeasible random combinations. */
static int plan_and_check(const pk_request_t *req, pk_stats_t *stats_out) {
  pk_plan_t *a = NULL, *b = NULL;
  char err[512];
  int rc = pk_plan(req, &a, err, sizeof err);
  if (rc != 0) {
    assert_null(a);
    /* Infeasible combinations must say why, and only as these classes. */
    assert_true(rc == PK_EPRECOND);
    assert_true(strlen(err) > 10);
    return rc;
  }
  check_plan(req, a);
  assert_int_equal(pk_plan(req, &b, err, sizeof err), 0);
  check_same_plan(a, b);
  if (stats_out)
    *stats_out = a->stats;
  pk_plan_free(a);
  pk_plan_free(b);
  return 0;
}

static void random_request(test_rng_t *r, pk_request_t *req, uint32_t *lengths, uint32_t *loss,
                           uint64_t *groups, uint32_t n) {
  memset(req, 0, sizeof *req);
  uint32_t shape = test_below(r, 3);
  for (uint32_t i = 0; i < n; i++) {
    lengths[i] = shape == 0   ? test_rl_length(r, 8192)
                 : shape == 1 ? test_below(r, 40) /* short, with zeros */
                              : 1 + test_below(r, 5000);
    loss[i] = lengths[i] ? test_below(r, lengths[i] + 1) : 0;
    groups[i] = test_below(r, n / 4 + 1);
  }
  req->lengths = lengths;
  req->n = n;
  if (test_below(r, 2)) {
    req->loss_tokens = loss;
    req->n_loss_tokens = n;
  }
  static const uint32_t dps[] = {1, 2, 3, 4, 8, 16};
  req->parallel.dp = dps[test_below(r, 6)];
  req->parallel.tp = 1 + test_below(r, 2);
  static const uint32_t cps[] = {1, 1, 2, 4, 8};
  req->parallel.cp = cps[test_below(r, 5)];
  req->parallel.cp_algo = test_below(r, 4) == 0 ? PK_CP_ULYSSES : PK_CP_ZIGZAG;
  req->parallel.sequence_parallel = test_below(r, 2);
  if (test_below(r, 4) == 0) {
    req->parallel.pp = 2 + test_below(r, 3);
    req->parallel.vpp = 2;
  }
  req->batching.mini_batches = 1 + test_below(r, 3);
  req->batching.shuffle = test_below(r, 2);
  req->batching.dp_balance = test_below(r, PK_DP_BALANCE_COUNT);
  req->batching.micro_algo = test_below(r, PK_MICRO_ALGO_COUNT);
  req->batching.order = test_below(r, PK_ORDER_COUNT);
  req->batching.equal_count = test_below(r, 3) == 0;
  req->batching.mode = test_below(r, 4) == 0 ? PK_MODE_PADDED : PK_MODE_PACKED;
  if (test_below(r, 8) == 0) {
    req->batching.mode = PK_MODE_FIXED;
    req->batching.micro_batch_size = 1 + test_below(r, 4);
  }
  req->batching.max_tokens = test_below(r, 5) == 0 ? 0 : 16384 + test_below(r, 16384);
  req->batching.max_seqs = test_below(r, 4) == 0 ? 4 + test_below(r, 16) : 0;
  req->batching.min_micro_batches = test_below(r, 4) == 0 ? 1 + test_below(r, 3) : 0;
  req->batching.round = test_below(r, 3) == 0 ? 64 : 0;
  if (test_below(r, 4) == 0) {
    req->groups = groups;
    req->n_groups = n;
    req->batching.keep_groups = true;
  }
  req->layout.pad_multiple = test_below(r, 4) == 0 ? 16 : 0;
  if (req->batching.mode != PK_MODE_PADDED) {
    req->layout.total_multiple = test_below(r, 4) == 0 ? 128 : 0;
    req->layout.fixed_shape = test_below(r, 4) == 0;
  }
  req->seed = test_next(r);
  /* The cost model, a third of the time with per_sequence and
   * per_micro_batch, drawn from a stream of its own (seeded by the request)
   * so that the draws above stay those of the other fields. */
  test_rng_t c = {req->seed ^ 0x636f7374ull};
  if (test_below(&c, 3) == 0) {
    req->cost.linear = test_below(&c, 2) ? 1.0 : 0.0;
    req->cost.quadratic = test_below(&c, 2) ? 1.0 / 24576 : 1.0 / 32;
    req->cost.per_sequence = test_below(&c, 2) ? 64 * test_uniform(&c) : 65536 * test_uniform(&c);
    req->cost.per_micro_batch = test_below(&c, 2) ? 0 : 4096 * test_uniform(&c);
  }
}

static void test_random_requests(void **state) {
  (void)state;
  test_rng_t r = {20261122};
  enum { MAXN = 700 };
  uint32_t lengths[MAXN], loss[MAXN];
  uint64_t groups[MAXN];
  int planned = 0, refused = 0;
  for (int iter = 0; iter < 600; iter++) {
    uint32_t n = 1 + test_below(&r, MAXN);
    pk_request_t req;
    random_request(&r, &req, lengths, loss, groups, n);
    char err[512];
    pk_plan_t *p = NULL;
    int rc = pk_plan(&req, &p, err, sizeof err);
    pk_plan_free(p);
    /* Requests the validator refuses carry INVALID_ARGUMENT or
     * FAILED_PRECONDITION and a message; the rest must plan correctly. */
    if (rc == PK_EINVAL || rc == PK_EPRECOND) {
      refused++;
      assert_true(strlen(err) > 10);
      continue;
    }
    assert_int_equal(rc, 0);
    assert_int_equal(plan_and_check(&req, NULL), 0);
    planned++;
  }
  /* The generator must exercise real plans, not only refusals. */
  assert_true(planned > 300);
  assert_true(refused > 10);
}

/* Every dp_balance x micro_algo pair on one heavy-tailed batch (SHARED_CUTS
 * only where it is valid: PADDED with the sorted stride, or AUTO meaning
 * it). */
static void test_every_algorithm_pair(void **state) {
  (void)state;
  test_rng_t r = {7};
  enum { N = 1024 };
  static uint32_t lengths[N];
  for (uint32_t i = 0; i < N; i++)
    lengths[i] = test_rl_length(&r, 16384);
  for (uint32_t mode = 0; mode < 2; mode++)
    for (uint32_t d = 0; d < PK_DP_BALANCE_COUNT; d++)
      for (uint32_t m = 0; m < PK_MICRO_ALGO_COUNT; m++)
        for (uint32_t eq = 0; eq < 2; eq++) {
          pk_request_t req = {.lengths = lengths, .n = N};
          req.parallel.dp = 8;
          req.parallel.cp = 2;
          req.batching.mode = mode;
          req.batching.dp_balance = d;
          req.batching.micro_algo = m;
          req.batching.equal_count = eq;
          req.batching.max_tokens = 16384;
          req.batching.round = 128;
          if (m == PK_MICRO_SHARED_CUTS &&
              (mode != PK_MODE_PADDED || (d != PK_DP_AUTO && d != PK_DP_SORTED_STRIDE)))
            continue;
          assert_int_equal(plan_and_check(&req, NULL), 0);
        }
}

/* Real length lists from bench/workloads. */
static uint32_t read_workload(const char *name, uint32_t *out, uint32_t *loss, uint32_t max,
                              uint32_t cap) {
  char path[1024];
  snprintf(path, sizeof path, "%s/bench/workloads/%s", PK_SOURCE_DIR, name);
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  char line[128];
  uint32_t n = 0;
  while (n < max && fgets(line, sizeof line, f)) {
    unsigned long a = 0, b = 0;
    int got = sscanf(line, "%lu %lu", &a, &b);
    if (got < 1)
      continue;
    uint32_t len = (uint32_t)(got == 2 ? a + b : a);
    if (len > cap) /* Documents longer than the cap are filtered out. */
      continue;
    out[n] = len;
    loss[n] = got == 2 ? (uint32_t)b : len;
    n++;
  }
  fclose(f);
  return n;
}

static void test_real_workloads(void **state) {
  (void)state;
  static const char *files[] = {"azure_conv_2023.txt", "azure_code_2023.txt",
                                "wikipedia_doc_lengths.txt"};
  enum { N = 4096 };
  static uint32_t lengths[N], loss[N];
  for (int f = 0; f < 3; f++) {
    uint32_t n = read_workload(files[f], lengths, loss, N, 32768);
    assert_true(n >= 4000);
    static const uint32_t dps[] = {8, 64};
    for (int d = 0; d < 2; d++)
      for (uint32_t mode = 0; mode < 2; mode++) {
        pk_request_t req = {.lengths = lengths, .n = n, .loss_tokens = loss, .n_loss_tokens = n};
        req.parallel.dp = dps[d];
        req.batching.max_tokens = 32768;
        req.batching.mode = mode;
        req.batching.mini_batches = 2;
        pk_stats_t st;
        assert_int_equal(plan_and_check(&req, &st), 0);
        /* Packed AUTO stays within one micro-batch of the bound; in PADDED
         * mode the bound (exact greedy grouping) is met exactly. */
        if (mode == PK_MODE_PACKED)
          assert_true(st.micro_batches_per_rank <= st.micro_batches_lower_bound + 1);
        else
          assert_int_equal(st.micro_batches_per_rank, st.micro_batches_lower_bound);
      }
  }
}

/* AUTO on RL-like batches: the micro-batch count stays within one of the
 * lower bound and lock-step efficiency stays high. These are regression
 * floors, below the 0.995 target: at dp 256 (16 sequences per rank, two
 * micro-batches at 98 % token fill) the cap leaves too little room to level
 * the quadratic cost of the longest sequences (bench/planner/README.md). */
static void test_auto_quality(void **state) {
  (void)state;
  enum { N = 4096 };
  static uint32_t lengths[N];
  for (uint64_t seed = 1; seed <= 4; seed++) {
    test_rng_t r = {seed};
    for (uint32_t i = 0; i < N; i++)
      lengths[i] = test_rl_length(&r, 16384);
    static const uint32_t dps[] = {8, 64, 256};
    for (int d = 0; d < 3; d++) {
      pk_request_t req = {.lengths = lengths, .n = N};
      req.parallel.dp = dps[d];
      req.batching.max_tokens = 32768;
      pk_stats_t st;
      assert_int_equal(plan_and_check(&req, &st), 0);
      assert_true(st.micro_batches_per_rank <= st.micro_batches_lower_bound + 1);
      print_message("seed %d dp %u: micro %u (bound %u) efficiency %.5f imbalance %.5f\n",
                    (int)seed, dps[d], st.micro_batches_per_rank, st.micro_batches_lower_bound,
                    st.lockstep_efficiency, st.dp_imbalance);
      assert_true(st.lockstep_efficiency >= (dps[d] <= 64 ? 0.98 : 0.94));
      assert_true(st.dp_imbalance <= (dps[d] <= 64 ? 1.02 : 1.06));
    }
  }
}

static int cmp_u32_desc(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x > y ? -1 : (x < y ? 1 : 0);
}

/* The fewest micro-batches per rank first fit decreasing needs for
 * `lengths` over dp ranks under `cap` (alignment 1, no max_seqs): the
 * reference AUTO's first fit repair must beat. A max tree over the room of
 * up to n micro-batches finds the first with room in O(log n). */
static uint32_t first_fit_count(const uint32_t *lengths, uint32_t n, uint32_t dp, uint64_t cap) {
  uint32_t *sorted = malloc((size_t)n * sizeof *sorted);
  uint32_t leaves = 1;
  while (leaves < n)
    leaves *= 2;
  uint64_t *room = malloc((size_t)leaves * 2 * sizeof *room);
  assert_non_null(sorted);
  assert_non_null(room);
  memcpy(sorted, lengths, (size_t)n * sizeof *sorted);
  qsort(sorted, n, sizeof *sorted, cmp_u32_desc);
  for (uint32_t i = 0; i < 2 * leaves; i++)
    room[i] = cap;
  uint32_t used = 0;
  for (uint32_t j = 0; j < n; j++) {
    uint32_t p = 1;
    while (p < leaves)
      p = room[2 * p] >= sorted[j] ? 2 * p : 2 * p + 1;
    room[p] -= sorted[j];
    used = used > p - leaves + 1 ? used : p - leaves + 1;
    for (p /= 2; p >= 1; p /= 2)
      room[p] = room[2 * p] > room[2 * p + 1] ? room[2 * p] : room[2 * p + 1];
  }
  free(sorted);
  free(room);
  return (used + dp - 1) / dp;
}

/* AUTO where the cap leaves almost no room (token fill above 99.7 % at the
 * micro-batch lower bound): the first fit probe, the repair of first fit at
 * counts it cannot fill, and the packing kept aside. Caps are chosen from
 * the batch so that the fill at the bound is 99.7 to 99.99 %; every plan
 * must keep every rule (check_plan: cap, max_seqs, every index once, equal
 * counts, bounds) and be deterministic, and the count may exceed the bound
 * by at most one (AUTO's target). Some batches must be ones where first
 * fit decreasing alone needs more micro-batches than AUTO plans (the
 * repair did the difference: two caps of the large RL batch); no plan
 * needs more than first fit's count. */
static void test_auto_tight_fill(void **state) {
  (void)state;
  enum { N = 65536 };
  static uint32_t lengths[N];
  int tight = 0, repaired = 0;
  for (uint64_t seed = 1; seed <= 4; seed++) {
    test_rng_t r = {seed * 977};
    uint32_t n = seed == 1 ? N : 3000;
    uint64_t total = 0;
    uint32_t longest = 0;
    for (uint32_t i = 0; i < n; i++) {
      lengths[i] = test_rl_length(&r, seed == 1 ? 15360 : 6000);
      total += lengths[i];
      longest = lengths[i] > longest ? lengths[i] : longest;
    }
    static const uint32_t dps[] = {8, 64};
    for (int d = 0; d < 2; d++) {
      for (uint32_t k = 0; k < 4; k++) {
        uint64_t cap;
        if (seed == 1 && k == 0) {
          cap = 16384;
        } else if (seed == 1 && k == 1) {
          /* Caps where first fit decreasing needs one micro-batch per rank
           * more than AUTO plans with the repair (DP 8: 1664 vs 1663, the
           * bound 1662; DP 64: 207 vs 206, the bound). */
          cap = dps[d] == 8 ? 16480 : 16624;
        } else {
          double fill = 0.997 + 0.0029 * test_uniform(&r);
          uint32_t m = 2 + test_below(&r, seed == 1 ? 40 : 12);
          cap = (uint64_t)((double)total / (fill * dps[d] * m)) + 1;
        }
        if (cap < longest)
          continue;
        pk_request_t req = {.lengths = lengths, .n = n};
        req.parallel.dp = dps[d];
        req.batching.max_tokens = (uint32_t)cap;
        pk_stats_t st;
        assert_int_equal(plan_and_check(&req, &st), 0);
        assert_true(st.micro_batches_per_rank <= st.micro_batches_lower_bound + 1);
        uint32_t ffd = first_fit_count(lengths, n, dps[d], cap);
        assert_true(st.micro_batches_per_rank <= ffd);
        repaired += st.micro_batches_per_rank < ffd;
        tight += (double)total > 0.99 * (double)cap * dps[d] * st.micro_batches_lower_bound;
        if (k == 1) {
          /* max_seqs that binds in some micro-batches: the repair's swaps
           * keep every count. */
          req.batching.max_seqs = 2 * (n / (dps[d] * st.micro_batches_per_rank)) + 1;
          assert_int_equal(plan_and_check(&req, &st), 0);
        }
      }
    }
  }
  /* The caps above must really be tight at the bound, and the repair must
   * have planned fewer micro-batches than first fit somewhere. */
  print_message("tight %d, fewer than first fit %d\n", tight, repaired);
  assert_true(tight >= 10);
  assert_true(repaired >= 2);
}

/* Plans lengths in `mode` on dp ranks, cap max_tokens, cost a + a^2 / 32,
 * checking every rule; returns the stats. */
static pk_stats_t plan_small(uint32_t *lengths, uint32_t n, uint32_t dp, uint64_t max_tokens,
                             uint32_t mode) {
  pk_request_t req = {.lengths = lengths, .n = n};
  req.parallel.dp = dp;
  req.batching.max_tokens = max_tokens;
  req.batching.mode = mode;
  req.cost.linear = 1;
  req.cost.quadratic = 1.0 / 32;
  pk_stats_t st;
  assert_int_equal(plan_and_check(&req, &st), 0);
  print_message("step %.4f, bound %.4f\n", st.step_cost, st.step_cost_lower_bound);
  return st;
}

/* The first column's level is one long sequence, so its other micro-batches
 * cost far less and have tokens to spare, while the second column is level
 * and high: only moving items across columns lowers the step cost (the
 * in-column refinement cannot). Regression for pk_auto_lower_columns: the
 * step cost was 296.09 (20.7 % above the bound 245.31), now within 5 %. */
static void test_auto_lowers_across_columns(void **state) {
  (void)state;
  uint32_t lengths[] = {14, 13, 73, 11, 12, 11, 8,  8, 8,  3, 11, 19,
                        15, 19, 5,  5,  7,  3,  13, 9, 13, 8, 18, 5};
  pk_stats_t st = plan_small(lengths, 24, 4, 76, PK_MODE_PACKED);
  assert_int_equal(st.micro_batches_per_rank, 2);
  assert_true(st.step_cost <= 1.05 * st.step_cost_lower_bound);
}

/* Where no item of a column's costliest micro-batch fits whole anywhere,
 * it trades a large item for smaller ones of a micro-batch with cost to
 * spare (pk_auto_lower_columns' exchanges). Regression: moves alone leave
 * the step cost at 194.34, 6.7 % above the bound 182.06; with exchanges
 * 191.34 (5.1 %). */
static void test_auto_exchanges_across_columns(void **state) {
  (void)state;
  uint32_t lengths[] = {4, 16, 1, 7, 16, 4, 10, 12, 11, 16, 11, 40, 61, 5, 7, 7, 5, 6, 11, 3, 3};
  pk_stats_t st = plan_small(lengths, 21, 3, 81, PK_MODE_PACKED);
  assert_true(st.step_cost <= 1.06 * st.step_cost_lower_bound);
}

/* PADDED AUTO: when the cost target leaves fewer runs than micro-batches,
 * halving the costliest runs leaves a tail of half-cost micro-batches; the
 * even band (auto/padded.c) cuts exactly as many runs with costs in one
 * band. Regression: halving alone gave a step cost of 201.16 (17.4 % above
 * the bound 171.39); with the band 183.44 (7.0 %). */
static void test_auto_padded_even_band(void **state) {
  (void)state;
  uint32_t lengths[] = {21, 14, 4, 43, 13, 3, 20, 10, 5, 12, 7, 1, 53, 52, 12, 11};
  pk_stats_t st = plan_small(lengths, 16, 4, 54, PK_MODE_PADDED);
  assert_true(st.step_cost <= 1.105 * st.step_cost_lower_bound);
}

/* PADDED column levels: one row of 39 (cost 39 + 39^2 / 32 = 86.5) among
 * 25 rows of 1..12 on 4 ranks x 2 micro-batches, cap 64. The 39 stands
 * alone (two would exceed the cap) and sets the first column's level far
 * above the least common target of the 8 groups (36), so closing every
 * group at that target leaves the first column nearly empty and the second
 * too full (step 120.66). With the first column's groups closed at the
 * head's cost instead, the plan reaches the proven bound, 88.66. */
static void test_auto_padded_levels(void **state) {
  (void)state;
  uint32_t lengths[] = {39, 12, 9,  7, 7, 9, 12, 2, 3, 3,  3, 11, 4,
                        2,  1,  11, 7, 6, 4, 7,  2, 7, 11, 9, 5,  9};
  pk_stats_t st = plan_small(lengths, 26, 4, 64, PK_MODE_PADDED);
  assert_int_equal(st.micro_batches_per_rank, 2);
  assert_true(st.step_cost <= st.step_cost_lower_bound * (1 + 1e-9));
}

/* Small random PADDED batches (zero lengths, max_seqs, rounding, tiny caps,
 * per_sequence and per_micro_batch) through AUTO: every rule holds, the
 * count is the bound, and no plan is below the proven step bound. */
static void test_auto_padded_random(void **state) {
  (void)state;
  test_rng_t r = {4242};
  uint32_t lengths[64];
  int planned = 0;
  for (int iter = 0; iter < 3000; iter++) {
    uint32_t n = 1 + test_below(&r, 64), cap = 8 + test_below(&r, 120);
    for (uint32_t i = 0; i < n; i++)
      lengths[i] =
          test_below(&r, 6) == 0 ? 0 : 1 + test_below(&r, test_below(&r, 3) ? cap / 4 : cap);
    pk_request_t req = {.lengths = lengths, .n = n};
    req.parallel.dp = 1 + test_below(&r, 4);
    req.batching.mode = PK_MODE_PADDED;
    req.batching.max_tokens = cap;
    req.batching.max_seqs = test_below(&r, 4) == 0 ? 1 + test_below(&r, 6) : 0;
    req.batching.round = test_below(&r, 3) == 0 ? 4 : 1;
    req.cost.linear = 1;
    req.cost.quadratic = test_below(&r, 2) ? 1.0 / 32 : 0;
    /* per_sequence and per_micro_batch on a third and a fifth of the
     * batches (by the iteration: the draws above stay as they were). */
    req.cost.per_sequence = iter % 3 ? 0 : iter % 2 ? 5 : 300;
    req.cost.per_micro_batch = iter % 5 ? 0 : 17;
    pk_stats_t st;
    if (plan_and_check(&req, &st) != 0)
      continue;
    planned++;
    assert_int_equal(st.micro_batches_per_rank, st.micro_batches_lower_bound);
    assert_true(st.step_cost >= st.step_cost_lower_bound * (1 - 1e-9));
  }
  assert_true(planned > 2000);
}

/* per_micro_batch is paid once by every micro-batch, the same on every plan
 * with the same count: plans do not change, and the step cost and its
 * bound rise by M x per_micro_batch (M micro-batches per rank), the total
 * by dp x M x per_micro_batch. per_sequence is paid by every sequence, and
 * AUTO balances it with the tokens: with a large one, counts of short
 * sequences weigh as much as tokens; every bound stays below the plan
 * (check_plan). */
static void test_cost_per_micro_batch_and_sequence(void **state) {
  (void)state;
  enum { N = 2048 };
  static uint32_t lengths[N];
  test_rng_t r = {99};
  for (uint32_t i = 0; i < N; i++)
    lengths[i] = test_below(&r, 4) ? 1 + test_below(&r, 300) : test_rl_length(&r, 8192);
  for (uint32_t mode = 0; mode < 2; mode++) {
    pk_request_t req = {.lengths = lengths, .n = N};
    req.parallel.dp = 8;
    req.batching.max_tokens = 16384;
    req.batching.mode = mode;
    req.batching.mini_batches = 2;
    pk_plan_t *a = NULL, *b = NULL;
    char err[256];
    assert_int_equal(pk_plan(&req, &a, err, sizeof err), 0);
    req.cost.per_micro_batch = 250;
    assert_int_equal(pk_plan(&req, &b, err, sizeof err), 0);
    check_plan(&req, b);
    check_same_plan(a, b);
    double m = b->stats.micro_batches_per_rank;
    assert_true(fabs(b->stats.step_cost - a->stats.step_cost - 250 * m) < 1e-6);
    assert_true(fabs(b->stats.step_cost_lower_bound - a->stats.step_cost_lower_bound - 250 * m) <
                1e-6);
    assert_true(fabs(b->stats.total_cost - a->stats.total_cost - 250 * m * 8) < 1e-6);
    pk_plan_free(a);
    pk_plan_free(b);
    /* per_sequence from none, through a tenth of a short sequence's
     * tokens, to many times a long one's. */
    static const double seqs[] = {0, 10, 1000, 100000};
    for (int s = 0; s < 4; s++) {
      req.cost.per_sequence = seqs[s];
      pk_stats_t st;
      assert_int_equal(plan_and_check(&req, &st), 0);
      print_message("mode %u per_sequence %g: step %.1f, bound %.1f\n", mode, seqs[s], st.step_cost,
                    st.step_cost_lower_bound);
      /* PACKED AUTO stays near the bound (PADDED leaves more: rows of
       * unlike width, each paying per_sequence, rarely level). */
      if (mode == PK_MODE_PACKED)
        assert_true(st.step_cost <= 1.01 * st.step_cost_lower_bound);
    }
  }
}

/* Zero-length sequences are planned like any other: one index, a zero-width
 * slot, no token cost (per_sequence only), no loss. */
static void test_zero_length_sequences(void **state) {
  (void)state;
  uint32_t lengths[] = {0, 5, 0, 7, 0, 0, 3, 9};
  pk_request_t req = {.lengths = lengths, .n = 8};
  req.parallel.dp = 2;
  req.parallel.cp = 2;
  req.batching.max_tokens = 16;
  pk_plan_t *p;
  char err[256];
  assert_int_equal(pk_plan(&req, &p, err, sizeof err), 0);
  check_plan(&req, p);
  assert_int_equal(p->stats.zero_length, 4);
  pk_plan_free(p);
  uint32_t zeros[] = {0, 0, 0, 0};
  req.lengths = zeros;
  req.n = 4;
  assert_int_equal(pk_plan(&req, &p, err, sizeof err), 0);
  check_plan(&req, p);
  assert_int_equal(p->stats.tokens, 0);
  assert_true(p->stats.total_cost == 0);
  pk_plan_free(p);
  /* per_sequence is paid by zero-length sequences too (check_plan checks
   * every micro-batch's cost against the model). */
  req.cost.per_sequence = 7;
  assert_int_equal(pk_plan(&req, &p, err, sizeof err), 0);
  check_plan(&req, p);
  assert_true(fabs(p->stats.total_cost - 4 * 7) < 1e-12);
  pk_plan_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_random_requests),
      cmocka_unit_test(test_every_algorithm_pair),
      cmocka_unit_test(test_real_workloads),
      cmocka_unit_test(test_auto_quality),
      cmocka_unit_test(test_zero_length_sequences),
      cmocka_unit_test(test_cost_per_micro_batch_and_sequence),
      cmocka_unit_test(test_auto_tight_fill),
      cmocka_unit_test(test_auto_lowers_across_columns),
      cmocka_unit_test(test_auto_exchanges_across_columns),
      cmocka_unit_test(test_auto_padded_even_band),
      cmocka_unit_test(test_auto_padded_levels),
      cmocka_unit_test(test_auto_padded_random),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
