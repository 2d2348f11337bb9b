/* Tests of micro_algo SHARED_CUTS (server/planner/compat_roll_cuts.c): ROLL's
 * sorted stride and shared boundary list, with the boundaries chosen by
 * dynamic programming.
 *
 * ROLL's worked example (lengths [2,4,7,6,3,4], dp 2, max tokens 20, round
 * 2): sorted 2,3,4,4,6,7; rank 0 holds 2,4,6 and rank 1 holds 3,4,7; the
 * slot widths are 4, 4, 8. ROLL's next-fit cuts [[0,2],[2,3]] with widths
 * [4,8] (2 x 4 + 1 x 8 rows x width per rank). The only other 2-cut list,
 * [[0,1],[1,3]], costs 1 x c(4) + 2 x c(8), more, so the DP agrees.
 *
 * The brute force enumerates all 2^(s-1) boundary lists of small batches
 * and sums every list's cost left to right as rows x pk_slot_cost(width),
 * the way the DP does, so the scan's cost must equal the least exactly. */
#include "compat_fixture.h"

enum { MAXN = 8192 };

typedef struct out {
  uint32_t rank[MAXN], micro[MAXN], pos[MAXN], inv[MAXN];
  pk_assign_t a;
} out_t;

static void out_init(out_t *o) {
  o->a = (pk_assign_t){.rank = o->rank, .micro = o->micro, .pos = o->pos};
}

typedef struct key {
  uint32_t len, item;
} key_t_;

static int key_cmp(const void *pa, const void *pb) {
  const key_t_ *a = pa, *b = pb;
  if (a->len != b->len)
    return a->len < b->len ? -1 : 1;
  return a->item < b->item ? -1 : (a->item > b->item ? 1 : 0);
}

/* The sorted stride's slot widths, computed here independently: sort by
 * length (ties by item), slot q = sorted positions q dp .. q dp + dp - 1. */
static uint32_t slot_widths(const fx_t *f, uint64_t *width) {
  static key_t_ keys[MAXN];
  uint32_t n = f->n, dp = f->cfg.dp;
  for (uint32_t i = 0; i < n; i++)
    keys[i] = (key_t_){f->len[i], i};
  qsort(keys, n, sizeof keys[0], key_cmp);
  uint32_t s = n / dp;
  for (uint32_t q = 0; q < s; q++) {
    width[q] = 0;
    for (uint32_t r = 0; r < dp; r++)
      width[q] = PK_MAX(width[q], f->size[keys[q * dp + r].item]);
  }
  return s;
}

/* Checks the shape of an assignment (sorted stride, one shared boundary
 * list, every micro-batch within the cap and max_seqs on every rank) and
 * returns its boundaries in start[0 .. nmicro] and its step cost (summed
 * left to right as rows x pk_slot_cost(shared width)). */
static double check_shape(const fx_t *f, out_t *o, uint32_t *start) {
  uint32_t n = f->n, dp = f->cfg.dp, s = n / dp, nm = o->a.nmicro;
  assert_true(o->a.columns);
  for (uint32_t k = 0; k < n; k++) {
    assert_true(o->pos[k] < n);
    o->inv[o->pos[k]] = k;
  }
  uint32_t j = 0;
  for (uint32_t p = 0; p < n; p++) {
    uint32_t k = o->inv[p];
    assert_int_equal(o->rank[k], p % dp);
    if (p > 0)
      assert_true(f->len[o->inv[p - 1]] <= f->len[k]);
    /* Every rank's micro-batch at a slot is the slot's micro-batch. */
    assert_int_equal(o->micro[k], o->micro[o->inv[p - p % dp]]);
    if (p % dp == 0) {
      uint32_t m = o->micro[k];
      if (p == 0)
        assert_int_equal(m, 0);
      else
        assert_true(m == j || m == j + 1);
      if (p == 0 || m == j + 1)
        start[m] = p / dp;
      j = m;
    }
  }
  assert_int_equal(j + 1, nm);
  start[nm] = s;
  double cost = 0;
  for (uint32_t m = 0; m < nm; m++) {
    uint64_t rows = start[m + 1] - start[m], w = 0;
    assert_true(rows > 0);
    for (uint32_t p = start[m] * dp; p < start[m + 1] * dp; p++)
      w = PK_MAX(w, f->size[o->inv[p]]);
    assert_true(rows * w <= f->cfg.cap);
    assert_true(rows <= f->cfg.max_seqs);
    cost += (double)rows * pk_slot_cost(&f->cfg, w);
  }
  assert_true(nm >= f->cfg.min_micro);
  assert_true(nm % f->cfg.group == 0);
  return cost;
}

