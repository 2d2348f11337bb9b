/* Tests of the DP balancing compatibility algorithms
 * (server/planner/compat_dp.c). */
#include "compat_fixture.h"

#include <math.h>

static void rank_counts(const uint32_t *rank, uint32_t n, uint32_t dp, uint32_t *count, double *sum,
                        const double *cost) {
  memset(count, 0, dp * sizeof(uint32_t));
  if (sum != NULL)
    memset(sum, 0, dp * sizeof(double));
  for (uint32_t k = 0; k < n; k++) {
    assert_true(rank[k] < dp);
    count[rank[k]]++;
    if (sum != NULL)
      sum[rank[k]] += cost[k];
  }
}

/* NONE: contiguous, the first n % dp ranks one item more. */
static void test_dp_none_contiguous(void **state) {
  (void)state;
  const uint32_t lens[10] = {5, 1, 7, 3, 9, 2, 8, 4, 6, 10};
  fx_t f;
  fx_init(&f, lens, 10, 4, PK_MODE_PACKED, 0);
  uint32_t rank[10];
  assert_int_equal(pk_compat_dp(&f.ctx, PK_DP_NONE, false, rank), 0);
  const uint32_t want[10] = {0, 0, 0, 1, 1, 1, 2, 2, 3, 3};
  assert_memory_equal(rank, want, sizeof(want));
  fx_free(&f);
}

/* Seed 001 (ROLL dynamic batching): lengths [7,6,8,5,1,3,8,6], dp 2, sorted
 * stride -> shard 0 holds lengths [1,5,6,8], shard 1 [3,6,7,8]. Ties of equal
 * length keep input order (stable): the first 6 (index 1) comes before the
 * second (index 7), the first 8 (index 2) before the second (index 6). */
static void test_dp_sorted_stride_seed001(void **state) {
  (void)state;
  const uint32_t lens[8] = {7, 6, 8, 5, 1, 3, 8, 6};
  fx_t f;
  fx_init(&f, lens, 8, 2, PK_MODE_PADDED, 10);
  uint32_t rank[8];
  assert_int_equal(pk_compat_dp(&f.ctx, PK_DP_SORTED_STRIDE, true, rank), 0);
  /* Sorted: 1(i4) 3(i5) 5(i3) 6(i1) 6(i7) 7(i0) 8(i2) 8(i6); even sorted
   * positions go to rank 0. */
  const uint32_t want[8] = {1, 1, 0, 0, 0, 1, 1, 0};
  assert_memory_equal(rank, want, sizeof(want));
  uint32_t tokens[2] = {0, 0};
  for (int k = 0; k < 8; k++)
    tokens[rank[k]] += lens[k];
  assert_int_equal(tokens[0], 1 + 5 + 6 + 8);
  assert_int_equal(tokens[1], 3 + 6 + 7 + 8);
  fx_free(&f);
}

/* LPT (free counts) on tokens: sorted 5(i1) 4(i3) 3(i0) 3(i2) 3(i4);
 * 5->g0, 4->g1, 3->g1 (4 < 5), 3->g0 (5 < 7), 3->g1 (7 < 8). */
static void test_dp_lpt_hand(void **state) {
  (void)state;
  const uint32_t lens[5] = {3, 5, 3, 4, 3};
  fx_t f;
  fx_init(&f, lens, 5, 2, PK_MODE_PACKED, 0);
  f.cfg.quad = 0;
  fx_build(&f);
  uint32_t rank[5];
  assert_int_equal(pk_compat_dp(&f.ctx, PK_DP_LPT, false, rank), 0);
  const uint32_t want[5] = {1, 0, 0, 1, 1};
  assert_memory_equal(rank, want, sizeof(want));
  /* LPT_EQUAL with 5 items on 2 ranks: shares of 3 and 2. */
  assert_int_equal(pk_compat_dp(&f.ctx, PK_DP_LPT_EQUAL, false, rank), 0);
  uint32_t count[2];
  rank_counts(rank, 5, 2, count, NULL, NULL);
  assert_true((count[0] == 3 && count[1] == 2) || (count[0] == 2 && count[1] == 3));
  fx_free(&f);
}

