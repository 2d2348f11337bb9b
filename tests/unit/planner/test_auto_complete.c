/* Micro-batch completion (auto/complete.c): its packing obeys the cap and
 * max_seqs and places every item exactly once, on random batches with
 * zero-length items and repeated sizes; it says PK_EPRECOND when the items
 * need more micro-batches than it is given; its exchanges and budget act as
 * documented; and through pk_plan it brings nearly full RL batches to the
 * micro-batch bound, or one above, where first fit and its repair, or
 * earlier forms of completion, ended one or two above it. */
#include "compat_fixture.h"
#include "plan_check.h"

#include "auto/auto.h"
#include "pk_planner.h"

/* Packs f's items into at most nbins micro-batches; checks the packing
 * when it fits and returns pk_auto_pack_complete's code. */
static int pack_and_check(const fx_t *f, uint32_t target, uint32_t nbins, uint32_t *used) {
  uint32_t n = f->n;
  uint32_t *order = calloc(n, sizeof *order);
  uint32_t *item_bin = calloc(n, sizeof *item_bin);
  pk_bin_t *bins = calloc(nbins ? nbins : 1, sizeof *bins);
  pk_bin_t *again = calloc(nbins ? nbins : 1, sizeof *again);
  assert_non_null(order);
  assert_non_null(item_bin);
  assert_non_null(bins);
  assert_non_null(again);
  fx_size_order(f, order);
  auto_state_t s = {.ctx = &f->ctx, .dp = f->cfg.dp};
  int rc = pk_auto_pack_complete(&s, order, target, nbins, (pk_packing_t){bins, item_bin}, used);
  if (rc == 0) {
    assert_true(*used <= nbins);
    /* Every item in one micro-batch in front; the micro-batches' sums and
     * counts are their items'; none breaks the cap or max_seqs; none of
     * those in front is empty. */
    for (uint32_t k = 0; k < n; k++) {
      assert_true(item_bin[k] < *used);
      pk_bin_t *b = &again[item_bin[k]];
      b->sum += f->size[k];
      b->count++;
    }
    for (uint32_t i = 0; i < nbins; i++) {
      assert_int_equal(bins[i].sum, again[i].sum);
      assert_int_equal(bins[i].count, again[i].count);
      assert_true(bins[i].sum <= f->cfg.cap);
      assert_true(bins[i].count <= f->cfg.max_seqs);
      assert_true(i < *used ? bins[i].count > 0 : bins[i].count == 0);
    }
  }
  free(order);
  free(item_bin);
  free(bins);
  free(again);
  return rc;
}

static void test_complete_props(void **state) {
  (void)state;
  test_rng_t r = {0xc0119e7eull};
  for (int iter = 0; iter < 400; iter++) {
    uint32_t n = 1 + test_below(&r, 300);
    uint64_t cap = 64 + test_below(&r, 4000);
    uint32_t *lens = calloc(n, sizeof *lens);
    assert_non_null(lens);
    /* Sizes from a few distinct values (repeats), any value, or zero. */
    uint32_t kinds = 1 + test_below(&r, 8);
    for (uint32_t k = 0; k < n; k++) {
      uint32_t pick = test_below(&r, 10);
      lens[k] = pick == 0  ? 0
                : pick < 5 ? (uint32_t)(cap / (2 + test_below(&r, kinds)))
                           : test_below(&r, (uint32_t)cap + 1);
    }
    fx_t f;
    fx_init(&f, lens, n, 1, PK_MODE_PACKED, cap);
    if (test_below(&r, 3) == 0)
      f.cfg.max_seqs = 1 + test_below(&r, 6);
    uint32_t target = test_below(&r, n + 1), used = 0;
    assert_int_equal(pack_and_check(&f, target, n, &used), 0);
    /* The same packing again (deterministic), and one micro-batch fewer
     * does not fit. */
    uint32_t used2 = 0;
    assert_int_equal(pack_and_check(&f, target, used, &used2), 0);
    assert_int_equal(used2, used);
    assert_int_equal(pack_and_check(&f, target, used - 1, &used2), PK_EPRECOND);
    fx_free(&f);
    free(lens);
  }
}

