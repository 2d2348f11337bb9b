/* Extreme values in every numeric request field, alone and in pairs: no
 * answer is OK with a nonsense plan (alignment 0, a non-finite or negative
 * cost, a micro-batch over the cap, an empty micro-batch, counts that break
 * the rules of plan_check.h), and every refusal is a known error class with
 * a message. Set PK_EXTREMES_VERBOSE=1 to print each case before it runs. */
#include "plan_check.h"

/* Integer extremes: 0 (default), 1, 2, 2^16, 2^31 and 2^32 - 1. */
static const uint64_t k_ints[] = {0, 1, 2, 1u << 16, 1u << 31, UINT32_MAX};
#define N_INTS (sizeof k_ints / sizeof k_ints[0])
/* Double extremes: NaN, +-inf, 1e308, -0.0, the smallest denormal, 1. */
#define N_DOUBLES 7
static double k_double(size_t i) {
  const double v[N_DOUBLES] = {NAN, INFINITY, -INFINITY, 1e308, -0.0, 4.9406564584124654e-324, 1.0};
  return v[i];
}

typedef enum { F_U32, F_U64, F_DOUBLE, F_LEN } kind_t;

typedef struct {
  const char *name;
  kind_t kind;
  size_t offset; /* In pk_request_t; for F_LEN the index into lengths. */
} field_t;

#define R(f) offsetof(pk_request_t, f)
static const field_t k_fields[] = {
    {"parallel.dp", F_U32, R(parallel.dp)},
    {"parallel.tp", F_U32, R(parallel.tp)},
    {"parallel.cp", F_U32, R(parallel.cp)},
    {"parallel.pp", F_U32, R(parallel.pp)},
    {"parallel.vpp", F_U32, R(parallel.vpp)},
    {"parallel.cp_algo", F_U32, R(parallel.cp_algo)},
    {"parallel.num_heads", F_U32, R(parallel.num_heads)},
    {"parallel.microbatch_group", F_U32, R(parallel.microbatch_group)},
    {"batching.mini_batches", F_U32, R(batching.mini_batches)},
    {"batching.dp_balance", F_U32, R(batching.dp_balance)},
    {"batching.mode", F_U32, R(batching.mode)},
    {"batching.max_tokens", F_U64, R(batching.max_tokens)},
    {"batching.max_seqs", F_U32, R(batching.max_seqs)},
    {"batching.micro_batch_size", F_U32, R(batching.micro_batch_size)},
    {"batching.min_micro_batches", F_U32, R(batching.min_micro_batches)},
    {"batching.round", F_U32, R(batching.round)},
    {"batching.micro_algo", F_U32, R(batching.micro_algo)},
    {"batching.order", F_U32, R(batching.order)},
    {"layout.align", F_U32, R(layout.align)},
    {"layout.pad_multiple", F_U32, R(layout.pad_multiple)},
    {"layout.total_multiple", F_U32, R(layout.total_multiple)},
    {"seed", F_U64, R(seed)},
    {"cost.linear", F_DOUBLE, R(cost.linear)},
    {"cost.quadratic", F_DOUBLE, R(cost.quadratic)},
    {"cost.per_sequence", F_DOUBLE, R(cost.per_sequence)},
    {"cost.per_micro_batch", F_DOUBLE, R(cost.per_micro_batch)},
    {"lengths[0]", F_LEN, 0},
    {"lengths[5]", F_LEN, 5},
};
#undef R
#define N_FIELDS (sizeof k_fields / sizeof k_fields[0])

#define N_LEN 8

typedef struct {
  pk_request_t req;
  uint32_t lengths[N_LEN];
  char what[256];
  size_t used;
} case_t;

/* Two bases: the defaults (PACKED, AUTO) under a cap, and a layout with
 * TP, CP and sequence parallelism, equal counts and a shuffle. */
static void base_case(case_t *c, int base) {
  static const uint32_t lens[N_LEN] = {0, 1, 100, 700, 1500, 2048, 3000, 4000};
  memset(c, 0, sizeof *c);
  memcpy(c->lengths, lens, sizeof lens);
  c->req.lengths = c->lengths;
  c->req.n = N_LEN;
  c->req.parallel.dp = 2;
  c->req.batching.max_tokens = 8192;
  if (base == 1) {
    c->req.parallel.tp = 2;
    c->req.parallel.cp = 2;
    c->req.parallel.sequence_parallel = true;
    c->req.batching.equal_count = true;
    c->req.batching.shuffle = true;
    c->req.seed = 7;
  }
  c->used = (size_t)snprintf(c->what, sizeof c->what, "base %d", base);
}

