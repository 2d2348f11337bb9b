/* Tests of the micro-batching compatibility algorithms
 * (server/planner/compat_micro.c). */
#include "compat_fixture.h"

static const uint32_t k_algos[] = {PK_MICRO_NEXT_FIT, PK_MICRO_FFD, PK_MICRO_MFFD,
                                   PK_MICRO_KK_COUNT, PK_MICRO_LPT_CAP};
#define NALGOS (sizeof(k_algos) / sizeof(k_algos[0]))

/* Checks the contract of pk_compat_micro: every item in a micro-batch below
 * nmicro, none empty, every micro-batch within the cap and max_seqs, the
 * count at least min(max(min_count, 1), nitems). */
static void check_micro(const fx_t *f, const uint32_t *items, uint32_t m, uint32_t min_count,
                        const uint32_t *micro, uint32_t nmicro) {
  if (m == 0) {
    assert_int_equal(nmicro, 0);
    return;
  }
  uint32_t want = min_count < 1 ? 1 : min_count;
  if (want > m)
    want = m;
  assert_true(nmicro >= want);
  assert_true(nmicro <= m);
  pk_bin_t *bins = calloc(nmicro, sizeof(pk_bin_t));
  assert_non_null(bins);
  for (uint32_t j = 0; j < m; j++) {
    assert_true(micro[j] < nmicro);
    pk_bin_t *b = &bins[micro[j]];
    assert_true(pk_bin_fits(&f->ctx, b, items[j]));
    pk_bin_add(&f->ctx, b, items[j]);
  }
  for (uint32_t b = 0; b < nmicro; b++) {
    assert_true(bins[b].count > 0);
    assert_true(pk_bin_footprint(&f->cfg, &bins[b]) <= f->cfg.cap);
    assert_true(bins[b].count <= f->cfg.max_seqs);
  }
  free(bins);
}

static void identity(uint32_t *items, uint32_t n) {
  for (uint32_t k = 0; k < n; k++)
    items[k] = k;
}

/* Seed 003 (verl): lengths [100,900,50,950,400,600], cap 2000, KK_COUNT ->
 * ceil(3000 / 2000) = 2 micro-batches of 1500 tokens; KK on the default cost
 * (24576 L + L^2 scaled) puts {900, 600} together, and that part has the
 * larger cost, so it is micro-batch 0. */
static void test_micro_seed003_kk_count(void **state) {
  (void)state;
  const uint32_t lens[6] = {100, 900, 50, 950, 400, 600};
  fx_t f;
  fx_init(&f, lens, 6, 1, PK_MODE_PACKED, 2000);
  uint32_t items[6], micro[6], nm = 0;
  identity(items, 6);
  assert_int_equal(pk_compat_micro(&f.ctx, PK_MICRO_KK_COUNT, items, 6, 1, micro, &nm), 0);
  check_micro(&f, items, 6, 1, micro, nm);
  assert_int_equal(nm, 2);
  uint64_t tokens[2] = {0, 0};
  for (int j = 0; j < 6; j++)
    tokens[micro[j]] += lens[j];
  assert_int_equal(tokens[0], 1500);
  assert_int_equal(tokens[1], 1500);
  assert_int_equal(micro[1], 0);
  assert_int_equal(micro[5], 0);
  assert_int_equal(micro[3], 1);
  fx_free(&f);
}

/* KK balances cost, not tokens: with cost = a^2, lengths [9,3,3,3,2] and cap
 * 10 give 2 parts {9} / {3,3,3,2} = 11 tokens, over the cap; the count is
 * raised to 3: {9}, then the second and third 3 together (the first 3 joined
 * the 9-state first and is the smallest set when the third 3 arrives), then
 * the first 3 with the 2. */
static void test_micro_kk_count_raises(void **state) {
  (void)state;
  const uint32_t lens[5] = {9, 3, 3, 3, 2};
  fx_t f;
  fx_init(&f, lens, 5, 1, PK_MODE_PACKED, 10);
  f.cfg.lin = 0;
  f.cfg.quad = 1;
  fx_build(&f);
  uint32_t items[5], micro[5], nm = 0;
  identity(items, 5);
  assert_int_equal(pk_compat_micro(&f.ctx, PK_MICRO_KK_COUNT, items, 5, 1, micro, &nm), 0);
  check_micro(&f, items, 5, 1, micro, nm);
  assert_int_equal(nm, 3);
  assert_int_equal(micro[0], 0);
  assert_int_equal(micro[2], micro[3]);
  assert_int_equal(micro[1], micro[4]);
  fx_free(&f);
}