/* KK_EQUAL on the verl seed lengths with 2 ranks: 3 items each. */
static void test_dp_kk_equal_hand(void **state) {
  (void)state;
  const uint32_t lens[6] = {100, 900, 50, 950, 400, 600};
  fx_t f;
  fx_init(&f, lens, 6, 2, PK_MODE_PACKED, 0);
  f.cfg.quad = 0;
  fx_build(&f);
  uint32_t rank[6], count[2];
  double sum[2];
  assert_int_equal(pk_compat_dp(&f.ctx, PK_DP_KK_EQUAL, false, rank), 0);
  rank_counts(rank, 6, 2, count, sum, f.cost);
  assert_int_equal(count[0], 3);
  assert_int_equal(count[1], 3);
  /* Runs [50,100] [400,600] [900,950]. The largest spread (200) merges with
   * the tie winner of spread 50 whose largest set is larger ({950|900}):
   * {600+900 | 400+950}; then with {100|50}: {1500+50 | 1350+100}. */
  assert_true(sum[0] == 1550.0 && sum[1] == 1450.0);
  const uint32_t want[6] = {1, 0, 0, 1, 1, 0};
  assert_memory_equal(rank, want, sizeof(want));
  fx_free(&f);
}

static void test_dp_auto_is_internal(void **state) {
  (void)state;
  const uint32_t lens[2] = {1, 2};
  fx_t f;
  fx_init(&f, lens, 2, 2, PK_MODE_PACKED, 0);
  uint32_t rank[2];
  assert_int_equal(pk_compat_dp(&f.ctx, PK_DP_AUTO, false, rank), PK_EINTERNAL);
  assert_int_equal(pk_compat_dp(&f.ctx, 99, false, rank), PK_EINTERNAL);
  fx_free(&f);
}

/* Properties over random batches for every algorithm: every item on a rank
 * < dp; equal counts with equal_count (and the _EQUAL forms) when dp divides
 * n, floor/ceil otherwise; NONE and SORTED_STRIDE floor/ceil always; free
 * LPT keeps max - min rank cost within the largest cost; KK keeps it within
 * the largest cost too; the same input gives the same output. */
static void test_dp_properties(void **state) {
  (void)state;
  static uint32_t lens[6000], rank[6000], rank2[6000], count[600];
  static double sum[600];
  uint64_t seed = 99;
  const uint32_t algos[] = {PK_DP_NONE, PK_DP_KK,        PK_DP_KK_EQUAL,
                            PK_DP_LPT,  PK_DP_LPT_EQUAL, PK_DP_SORTED_STRIDE};
  for (int iter = 0; iter < 120; iter++) {
    uint32_t dp = 1 + fx_below(&seed, iter % 4 == 0 ? 512 : 16);
    uint32_t n = dp * (1 + fx_below(&seed, 10)) + (iter % 3 == 0 ? fx_below(&seed, dp) : 0);
    if (n > 6000)
      n = 6000;
    fx_random_lengths(&seed, lens, n, 16384, 1);
    fx_t f;
    fx_init(&f, lens, n, dp, PK_MODE_PACKED, 0);
    double cmax = 0;
    for (uint32_t k = 0; k < n; k++)
      cmax = fmax(cmax, f.cost[k]);
    for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]); a++) {
      for (int eq = 0; eq < 2; eq++) {
        bool equal = eq == 1 && n % dp == 0;
        assert_int_equal(pk_compat_dp(&f.ctx, algos[a], equal, rank), 0);
        rank_counts(rank, n, dp, count, sum, f.cost);
        bool want_equal = equal || algos[a] == PK_DP_KK_EQUAL || algos[a] == PK_DP_LPT_EQUAL ||
                          algos[a] == PK_DP_NONE || algos[a] == PK_DP_SORTED_STRIDE;
        double lo = INFINITY, hi = -INFINITY;
        for (uint32_t r = 0; r < dp; r++) {
          if (want_equal)
            assert_true(count[r] == n / dp || count[r] == (n + dp - 1) / dp);
          lo = fmin(lo, sum[r]);
          hi = fmax(hi, sum[r]);
        }
        if (!equal && (algos[a] == PK_DP_LPT || algos[a] == PK_DP_KK))
          assert_true(hi - lo <= cmax * (1 + 1e-12));
        assert_int_equal(pk_compat_dp(&f.ctx, algos[a], equal, rank2), 0);
        assert_memory_equal(rank, rank2, n * sizeof(uint32_t));
      }
    }
    fx_free(&f);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_dp_none_contiguous),  cmocka_unit_test(test_dp_sorted_stride_seed001),
      cmocka_unit_test(test_dp_lpt_hand),         cmocka_unit_test(test_dp_kk_equal_hand),
      cmocka_unit_test(test_dp_auto_is_internal), cmocka_unit_test(test_dp_properties),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
