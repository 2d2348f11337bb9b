/* Packed layouts: the worked examples of docs/design.md exactly, alignment rules,
 * total_multiple, fixed_shape, micro-batch order and names. */
#include "plan_check.h"

/* A worked example (ROLL packing): lengths [2,4,6,1], CP 2,
 * TP 1 -> A = 4, cu_seqlens_padded [0,4,8,16,20]. */
static void test_roll_packing_example(void **state) {
  (void)state;
  uint32_t lengths[] = {2, 4, 6, 1};
  pk_request_t req = {.lengths = lengths, .n = 4};
  req.parallel.dp = 1;
  req.parallel.cp = 2;
  req.batching.order = PK_ORDER_ORIGINAL;
  pk_plan_t *p;
  char err[256];
  assert_int_equal(pk_plan(&req, &p, err, sizeof err), 0);
  check_plan(&req, p);
  const pk_cell_t *cell = pk_plan_cell(p, 0, 0);
  assert_int_equal(cell->nmicros, 1);
  const pk_micro_t *mb = &cell->micros[0];
  static const uint32_t seqs[] = {0, 1, 2, 3};
  static const int32_t cu[] = {0, 2, 6, 12, 13};
  static const int32_t cu_pad[] = {0, 4, 8, 16, 20};
  assert_int_equal(mb->nseqs, 4);
  assert_memory_equal(mb->seqs, seqs, sizeof seqs);
  assert_memory_equal(mb->cu_seqlens, cu, sizeof cu);
  assert_memory_equal(mb->cu_seqlens_padded, cu_pad, sizeof cu_pad);
  assert_int_equal(mb->max_seqlen, 8);
  assert_int_equal(mb->tokens, 13);
  assert_int_equal(mb->padded_tokens, 20);
  assert_int_equal(p->stats.alignment, 4);
  pk_plan_free(p);
  /* CP 2, TP 2 (verl's rule A = 2*CP*TP = 8): [0,8,16,24,32]. */
  req.parallel.tp = 2;
  assert_int_equal(pk_plan(&req, &p, err, sizeof err), 0);
  static const int32_t cu_pad8[] = {0, 8, 16, 24, 32};
  assert_memory_equal(pk_plan_cell(p, 0, 0)->micros[0].cu_seqlens_padded, cu_pad8, sizeof cu_pad8);
  pk_plan_free(p);
}

/* Seed 003 (verl): lengths [100,900,50,950,400,600], cap 2000, KK_COUNT ->
 * two micro-batches of 1500 tokens; under COST_DESC the one holding {900,600}
 * comes first (its quadratic cost is larger). */
static void test_verl_example(void **state) {
  (void)state;
  uint32_t lengths[] = {100, 900, 50, 950, 400, 600};
  for (uint32_t algo = PK_MICRO_AUTO; algo <= PK_MICRO_KK_COUNT; algo += PK_MICRO_KK_COUNT) {
    pk_request_t req = {.lengths = lengths, .n = 6};
    req.parallel.dp = 1;
    req.batching.max_tokens = 2000;
    req.batching.dp_balance = PK_DP_NONE;
    req.batching.micro_algo = algo;
    req.batching.order = PK_ORDER_COST_DESC;
    pk_plan_t *p;
    char err[256];
    assert_int_equal(pk_plan(&req, &p, err, sizeof err), 0);
    check_plan(&req, p);
    const pk_cell_t *cell = pk_plan_cell(p, 0, 0);
    assert_int_equal(cell->nmicros, 2);
    assert_int_equal(cell->micros[0].tokens, 1500);
    assert_int_equal(cell->micros[1].tokens, 1500);
    assert_int_equal(cell->micros[0].nseqs, 2);
    uint32_t a = cell->micros[0].seqs[0], b = cell->micros[0].seqs[1];
    assert_true((a == 1 && b == 5) || (a == 5 && b == 1));
    assert_true(cell->micros[0].cost > cell->micros[1].cost);
    pk_plan_free(p);
  }
}

/* Alignment: the default alignment (pk_alignment) and pad_multiple by lcm. */
static void test_alignment_rules(void **state) {
  (void)state;
  uint32_t one = 1;
  pk_request_t req = {.lengths = &one, .n = 1};
  req.parallel.dp = 1;
  assert_int_equal(pk_alignment(&req), 1);
  req.parallel.tp = 4;
  assert_int_equal(pk_alignment(&req), 1);
  req.parallel.sequence_parallel = true;
  assert_int_equal(pk_alignment(&req), 4);
  req.parallel.cp = 2;
  assert_int_equal(pk_alignment(&req), 16); /* 2*CP*TP */
  req.parallel.cp_algo = PK_CP_ULYSSES;
  assert_int_equal(pk_alignment(&req), 8); /* CP*TP */
  req.layout.pad_multiple = 16;
  assert_int_equal(pk_alignment(&req), 16);
  req.layout.pad_multiple = 12;
  assert_int_equal(pk_alignment(&req), 24);
  req.layout.align = 32;
  req.layout.pad_multiple = 0;
  assert_int_equal(pk_alignment(&req), 32);
}

