/* The PADDED cut search (auto/runs.c) and level search (auto/levels.c)
 * against their contracts, and the cut search against exhaustive search:
 * the runs they return cover the width order exactly, each within the cap
 * and max_seqs, with their costs filled in; the step cost of the runs
 * (sorted by cost, tiers of dp, the sum of the tier tops) never rises (the
 * level search changes them only to lower it); on small batches the cut
 * search reaches the least step cost of any cut of the order, which is the
 * least of any PADDED packing (the argument at the top of auto/runs.c;
 * test_bounds.c checks packings exhaustively). */
#include "compat_fixture.h"

#include <math.h>

#include "auto/auto.h"
#include "pk_planner.h"

static int cost_desc(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? 1 : (x > y ? -1 : 0);
}

/* The step cost of count runs in tiers of dp; INFINITY when a run is empty
 * or does not fit. */
static double runs_step(const padded_rows_t *rt, const padded_group_t *runs, uint32_t count,
                        uint32_t dp) {
  double *c = calloc(count, sizeof *c);
  assert_non_null(c);
  double step = 0;
  for (uint32_t q = 0; q < count && step != INFINITY; q++) {
    if (runs[q].rows == 0 || runs[q].rows > rt->cap_rows[runs[q].first])
      step = INFINITY;
    else
      c[q] = (double)runs[q].rows * rt->cost[runs[q].first];
  }
  if (step == 0) {
    qsort(c, count, sizeof *c, cost_desc);
    for (uint32_t q = 0; q < count; q += dp)
      step += c[q];
  }
  free(c);
  return step;
}

/* The runs cover [0, n) in position order, fit, and carry their costs. */
static void assert_cover(const padded_rows_t *rt, const padded_group_t *runs, uint32_t count) {
  uint32_t at = 0;
  for (uint32_t q = 0; q < count; q++) {
    assert_int_equal(runs[q].first, at);
    assert_true(runs[q].rows >= 1);
    assert_true(runs[q].rows <= rt->cap_rows[at]);
    assert_true(runs[q].cost == (double)runs[q].rows * rt->cost[at]);
    at += runs[q].rows;
  }
  assert_int_equal(at, rt->n);
}

/* Some fitting cut of the order into exactly count runs (count <= n):
 * greedy runs of at most `most` rows, then the longest split, handed out in
 * a shuffled order. Returns false where the greedy cut needs more than
 * count runs. */
static bool some_runs(const padded_rows_t *rt, uint32_t most, uint32_t count, padded_group_t *runs,
                      uint64_t *seed) {
  uint32_t g = 0;
  for (uint32_t i = 0; i < rt->n;) {
    uint32_t rows = rt->cap_rows[i] < most ? rt->cap_rows[i] : most;
    rows = rows < rt->n - i ? rows : rt->n - i;
    if (g == count)
      return false;
    runs[g++] = (padded_group_t){i, rows, 0};
    i += rows;
  }
  while (g < count) {
    uint32_t best = 0;
    for (uint32_t q = 1; q < g; q++)
      if (runs[q].rows > runs[best].rows)
        best = q;
    if (runs[best].rows < 2)
      return false;
    uint32_t keep = runs[best].rows / 2;
    runs[g++] = (padded_group_t){runs[best].first + keep, runs[best].rows - keep, 0};
    runs[best].rows = keep;
  }
  for (uint32_t q = 0; q < count; q++)
    runs[q].cost = (double)runs[q].rows * rt->cost[runs[q].first];
  for (uint32_t q = count; q > 1; q--) {
    uint32_t j = fx_below(seed, q);
    padded_group_t t = runs[q - 1];
    runs[q - 1] = runs[j];
    runs[j] = t;
  }
  return true;
}

