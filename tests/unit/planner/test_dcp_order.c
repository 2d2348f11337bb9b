/* The dynamic-CP planner's sorts (dcp/order.c) against a plain insertion
 * sort with the comparison they replace: dcp_order_desc, the indices by
 * cost descending then index; dcp_sort_keys, by major ascending, minor
 * descending, index. Random keys with many ties, keys a few ulps apart
 * (the radix sort's high half then leaves the order to its last pass or its
 * fallback), -0 beside +0, negative costs, lists already in order or in
 * reverse, and sizes from 0 to past the radix sort's fallback. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dcp/dcp.h"

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;

static uint64_t next_u64(void) {
  uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static uint32_t below(uint32_t n) {
  return (uint32_t)(next_u64() % n);
}

/* A cost of one of several shapes: a few distinct values (ties), values a
 * few ulps apart, a wide spread, zeros of either sign, negatives. */
static double draw(uint32_t shape) {
  switch (shape) {
  case 0:
    return (double)below(5) * 1000.0;
  case 1:
    return nextafter(12345.678, INFINITY) + (double)below(8) * 1e-12;
  case 2:
    return ldexp((double)(next_u64() >> 11), -(int)below(80));
  case 3:
    return below(2) ? 0.0 : -0.0;
  default:
    return ((double)(next_u64() >> 11) - 4503599627370496.0) / 7.0;
  }
}

static bool desc_before(const double *key, uint32_t x, uint32_t y) {
  if (key[x] != key[y])
    return key[x] > key[y];
  return x < y;
}

static void check_order(uint32_t n, uint32_t shape) {
  double *key = malloc((n + 1) * sizeof *key);
  uint32_t *out = malloc((n + 1) * sizeof *out);
  dcp_rank_t *tmp = malloc((2 * n + 1) * sizeof *tmp);
  uint32_t *ref = malloc((n + 1) * sizeof *ref);
  assert_non_null(key);
  assert_non_null(out);
  assert_non_null(tmp);
  assert_non_null(ref);
  for (uint32_t i = 0; i < n; i++)
    key[i] = draw(shape == 5 ? below(5) : shape);
  for (uint32_t i = 0; i < n; i++) {
    uint32_t y = i;
    for (; y > 0 && desc_before(key, i, ref[y - 1]); y--)
      ref[y] = ref[y - 1];
    ref[y] = i;
  }
  dcp_order_desc(key, n, out, tmp);
  for (uint32_t r = 0; r < n; r++)
    assert_int_equal(out[r], ref[r]);
  free(key);
  free(out);
  free(tmp);
  free(ref);
}

static void test_order_desc_matches_comparison(void **state) {
  (void)state;
  static const uint32_t sizes[] = {0, 1, 2, 3, 17, 64, 257, 1000, 5000};
  for (uint32_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (uint32_t shape = 0; shape <= 5; shape++)
      for (uint32_t rep = 0; rep < 3; rep++)
        check_order(sizes[s], shape);
}

static bool key_ref_before(const dcp_key_t *x, const dcp_key_t *y) {
  if (x->major != y->major)
    return x->major < y->major;
  if (x->minor != y->minor)
    return x->minor > y->minor;
  return x->idx < y->idx;
}

/* layout: 0 random, 1 in order, 2 in reverse. */
static void check_keys(uint32_t n, uint32_t layout) {
  dcp_key_t *a = malloc((n + 1) * sizeof *a);
  dcp_key_t *tmp = malloc((n + 1) * sizeof *tmp);
  dcp_key_t *ref = malloc((n + 1) * sizeof *ref);
  assert_non_null(a);
  assert_non_null(tmp);
  assert_non_null(ref);
  for (uint32_t i = 0; i < n; i++)
    a[i] = (dcp_key_t){.major = below(4), .idx = i, .minor = draw(below(5))};
  for (uint32_t i = 0; i < n; i++) {
    uint32_t y = i;
    for (; y > 0 && key_ref_before(&a[i], &ref[y - 1]); y--)
      ref[y] = ref[y - 1];
    ref[y] = a[i];
  }
  if (layout == 1)
    memcpy(a, ref, n * sizeof *a);
  for (uint32_t i = 0; layout == 2 && i < n; i++)
    a[i] = ref[n - 1 - i];
  dcp_sort_keys(a, tmp, n);
  for (uint32_t r = 0; r < n; r++) {
    assert_int_equal(a[r].idx, ref[r].idx);
    assert_int_equal(a[r].major, ref[r].major);
  }
  free(a);
  free(tmp);
  free(ref);
}

static void test_sort_keys_matches_comparison(void **state) {
  (void)state;
  static const uint32_t sizes[] = {0, 1, 2, 15, 16, 17, 33, 100, 1000};
  for (uint32_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
    for (uint32_t layout = 0; layout < 3; layout++)
      for (uint32_t rep = 0; rep < 4; rep++)
        check_keys(sizes[s], layout);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_order_desc_matches_comparison),
      cmocka_unit_test(test_sort_keys_matches_comparison),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
