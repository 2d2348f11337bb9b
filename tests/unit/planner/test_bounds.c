/* The proven lower bounds of bounds.c against exhaustive search.
 *
 * For small random mini-batches every assignment of the items to (rank,
 * micro-batch) cells with m micro-batches per rank is enumerated (cells
 * non-empty, cap and max_seqs obeyed); the fewest feasible m must be at
 * least pk_micro_lower_bound (and, in PADDED mode, equal to it: the bound is
 * exact there), and for every m the least step cost must be at least
 * pk_step_lower_bound(m). */
#include "compat_fixture.h"

#include <math.h>

typedef struct search {
  const fx_t *f;
  uint32_t m, cells;
  uint32_t *cell_of;
  pk_bin_t bins[16];
  double best; /* Least step cost found (INFINITY: none feasible). */
} search_t;

static double step_cost(const search_t *s) {
  const pk_cfg_t *cfg = &s->f->cfg;
  double step = 0;
  for (uint32_t j = 0; j < s->m; j++) {
    double level = 0;
    for (uint32_t r = 0; r < cfg->dp; r++) {
      const pk_bin_t *b = &s->bins[r * s->m + j];
      double c =
          cfg->mode == PK_MODE_PADDED ? (double)b->count * pk_slot_cost(cfg, b->width) : b->cost;
      level = c > level ? c : level;
    }
    step += level;
  }
  return step;
}

static void enumerate(search_t *s, uint32_t k) {
  const fx_t *f = s->f;
  if (k == f->n) {
    for (uint32_t c = 0; c < s->cells; c++)
      if (s->bins[c].count == 0)
        return;
    double step = step_cost(s);
    if (step < s->best)
      s->best = step;
    return;
  }
  for (uint32_t c = 0; c < s->cells; c++) {
    if (!pk_bin_fits(&f->ctx, &s->bins[c], k))
      continue;
    pk_bin_t saved = s->bins[c];
    pk_bin_add(&f->ctx, &s->bins[c], k);
    enumerate(s, k + 1);
    s->bins[c] = saved;
  }
}

/* The least step cost over all plans with m micro-batches per rank. */
static double brute_force(const fx_t *f, uint32_t m) {
  search_t s = {.f = f, .m = m, .cells = f->cfg.dp * m, .best = INFINITY};
  memset(s.bins, 0, sizeof s.bins);
  enumerate(&s, 0);
  return s.best;
}

/* The exhaustive optimum with m micro-batches per rank (INFINITY: none
 * feasible), after checking that the step bound is not above it. */
static double optimum_above_bound(const fx_t *f, uint32_t m, int iter) {
  double best = brute_force(f, m);
  double bound = pk_step_lower_bound(&f->ctx, m, INFINITY);
  if (!isinf(best) && bound > best * (1 + 1e-9))
    fail_msg("iter %d: step bound %.6f above the optimum %.6f (n %u dp %u m %u cap %llu)", iter,
             bound, best, f->n, f->cfg.dp, m, (unsigned long long)f->cfg.cap);
  return best;
}

static void check_random(uint32_t mode) {
  uint64_t seed = 0x626f756e64ull + mode;
  for (int iter = 0; iter < 300; iter++) {
    uint32_t n = 2 + fx_below(&seed, 6); /* 2..7 */
    uint32_t dp = 1 + fx_below(&seed, 2);
    uint32_t lens[8];
    uint64_t cap = 8 + fx_below(&seed, 24);
    /* Zero-length rows occur in real batches; one in six here. */
    for (uint32_t i = 0; i < n; i++)
      lens[i] = fx_below(&seed, 6) == 0 ? 0 : 1 + fx_below(&seed, (uint32_t)cap);
    fx_t f;
    fx_init(&f, lens, n, dp, mode, cap);
    if (fx_below(&seed, 3) == 0)
      f.cfg.max_seqs = 1 + fx_below(&seed, 3);
    /* Coarse costs make ties and plateaus likely, fine ones the opposite. */
    f.cfg.quad = fx_below(&seed, 2) ? 1.0 / 24576.0 : 0.25;
    fx_build(&f);
    uint32_t lb = pk_micro_lower_bound(&f.ctx);
    uint32_t fewest = 0;
    for (uint32_t m = 1; m * dp <= n && dp * m <= 16; m++) {
      if (isinf(optimum_above_bound(&f, m, iter)))
        continue;
      if (fewest == 0)
        fewest = m;
    }
    if (fewest != 0) {
      assert_true(lb <= fewest);
      if (mode == PK_MODE_PADDED && f.cfg.max_seqs == UINT32_MAX)
        assert_int_equal(lb, fewest);
    }
    fx_free(&f);
  }
}