/* The pair exchange: {6, 5} leave 1 of 12 where no item fits; the last
 * item 5 for the smallest, 2, and the largest beside it, 4, fills 12 (no
 * target: the exchange wherever room is left). */
static void test_complete_pair(void **state) {
  (void)state;
  const uint32_t lens[] = {6, 5, 4, 2};
  fx_t f;
  fx_init(&f, lens, 4, 1, PK_MODE_PACKED, 12);
  uint32_t used = 0;
  assert_int_equal(pack_and_check(&f, 0, 2, &used), 0);
  assert_int_equal(used, 2);
  /* Without the exchange, first fit's {6, 5} and {4, 2} would fill the
   * same count; here the first micro-batch is full. */
  uint32_t order[4], item_bin[4];
  pk_bin_t bins[2];
  fx_size_order(&f, order);
  auto_state_t s = {.ctx = &f.ctx, .dp = 1};
  assert_int_equal(pk_auto_pack_complete(&s, order, 0, 2, (pk_packing_t){bins, item_bin}, &used),
                   0);
  assert_int_equal(bins[0].sum, 12);
  assert_int_equal(item_bin[1], 1); /* The 5 moved on. */
  /* Aiming at 2 micro-batches, 7 tokens of room may be left in all, 3.5
   * each: the gap of 1 is within the first one's share, so the smallest
   * item is kept for later and {6, 5} stays. */
  assert_int_equal(pk_auto_pack_complete(&s, order, 2, 2, (pk_packing_t){bins, item_bin}, &used),
                   0);
  assert_int_equal(bins[0].sum, 11);
  assert_int_equal(bins[1].sum, 6);
  fx_free(&f);
}

/* The exchange of two items: {7, 6, 6} leave 1 of 20. One item out cannot
 * fill more (a 6 out leaves 7: the smallest left, 3, and nothing of at most
 * 4 beside it), but {6, 6} out leave 13: the two smallest, 3 and 5, and the
 * largest of at most 5 beside them, 5, fill 20. */
static void test_complete_exchange_two(void **state) {
  (void)state;
  const uint32_t lens[] = {7, 6, 6, 5, 5, 3};
  fx_t f;
  fx_init(&f, lens, 6, 1, PK_MODE_PACKED, 20);
  uint32_t order[6], item_bin[6], used = 0;
  pk_bin_t bins[2];
  fx_size_order(&f, order);
  auto_state_t s = {.ctx = &f.ctx, .dp = 1};
  assert_int_equal(pk_auto_pack_complete(&s, order, 0, 2, (pk_packing_t){bins, item_bin}, &used),
                   0);
  assert_int_equal(used, 2);
  assert_int_equal(bins[0].sum, 20);
  assert_int_equal(bins[0].count, 4);
  assert_int_equal(item_bin[0], 0); /* The 7 stays. */
  assert_int_equal(item_bin[1], 1);
  assert_int_equal(item_bin[2], 1);
  fx_free(&f);
}

/* A request for lens on dp ranks under cap (and max_seqs; 0: none), the
 * defaults otherwise. */
static void request_for(pk_request_t *req, const uint32_t *lens, uint32_t n, uint32_t dp,
                        uint64_t cap, uint32_t max_seqs) {
  memset(req, 0, sizeof *req);
  req->lengths = lens;
  req->n = n;
  req->parallel.dp = dp;
  req->batching.max_tokens = cap;
  req->batching.max_seqs = max_seqs;
}

/* Plans request_for(...) and checks every rule of the plan; the caller
 * frees it. */
static pk_plan_t *plan_checked(const uint32_t *lens, uint32_t n, uint32_t dp, uint64_t cap,
                               uint32_t max_seqs) {
  pk_request_t req;
  request_for(&req, lens, n, dp, cap, max_seqs);
  pk_plan_t *plan = NULL;
  char err[256];
  assert_int_equal(pk_plan(&req, &plan, err, sizeof err), 0);
  check_plan(&req, plan);
  return plan;
}