static int value_count(kind_t k) {
  return k == F_DOUBLE ? N_DOUBLES : (int)N_INTS;
}

static void set_field(case_t *c, const field_t *f, size_t vi) {
  char *base = (char *)&c->req;
  int w = 0;
  switch (f->kind) {
  case F_U32: {
    uint32_t v = (uint32_t)k_ints[vi];
    memcpy(base + f->offset, &v, sizeof v);
    w = snprintf(c->what + c->used, sizeof c->what - c->used, ", %s=%u", f->name, v);
    break;
  }
  case F_U64: {
    uint64_t v = k_ints[vi];
    memcpy(base + f->offset, &v, sizeof v);
    w = snprintf(c->what + c->used, sizeof c->what - c->used, ", %s=%llu", f->name,
                 (unsigned long long)v);
    break;
  }
  case F_DOUBLE: {
    double v = k_double(vi);
    memcpy(base + f->offset, &v, sizeof v);
    w = snprintf(c->what + c->used, sizeof c->what - c->used, ", %s=%g", f->name, v);
    break;
  }
  case F_LEN:
    c->lengths[f->offset] = (uint32_t)k_ints[vi];
    w = snprintf(c->what + c->used, sizeof c->what - c->used, ", %s=%u", f->name,
                 c->lengths[f->offset]);
    break;
  }
  if (w > 0 && c->used + (size_t)w < sizeof c->what)
    c->used += (size_t)w;
}

static unsigned long g_ok, g_refused;

/* Plans one case and checks the answer. */
static void run_case(const case_t *c) {
  if (getenv("PK_EXTREMES_VERBOSE") != NULL)
    print_message("%s\n", c->what);
  pk_plan_t *plan = NULL;
  char err[512] = "";
  int rc = pk_plan(&c->req, &plan, err, sizeof err);
  if (rc != 0) {
    g_refused++;
    if (plan != NULL)
      fail_msg("%s: error %d with a plan", c->what, rc);
    if (rc != PK_EINVAL && rc != PK_EPRECOND && rc != PK_ENOMEM)
      fail_msg("%s: unexpected error %d: %s", c->what, rc, err);
    if (err[0] == '\0')
      fail_msg("%s: error %d without a message", c->what, rc);
    return;
  }
  g_ok++;
  const pk_stats_t *st = &plan->stats;
  if (pk_alignment(&c->req) == 0 || st->alignment == 0)
    fail_msg("%s: OK with alignment 0", c->what);
  if (!isfinite(st->total_cost) || st->total_cost < 0 || !isfinite(st->step_cost) ||
      st->step_cost < 0 || !isfinite(st->step_cost_lower_bound) ||
      !isfinite(st->lockstep_efficiency) || !isfinite(st->dp_imbalance) ||
      !isfinite(st->pad_fraction))
    fail_msg("%s: OK with non-finite stats: total %g step %g bound %g eff %g imb %g pad %g",
             c->what, st->total_cost, st->step_cost, st->step_cost_lower_bound,
             st->lockstep_efficiency, st->dp_imbalance, st->pad_fraction);
  for (uint32_t r = 0; r < plan->dp; r++)
    for (uint32_t m = 0; m < plan->mini_batches; m++) {
      const pk_cell_t *cell = pk_plan_cell(plan, r, m);
      for (uint32_t j = 0; j < cell->nmicros; j++) {
        const pk_micro_t *mb = &cell->micros[j];
        if (!isfinite(mb->cost) || mb->cost < 0 || !isfinite(mb->loss_scale) || mb->loss_scale < 0)
          fail_msg("%s: rank %u mini %u micro %u: cost %g loss_scale %g", c->what, r, m, j,
                   mb->cost, mb->loss_scale);
        if (mb->nseqs == 0)
          fail_msg("%s: rank %u mini %u micro %u is empty", c->what, r, m, j);
      }
    }
  check_plan(&c->req, plan);
  pk_plan_free(plan);
}

