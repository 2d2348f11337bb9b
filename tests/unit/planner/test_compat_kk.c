/* Tests of the k-way Karmarkar-Karp partitioner (server/planner/compat_kk.c). */
#include "compat_fixture.h"

#include <math.h>

#include "compat_kk.h"

/* Sums, counts and spread of a partition. */
typedef struct parts {
  double sum[1024];
  uint32_t count[1024];
  double spread;
} parts_t;

static void parts_of(const double *val, const uint32_t *part, uint32_t m, uint32_t k, parts_t *p) {
  assert_true(k <= 1024);
  memset(p, 0, sizeof(*p));
  for (uint32_t j = 0; j < m; j++) {
    assert_true(part[j] < k);
    p->sum[part[j]] += val[j];
    p->count[part[j]]++;
  }
  double lo = INFINITY, hi = -INFINITY;
  for (uint32_t i = 0; i < k; i++) {
    lo = fmin(lo, p->sum[i]);
    hi = fmax(hi, p->sum[i]);
  }
  p->spread = hi - lo;
}

/* verl's seed 003 lengths as token values: two parts of 1500 each. */
static void test_kk_seed_tokens(void **state) {
  (void)state;
  const double v[] = {100, 900, 50, 950, 400, 600};
  uint32_t part[6];
  parts_t p;
  assert_int_equal(pk_kk_partition(v, 6, 2, false, part), 0);
  parts_of(v, part, 6, 2, &p);
  assert_true(p.sum[0] == 1500.0 && p.sum[1] == 1500.0);
  /* 900 and 600 end in the same part. */
  assert_int_equal(part[1], part[5]);
  assert_int_equal(part[0], part[3]);
  assert_int_equal(part[2], part[4]);
}

/* The classic 2-way differencing example {8,7,6,5,4}: KK gives 16/14. */
static void test_kk_two_way_classic(void **state) {
  (void)state;
  const double v[] = {8, 7, 6, 5, 4};
  uint32_t part[5];
  parts_t p;
  assert_int_equal(pk_kk_partition(v, 5, 2, false, part), 0);
  parts_of(v, part, 5, 2, &p);
  /* Parts are numbered by descending sum. */
  assert_true(p.sum[0] == 16.0);
  assert_true(p.sum[1] == 14.0);
}

static void test_kk_bad_input(void **state) {
  (void)state;
  const double v[] = {1, -2};
  const double w[] = {1, NAN};
  uint32_t part[2];
  assert_int_equal(pk_kk_partition(v, 2, 2, false, part), PK_EINVAL);
  assert_int_equal(pk_kk_partition(w, 2, 2, false, part), PK_EINVAL);
  assert_int_equal(pk_kk_partition(v, 2, 0, false, part), PK_EINVAL);
  assert_int_equal(pk_kk_partition(v, 0, 3, false, part), 0);
}

/* Fewer values than parts: every value alone, parts 0..m-1 used. */
static void test_kk_fewer_values_than_parts(void **state) {
  (void)state;
  const double v[] = {3, 9, 1};
  uint32_t part[3];
  assert_int_equal(pk_kk_partition(v, 3, 8, false, part), 0);
  assert_int_equal(part[1], 0);
  assert_int_equal(part[0], 1);
  assert_int_equal(part[2], 2);
}

/* Properties on random inputs: every value in a part < k; with m >= k no part
 * is empty; equal mode gives floor/ceil(m/k) values per part; the spread never
 * exceeds the largest value (each merge keeps spread <= the larger input
 * spread); the result is deterministic. */
static void test_kk_properties(void **state) {
  (void)state;
  uint64_t seed = 12345;
  static uint32_t part[4096], part2[4096];
  static double v[4096];
  static parts_t p;
  for (int iter = 0; iter < 300; iter++) {
    uint32_t m = 1 + fx_below(&seed, iter < 200 ? 200 : 4096);
    uint32_t k = 1 + fx_below(&seed, iter % 3 == 0 ? 8 : 600);
    bool equal = iter % 2 == 0;
    double vmax = 0;
    for (uint32_t j = 0; j < m; j++) {
      uint32_t r = fx_below(&seed, 10);
      v[j] = r == 0 ? 0.0 : (r < 3 ? (double)fx_below(&seed, 100000) : fx_below(&seed, 3000));
      vmax = fmax(vmax, v[j]);
    }
    assert_int_equal(pk_kk_partition(v, m, k, equal, part), 0);
    parts_of(v, part, m, k, &p);
    if (m >= k)
      for (uint32_t i = 0; i < k; i++)
        assert_true(p.count[i] > 0);
    if (equal)
      for (uint32_t i = 0; i < k; i++)
        assert_true(p.count[i] == m / k || p.count[i] == (m + k - 1) / k);
    assert_true(p.spread <= vmax * (1 + 1e-12) + 1e-9);
    for (uint32_t i = 1; i < k && i < m; i++)
      assert_true(p.sum[i - 1] >= p.sum[i]);
    assert_int_equal(pk_kk_partition(v, m, k, equal, part2), 0);
    assert_memory_equal(part, part2, m * sizeof(uint32_t));
  }
}

/* A size the old implementation needed 17.5 s for (n=16384, k=512): here it
 * must simply complete (timing is measured in bench/, not asserted). */
static void test_kk_large(void **state) {
  (void)state;
  uint32_t m = 16384, k = 512;
  double *v = malloc(m * sizeof(double));
  uint32_t *part = malloc(m * sizeof(uint32_t));
  assert_non_null(v);
  assert_non_null(part);
  uint64_t seed = 7;
  double vmax = 0;
  for (uint32_t j = 0; j < m; j++) {
    v[j] = 64 + fx_below(&seed, 16384);
    vmax = fmax(vmax, v[j]);
  }
  assert_int_equal(pk_kk_partition(v, m, k, false, part), 0);
  double *sum = calloc(k, sizeof(double));
  assert_non_null(sum);
  for (uint32_t j = 0; j < m; j++)
    sum[part[j]] += v[j];
  for (uint32_t i = 1; i < k; i++)
    assert_true(sum[i - 1] >= sum[i]);
  assert_true(sum[0] - sum[k - 1] <= vmax);
  free(sum);
  free(v);
  free(part);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_kk_seed_tokens), cmocka_unit_test(test_kk_two_way_classic),
      cmocka_unit_test(test_kk_bad_input),   cmocka_unit_test(test_kk_fewer_values_than_parts),
      cmocka_unit_test(test_kk_properties),  cmocka_unit_test(test_kk_large),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