static void test_micro_next_fit_hand(void **state) {
  (void)state;
  const uint32_t lens[5] = {4, 5, 3, 6, 2};
  fx_t f;
  fx_init(&f, lens, 5, 1, PK_MODE_PACKED, 10);
  uint32_t items[5], micro[5], nm = 0;
  identity(items, 5);
  assert_int_equal(pk_compat_micro(&f.ctx, PK_MICRO_NEXT_FIT, items, 5, 1, micro, &nm), 0);
  const uint32_t want[5] = {0, 0, 1, 1, 2};
  assert_int_equal(nm, 3);
  assert_memory_equal(micro, want, sizeof(want));
  /* min_count 5: both 9-token micro-batches are split at their midpoint in
   * one pass. */
  assert_int_equal(pk_compat_micro(&f.ctx, PK_MICRO_NEXT_FIT, items, 5, 5, micro, &nm), 0);
  const uint32_t want5[5] = {0, 1, 2, 3, 4};
  assert_int_equal(nm, 5);
  assert_memory_equal(micro, want5, sizeof(want5));
  /* min_count 4: only the first (tie: lower number) is split. */
  assert_int_equal(pk_compat_micro(&f.ctx, PK_MICRO_NEXT_FIT, items, 5, 4, micro, &nm), 0);
  const uint32_t want4[5] = {0, 1, 2, 2, 3};
  assert_int_equal(nm, 4);
  assert_memory_equal(micro, want4, sizeof(want4));
  /* min_count above the item count: one item per micro-batch. */
  assert_int_equal(pk_compat_micro(&f.ctx, PK_MICRO_NEXT_FIT, items, 5, 9, micro, &nm), 0);
  assert_int_equal(nm, 5);
  check_micro(&f, items, 5, 9, micro, nm);
  fx_free(&f);
}

/* PADDED: rows x width. [2,4] is 2 x 4 = 8; adding 6 makes 3 x 6 = 18 > 12. */
static void test_micro_next_fit_padded(void **state) {
  (void)state;
  const uint32_t lens[5] = {2, 4, 6, 6, 8};
  fx_t f;
  fx_init(&f, lens, 5, 1, PK_MODE_PADDED, 12);
  uint32_t items[5], micro[5], nm = 0;
  identity(items, 5);
  assert_int_equal(pk_compat_micro(&f.ctx, PK_MICRO_NEXT_FIT, items, 5, 1, micro, &nm), 0);
  const uint32_t want[5] = {0, 0, 1, 1, 2};
  assert_int_equal(nm, 3);
  assert_memory_equal(micro, want, sizeof(want));
  fx_free(&f);
}

/* FFD: 6+4 and 5+3+2 fill two bins of 10. min_count 4 moves the smallest
 * item of the fullest bin (2 from {5,3,2}), then of {6,4} (tie: lower bin). */
static void test_micro_ffd_hand(void **state) {
  (void)state;
  const uint32_t lens[5] = {6, 5, 4, 3, 2};
  fx_t f;
  fx_init(&f, lens, 5, 1, PK_MODE_PACKED, 10);
  uint32_t items[5], micro[5], nm = 0;
  identity(items, 5);
  assert_int_equal(pk_compat_micro(&f.ctx, PK_MICRO_FFD, items, 5, 1, micro, &nm), 0);
  const uint32_t want[5] = {0, 1, 0, 1, 1};
  assert_int_equal(nm, 2);
  assert_memory_equal(micro, want, sizeof(want));
  assert_int_equal(pk_compat_micro(&f.ctx, PK_MICRO_FFD, items, 5, 4, micro, &nm), 0);
  const uint32_t want4[5] = {0, 1, 3, 1, 2};
  assert_int_equal(nm, 4);
  assert_memory_equal(micro, want4, sizeof(want4));
  fx_free(&f);
}

/* MFFD with C = 100: large 60, 55; medium 40, 35; small 20, 20, 18; tiny 10,
 * 5. Large bins take the largest medium that fits (60+40, 55+35), the
 * greedy fill adds 10 to the second, the rest opens one more bin. */
static void test_micro_mffd_hand(void **state) {
  (void)state;
  const uint32_t lens[9] = {20, 60, 5, 35, 18, 55, 40, 10, 20};
  fx_t f;
  fx_init(&f, lens, 9, 1, PK_MODE_PACKED, 100);
  uint32_t items[9], micro[9], nm = 0;
  identity(items, 9);
  assert_int_equal(pk_compat_micro(&f.ctx, PK_MICRO_MFFD, items, 9, 1, micro, &nm), 0);
  check_micro(&f, items, 9, 1, micro, nm);
  assert_int_equal(nm, 3);
  assert_int_equal(micro[1], 0); /* 60 */
  assert_int_equal(micro[6], 0); /* 40 */
  assert_int_equal(micro[5], 1); /* 55 */
  assert_int_equal(micro[3], 1); /* 35 */
  assert_int_equal(micro[7], 1); /* 10 */
  assert_int_equal(micro[0], 2);
  assert_int_equal(micro[8], 2);
  assert_int_equal(micro[4], 2);
  assert_int_equal(micro[2], 2);
  fx_free(&f);
}

