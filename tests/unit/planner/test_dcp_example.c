/* The worked example of docs/design.md ("Dynamic context parallelism"):
 * planned here so that every number the document quotes is checked. */
#include "dcp_check.h"

static const uint32_t lengths[12] = {30000, 12000, 9000, 7000, 5000, 4000,
                                     3000,  2500,  2000, 1500, 1200, 800};

static pk_dcp_request_t example(uint32_t algo) {
  pk_dcp_request_t req = {.lengths = lengths, .n = 12, .dp = 4, .cp = 2, .max_tokens = 8192};
  req.cost.cp_token = 0.25;
  req.cost.cp_group = 100;
  req.algo = algo;
  return req;
}

/* The group of slot `slot` that starts at GPU `first`. */
static const pk_dcp_group_t *group_at(const pk_dcp_plan_t *p, uint32_t slot, uint32_t first) {
  uint32_t r = p->gpu_group[(size_t)slot * p->pool + first];
  assert_true(r != UINT32_MAX);
  assert_int_equal(p->groups[r].first, first);
  return &p->groups[r];
}

static void expect(const pk_dcp_group_t *g, uint32_t size, double cost, const uint32_t *seqs,
                   uint32_t nseqs) {
  assert_int_equal(g->size, size);
  assert_int_equal(g->nseqs, nseqs);
  for (uint32_t k = 0; k < nseqs; k++)
    assert_int_equal(g->seqs[k], seqs[k]);
  assert_true(fabs(g->cost - cost) < 0.5);
}

static void test_auto(void **state) {
  (void)state;
  pk_dcp_request_t req = example(PK_DCP_AUTO);
  pk_dcp_plan_t *p = NULL;
  char err[256];
  assert_int_equal(pk_dcp_plan(&req, NULL, &p, err, sizeof err), 0);
  check_dcp_plan(&req, p);
  assert_int_equal(p->slots, 2);
  assert_true(fabs(p->stats.step_cost - 26003) < 0.5);
  assert_true(fabs(p->stats.step_cost_lower_bound - 22580) < 0.5);
  expect(group_at(p, 0, 0), 4, 22580, (uint32_t[]){0}, 1);
  expect(group_at(p, 0, 4), 2, 13355, (uint32_t[]){1, 5}, 2);
  expect(group_at(p, 0, 6), 2, 12745, (uint32_t[]){2, 3}, 2);
  expect(group_at(p, 1, 0), 4, 3423, (uint32_t[]){4, 9}, 2);
  expect(group_at(p, 1, 4), 1, 3366, (uint32_t[]){6}, 1);
  expect(group_at(p, 1, 5), 1, 2163, (uint32_t[]){8}, 1);
  expect(group_at(p, 1, 6), 2, 3082, (uint32_t[]){7, 10, 11}, 3);
  pk_dcp_plan_free(p);
}

static void test_megatron(void **state) {
  (void)state;
  pk_dcp_request_t req = example(PK_DCP_MEGATRON);
  pk_dcp_plan_t *p = NULL;
  char err[256];
  assert_int_equal(pk_dcp_plan(&req, NULL, &p, err, sizeof err), 0);
  check_dcp_plan(&req, p);
  assert_int_equal(p->slots, 2);
  assert_true(fabs(p->stats.step_cost - 31574) < 0.5);
  expect(group_at(p, 0, 0), 4, 22580, (uint32_t[]){0}, 1);
  for (uint32_t gpu = 0; gpu < 7; gpu++)
    assert_int_equal(group_at(p, 1, gpu)->size, 1);
  pk_dcp_plan_free(p);
}

int main(void) {
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_auto), cmocka_unit_test(test_megatron)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