/* Nearly full RL batches (test_rl_length, responses up to cap - 1024
 * tokens); `above` is the most micro-batches per rank above the bound
 * expected now. Cap 16384, one rank: first fit decreasing and its repair
 * ended one micro-batch above the bound on each of these seeds (two above
 * on n = 4096 seed 7). Cap 8192, where about a fifth of the items exceed
 * half the cap: with DP 8, completion without the budget on its exchanges
 * ended one above the bound on n = 4096 seed 4 and n = 8192 seed 1, two
 * above on n = 8192 seed 46; with one or two ranks, completion exchanging
 * only its last item ended two above on n = 2048 seed 1 and n = 4096 seed
 * 2 (the bound there is not known to be reachable). */
static void test_complete_reaches_bound(void **state) {
  (void)state;
  static const struct {
    uint32_t n, dp;
    uint64_t cap, seed;
    uint32_t above;
  } cases[] = {{1024, 1, 16384, 2, 0}, {1024, 1, 16384, 5, 0}, {2048, 1, 16384, 2, 0},
               {2048, 1, 16384, 7, 0}, {4096, 1, 16384, 5, 0}, {4096, 1, 16384, 8, 0},
               {4096, 1, 16384, 7, 0}, {4096, 8, 8192, 4, 0},  {8192, 8, 8192, 1, 0},
               {8192, 8, 8192, 46, 1}, {2048, 1, 8192, 1, 1},  {4096, 2, 8192, 2, 1}};
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    uint32_t n = cases[c].n;
    uint32_t *lens = calloc(n, sizeof *lens);
    assert_non_null(lens);
    test_rng_t r = {cases[c].seed};
    for (uint32_t k = 0; k < n; k++)
      lens[k] = test_rl_length(&r, (uint32_t)cases[c].cap - 1024);
    pk_plan_t *plan = plan_checked(lens, n, cases[c].dp, cases[c].cap, 0);
    if (plan->stats.micro_batches_per_rank > plan->stats.micro_batches_lower_bound + cases[c].above)
      fail_msg("n %u seed %llu: %u micro-batches, bound %u", n, (unsigned long long)cases[c].seed,
               plan->stats.micro_batches_per_rank, plan->stats.micro_batches_lower_bound);
    pk_plan_free(plan);
    free(lens);
  }
}

/* The counts completion aims at are micro-batches, not columns: with one
 * or two ranks a column is one or two micro-batches, and the tries used to
 * aim at the bound and the next three columns, all too low (the exchanges
 * then spend the smallest items early and the last micro-batches are far
 * from full). 65536 RL lengths, cap 8192, responses up to 7168: one rank
 * ended 24 micro-batches above the bound on seed 1 with the planner of
 * 80acea7; now 4 and 5 above for one rank, 2 and 3 for two (at most 12
 * and 6 over the 20 batches of the bench's sweep, bench/planner/README.md,
 * where the old planner had 34 and 16). */
static void test_tighten_aims_in_micro_batches(void **state) {
  (void)state;
  const uint32_t n = 65536;
  uint32_t *lens = calloc(n, sizeof *lens);
  assert_non_null(lens);
  for (uint64_t seed = 1; seed <= 2; seed++) {
    test_rng_t r = {0x61696d73ull + seed};
    for (uint32_t k = 0; k < n; k++)
      lens[k] = test_rl_length(&r, 7168);
    for (uint32_t dp = 1; dp <= 2; dp++) {
      pk_plan_t *plan = plan_checked(lens, n, dp, 8192, 0);
      uint32_t slack = dp == 1 ? 12 : 6;
      if (plan->stats.micro_batches_per_rank > plan->stats.micro_batches_lower_bound + slack)
        fail_msg("seed %llu dp %u: %u micro-batches per rank, bound %u", (unsigned long long)seed,
                 dp, plan->stats.micro_batches_per_rank, plan->stats.micro_batches_lower_bound);
      pk_plan_free(plan);
    }
  }
  free(lens);
}

