/* Tests of ROLL dynamic batching (server/planner/compat_roll.c).
 *
 * A worked example: lengths [7,6,8,5,1,3,8,6], dp 2,
 * sequence_length_round 2, max_tokens_per_microbatch 10. Sorting and the
 * stride give shard 0 = lengths [1,5,6,8] and shard 1 = [3,6,7,8]; the shared
 * slot widths (max over shards, rounded to 2) are 4, 6, 8, 8.
 *
 * ROLL's own description then shows 3 micro-batches per rank (widths 6, 8, 8) and
 * 56 padded tokens, but its first micro-batch has 2 rows x width 6 = 12 > 10
 * tokens: ROLL's own code (rows x width <= max tokens) would not build it.
 * Our cap is hard, so:
 *   - max 10: 4 micro-batches per rank, widths 4, 6, 8, 8, 52 padded tokens;
 *   - max 12: the document's 3 micro-batches and 56 padded tokens exactly;
 *   - max 12 with PP 4 / VPP 2 (group 4): the 2-row micro-batch is split, 4
 *     micro-batches per rank. The document keeps width 6 for both halves;
 *     each half here gets its own width (4 and 6), as the layout computes
 *     the width from the rows it holds, so 52 padded tokens. */
#include "compat_fixture.h"

typedef struct roll_out {
  uint32_t rank[64], micro[64], pos[64];
  pk_assign_t a;
} roll_out_t;

static void roll_out_init(roll_out_t *o) {
  memset(o, 0, sizeof(*o));
  o->a.rank = o->rank;
  o->a.micro = o->micro;
  o->a.pos = o->pos;
}

/* Padded tokens in ROLL's sense: every micro-batch is padded to its shared
 * width (the widest row of that micro-batch over all ranks), so the total is
 * dp x sum over micro-batches of rows x shared width. Also checks that every
 * rank's micro-batch is non-empty and within the cap at the shared width.
 * width_of[m] receives the shared widths. */
static uint64_t padded_tokens(const fx_t *f, const pk_assign_t *a, uint64_t *width_of) {
  uint64_t total = 0;
  uint32_t dp = f->cfg.dp;
  for (uint32_t m = 0; m < a->nmicro; m++) {
    uint64_t w = 0, rows0 = 0;
    for (uint32_t k = 0; k < f->n; k++)
      if (a->micro[k] == m)
        w = f->size[k] > w ? f->size[k] : w;
    for (uint32_t r = 0; r < dp; r++) {
      uint64_t rows = 0;
      for (uint32_t k = 0; k < f->n; k++)
        if (a->rank[k] == r && a->micro[k] == m)
          rows++;
      assert_true(rows > 0);
      assert_true(rows * w <= f->cfg.cap);
      if (r == 0)
        rows0 = rows;
      else
        assert_int_equal(rows, rows0);
      total += rows * w;
    }
    if (width_of != NULL)
      width_of[m] = w;
  }
  return total;
}

static void seed001(fx_t *f, uint64_t max_tokens) {
  const uint32_t lens[8] = {7, 6, 8, 5, 1, 3, 8, 6};
  fx_init(f, lens, 8, 2, PK_MODE_PADDED, max_tokens);
  f->cfg.round = 2;
  fx_build(f);
}

static void test_roll_seed001_max10(void **state) {
  (void)state;
  fx_t f;
  seed001(&f, 10);
  roll_out_t o;
  roll_out_init(&o);
  char err[256] = "";
  assert_int_equal(pk_roll_assign(&f.ctx, &o.a, err, sizeof(err)), 0);
  /* Sorted: 1 (i4), 3 (i5), 5 (i3), 6 (i1), 6 (i7), 7 (i0), 8 (i2), 8 (i6).
   * Shards: rank 0 holds lengths 1 (i4), 5 (i3), 6 (i7), 8 (i2); rank 1
   * holds 3 (i5), 6 (i1), 7 (i0), 8 (i6). */
  const uint32_t want_rank[8] = {1, 1, 0, 0, 0, 1, 1, 0};
  assert_memory_equal(o.rank, want_rank, sizeof(want_rank));
  assert_int_equal(o.a.nmicro, 4);
  uint64_t w[8];
  assert_int_equal(padded_tokens(&f, &o.a, w), 52);
  assert_int_equal(w[0], 4);
  assert_int_equal(w[1], 6);
  assert_int_equal(w[2], 8);
  assert_int_equal(w[3], 8);
  /* pos is the sorted position: 1 (i4) first, 8 (i6) last. */
  assert_int_equal(o.pos[4], 0);
  assert_int_equal(o.pos[5], 1);
  assert_int_equal(o.pos[6], 7);
  fx_free(&f);
}

