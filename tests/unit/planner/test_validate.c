/* Every validation error: the right class, a message that names the field
 * and the value, and no plan. */
#include "plan_check.h"

static uint32_t base_lengths[] = {100, 200, 300, 400, 500, 600, 700, 800};

static pk_request_t base_request(void) {
  pk_request_t req = {.lengths = base_lengths, .n = 8};
  req.parallel.dp = 2;
  req.batching.max_tokens = 1000;
  return req;
}

static void expect_error(const pk_request_t *req, int code, const char *needle1,
                         const char *needle2) {
  pk_plan_t *p = (pk_plan_t *)0x1;
  char err[512] = "";
  int rc = pk_plan(req, &p, err, sizeof err);
  if (rc != code)
    fail_msg("expected %d, got %d: %s", code, rc, err);
  assert_null(p);
  if (strstr(err, needle1) == NULL || (needle2 && strstr(err, needle2) == NULL))
    fail_msg("message \"%s\" lacks \"%s\" / \"%s\"", err, needle1, needle2 ? needle2 : "");
}

static void test_base_request_plans(void **state) {
  (void)state;
  pk_request_t req = base_request();
  pk_plan_t *p;
  char err[256];
  assert_int_equal(pk_plan(&req, &p, err, sizeof err), 0);
  check_plan(&req, p);
  pk_plan_free(p);
}

static void test_sequences(void **state) {
  (void)state;
  pk_request_t req = base_request();
  req.n = 0;
  expect_error(&req, PK_EINVAL, "lengths", "empty");
  req = base_request();
  req.lengths = NULL;
  expect_error(&req, PK_EINVAL, "lengths", NULL);
  req = base_request();
  uint32_t loss[3] = {1, 2, 3};
  req.loss_tokens = loss;
  req.n_loss_tokens = 3;
  expect_error(&req, PK_EINVAL, "loss_tokens", "3 entries");
  req = base_request();
  uint32_t big_loss[8] = {0, 0, 0, 0, 0, 900, 0, 0};
  req.loss_tokens = big_loss;
  req.n_loss_tokens = 8;
  expect_error(&req, PK_EINVAL, "loss_tokens[5]", "900");
  req = base_request();
  uint64_t groups[2] = {1, 2};
  req.groups = groups;
  req.n_groups = 2;
  expect_error(&req, PK_EINVAL, "groups", "2 entries");
  req = base_request();
  req.batching.keep_groups = true;
  expect_error(&req, PK_EINVAL, "batching.keep_groups", NULL);
  req = base_request();
  uint32_t huge[1] = {2000000000u};
  req.lengths = huge;
  req.n = 1;
  req.parallel.dp = 1;
  req.batching.max_tokens = 0;
  expect_error(&req, PK_EINVAL, "lengths[0]", "2000000000");
}

static void test_parallel(void **state) {
  (void)state;
  pk_request_t req = base_request();
  req.parallel.dp = 0;
  expect_error(&req, PK_EINVAL, "parallel.dp", "0");
  req = base_request();
  req.parallel.cp = 100000;
  expect_error(&req, PK_EINVAL, "parallel.cp", "100000");
  req = base_request();
  req.parallel.cp_algo = 7;
  expect_error(&req, PK_EINVAL, "parallel.cp_algo", "7");
  req = base_request();
  req.parallel.cp = 4;
  req.parallel.tp = 2;
  req.parallel.cp_algo = PK_CP_ULYSSES;
  req.parallel.num_heads = 12;
  req.batching.max_tokens = 4000;
  expect_error(&req, PK_EPRECOND, "parallel.num_heads", "12");
  req.parallel.num_heads = 16;
  pk_plan_t *p;
  char err[256];
  assert_int_equal(pk_plan(&req, &p, err, sizeof err), 0);
  pk_plan_free(p);
}