static void test_bounds_packed(void **state) {
  (void)state;
  check_random(PK_MODE_PACKED);
}

static void test_bounds_padded(void **state) {
  (void)state;
  check_random(PK_MODE_PADDED);
}

/* The step bound of lens on 2 ranks x m micro-batches (cost lin x a +
 * quad x a^2) is `bound` when a plan of step cost `known` is at hand (the
 * costlier parts of the bound run only while it is more than 0.5 % below
 * that), and the exhaustive optimum is `optimum`. */
static void assert_bound_known(const uint32_t *lens, uint32_t n, uint32_t mode, uint64_t cap,
                               double lin, double quad, uint32_t m, double known, double bound,
                               double optimum) {
  fx_t f;
  fx_init(&f, lens, n, 2, mode, cap);
  f.cfg.lin = lin;
  f.cfg.quad = quad;
  fx_build(&f);
  double got = pk_step_lower_bound(&f.ctx, m, known);
  if (fabs(got - bound) > 1e-6)
    fail_msg("step bound %.6f, expected %.6f", got, bound);
  assert_true(fabs(brute_force(&f, m) - optimum) < 1e-6);
  fx_free(&f);
}

static void assert_bound(const uint32_t *lens, uint32_t n, uint32_t mode, uint64_t cap, double lin,
                         double quad, uint32_t m, double bound, double optimum) {
  assert_bound_known(lens, n, mode, cap, lin, quad, m, INFINITY, bound, optimum);
}

/* The step bound sees the cap: one item of the cap's size and six small
 * ones on 2 ranks x 2 micro-batches, cap 100, cost a^2. The full item
 * fills a micro-batch alone, its column costs 10000 however the other
 * micro-batch is filled, and at most 100 tokens of small items (5 of them)
 * can share that column, so the other column holds at least one small item
 * per rank: the optimum is 10000 + 400. The plain bound max(C / dp, c_max)
 * is 10000. */
static void test_step_bound_cap(void **state) {
  (void)state;
  uint32_t lens[] = {100, 20, 20, 20, 20, 20, 20};
  assert_bound(lens, 7, PK_MODE_PACKED, 100, 0, 1, 2, 10400, 10400);
}

/* PADDED: rows wider than cap / 2 stand alone. Rows 90 and 51 and six of
 * 10 on 2 ranks x 2 micro-batches, cap 100, cost = tokens: one column can
 * hold both singles, or one single and at most 60 of the small rows, so it
 * holds at most 150 of the 201 and the other column's level is at least
 * (201 - 150) / 2. The bound is 90 + 25.5 = 115.5; the optimum puts the
 * singles together (level 90) and splits the small rows 3 + 3 (level 30):
 * 120. Counting the singles' tokens as if small rows could share their
 * micro-batches (the token bound alone) gives only max(201 / 2, 90 + 10).
 * With a plan of 116 at hand that is the bound; with none, the stair (f)
 * finds the optimum: four micro-batches cost at least 90 (the widest row)
 * and, with at most two above x, the other two hold 60 of rows 10 wide
 * only for x >= 30. */
static void test_step_bound_padded_singles(void **state) {
  (void)state;
  uint32_t lens[] = {90, 51, 10, 10, 10, 10, 10, 10};
  assert_bound_known(lens, 8, PK_MODE_PADDED, 100, 1, 0, 2, 116, 115.5, 120);
  assert_bound(lens, 8, PK_MODE_PADDED, 100, 1, 0, 2, 120, 120);
}

/* PADDED: what k columns hold, through runs. Rows 97, 37, 37, 28, 28 and 24
 * on 2 ranks x 2 micro-batches, cap 100, cost = rows x width. A micro-batch
 * whose widest row is w holds at most 100 / w rows, so two micro-batches
 * hold at most 97 + 80 ([97] and [28, 28, 24]) of the 251: the other column
 * holds at least 74 on two ranks, and the bound is 97 + 37 = 134, the
 * optimum ([97] with [28, 28, 24], then [37] and [37]). Counting tokens
 * (fractionally, with the singles apart) lets two micro-batches hold 197
 * and gives only 125.5. */