/* The cost of boundaries start[0 .. t] over slot widths, or -1 when a
 * micro-batch breaks the cap or max_seqs. */
static double list_cost(const pk_cfg_t *cfg, const uint64_t *width, const uint32_t *start,
                        uint32_t t) {
  double cost = 0;
  for (uint32_t j = 0; j < t; j++) {
    uint64_t rows = start[j + 1] - start[j], w = width[start[j + 1] - 1];
    if (rows == 0 || rows > cfg->max_seqs || rows * w > cfg->cap)
      return -1;
    cost += (double)rows * pk_slot_cost(cfg, w);
  }
  return cost;
}

static void test_roll_worked_example(void **state) {
  (void)state;
  const uint32_t lens[6] = {2, 4, 7, 6, 3, 4};
  static const uint32_t algos[2] = {PK_MICRO_NEXT_FIT, PK_MICRO_SHARED_CUTS};
  for (uint32_t i = 0; i < 2; i++) {
    uint32_t algo = algos[i];
    fx_t f;
    fx_init(&f, lens, 6, 2, PK_MODE_PADDED, 20);
    f.cfg.round = 2;
    f.cfg.micro_algo = algo;
    fx_build(&f);
    static out_t o;
    out_init(&o);
    char err[256] = "";
    assert_int_equal(pk_roll_assign(&f.ctx, &o.a, err, sizeof err), 0);
    assert_int_equal(o.a.nmicro, 2);
    uint32_t start[3];
    check_shape(&f, &o, start);
    /* ROLL's boundaries [[0,2],[2,3]] and widths [4,8]. */
    assert_int_equal(start[0], 0);
    assert_int_equal(start[1], 2);
    assert_int_equal(start[2], 3);
    uint64_t width[3];
    assert_int_equal(slot_widths(&f, width), 3);
    assert_int_equal(width[start[1] - 1], 4);
    assert_int_equal(width[start[2] - 1], 8);
    /* Rank 0 holds 2 (item 0) and 4 (item 1 or 5) in micro-batch 0. */
    assert_int_equal(o.rank[0], 0);
    assert_int_equal(o.micro[0], 0);
    assert_int_equal(o.micro[2], 1); /* 7 */
    fx_free(&f);
  }
}

/* Every boundary list of s slots by brute force: the fewest count m* over
 * lists that fit, and the least cost at exactly `t` micro-batches (-1 when
 * none). */
static double brute_force(const pk_cfg_t *cfg, const uint64_t *width, uint32_t s, uint32_t t,
                          uint32_t *fewest) {
  double best = -1;
  *fewest = UINT32_MAX;
  uint32_t start[32];
  for (uint32_t mask = 0; mask < (1u << (s - 1)); mask++) {
    uint32_t nm = 0;
    start[nm++] = 0;
    for (uint32_t q = 1; q < s; q++)
      if (mask & (1u << (q - 1)))
        start[nm++] = q;
    start[nm] = s;
    double c = list_cost(cfg, width, start, nm);
    if (c < 0)
      continue;
    *fewest = PK_MIN(*fewest, nm);
    if (nm == t && (best < 0 || c < best))
      best = c;
  }
  return best;
}

/* Property, against the brute force on random small batches (with and
 * without max_seqs, min_micro_batches and microbatch_group): the count is
 * the fewest raised to min_micro and the group, the cost is the least at
 * that count, exactly for the scan and within rounding for the Monge
 * divide and conquer; the shape is ROLL's; plans are deterministic. */