/* The least step cost over every cut of [0, n) into count runs. */
static double best_cut(const padded_rows_t *rt, uint32_t count, uint32_t dp) {
  uint32_t n = rt->n;
  double best = INFINITY;
  padded_group_t runs[16];
  assert_true(count <= 16 && n <= 20);
  /* Bit i of mask set: a cut before position i + 1. */
  for (uint32_t mask = 0; mask < (1u << (n - 1)); mask++) {
    if ((uint32_t)__builtin_popcount(mask) != count - 1)
      continue;
    uint32_t g = 0, first = 0;
    for (uint32_t i = 1; i <= n; i++)
      if (i == n || (mask >> (i - 1) & 1)) {
        runs[g++] = (padded_group_t){first, i - first, 0};
        first = i;
      }
    double step = runs_step(rt, runs, count, dp);
    best = step < best ? step : best;
  }
  return best;
}

/* A random PADDED batch of n rows into f and rt (lens and order: n
 * entries, kept by the caller): lengths up to the cap in a quarter of the
 * draws, else up to cap / 8; max_seqs 2 to 9 in a third of the batches.
 * With varied, also zero-length rows (cost 0) in a third of the batches (a
 * level-search walk whose last column was made of them once spun forever
 * looking for its target) and widths rounded to 64 in half. Returns the
 * fewest runs the rows fit in (greedy at cap_rows). */
static uint32_t random_rows(uint64_t *seed, uint32_t n, uint32_t dp, uint64_t cap, bool varied,
                            uint32_t *lens, uint32_t *order, fx_t *f, padded_rows_t *rt) {
  uint32_t zeros = varied && fx_below(seed, 3) == 0 ? 1 + fx_below(seed, 3) : 0;
  for (uint32_t k = 0; k < n; k++)
    lens[k] = varied && fx_below(seed, 4) < zeros
                  ? 0
                  : 1 + fx_below(seed, fx_below(seed, 4) == 0 ? (uint32_t)cap : (uint32_t)cap / 8);
  fx_init(f, lens, n, dp, PK_MODE_PADDED, cap);
  if (fx_below(seed, 3) == 0)
    f->cfg.max_seqs = 2 + fx_below(seed, 8);
  if (varied && fx_below(seed, 2) == 0)
    f->cfg.round = 64;
  fx_build(f);
  fx_size_order(f, order);
  assert_int_equal(pk_padded_rows_init(rt, &f->ctx, order), 0);
  uint32_t fewest = 0;
  for (uint32_t i = 0; i < n; i += rt->cap_rows[i])
    fewest++;
  return fewest;
}

static void test_search_keeps_runs_valid(void **state) {
  (void)state;
  uint64_t seed = 11;
  int searched = 0;
  for (int trial = 0; trial < 300; trial++) {
    uint32_t n = 8 + fx_below(&seed, 300), dp = 1 + fx_below(&seed, 8);
    uint64_t cap = 256 + fx_below(&seed, 4096);
    uint32_t lens[320], order[320];
    fx_t f;
    padded_rows_t rt;
    uint32_t fewest = random_rows(&seed, n, dp, cap, false, lens, order, &f, &rt);
    /* A count at or above the fewest runs, in tiers of dp. */
    uint32_t count = (fewest + dp - 1) / dp * dp + dp * fx_below(&seed, 3);
    padded_group_t *runs = calloc(count, sizeof *runs);
    assert_non_null(runs);
    if (count <= n && some_runs(&rt, n, count, runs, &seed)) {
      double before = runs_step(&rt, runs, count, dp);
      uint32_t moves = fx_below(&seed, 4) == 0 ? 0 : 1 + fx_below(&seed, 5000);
      assert_int_equal(pk_auto_search_runs(&rt, runs, count, dp, moves, trial), 0);
      assert_cover(&rt, runs, count);
      assert_true(runs_step(&rt, runs, count, dp) <= before);
      searched++;
    }
    free(runs);
    pk_padded_rows_free(&rt);
    fx_free(&f);
  }
  /* Most draws give a starting cut to search from. */
  assert_true(searched >= 150);
}