static void test_step_bound_padded_runs(void **state) {
  (void)state;
  uint32_t lens[] = {28, 28, 97, 37, 37, 24};
  assert_bound(lens, 6, PK_MODE_PADDED, 100, 1, 0, 2, 134, 134);
}

/* PADDED: the padding the micro-batch count forces. Rows 50, 40, 40 and 30
 * on 2 ranks x 1 micro-batch, cap 100, cost = rows x width: two
 * micro-batches of at most 100 padded tokens hold the four rows only as
 * [50, 40] and [40, 30] (every other pair of groups breaks the cap), so
 * every plan pays 100 + 80 = 180 in all and the step is at least 90 (the
 * padding bound (e), with a plan of 90.3 at hand). The rows' own costs
 * (160) give only 80. With no plan at hand the stair (f) finds the
 * optimum: the costlier of those two micro-batches costs 100. */
static void test_step_bound_padded_forced(void **state) {
  (void)state;
  uint32_t lens[] = {40, 30, 50, 40};
  assert_bound_known(lens, 4, PK_MODE_PADDED, 100, 1, 0, 1, 90.3, 90, 100);
  assert_bound(lens, 4, PK_MODE_PADDED, 100, 1, 0, 1, 100, 100);
}

/* PADDED, the stair (f) with zero-length rows: rows 3, 3, 0, 0 on 2 ranks x
 * 2 micro-batches, cap 6. The second column can hold the two empty rows
 * and cost nothing, so its level's bound is 0, not the least positive run
 * cost (3; the bound was 6 against an optimum of 3 before the search for a
 * level checked 0 itself). */
static void test_step_bound_padded_stair_zero(void **state) {
  (void)state;
  uint32_t lens[] = {3, 0, 3, 0};
  assert_bound(lens, 4, PK_MODE_PADDED, 6, 1, 0, 2, 3, 3);
}

/* PADDED with wide, middle and narrow rows mixed (the runs bound is what
 * decides there): the step bound never exceeds the exhaustive optimum. */
static void test_bounds_padded_mixed(void **state) {
  (void)state;
  uint64_t seed = 0x72756e73ull;
  for (int iter = 0; iter < 400; iter++) {
    uint32_t n = 4 + fx_below(&seed, 4); /* 4..7 */
    uint32_t lens[8];
    for (uint32_t i = 0; i < n; i++) {
      uint32_t kind = fx_below(&seed, 4);
      lens[i] = kind == 0   ? 51 + fx_below(&seed, 49)
                : kind == 1 ? 30 + fx_below(&seed, 20)
                            : 5 + fx_below(&seed, 25);
    }
    fx_t f;
    fx_init(&f, lens, n, 2, PK_MODE_PADDED, 100);
    f.cfg.lin = 1;
    f.cfg.quad = fx_below(&seed, 2) ? 0 : 0.01;
    fx_build(&f);
    for (uint32_t m = 1; 2 * m <= n && m <= 3; m++)
      optimum_above_bound(&f, m, iter);
    fx_free(&f);
  }
}

/* PACKED: the micro-batch holding the costliest item holds nothing else
 * while its column's level is that item's cost. Items 60, 30 x 4, 20 x 2 on
 * 2 ranks x 2 micro-batches, cap 100, cost a^2 (3600, 900, 400; 8000 in
 * all). The column holding the 60 holds at most 3600 + 3000 (the other
 * micro-batch: 30, 30, 30 and a third of a 30) at level 3600, so the other
 * column's level is at least (8000 - 6600) / 2 and the bound is 4300; the
 * optimum is 4500 ([60], [30, 30, 30] then [30], [20, 20]). Counting only
 * the costliest 200 tokens lets the first column hold 7600 and gives
 * 4000. */
static void test_step_bound_first_column(void **state) {
  (void)state;
  uint32_t lens[] = {30, 20, 60, 30, 20, 30, 30};
  assert_bound(lens, 7, PK_MODE_PACKED, 100, 0, 1, 2, 4300, 4500);
}