/* Plans n RL lengths (seeded) for dp ranks under cap 16384 and max_seqs,
 * checks the plan's rules, and fails unless it is within `slack`
 * micro-batches per rank of the bound. */
static void check_rl_max_seqs(uint32_t n, uint32_t dp, uint32_t max_seqs, uint64_t seed,
                              uint32_t slack) {
  uint32_t *lens = calloc(n, sizeof *lens);
  assert_non_null(lens);
  test_rng_t r = {seed};
  for (uint32_t k = 0; k < n; k++)
    lens[k] = test_rl_length(&r, 15360);
  pk_plan_t *plan = plan_checked(lens, n, dp, 16384, max_seqs);
  if (plan->stats.micro_batches_per_rank > plan->stats.micro_batches_lower_bound + slack)
    fail_msg("n %u dp %u seed %llu: %u micro-batches, bound %u", n, dp, (unsigned long long)seed,
             plan->stats.micro_batches_per_rank, plan->stats.micro_batches_lower_bound);
  pk_plan_free(plan);
  free(lens);
}

/* max_seqs 8 (cap 16384, RL batches, n = 2048, DP 4): the column packings
 * and first fit fill micro-batches by tokens and run out of count; before
 * completion kept room for the slots left, seeds 1 to 6 ended 5 to 9
 * micro-batches per rank above the bound (114 against 106 on seed 1), now
 * at most 2. */
static void test_complete_max_seqs(void **state) {
  (void)state;
  for (uint64_t seed = 1; seed <= 6; seed++)
    check_rl_max_seqs(2048, 4, 8, seed, 2);
}

/* The completion packings that keep room for later slots let the largest
 * item left open each micro-batch. Holding the opening item back too (the
 * planner of 2d63020) left the largest sequences, those above cap - 7 x
 * the smallest, to the end, where each filled a micro-batch of its own
 * with room no sequence left could use: n = 8192 DP 8 ended 2 or 3 above
 * the bound, n = 2048 DP 1 3 to 5 above (seeds 1-4). The packing paced by
 * the sequences left per micro-batch left spends the small sequences
 * evenly. */
static void test_complete_max_seqs_opens_largest(void **state) {
  (void)state;
  for (uint64_t seed = 1; seed <= 4; seed++) {
    check_rl_max_seqs(8192, 8, 8, seed, 1);
    check_rl_max_seqs(2048, 1, 8, seed, 2);
  }
}

/* max_seqs 4, cap 16384, RL lengths: the sequences cut at the length limit
 * leave no room for three more beside them, so the count needs hundreds of
 * micro-batches above the count bound. The planner used to walk there one
 * count at a time, two failed packings each (65536 sequences: 25 s at DP
 * 1); it now takes completion's packing
 * where first fit needs as many. The plan obeys every rule and stays
 * within 2 % of the bound, which counts the room beside those sequences
 * (bounds.c, packed_count_bound). */
static void test_max_seqs_count_decides(void **state) {
  (void)state;
  const uint32_t n = 16384;
  uint32_t *lens = calloc(n, sizeof *lens);
  assert_non_null(lens);
  test_rng_t r = {0x6d617834ull};
  for (uint32_t k = 0; k < n; k++)
    lens[k] = test_rl_length(&r, 15360);
  for (uint32_t dp = 1; dp <= 8; dp *= 8) {
    pk_plan_t *plan = plan_checked(lens, n, dp, 16384, 4);
    uint32_t m = plan->stats.micro_batches_per_rank, lb = plan->stats.micro_batches_lower_bound;
    /* Above the count bound, n / (max_seqs x dp). */
    assert_true((uint64_t)lb * dp * 4 > (uint64_t)n + 4 * dp);
    if ((double)m > (double)lb * 1.02)
      fail_msg("dp %u: %u micro-batches per rank, bound %u", dp, m, lb);
    pk_plan_free(plan);
  }
  free(lens);
}