/* total_multiple pads the last slot; fixed_shape pads every micro-batch of a
 * rank to the rank's longest; neither breaks the cap. */
static void test_total_multiple_and_fixed_shape(void **state) {
  (void)state;
  test_rng_t r = {99};
  enum { N = 300 };
  uint32_t lengths[N];
  for (int i = 0; i < N; i++)
    lengths[i] = 1 + test_below(&r, 3000);
  pk_request_t req = {.lengths = lengths, .n = N};
  req.parallel.dp = 4;
  req.parallel.cp = 2;
  req.batching.max_tokens = 4000;
  req.layout.total_multiple = 256;
  req.layout.fixed_shape = true;
  pk_plan_t *p;
  char err[256];
  assert_int_equal(pk_plan(&req, &p, err, sizeof err), 0);
  check_plan(&req, p);
  for (uint32_t rank = 0; rank < 4; rank++) {
    const pk_cell_t *cell = pk_plan_cell(p, rank, 0);
    for (uint32_t j = 0; j < cell->nmicros; j++) {
      assert_int_equal(cell->micros[j].padded_tokens % 256, 0);
      assert_int_equal(cell->micros[j].padded_tokens, cell->micros[0].padded_tokens);
      assert_true(cell->micros[j].padded_tokens / 2 <= 4000);
    }
  }
  pk_plan_free(p);
}

/* ORDER: COST_DESC puts the costliest slot first, HEAVY_MIDDLE in the
 * middle; both keep the set of micro-batches. */
static void test_orders(void **state) {
  (void)state;
  test_rng_t r = {5};
  enum { N = 400 };
  uint32_t lengths[N];
  for (int i = 0; i < N; i++)
    lengths[i] = test_rl_length(&r, 8192);
  for (uint32_t dpb = 0; dpb < 2; dpb++) {
    pk_request_t req = {.lengths = lengths, .n = N};
    req.parallel.dp = 2;
    req.batching.max_tokens = 20000;
    req.batching.dp_balance = dpb ? PK_DP_LPT : PK_DP_AUTO;
    req.batching.micro_algo = dpb ? PK_MICRO_FFD : PK_MICRO_AUTO;
    pk_plan_t *p;
    char err[256];
    req.batching.order = PK_ORDER_COST_DESC;
    assert_int_equal(pk_plan(&req, &p, err, sizeof err), 0);
    const pk_cell_t *c = pk_plan_cell(p, 0, 0);
    assert_true(c->nmicros >= 5);
    if (!dpb) {
      /* AUTO orders columns: the slot maximum descends. */
      double prev = INFINITY;
      for (uint32_t j = 0; j < c->nmicros; j++) {
        double mx = fmax(c->micros[j].cost, pk_plan_cell(p, 1, 0)->micros[j].cost);
        assert_true(mx <= prev);
        prev = mx;
      }
    } else {
      for (uint32_t j = 1; j < c->nmicros; j++)
        assert_true(c->micros[j].cost <= c->micros[j - 1].cost);
    }
    pk_plan_free(p);
    req.batching.order = PK_ORDER_HEAVY_MIDDLE;
    assert_int_equal(pk_plan(&req, &p, err, sizeof err), 0);
    c = pk_plan_cell(p, 1, 0);
    if (dpb) {
      double mid = c->micros[c->nmicros / 2].cost;
      assert_true(mid >= c->micros[0].cost);
      assert_true(mid >= c->micros[c->nmicros - 1].cost);
    }
    pk_plan_free(p);
  }
}

static void test_names(void **state) {
  (void)state;
  uint32_t v;
  assert_string_equal(pk_dp_balance_name(PK_DP_KK_EQUAL), "kk_equal");
  assert_int_equal(pk_dp_balance_parse("KK-EQUAL", &v), 0);
  assert_int_equal(v, PK_DP_KK_EQUAL);
  assert_int_equal(pk_micro_algo_parse("lpt_cap", &v), 0);
  assert_int_equal(v, PK_MICRO_LPT_CAP);
  assert_int_equal(pk_mode_parse("padded", &v), 0);
  assert_int_equal(pk_order_parse("heavy_middle", &v), 0);
  assert_int_equal(pk_cp_algo_parse("ulysses", &v), 0);
  assert_int_equal(pk_cp_algo_parse("ring", &v), PK_EINVAL);
  assert_null(pk_mode_name(3));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roll_packing_example),
      cmocka_unit_test(test_verl_example),
      cmocka_unit_test(test_alignment_rules),
      cmocka_unit_test(test_total_multiple_and_fixed_shape),
      cmocka_unit_test(test_orders),
      cmocka_unit_test(test_names),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