/* PACKED: items wider than cap / 2 never share a micro-batch. Items 60 x 3
 * and 10 x 6 on 2 ranks x 2 micro-batches, cap 100, cost a^2: one column
 * holds at most two of the 60s, so the other column's level is at least
 * 3600 and the bound is 7200, the optimum ([60], [60] then [60], [10 x
 * 6]). By tokens alone the first column could hold all three (180 of 200
 * tokens), and the bound was only the mean 5700. */
static void test_step_bound_wide_items(void **state) {
  (void)state;
  uint32_t lens[] = {10, 60, 10, 10, 60, 10, 10, 60, 10};
  assert_bound(lens, 9, PK_MODE_PACKED, 100, 0, 1, 2, 7200, 7200);
}

/* PACKED: what fills a wide item's room costs at most the room's tokens at
 * the cost per token of items that fit there ((g) in bounds.c). Items 90,
 * 80, 40, 40, 20, 10 on 2 ranks x 2 micro-batches, cap 100, cost a^2
 * (18200 in all). The column of the 90 (level 8100) holds beside it at
 * most the 80 and 20 tokens of items no larger than 20, 6400 + 20 x 20, so
 * the other column's level is at least (18200 - 8100 - 6800) / 2 and the
 * bound is 9750; the optimum is 9800. Filling the 80's room with 20
 * tokens of a 40 (cost per token 40) let that column hold 7200 beside the
 * 90, and the bound was the two largest levels, 8100 + 1600. */
static void test_step_bound_room_density(void **state) {
  (void)state;
  uint32_t lens[] = {40, 90, 10, 80, 40, 20};
  assert_bound(lens, 6, PK_MODE_PACKED, 100, 0, 1, 2, 9750, 9800);
}

/* PACKED with items wider than cap / 2 mixed with narrow ones, on 2 or 3
 * ranks (the wide items' bounds decide there): the step bound never
 * exceeds the exhaustive optimum. */
static void test_bounds_packed_wide(void **state) {
  (void)state;
  uint64_t seed = 0x77696465ull;
  for (int iter = 0; iter < 400; iter++) {
    uint32_t dp = 2 + fx_below(&seed, 2);
    uint32_t n = dp + 2 + fx_below(&seed, 3); /* dp + 2 .. dp + 4 */
    uint32_t lens[8];
    for (uint32_t i = 0; i < n; i++)
      lens[i] = fx_below(&seed, 2) ? 51 + fx_below(&seed, 50) : 1 + fx_below(&seed, 50);
    fx_t f;
    fx_init(&f, lens, n, dp, PK_MODE_PACKED, 100);
    f.cfg.lin = fx_below(&seed, 2);
    f.cfg.quad = fx_below(&seed, 2) ? 0.01 : 1;
    if (fx_below(&seed, 4) == 0)
      f.cfg.max_seqs = 1 + fx_below(&seed, 3);
    fx_build(&f);
    for (uint32_t m = 1; dp * m <= n && dp * m <= 6; m++)
      optimum_above_bound(&f, m, iter);
    fx_free(&f);
  }
}

/* per_sequence ((h) in bounds.c): every item costs per_sequence on top of
 * its token part, so small items cost the most per token and the holds
 * count them apart. Random small batches in both modes, with zero-length
 * items, max_seqs and no cap among them, and per_sequence from a fraction
 * of a token's cost to far above a whole item's: the step bound never
 * exceeds the exhaustive optimum. */
static void test_bounds_per_sequence(void **state) {
  (void)state;
  static const double seqs[] = {0.5, 4, 40, 4000};
  uint64_t seed = 0x70657273ull;
  for (int iter = 0; iter < 1200; iter++) {
    uint32_t mode = fx_below(&seed, 2) ? PK_MODE_PADDED : PK_MODE_PACKED;
    uint32_t dp = 1 + fx_below(&seed, 3);
    uint32_t n = dp + 1 + fx_below(&seed, 8 - dp); /* dp + 1 .. 8 */
    uint64_t cap = fx_below(&seed, 6) == 0 ? 0 : 20 + fx_below(&seed, 80);
    uint32_t top = cap ? (uint32_t)cap : 100, lens[8];
    for (uint32_t i = 0; i < n; i++) {
      uint32_t kind = fx_below(&seed, 8);
      lens[i] = kind == 0  ? 0
                : kind < 3 ? top / 2 + 1 + fx_below(&seed, top - top / 2)
                           : 1 + fx_below(&seed, top / 4 + 1);
    }
    fx_t f;
    fx_init(&f, lens, n, dp, mode, cap);
    f.cfg.lin = fx_below(&seed, 3) ? 1 : 0;
    f.cfg.quad = fx_below(&seed, 2) ? 0.01 : (f.cfg.lin == 0 ? 1 : 0);
    f.cfg.seq = seqs[fx_below(&seed, 4)];
    if (fx_below(&seed, 4) == 0)
      f.cfg.max_seqs = 1 + fx_below(&seed, 3);
    fx_build(&f);
    for (uint32_t m = 1; dp * m <= n && dp * m <= 7; m++)
      optimum_above_bound(&f, m, iter);
    fx_free(&f);
  }
}