static void test_roll_seed001_max12(void **state) {
  (void)state;
  fx_t f;
  seed001(&f, 12);
  roll_out_t o;
  roll_out_init(&o);
  char err[256] = "";
  assert_int_equal(pk_roll_assign(&f.ctx, &o.a, err, sizeof(err)), 0);
  assert_int_equal(o.a.nmicro, 3);
  uint64_t w[8];
  assert_int_equal(padded_tokens(&f, &o.a, w), 56);
  assert_int_equal(w[0], 6);
  assert_int_equal(w[1], 8);
  assert_int_equal(w[2], 8);
  /* The first micro-batch of rank 0 holds lengths 1 and 5. */
  assert_int_equal(o.micro[4], 0);
  assert_int_equal(o.micro[3], 0);
  fx_free(&f);
}

static void test_roll_seed001_pp4_vpp2(void **state) {
  (void)state;
  fx_t f;
  seed001(&f, 12);
  f.cfg.pp = 4;
  f.cfg.vpp = 2;
  f.cfg.group = 4;
  roll_out_t o;
  roll_out_init(&o);
  char err[256] = "";
  assert_int_equal(pk_roll_assign(&f.ctx, &o.a, err, sizeof(err)), 0);
  assert_int_equal(o.a.nmicro, 4);
  uint64_t w[8];
  assert_int_equal(padded_tokens(&f, &o.a, w), 52);
  /* The 2-row micro-batch (footprint 12) was split: [1] and [5] on rank 0. */
  assert_int_equal(o.micro[4], 0);
  assert_int_equal(o.micro[3], 1);
  assert_int_equal(w[0], 4);
  assert_int_equal(w[1], 6);
  fx_free(&f);
}

static void test_roll_errors(void **state) {
  (void)state;
  const uint32_t lens[5] = {7, 6, 8, 5, 1};
  fx_t f;
  fx_init(&f, lens, 5, 2, PK_MODE_PADDED, 10);
  roll_out_t o;
  roll_out_init(&o);
  char err[256] = "";
  assert_int_equal(pk_roll_assign(&f.ctx, &o.a, err, sizeof(err)), PK_EPRECOND);
  assert_non_null(strstr(err, "parallel.dp"));
  fx_free(&f);

  /* 4 sequences per rank cannot make 8 micro-batches. */
  seed001(&f, 12);
  f.cfg.group = 8;
  assert_int_equal(pk_roll_assign(&f.ctx, &o.a, err, sizeof(err)), PK_EPRECOND);
  assert_non_null(strstr(err, "microbatch_group"));
  /* A row wider than the cap. */
  f.cfg.group = 1;
  f.cfg.cap = 6;
  assert_int_equal(pk_roll_assign(&f.ctx, &o.a, err, sizeof(err)), PK_EPRECOND);
  assert_non_null(strstr(err, "max_tokens"));
  fx_free(&f);
}

/* Properties on random batches: n/dp items per rank; sorted stride (rank of
 * sorted position p is p % dp, pos = p); one shared boundary list (micro of
 * a slot is the same on every rank and nondecreasing along slots); every
 * micro-batch of every rank non-empty and rows x width <= cap and rows <=
 * max_seqs; count a multiple of the group and at least min_micro;
 * deterministic. */