/* Phase 3 of MFFD: a large bin without a medium takes the smallest small and
 * then the largest small that still fits. C = 60: large 35, smalls 11, 12,
 * 19 (> 10). 35 + 11 + 12 = 58 <= 60, so the pair check passes; after 11 the
 * room is 14 and the largest small that fits is 12. */
static void test_micro_mffd_small_pairs(void **state) {
  (void)state;
  const uint32_t lens[4] = {19, 12, 35, 11};
  fx_t f;
  fx_init(&f, lens, 4, 1, PK_MODE_PACKED, 60);
  uint32_t items[4], micro[4], nm = 0;
  identity(items, 4);
  assert_int_equal(pk_compat_micro(&f.ctx, PK_MICRO_MFFD, items, 4, 1, micro, &nm), 0);
  check_micro(&f, items, 4, 1, micro, nm);
  assert_int_equal(nm, 2);
  assert_int_equal(micro[2], 0);
  assert_int_equal(micro[3], 0);
  assert_int_equal(micro[1], 0);
  assert_int_equal(micro[0], 1);
  fx_free(&f);
}

/* LPT_CAP (MindSpeed-RL): sizes [6,5,4,3,2], cap 10. LPT over
 * ceil(20/10) = 2 groups: 6 | 5, 4 -> the 5 group (9), 3 -> the 6 group (9),
 * 2 does not fit the least-loaded group (tie: group 0, 9 + 2 > 10): it is
 * closed and a third opened. The final KK into 3 parts on sizes gives
 * {6}, {5,2}, {4,3}. */
static void test_micro_lpt_cap_hand(void **state) {
  (void)state;
  const uint32_t lens[5] = {6, 5, 4, 3, 2};
  fx_t f;
  fx_init(&f, lens, 5, 1, PK_MODE_PACKED, 10);
  uint32_t items[5], micro[5], nm = 0;
  identity(items, 5);
  assert_int_equal(pk_compat_micro(&f.ctx, PK_MICRO_LPT_CAP, items, 5, 1, micro, &nm), 0);
  check_micro(&f, items, 5, 1, micro, nm);
  assert_int_equal(nm, 3);
  assert_int_equal(micro[2], micro[3]);
  assert_int_equal(micro[1], micro[4]);
  assert_true(micro[0] != micro[1] && micro[0] != micro[2]);
  fx_free(&f);
}

/* max_seqs is a hard cap for every algorithm, and without a token cap the
 * count-based algorithms use max(1, min_count) parts. */
static void test_micro_max_seqs_and_no_cap(void **state) {
  (void)state;
  const uint32_t lens[5] = {100, 200, 300, 400, 500};
  fx_t f;
  fx_init(&f, lens, 5, 1, PK_MODE_PACKED, 0);
  uint32_t items[5], micro[5], nm = 0;
  identity(items, 5);
  for (size_t a = 0; a < NALGOS; a++) {
    assert_int_equal(pk_compat_micro(&f.ctx, k_algos[a], items, 5, 1, micro, &nm), 0);
    assert_int_equal(nm, 1);
    assert_int_equal(pk_compat_micro(&f.ctx, k_algos[a], items, 5, 3, micro, &nm), 0);
    assert_int_equal(nm, 3);
    check_micro(&f, items, 5, 3, micro, nm);
  }
  f.cfg.max_seqs = 2;
  for (size_t a = 0; a < NALGOS; a++) {
    assert_int_equal(pk_compat_micro(&f.ctx, k_algos[a], items, 5, 1, micro, &nm), 0);
    assert_int_equal(nm, 3);
    check_micro(&f, items, 5, 1, micro, nm);
  }
  fx_free(&f);
}

/* An item that cannot fit alone is a precondition failure; AUTO and unknown
 * algorithms are internal errors; no items give no micro-batches. */
static void test_micro_errors(void **state) {
  (void)state;
  const uint32_t lens[3] = {5, 11, 2};
  fx_t f;
  fx_init(&f, lens, 3, 1, PK_MODE_PACKED, 10);
  uint32_t items[3], micro[3], nm = 7;
  identity(items, 3);
  for (size_t a = 0; a < NALGOS; a++)
    assert_int_equal(pk_compat_micro(&f.ctx, k_algos[a], items, 3, 1, micro, &nm), PK_EPRECOND);
  items[1] = 2;
  assert_int_equal(pk_compat_micro(&f.ctx, PK_MICRO_AUTO, items, 2, 1, micro, &nm), PK_EINTERNAL);
  assert_int_equal(pk_compat_micro(&f.ctx, 42, items, 2, 1, micro, &nm), PK_EINTERNAL);
  assert_int_equal(pk_compat_micro(&f.ctx, PK_MICRO_FFD, items, 0, 3, micro, &nm), 0);
  assert_int_equal(nm, 0);
  fx_free(&f);
}