/* max_seqs 4 (RL batches, cap 16384): count, not tokens, decides, and the
 * micro-batches of the widest sequences must hold as many short ones as
 * their rooms allow. When completion kept room for the slots only at the
 * smallest size left, a room that could not take three of it took the one
 * largest item that fit: seeds 1-4 ended 16 to 21 micro-batches per rank
 * above the bound at DP 1, 9 or 10 at DP 2, 4 or 5 at DP 4, 2 or 3 at DP 8;
 * keeping room for the smallest items as they are (keep_room), at most 3,
 * 2, 1 and 1. */
static void test_max_seqs_wide_rooms(void **state) {
  (void)state;
  for (uint64_t seed = 1; seed <= 4; seed++)
    for (uint32_t dp = 1; dp <= 8; dp *= 2)
      check_rl_max_seqs(4096, dp, 4, seed, dp == 1 ? 4 : 2);
}

/* Whole plans where completion runs (RL batches that nearly fill the cap,
 * so first fit needs more micro-batches than the bound), with the options
 * that constrain it: max_seqs, microbatch_group, zero-length sequences,
 * mini-batches. Every plan obeys the rules (check_plan: every sequence
 * once, cap and max_seqs, equal counts divisible by the group, cu_seqlens
 * consistent, loss scales), and without max_seqs stays within two groups
 * of micro-batches per rank and mini-batch of the bound. */
static void test_complete_plans_props(void **state) {
  (void)state;
  test_rng_t r = {0x636f6d70ull};
  for (int iter = 0; iter < 60; iter++) {
    uint32_t n = 256 + test_below(&r, 1792);
    uint32_t dp = 1 + test_below(&r, 8);
    uint64_t cap = test_below(&r, 2) ? 8192 : 16384;
    uint32_t *lens = calloc(n, sizeof *lens);
    assert_non_null(lens);
    for (uint32_t k = 0; k < n; k++)
      lens[k] = test_below(&r, 50) == 0 ? 0 : test_rl_length(&r, (uint32_t)cap - 1024);
    pk_request_t req;
    request_for(&req, lens, n, dp, cap, test_below(&r, 3) == 0 ? 4 + test_below(&r, 12) : 0);
    if (test_below(&r, 3) == 0)
      req.parallel.microbatch_group = 2 + test_below(&r, 2);
    if (test_below(&r, 4) == 0)
      req.batching.mini_batches = 2;
    pk_plan_t *plan = NULL;
    char err[256];
    int rc = pk_plan(&req, &plan, err, sizeof err);
    if (rc != 0)
      fail_msg("iter %d (n %u dp %u cap %llu): %s", iter, n, dp, (unsigned long long)cap, err);
    check_plan(&req, plan);
    /* With max_seqs the bound takes the larger of the count and the token
     * bounds, not both at once, and plans end further above it. */
    uint32_t group = req.parallel.microbatch_group ? req.parallel.microbatch_group : 1;
    if (req.batching.max_seqs == 0 &&
        plan->stats.micro_batches_per_rank >
            plan->stats.micro_batches_lower_bound + 2 * plan->mini_batches * group)
      fail_msg("iter %d (n %u dp %u cap %llu max_seqs %u group %u minis %u): %u micro-batches, "
               "bound %u",
               iter, n, dp, (unsigned long long)cap, req.batching.max_seqs, group,
               plan->mini_batches, plan->stats.micro_batches_per_rank,
               plan->stats.micro_batches_lower_bound);
    pk_plan_free(plan);
    free(lens);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_complete_props),
      cmocka_unit_test(test_complete_pair),
      cmocka_unit_test(test_complete_exchange_two),
      cmocka_unit_test(test_complete_reaches_bound),
      cmocka_unit_test(test_tighten_aims_in_micro_batches),
      cmocka_unit_test(test_max_seqs_count_decides),
      cmocka_unit_test(test_max_seqs_wide_rooms),
      cmocka_unit_test(test_complete_max_seqs),
      cmocka_unit_test(test_complete_max_seqs_opens_largest),
      cmocka_unit_test(test_complete_plans_props),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