static void test_batching(void **state) {
  (void)state;
  pk_request_t req = base_request();
  req.batching.dp_balance = 9;
  expect_error(&req, PK_EINVAL, "batching.dp_balance", "9");
  req = base_request();
  req.batching.micro_algo = 7;
  expect_error(&req, PK_EINVAL, "batching.micro_algo", "7");
  /* SHARED_CUTS cuts the sorted stride's PADDED rows. */
  req = base_request();
  req.batching.micro_algo = PK_MICRO_SHARED_CUTS;
  expect_error(&req, PK_EINVAL, "batching.mode", "packed");
  req.batching.mode = PK_MODE_PADDED;
  req.batching.dp_balance = PK_DP_LPT;
  expect_error(&req, PK_EINVAL, "batching.dp_balance", "lpt");
  req = base_request();
  req.batching.mode = 3;
  expect_error(&req, PK_EINVAL, "batching.mode", "3");
  req = base_request();
  req.batching.order = 3;
  expect_error(&req, PK_EINVAL, "batching.order", "3");
  req = base_request();
  req.batching.mode = PK_MODE_FIXED;
  expect_error(&req, PK_EINVAL, "batching.micro_batch_size", "FIXED");
  req = base_request();
  req.batching.micro_batch_size = 2;
  expect_error(&req, PK_EINVAL, "batching.micro_batch_size", "2");
  req = base_request();
  req.batching.mini_batches = 9;
  expect_error(&req, PK_EPRECOND, "batching.mini_batches", "9");
  req = base_request();
  req.batching.max_tokens = 500; /* 600, 700, 800 cannot fit alone */
  expect_error(&req, PK_EPRECOND, "lengths[5]", "600");
  req = base_request();
  req.batching.max_tokens = 3000000000ull;
  expect_error(&req, PK_EINVAL, "batching.max_tokens", "3000000000");
}

static void test_counts_that_cannot_be_met(void **state) {
  (void)state;
  /* Fewer sequences than ranks. */
  pk_request_t req = base_request();
  req.parallel.dp = 9;
  expect_error(&req, PK_EPRECOND, "parallel.dp 9", "8 sequences");
  /* equal_count with n % dp != 0. */
  req = base_request();
  req.parallel.dp = 3;
  req.batching.equal_count = true;
  expect_error(&req, PK_EPRECOND, "not divisible by parallel.dp 3", "equal_count");
  /* More micro-batches needed than sequences allow: 4 ranks x 3. */
  req = base_request();
  req.parallel.dp = 4;
  req.batching.min_micro_batches = 3;
  expect_error(&req, PK_EPRECOND, "fewer than parallel.dp 4 x 3", NULL);
  /* FIXED: micro_batch_size must divide the per-rank count. */
  req = base_request();
  req.batching.mode = PK_MODE_FIXED;
  req.batching.micro_batch_size = 3;
  expect_error(&req, PK_EPRECOND, "batching.micro_batch_size: 3", NULL);
  /* FIXED over the cap. */
  req.batching.micro_batch_size = 4;
  req.batching.max_tokens = 1000;
  expect_error(&req, PK_EPRECOND, "FIXED", NULL);
}

static void test_layout_and_cost(void **state) {
  (void)state;
  pk_request_t req = base_request();
  req.parallel.cp = 2;
  req.layout.align = 6; /* zigzag CP 2 needs multiples of 4 */
  expect_error(&req, PK_EPRECOND, "layout.align", "6");
  req = base_request();
  req.batching.mode = PK_MODE_PADDED;
  req.layout.fixed_shape = true;
  expect_error(&req, PK_EINVAL, "layout.fixed_shape", NULL);
  req = base_request();
  req.layout.total_multiple = 4096;
  expect_error(&req, PK_EPRECOND, "layout.total_multiple", "4096");
  req = base_request();
  req.cost.linear = -1;
  expect_error(&req, PK_EINVAL, "cost.linear", "-1");
  req = base_request();
  req.cost.quadratic = NAN;
  expect_error(&req, PK_EINVAL, "cost.quadratic", "nan");
  req = base_request();
  req.cost.per_sequence = -0.5;
  expect_error(&req, PK_EINVAL, "cost.per_sequence", "-0.5");
  req = base_request();
  req.cost.per_sequence = INFINITY;
  expect_error(&req, PK_EINVAL, "cost.per_sequence", "inf");
  req = base_request();
  req.cost.per_micro_batch = NAN;
  expect_error(&req, PK_EINVAL, "cost.per_micro_batch", "nan");
  req = base_request();
  req.cost.per_micro_batch = -3;
  expect_error(&req, PK_EINVAL, "cost.per_micro_batch", "-3");
}

static void test_errors_without_buffer(void **state) {
  (void)state;
  pk_request_t req = base_request();
  req.parallel.dp = 0;
  pk_plan_t *p;
  assert_int_equal(pk_plan(&req, &p, NULL, 0), PK_EINVAL);
  assert_int_equal(pk_plan(NULL, &p, NULL, 0), PK_EINVAL);
  assert_string_equal(pk_strerror(PK_EPRECOND), "failed precondition");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_base_request_plans),
      cmocka_unit_test(test_sequences),
      cmocka_unit_test(test_parallel),
      cmocka_unit_test(test_batching),
      cmocka_unit_test(test_counts_that_cannot_be_met),
      cmocka_unit_test(test_layout_and_cost),
      cmocka_unit_test(test_errors_without_buffer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