/* Properties over random rank slices, both modes, with and without
 * max_seqs, and random min_count: the contract of check_micro; determinism;
 * KK_COUNT and LPT_CAP counts at least the token and max_seqs lower bounds;
 * next fit and FFD (no max_seqs, PACKED, no forced count) at most
 * 2 * ceil(sum / cap) + 1 bins (any two of their bins hold more than the
 * cap). */
static void test_micro_properties(void **state) {
  (void)state;
  static uint32_t lens[3000], items[3000], micro[3000], micro2[3000];
  uint64_t seed = 4242;
  for (int iter = 0; iter < 400; iter++) {
    uint32_t n = 1 + fx_below(&seed, iter < 340 ? 60 : 1500);
    uint32_t max_len = 64 + fx_below(&seed, 8192);
    fx_random_lengths(&seed, lens, n, max_len, 1);
    uint32_t mode = iter % 2 == 0 ? PK_MODE_PACKED : PK_MODE_PADDED;
    fx_t f;
    fx_init(&f, lens, n, 1, mode, 0);
    f.cfg.align = 1u << fx_below(&seed, 4);
    f.cfg.round = mode == PK_MODE_PADDED ? 1u << fx_below(&seed, 7) : 1;
    fx_build(&f);
    uint64_t smax = 0;
    for (uint32_t k = 0; k < n; k++)
      smax = f.size[k] > smax ? f.size[k] : smax;
    if (smax == 0)
      smax = 1;
    f.cfg.cap = smax + fx_below(&seed, (uint32_t)smax * 4 + 1);
    f.cfg.max_seqs = iter % 5 == 0 ? 1 + fx_below(&seed, 8) : UINT32_MAX;
    /* The rank's items: a random subset in random order. */
    uint32_t m = 0;
    for (uint32_t k = 0; k < n; k++)
      if (fx_below(&seed, 3) != 0)
        items[m++] = k;
    for (uint32_t j = m; j > 1; j--) {
      uint32_t r = fx_below(&seed, j);
      uint32_t t = items[j - 1];
      items[j - 1] = items[r];
      items[r] = t;
    }
    uint32_t min_count = iter % 4 == 0 ? fx_below(&seed, m + 3) : 1;
    uint64_t sum = 0;
    for (uint32_t j = 0; j < m; j++)
      sum += f.size[items[j]];
    uint64_t lb = sum == 0 ? 0 : (sum - 1) / f.cfg.cap + 1;
    if (f.cfg.max_seqs != UINT32_MAX && m > 0) {
      uint64_t lbs = (m - 1) / f.cfg.max_seqs + 1;
      lb = lbs > lb ? lbs : lb;
    }
    for (size_t a = 0; a < NALGOS; a++) {
      uint32_t nm = 0, nm2 = 0;
      assert_int_equal(pk_compat_micro(&f.ctx, k_algos[a], items, m, min_count, micro, &nm), 0);
      check_micro(&f, items, m, min_count, micro, nm);
      assert_true(nm >= lb);
      assert_int_equal(pk_compat_micro(&f.ctx, k_algos[a], items, m, min_count, micro2, &nm2), 0);
      assert_int_equal(nm, nm2);
      assert_memory_equal(micro, micro2, m * sizeof(uint32_t));
      if ((k_algos[a] == PK_MICRO_NEXT_FIT || k_algos[a] == PK_MICRO_FFD) &&
          mode == PK_MODE_PACKED && f.cfg.max_seqs == UINT32_MAX && min_count <= 1 && m > 0)
        assert_true(nm <= 2 * lb + 1);
    }
    fx_free(&f);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_micro_seed003_kk_count),
      cmocka_unit_test(test_micro_kk_count_raises),
      cmocka_unit_test(test_micro_next_fit_hand),
      cmocka_unit_test(test_micro_next_fit_padded),
      cmocka_unit_test(test_micro_ffd_hand),
      cmocka_unit_test(test_micro_mffd_hand),
      cmocka_unit_test(test_micro_mffd_small_pairs),
      cmocka_unit_test(test_micro_lpt_cap_hand),
      cmocka_unit_test(test_micro_max_seqs_and_no_cap),
      cmocka_unit_test(test_micro_errors),
      cmocka_unit_test(test_micro_properties),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