/* (h) by hand: items 100, 80, 40, 40 and 20 on 2 ranks x 2 micro-batches,
 * cap 100, cost a^2 + 1000 per sequence (11000, 7400, 2600, 2600, 1400;
 * 25000 in all). The optimum is 13600: [100] beside [80, 20], then [40]
 * and [40]. Taking whole costs per token largest first, the 80's room of
 * 20 tokens held half a 40 (1300), less than the 20 there costs (1400), and
 * the bound was 11000 + (25000 - 19700) / 2 = 13650, above the optimum.
 * Token parts first (20 tokens of a 40: 800) and per_sequence for the
 * three smallest items one micro-batch holds (20, 40, 40) give the
 * optimum. */
static void test_step_bound_per_sequence(void **state) {
  (void)state;
  uint32_t lens[] = {40, 100, 20, 80, 40};
  fx_t f;
  fx_init(&f, lens, 5, 2, PK_MODE_PACKED, 100);
  f.cfg.lin = 0;
  f.cfg.quad = 1;
  f.cfg.seq = 1000;
  fx_build(&f);
  assert_true(fabs(brute_force(&f, 2) - 13600) < 1e-6);
  double bound = pk_step_lower_bound(&f.ctx, 2, INFINITY);
  if (fabs(bound - 13600) > 1e-6)
    fail_msg("step bound %.6f, expected the optimum 13600", bound);
  fx_free(&f);
}

/* One rank, cap 100: the count bound under max_seqs is `fewest`, and the
 * exhaustive search finds no plan with one fewer and one with that many. */
static void check_count_bound(const uint32_t *lens, uint32_t n, uint32_t max_seqs,
                              uint32_t fewest) {
  fx_t f;
  fx_init(&f, lens, n, 1, PK_MODE_PACKED, 100);
  f.cfg.max_seqs = max_seqs;
  fx_build(&f);
  assert_int_equal(pk_micro_lower_bound(&f.ctx), fewest);
  assert_true(isinf(brute_force(&f, fewest - 1)));
  assert_false(isinf(brute_force(&f, fewest)));
  fx_free(&f);
}

/* PACKED with max_seqs: sequences above half the cap open a micro-batch
 * each, and beside them fit only as many others as their room takes. Three
 * of 95 and four of 10 under cap 100, max_seqs 3: the count bound says 3,
 * L2 4 (the 95s, and the 10s' 40 tokens need one more), but the 95s leave
 * 5 tokens each, so the 10s need two micro-batches of their own: 5, which
 * the exhaustive search confirms. Random batches of wide and narrow items
 * under max_seqs 2 or 3: the bound is never above the fewest micro-batches
 * any plan has. */