static void test_search_reaches_best_cut(void **state) {
  (void)state;
  uint64_t seed = 5;
  int improved = 0;
  for (int trial = 0; trial < 60; trial++) {
    uint32_t n = 8 + fx_below(&seed, 7), dp = 2, count = dp * (2 + fx_below(&seed, 2));
    uint64_t cap = 64;
    uint32_t lens[16], order[16];
    for (uint32_t k = 0; k < n; k++)
      lens[k] = 1 + fx_below(&seed, fx_below(&seed, 3) == 0 ? 64 : 16);
    fx_t f;
    fx_init(&f, lens, n, dp, PK_MODE_PADDED, cap);
    fx_size_order(&f, order);
    padded_rows_t rt;
    assert_int_equal(pk_padded_rows_init(&rt, &f.ctx, order), 0);
    padded_group_t runs[16];
    if (some_runs(&rt, n, count, runs, &seed)) {
      double before = runs_step(&rt, runs, count, dp), least = best_cut(&rt, count, dp);
      assert_int_equal(pk_auto_search_runs(&rt, runs, count, dp, 20000, trial), 0);
      assert_cover(&rt, runs, count);
      double after = runs_step(&rt, runs, count, dp);
      assert_true(after <= least * (1 + 1e-12));
      improved += after < before;
    }
    pk_padded_rows_free(&rt);
    fx_free(&f);
  }
  /* The starting cuts are poor on purpose: the search has work to do. */
  assert_true(improved >= 20);
}

static int by_first(const void *a, const void *b) {
  const padded_group_t *x = a, *y = b;
  return x->first < y->first ? -1 : (x->first > y->first ? 1 : 0);
}

/* The level search (auto/levels.c) on random batches, from poor starting
 * cuts: where it answers 0 its runs cover the order exactly, each within
 * the cap and max_seqs, with a step cost below the start's; where it
 * answers PK_EPRECOND the runs are untouched. */
static void test_level_search_keeps_runs_valid(void **state) {
  (void)state;
  uint64_t seed = 23;
  int searched = 0, improved = 0;
  for (int trial = 0; trial < 300; trial++) {
    uint32_t n = 8 + fx_below(&seed, 600), dp = 2 + fx_below(&seed, 12);
    uint64_t cap = 256 + fx_below(&seed, 4096);
    uint32_t lens[640], order[640];
    fx_t f;
    padded_rows_t rt;
    uint32_t fewest = random_rows(&seed, n, dp, cap, true, lens, order, &f, &rt);
    uint32_t m = (fewest + dp - 1) / dp + fx_below(&seed, 3);
    m = m < 2 ? 2 : m;
    uint32_t count = m * dp;
    padded_group_t *runs = calloc(count, sizeof *runs);
    padded_group_t *copy = calloc(count, sizeof *copy);
    assert_non_null(runs);
    assert_non_null(copy);
    if (count <= n && some_runs(&rt, n, count, runs, &seed)) {
      double before = runs_step(&rt, runs, count, dp);
      memcpy(copy, runs, count * sizeof *runs);
      uint64_t work = fx_below(&seed, 4) == 0 ? 1 : 1 + fx_below(&seed, 200000);
      int rc = pk_auto_level_search(&rt, runs, m, dp, work);
      assert_true(rc == 0 || rc == PK_EPRECOND);
      if (rc == 0) {
        qsort(runs, count, sizeof *runs, by_first);
        assert_cover(&rt, runs, count);
        assert_true(runs_step(&rt, runs, count, dp) < before);
        improved++;
      } else {
        assert_memory_equal(runs, copy, count * sizeof *runs);
      }
      searched++;
    }
    free(runs);
    free(copy);
    pk_padded_rows_free(&rt);
    fx_free(&f);
  }
  assert_true(searched >= 150);
  /* The starting cuts are poor on purpose: most searches find better. */
  assert_true(improved >= searched / 2);
}

/* Regression: a walk whose last column is ten zero-cost rows (cost 0,
 * more rows than dp) looked for their target by 1 % steps down to the
 * mean cost per run, 0, and never got there (found by the planner's
 * property tests; these are the rows of that batch). */