static void test_roll_properties(void **state) {
  (void)state;
  static uint32_t lens[4096], rank[4096], micro[4096], pos[4096], rank2[4096], micro2[4096],
      pos2[4096], inv[4096];
  uint64_t seed = 2718;
  for (int iter = 0; iter < 200; iter++) {
    uint32_t dp = 1 + fx_below(&seed, 16);
    uint32_t s = 1 + fx_below(&seed, 4096 / dp);
    uint32_t n = dp * s;
    uint32_t max_len = 16 + fx_below(&seed, 4096);
    fx_random_lengths(&seed, lens, n, max_len, 1);
    fx_t f;
    fx_init(&f, lens, n, dp, PK_MODE_PADDED, 0);
    f.cfg.round = 1u << fx_below(&seed, 8);
    f.cfg.align = 1u << fx_below(&seed, 3);
    fx_build(&f);
    uint64_t wmax = 1;
    for (uint32_t k = 0; k < n; k++)
      wmax = f.size[k] > wmax ? f.size[k] : wmax;
    f.cfg.cap = wmax * (1 + fx_below(&seed, 16));
    if (iter % 4 == 0)
      f.cfg.max_seqs = 1 + fx_below(&seed, 6);
    f.cfg.group = 1 + fx_below(&seed, 4);
    f.cfg.min_micro = 1 + fx_below(&seed, 3);
    pk_assign_t a = {.rank = rank, .micro = micro, .pos = pos};
    pk_assign_t b = {.rank = rank2, .micro = micro2, .pos = pos2};
    char err[256] = "";
    int rc = pk_roll_assign(&f.ctx, &a, err, sizeof(err));
    if (rc != 0) {
      /* Only when the group or min_micro cannot be met with s rows. */
      assert_int_equal(rc, PK_EPRECOND);
      assert_non_null(strstr(err, "microbatch_group"));
      fx_free(&f);
      continue;
    }
    assert_true(a.nmicro % f.cfg.group == 0);
    assert_true(a.nmicro >= f.cfg.min_micro);
    for (uint32_t k = 0; k < n; k++) {
      assert_true(pos[k] < n);
      inv[pos[k]] = k;
    }
    for (uint32_t p = 0; p < n; p++) {
      uint32_t k = inv[p];
      assert_int_equal(pos[k], p);
      assert_int_equal(rank[k], p % dp);
      if (p > 0)
        assert_true(lens[inv[p - 1]] <= lens[k]);
      /* Same micro on every rank at a slot; nondecreasing along slots. */
      assert_int_equal(micro[k], micro[inv[p - p % dp]]);
      if (p >= dp)
        assert_true(micro[k] >= micro[inv[p - dp]]);
    }
    /* Rows per micro-batch (equal on all ranks by the slot check above)
     * times the shared width fit the cap. */
    for (uint32_t m = 0; m < a.nmicro; m++) {
      uint64_t rows = 0, w = 0;
      for (uint32_t q = 0; q < s; q++) {
        if (micro[inv[q * dp]] != m)
          continue;
        rows++;
        for (uint32_t r = 0; r < dp; r++)
          w = f.size[inv[q * dp + r]] > w ? f.size[inv[q * dp + r]] : w;
      }
      assert_true(rows > 0);
      assert_true(rows * w <= f.cfg.cap);
      assert_true(rows <= f.cfg.max_seqs);
    }
    assert_int_equal(pk_roll_assign(&f.ctx, &b, err, sizeof(err)), 0);
    assert_int_equal(a.nmicro, b.nmicro);
    assert_memory_equal(micro, micro2, n * sizeof(uint32_t));
    assert_memory_equal(rank, rank2, n * sizeof(uint32_t));
    fx_free(&f);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roll_seed001_max10),    cmocka_unit_test(test_roll_seed001_max12),
      cmocka_unit_test(test_roll_seed001_pp4_vpp2), cmocka_unit_test(test_roll_errors),
      cmocka_unit_test(test_roll_properties),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