static void test_shared_cuts_brute_force(void **state) {
  (void)state;
  static uint32_t lens[MAXN];
  static out_t o, o2;
  uint64_t seed = 6021;
  int planned = 0, refused = 0;
  for (int iter = 0; iter < 3000; iter++) {
    uint32_t dp = 1 + fx_below(&seed, 4);
    uint32_t s = 1 + fx_below(&seed, 14);
    uint32_t n = dp * s;
    uint32_t max_len = 8 + fx_below(&seed, 600);
    fx_random_lengths(&seed, lens, n, max_len, iter % 3 == 0);
    fx_t f;
    fx_init(&f, lens, n, dp, PK_MODE_PADDED, 0);
    f.cfg.round = 1u << fx_below(&seed, 5);
    f.cfg.align = 1u << fx_below(&seed, 2);
    f.cfg.micro_algo = PK_MICRO_SHARED_CUTS;
    if (iter % 5 == 0) /* Costs dominated by the quadratic term. */
      f.cfg.quad = 1.0 / 64.0;
    fx_build(&f);
    uint64_t width[32];
    assert_int_equal(slot_widths(&f, width), s);
    uint64_t wmax = PK_MAX(width[s - 1], 1);
    f.cfg.cap = wmax + fx_below(&seed, (uint32_t)(wmax * 6));
    if (iter % 3 == 1)
      f.cfg.max_seqs = 1 + fx_below(&seed, 5);
    if (iter % 4 == 2)
      f.cfg.min_micro = 1 + fx_below(&seed, s + 2);
    if (iter % 4 == 3)
      f.cfg.group = 1 + fx_below(&seed, 4);

    uint32_t fewest;
    brute_force(&f.cfg, width, s, 0, &fewest);
    uint32_t t = PK_MAX(fewest, f.cfg.min_micro);
    t = (t + f.cfg.group - 1) / f.cfg.group * f.cfg.group;
    out_init(&o);
    char err[256] = "";
    int rc = pk_roll_assign(&f.ctx, &o.a, err, sizeof err);
    if (t > s) {
      assert_int_equal(rc, PK_EPRECOND);
      assert_non_null(strstr(err, "microbatch_group"));
      refused++;
      fx_free(&f);
      continue;
    }
    assert_int_equal(rc, 0);
    planned++;
    assert_int_equal(o.a.nmicro, t);
    uint32_t start[33];
    double got = check_shape(&f, &o, start);
    uint32_t unused;
    double best = brute_force(&f.cfg, width, s, t, &unused);
    assert_true(best >= 0);
    assert_true(got == best);

    /* Both ways of pk_roll_shared_cuts on the same widths. */
    uint32_t cut[33];
    assert_int_equal(pk_roll_shared_cuts(&f.cfg, width, s, t, PK_CUTS_SCAN, cut), 0);
    assert_true(list_cost(&f.cfg, width, cut, t) == best);
    assert_memory_equal(cut, start, (t + 1) * sizeof(uint32_t));
    assert_int_equal(pk_roll_shared_cuts(&f.cfg, width, s, t, PK_CUTS_MONGE, cut), 0);
    double monge = list_cost(&f.cfg, width, cut, t);
    assert_true(monge >= 0);
    assert_true(monge <= best * (1 + 1e-12));
    /* Below the fewest count: refused. */
    if (fewest > 1)
      assert_int_equal(pk_roll_shared_cuts(&f.cfg, width, s, fewest - 1, PK_CUTS_SCAN, cut),
                       PK_EINTERNAL);

    out_init(&o2);
    assert_int_equal(pk_roll_assign(&f.ctx, &o2.a, err, sizeof err), 0);
    assert_memory_equal(o.micro, o2.micro, n * sizeof(uint32_t));
    assert_memory_equal(o.rank, o2.rank, n * sizeof(uint32_t));
    fx_free(&f);
  }
  assert_true(planned > 2000);
  assert_true(refused > 20);
}

/* Property on larger random batches: never more micro-batches than
 * NEXT_FIT on the same request, and at equal count never a higher step
 * cost; the shape and the cap hold; the Monge way costs the same as the
 * scan up to rounding. */