static void test_level_search_zero_cost_tail(void **state) {
  (void)state;
  static const double cost[61] = {13, 13, 13, 13, 13, 12, 11, 11, 9, 7, 6, 5, 3, 3, 3, 3, 3,
                                  3,  3,  3,  3,  3,  2,  2,  2,  2, 2, 2, 2, 2, 2, 2, 2, 2,
                                  2,  2,  2,  1,  1,  1,  1,  1,  1, 1, 1, 1, 1, 1, 1, 1, 1};
  uint32_t n = 61, dp = 2, m = 10, count = m * dp;
  double costs[61];
  uint32_t cap_rows[61], class_end[61];
  for (uint32_t i = 0; i < n; i++) {
    costs[i] = cost[i]; /* The last ten are 0. */
    cap_rows[i] = cost[i] >= 7   ? 1
                  : cost[i] >= 5 ? 2
                  : cost[i] >= 3 ? 4
                  : cost[i] >= 2 ? 6
                  : cost[i] >= 1 ? 13
                                 : 61;
  }
  for (uint32_t i = n; i-- > 0;)
    class_end[i] = i + 1 < n && costs[i + 1] == costs[i] ? class_end[i + 1] : i + 1;
  padded_rows_t rt = {n, costs, cap_rows, class_end, NULL};
  uint64_t seed = 3;
  for (int trial = 0; trial < 200; trial++) {
    padded_group_t runs[20];
    if (!some_runs(&rt, 1 + fx_below(&seed, 61), count, runs, &seed))
      continue;
    double before = runs_step(&rt, runs, count, dp);
    int rc = pk_auto_level_search(&rt, runs, m, dp, 1 + fx_below(&seed, 5000));
    assert_true(rc == 0 || rc == PK_EPRECOND);
    qsort(runs, count, sizeof *runs, by_first);
    assert_cover(&rt, runs, count);
    assert_true(runs_step(&rt, runs, count, dp) <= before);
  }
}

/* Batches where the widest rows pair under the cap (rows cut at a length
 * limit, cap = twice the limit) but a pair costs more than the common
 * target: AUTO's packing reaches the least step cost of any cut (before
 * the cap-run levels of auto/padded.c it did not: 12338.7, 11372.0 and
 * 11690.7 against 11527.3, 11125.3 and 11141.3 on the three below; found
 * by comparing both builds against exhaustive search on random batches). */
static void test_plan_pairs_the_widest_rows(void **state) {
  (void)state;
  static const uint32_t lens[][14] = {
      {4041, 4000, 1159, 4052, 2177, 1754, 147, 4024, 560, 790, 868, 1005, 587},
      {597, 271, 846, 4002, 4019, 1770, 2537, 4006, 501, 581, 288, 1173, 2878},
      {704, 89, 603, 1442, 2483, 4089, 2962, 183, 634, 4010, 948, 682, 110, 4018},
  };
  static const uint32_t count[] = {13, 13, 14};
  for (uint32_t c = 0; c < 3; c++) {
    uint32_t n = count[c], dp = 3, order[16];
    pk_request_t req = {0};
    req.lengths = lens[c];
    req.n = n;
    req.parallel.dp = dp;
    req.batching.mode = PK_MODE_PADDED;
    req.batching.max_tokens = 8192;
    req.batching.round = 128;
    pk_plan_t *plan = NULL;
    char err[256];
    assert_int_equal(pk_plan(&req, &plan, err, sizeof err), 0);
    fx_t f;
    fx_init(&f, lens[c], n, dp, PK_MODE_PADDED, 8192);
    f.cfg.round = 128;
    fx_build(&f);
    fx_size_order(&f, order);
    padded_rows_t rt;
    assert_int_equal(pk_padded_rows_init(&rt, &f.ctx, order), 0);
    uint32_t m = plan->stats.micro_batches_per_rank;
    double least = best_cut(&rt, m * dp, dp);
    assert_true(plan->stats.step_cost <= least * (1 + 1e-12));
    pk_padded_rows_free(&rt);
    fx_free(&f);
    pk_plan_free(plan);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_search_keeps_runs_valid),
      cmocka_unit_test(test_search_reaches_best_cut),
      cmocka_unit_test(test_plan_pairs_the_widest_rows),
      cmocka_unit_test(test_level_search_keeps_runs_valid),
      cmocka_unit_test(test_level_search_zero_cost_tail),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