static void test_bound_count_beside_wide(void **state) {
  (void)state;
  static const uint32_t lens[] = {95, 95, 95, 10, 10, 10, 10};
  check_count_bound(lens, 7, 3, 5);
  /* The rooms 5, 14 and 18 of the wide items: the smallest item (13) fits
   * two of them, and 13 + 20 the sum of the three, but no other item fits
   * any: one item beside the wide ones, so 3 + ceil(3 / 2) = 5 bins, where
   * counting the smallest item in every room said 4 (the slots count,
   * slots_held); L2 says 4 too. */
  static const uint32_t lens3[] = {95, 86, 82, 46, 26, 20, 13};
  check_count_bound(lens3, 7, 2, 5);
  fx_t f;
  uint64_t seed = 0x636f756eull;
  for (int iter = 0; iter < 600; iter++) {
    uint32_t n = 4 + fx_below(&seed, 4); /* 4..7 */
    uint32_t dp = 1 + fx_below(&seed, 2);
    uint32_t lens2[8];
    for (uint32_t i = 0; i < n; i++)
      lens2[i] = fx_below(&seed, 3) == 0 ? 51 + fx_below(&seed, 50)
                                         : 1 + fx_below(&seed, iter % 2 ? 30 : 50);
    fx_init(&f, lens2, n, dp, PK_MODE_PACKED, 100);
    f.cfg.max_seqs = 2 + fx_below(&seed, 2);
    fx_build(&f);
    uint32_t lb = pk_micro_lower_bound(&f.ctx);
    uint32_t fewest = 0;
    for (uint32_t m = 1; m * dp <= n && dp * m <= 16 && fewest == 0; m++)
      if (!isinf(brute_force(&f, m)))
        fewest = m;
    if (fewest != 0 && lb > fewest)
      fail_msg("iter %d: bound %u above the fewest %u (n %u dp %u max_seqs %u)", iter, lb, fewest,
               n, dp, f.cfg.max_seqs);
    fx_free(&f);
  }
}

/* PACKED, no max_seqs: nine lengths of 20 to 24 hold 196 tokens, which two
 * micro-batches of 100 would take, and L2 says 2 (none is above half the
 * cap); but any five of them add up to at least 104, so no micro-batch
 * holds more than four and nine need 3, which the exhaustive search
 * confirms (the count bound by items). */
static void test_bound_count_by_items(void **state) {
  (void)state;
  static const uint32_t lens[] = {20, 21, 22, 23, 24, 21, 22, 23, 20};
  check_count_bound(lens, 9, UINT32_MAX, 3);
  /* Under max_seqs 3 the items' bound is max_seqs': 3 as well. */
  check_count_bound(lens, 9, 3, 3);
}

/* The step memo (pk_ctx_t.step_memo): outside PADDED mode the bound for m
 * is computed once and read back; a different m computes afresh, and the
 * values are those of a context without a memo. */
static void test_step_bound_memo(void **state) {
  (void)state;
  uint64_t seed = 7;
  for (int trial = 0; trial < 40; trial++) {
    uint32_t n = 20 + fx_below(&seed, 200), dp = 1 + fx_below(&seed, 8), lens[220];
    uint64_t cap = 1024 + fx_below(&seed, 4096);
    for (uint32_t k = 0; k < n; k++)
      lens[k] = 1 + fx_below(&seed, (uint32_t)cap);
    fx_t f;
    fx_init(&f, lens, n, dp, PK_MODE_PACKED, cap);
    uint32_t m = pk_micro_lower_bound(&f.ctx);
    double plain[3];
    for (uint32_t d = 0; d < 3; d++)
      plain[d] = pk_step_lower_bound(&f.ctx, m + d, INFINITY);
    pk_step_memo_t memo = {0};
    f.ctx.step_memo = &memo;
    for (uint32_t d = 0; d < 3; d++) {
      assert_true(pk_step_lower_bound(&f.ctx, m + d, INFINITY) == plain[d]);
      assert_int_equal(memo.m, m + d);
      assert_true(pk_step_lower_bound(&f.ctx, m + d, 1.0) == plain[d]);
    }
    fx_free(&f);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_bounds_packed),
      cmocka_unit_test(test_bounds_padded),
      cmocka_unit_test(test_step_bound_cap),
      cmocka_unit_test(test_step_bound_padded_singles),
      cmocka_unit_test(test_step_bound_padded_runs),
      cmocka_unit_test(test_step_bound_padded_forced),
      cmocka_unit_test(test_step_bound_padded_stair_zero),
      cmocka_unit_test(test_bounds_padded_mixed),
      cmocka_unit_test(test_step_bound_first_column),
      cmocka_unit_test(test_step_bound_wide_items),
      cmocka_unit_test(test_step_bound_room_density),
      cmocka_unit_test(test_bounds_packed_wide),
      cmocka_unit_test(test_bound_count_beside_wide),
      cmocka_unit_test(test_bound_count_by_items),
      cmocka_unit_test(test_bounds_per_sequence),
      cmocka_unit_test(test_step_bound_per_sequence),
      cmocka_unit_test(test_step_bound_memo),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