static void test_shared_cuts_vs_next_fit(void **state) {
  (void)state;
  static uint32_t lens[MAXN], start_nf[MAXN + 1], start_sc[MAXN + 1], cut[MAXN + 1];
  static uint64_t width[MAXN];
  static out_t nf, sc;
  uint64_t seed = 31337;
  uint32_t lower = 0, runs = 0;
  for (int iter = 0; iter < 150; iter++) {
    uint32_t dp = 1 + fx_below(&seed, 16);
    uint32_t s = 1 + fx_below(&seed, MAXN / dp);
    uint32_t n = dp * s;
    uint32_t max_len = 16 + fx_below(&seed, 8192);
    fx_random_lengths(&seed, lens, n, max_len, 1);
    fx_t f;
    fx_init(&f, lens, n, dp, PK_MODE_PADDED, 0);
    f.cfg.round = 1u << fx_below(&seed, 8);
    f.cfg.align = 1u << fx_below(&seed, 3);
    fx_build(&f);
    uint64_t wmax = 1;
    for (uint32_t k = 0; k < n; k++)
      wmax = PK_MAX(wmax, f.size[k]);
    f.cfg.cap = wmax * (1 + fx_below(&seed, 16));
    if (iter % 4 == 0)
      f.cfg.max_seqs = 1 + fx_below(&seed, 64);
    if (iter % 3 == 0)
      f.cfg.group = 1 + fx_below(&seed, 4);
    if (iter % 5 == 0)
      f.cfg.min_micro = 1 + fx_below(&seed, s);

    char err[256] = "";
    f.cfg.micro_algo = PK_MICRO_NEXT_FIT;
    out_init(&nf);
    int rc = pk_roll_assign(&f.ctx, &nf.a, err, sizeof err);
    f.cfg.micro_algo = PK_MICRO_SHARED_CUTS;
    out_init(&sc);
    assert_int_equal(pk_roll_assign(&f.ctx, &sc.a, err, sizeof err), rc);
    if (rc != 0) {
      assert_int_equal(rc, PK_EPRECOND);
      fx_free(&f);
      continue;
    }
    runs++;
    double c_nf = check_shape(&f, &nf, start_nf);
    double c_sc = check_shape(&f, &sc, start_sc);
    assert_true(sc.a.nmicro <= nf.a.nmicro);
    if (sc.a.nmicro == nf.a.nmicro)
      assert_true(c_sc <= c_nf);
    lower += c_sc < c_nf;

    assert_int_equal(slot_widths(&f, width), s);
    assert_int_equal(pk_roll_shared_cuts(&f.cfg, width, s, sc.a.nmicro, PK_CUTS_MONGE, cut), 0);
    double monge = list_cost(&f.cfg, width, cut, sc.a.nmicro);
    assert_true(monge >= 0);
    assert_true(monge <= c_sc * (1 + 1e-9));
    assert_true(monge >= c_sc * (1 - 1e-9));
    fx_free(&f);
  }
  assert_true(runs > 100);
  assert_true(lower > runs / 4); /* The DP must actually improve plans. */
}

/* Wide bands: no token cap and a high min_micro_batches force about half
 * the slots as micro-batches, so the states exceed the bound and
 * SHARED_CUTS keeps next-fit's boundaries and splits (ROLL's own cuts);
 * a smaller case of the same shape is planned by the DP. */
static void test_shared_cuts_bounds(void **state) {
  (void)state;
  enum { S = MAXN }; /* 4097 x 4097 states at t = S / 2 */
  static uint32_t lens[S], start[S + 1];
  static uint64_t width[S];
  static out_t nf, sc;
  uint64_t seed = 99;
  for (uint32_t k = 0; k < S; k++)
    lens[k] = 1 + fx_below(&seed, 4000);
  fx_t f;
  fx_init(&f, lens, S, 1, PK_MODE_PADDED, 0);
  f.cfg.min_micro = S / 2;
  assert_int_equal(slot_widths(&f, width), S);
  /* (t + 1) (s - t + 1) states, above 2^24. */
  assert_int_equal(pk_roll_shared_cuts(&f.cfg, width, S, S / 2, PK_CUTS_ANY, start), 1);
  char err[256] = "";
  f.cfg.micro_algo = PK_MICRO_NEXT_FIT;
  out_init(&nf);
  assert_int_equal(pk_roll_assign(&f.ctx, &nf.a, err, sizeof err), 0);
  f.cfg.micro_algo = PK_MICRO_SHARED_CUTS;
  out_init(&sc);
  assert_int_equal(pk_roll_assign(&f.ctx, &sc.a, err, sizeof err), 0);
  assert_memory_equal(nf.micro, sc.micro, S * sizeof(uint32_t));

  /* 1500 slots, 500 micro-batches, no cap: the scan's work (about
   * 2.5e8 steps) is above its bound, the Monge way plans it and costs the
   * least (the scan, forced, agrees up to rounding). */
  f.n = 1500;
  f.cfg.min_micro = 500;
  fx_build(&f);
  assert_int_equal(slot_widths(&f, width), 1500);
  assert_int_equal(pk_roll_shared_cuts(&f.cfg, width, 1500, 500, PK_CUTS_ANY, start), 0);
  double any = list_cost(&f.cfg, width, start, 500);
  assert_int_equal(pk_roll_shared_cuts(&f.cfg, width, 1500, 500, PK_CUTS_SCAN, start), 0);
  double scan = list_cost(&f.cfg, width, start, 500);
  assert_true(any >= 0 && scan >= 0);
  assert_true(any <= scan * (1 + 1e-12) && any >= scan * (1 - 1e-12));
  f.n = S;
  fx_free(&f);
}

/* Through pk_plan: validation (mode PADDED required, dp_balance AUTO means
 * the sorted stride, other balances refused), the same count as NEXT_FIT
 * and no higher step cost, per mini-batch. */
