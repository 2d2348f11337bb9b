/* Group halving (dcp/split.c) on pools that are not a power of two: the
 * whole pool of an odd count has no halves (c / 2 rounds down to an
 * allowed size, and its two halves would leave a GPU idle), so AUTO's
 * plans of short sequences on 3, 5 and 7 GPUs leave none idle. */
#include "dcp_check.h"

static void test_odd_pool_no_idle(void **state) {
  (void)state;
  /* The smallest batches that left a GPU idle before. */
  static const uint32_t small[2][2] = {{1, 3}, {45, 81}};
  for (int c = 0; c < 2; c++) {
    pk_dcp_request_t req = {.lengths = small[c], .n = 2, .dp = 5, .max_tokens = 256};
    pk_dcp_plan_t *p = NULL;
    char err[256];
    assert_int_equal(pk_dcp_plan(&req, NULL, &p, err, sizeof err), 0);
    check_dcp_plan(&req, p);
    assert_int_equal(p->stats.idle_gpu_slots, 0);
    pk_dcp_plan_free(p);
  }
  test_rng_t r = {.s = 17};
  uint32_t lengths[64];
  static const uint32_t pools[] = {3, 5, 7};
  for (int t = 0; t < 600; t++) {
    uint32_t n = 1 + test_below(&r, 64);
    pk_dcp_request_t req = {.lengths = lengths, .n = n, .dp = pools[test_below(&r, 3)]};
    req.max_tokens = 256u << test_below(&r, 5);
    req.cp_algo = test_below(&r, 2);
    for (uint32_t i = 0; i < n; i++)
      lengths[i] = 1 + test_below(&r, (uint32_t)req.max_tokens / 2);
    if (test_below(&r, 2))
      req.cost.cp_token = test_uniform(&r);
    pk_dcp_plan_t *p = NULL;
    char err[256];
    assert_int_equal(pk_dcp_plan(&req, NULL, &p, err, sizeof err), 0);
    check_dcp_plan(&req, p);
    if (p->stats.idle_gpu_slots != 0)
      fail_msg("request %d: %u GPU-slots idle on %u GPUs", t, p->stats.idle_gpu_slots, req.dp);
    pk_dcp_plan_free(p);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_odd_pool_no_idle),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