static void test_single_fields(void **state) {
  (void)state;
  for (int base = 0; base < 2; base++)
    for (size_t f = 0; f < N_FIELDS; f++)
      for (int v = 0; v < value_count(k_fields[f].kind); v++) {
        case_t c;
        base_case(&c, base);
        set_field(&c, &k_fields[f], (size_t)v);
        run_case(&c);
      }
}

/* Every pair of fields, every pair of their extreme values, on both bases:
 * about 2 x 378 x 45 plans of 8 sequences. */
static void test_field_pairs(void **state) {
  (void)state;
  for (int base = 0; base < 2; base++)
    for (size_t f = 0; f < N_FIELDS; f++)
      for (size_t g = f + 1; g < N_FIELDS; g++)
        for (int v = 0; v < value_count(k_fields[f].kind); v++)
          for (int w = 0; w < value_count(k_fields[g].kind); w++) {
            case_t c;
            base_case(&c, base);
            set_field(&c, &k_fields[f], (size_t)v);
            set_field(&c, &k_fields[g], (size_t)w);
            run_case(&c);
          }
  print_message("%lu plans OK, %lu refused\n", g_ok, g_refused);
}

/* The products the planner used to take in 32 bits, each now refused with
 * the fields named. */
static void expect(const pk_request_t *req, int code, const char *a, const char *b) {
  pk_plan_t *p = NULL;
  char err[512] = "";
  int rc = pk_plan(req, &p, err, sizeof err);
  if (rc != code)
    fail_msg("expected %d, got %d: %s", code, rc, err);
  assert_null(p);
  if (strstr(err, a) == NULL || (b != NULL && strstr(err, b) == NULL))
    fail_msg("message \"%s\" lacks \"%s\" / \"%s\"", err, a, b ? b : "");
}

static void test_wide_products(void **state) {
  (void)state;
  case_t c;
  /* 2 x 65536 x 65536 wrapped to alignment 0 in 32 bits. */
  base_case(&c, 0);
  c.req.parallel.cp = 65536;
  c.req.parallel.tp = 65536;
  expect(&c.req, PK_EINVAL, "parallel.cp", "8589934592");
  assert_int_equal(pk_alignment(&c.req), 0);
  /* The largest zigzag alignment that is allowed. */
  base_case(&c, 0);
  c.req.parallel.cp = 256;
  c.req.parallel.tp = 128;
  c.req.batching.max_tokens = 1u << 22;
  assert_int_equal(pk_alignment(&c.req), 65536);
  /* num_heads against CP x TP = 2^32 (Ulysses). */
  base_case(&c, 0);
  c.req.parallel.cp = 65536;
  c.req.parallel.tp = 65536;
  c.req.parallel.cp_algo = PK_CP_ULYSSES;
  c.req.parallel.num_heads = 64;
  expect(&c.req, PK_EPRECOND, "parallel.num_heads", "4294967296");
  /* max_tokens x CP over int32. */
  base_case(&c, 0);
  c.req.parallel.cp = 4;
  c.req.parallel.cp_algo = PK_CP_ULYSSES;
  c.req.batching.max_tokens = 1u << 30;
  expect(&c.req, PK_EINVAL, "batching.max_tokens", "parallel.cp 4");
  /* lcm(total_multiple, A) past 32 bits used to be truncated. */
  base_case(&c, 0);
  c.req.layout.total_multiple = (1u << 20) - 1;
  c.req.layout.pad_multiple = 65536;
  expect(&c.req, PK_EINVAL, "layout.total_multiple", NULL);
  /* lcm(round, A) in PADDED mode. */
  base_case(&c, 0);
  c.req.batching.mode = PK_MODE_PADDED;
  c.req.batching.round = 65535;
  c.req.layout.pad_multiple = 65536;
  c.req.batching.max_tokens = 0;
  expect(&c.req, PK_EINVAL, "batching.round", "65535");
  /* A cost coefficient whose sums overflow to inf. */
  base_case(&c, 0);
  c.req.cost.quadratic = 1e308;
  expect(&c.req, PK_EINVAL, "cost.quadratic", "1e+308");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_wide_products),
      cmocka_unit_test(test_single_fields),
      cmocka_unit_test(test_field_pairs),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