static pk_request_t roll_request(const uint32_t *lengths, uint32_t n, uint32_t micro_algo) {
  pk_request_t req = {.lengths = lengths, .n = n};
  req.parallel.dp = 4;
  req.batching.mode = PK_MODE_PADDED;
  req.batching.dp_balance = PK_DP_SORTED_STRIDE;
  req.batching.micro_algo = micro_algo;
  req.batching.max_tokens = 8192;
  req.batching.round = 128;
  req.batching.order = PK_ORDER_ORIGINAL;
  return req;
}

static void test_shared_cuts_plan(void **state) {
  (void)state;
  enum { N = 1024 };
  static uint32_t lens[N];
  uint64_t seed = 4;
  for (uint32_t k = 0; k < N; k++)
    lens[k] = 128 + fx_below(&seed, 8192 - 128 + 1);
  char err[512];
  pk_plan_t *nf = NULL, *sc = NULL, *au = NULL;
  for (uint32_t mb = 1; mb <= 4; mb *= 4) {
    pk_request_t req = roll_request(lens, N, PK_MICRO_NEXT_FIT);
    req.batching.mini_batches = mb;
    assert_int_equal(pk_plan(&req, &nf, err, sizeof err), 0);
    req.batching.micro_algo = PK_MICRO_SHARED_CUTS;
    assert_int_equal(pk_plan(&req, &sc, err, sizeof err), 0);
    req.batching.dp_balance = PK_DP_AUTO;
    assert_int_equal(pk_plan(&req, &au, err, sizeof err), 0);
    assert_int_equal(sc->stats.cap_violations, 0);
    assert_int_equal(sc->stats.micro_batches_per_rank, nf->stats.micro_batches_per_rank);
    assert_true(sc->stats.step_cost < nf->stats.step_cost);
    /* AUTO balance with SHARED_CUTS is the sorted stride: the same plan. */
    assert_true(au->stats.step_cost == sc->stats.step_cost);
    for (uint32_t r = 0; r < 4; r++)
      for (uint32_t m = 0; m < mb; m++) {
        const pk_cell_t *a = pk_plan_cell(sc, r, m), *b = pk_plan_cell(au, r, m);
        assert_int_equal(a->nmicros, b->nmicros);
        for (uint32_t j = 0; j < a->nmicros; j++) {
          assert_int_equal(a->micros[j].nseqs, b->micros[j].nseqs);
          assert_memory_equal(a->micros[j].seqs, b->micros[j].seqs,
                              a->micros[j].nseqs * sizeof(uint32_t));
          /* Lock-step: micro-batch j has the same rows on every rank. */
          assert_int_equal(a->micros[j].nseqs, pk_plan_cell(sc, 0, m)->micros[j].nseqs);
        }
      }
    pk_plan_free(nf);
    pk_plan_free(sc);
    pk_plan_free(au);
  }

  pk_request_t req = roll_request(lens, N, PK_MICRO_SHARED_CUTS);
  req.batching.mode = PK_MODE_PACKED;
  assert_int_equal(pk_plan(&req, &sc, err, sizeof err), PK_EINVAL);
  assert_non_null(strstr(err, "batching.mode: packed"));
  req = roll_request(lens, N, PK_MICRO_SHARED_CUTS);
  req.batching.dp_balance = PK_DP_KK;
  assert_int_equal(pk_plan(&req, &sc, err, sizeof err), PK_EINVAL);
  assert_non_null(strstr(err, "batching.dp_balance: kk"));
  /* n % dp != 0 and too many micro-batches: FAILED_PRECONDITION. */
  req = roll_request(lens, N - 1, PK_MICRO_SHARED_CUTS);
  assert_int_equal(pk_plan(&req, &sc, err, sizeof err), PK_EPRECOND);
  assert_non_null(strstr(err, "shared_cuts"));
  req = roll_request(lens, 8, PK_MICRO_SHARED_CUTS);
  req.batching.min_micro_batches = 3;
  assert_int_equal(pk_plan(&req, &sc, err, sizeof err), PK_EPRECOND);

  uint32_t v = 0;
  assert_int_equal(pk_micro_algo_parse("shared-cuts", &v), 0);
  assert_int_equal(v, PK_MICRO_SHARED_CUTS);
  assert_string_equal(pk_micro_algo_name(PK_MICRO_SHARED_CUTS), "shared_cuts");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_roll_worked_example),
      cmocka_unit_test(test_shared_cuts_brute_force),
      cmocka_unit_test(test_shared_cuts_vs_next_fit),
      cmocka_unit_test(test_shared_cuts_bounds),
      cmocka_unit_test(test_shared_cuts_plan),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
