/* Megatron-Core's packing-aware scheduler as packd reproduces it
 * (PK_DCP_MEGATRON_PACKING, dcp/packaware.c): on random requests every plan
 * keeps every dynamic-CP rule (dcp_check.h) and is the same when planned
 * again; AUTO, which takes it as a candidate, is never worse where it
 * leaves no GPU idle; a slot whose original grouping would break the
 * aligned cap is rebuilt under it. (Its groups equal the original's where
 * the original keeps the cap: tests/peers/megatron/test_dcp_packing.py,
 * against Megatron-LM's own code.) */
#include "dcp_check.h"

static pk_dcp_plan_t *plan_ok(const pk_dcp_request_t *req) {
  pk_dcp_plan_t *p = NULL;
  char err[512];
  int rc = pk_dcp_plan(req, NULL, &p, err, sizeof err);
  if (rc != 0)
    fail_msg("planning failed (%d): %s", rc, err);
  check_dcp_plan(req, p);
  return p;
}

static void random_request(test_rng_t *r, pk_dcp_request_t *req, uint32_t *lengths, uint32_t n) {
  static const uint32_t dps[] = {1, 2, 3, 4, 5, 8, 16};
  static const uint64_t caps[] = {64, 1024, 4096, 16384};
  static const dcp_test_draw_t draw = {dps, 7, caps, 4};
  dcp_test_random_request(r, &draw, req, lengths, n);
}

/* Every rule on random requests (pools a power of two or not, both size
 * rules, minimum sizes, alignments, caps tight enough to break the
 * original's grouping, max_seqs), and the same plan twice. */
static void test_rules(void **state) {
  (void)state;
  test_rng_t r = {.s = 5};
  uint32_t lengths[600];
  uint32_t planned = 0;
  for (int t = 0; t < 1500; t++) {
    pk_dcp_request_t req;
    uint32_t n = 1 + test_below(&r, t % 10 == 0 ? 600 : 60);
    random_request(&r, &req, lengths, n);
    req.algo = PK_DCP_MEGATRON_PACKING;
    pk_dcp_plan_t *a = NULL, *b = NULL;
    char err[512];
    int rc = pk_dcp_plan(&req, NULL, &a, err, sizeof err);
    if (rc != 0) {
      /* Only a sequence that fits no allowed group is refused. */
      assert_int_equal(rc, PK_EPRECOND);
      assert_non_null(strstr(err, "lengths["));
      assert_null(a);
      continue;
    }
    check_dcp_plan(&req, a);
    assert_int_equal(pk_dcp_plan(&req, NULL, &b, err, sizeof err), 0);
    assert_int_equal(a->ngroups, b->ngroups);
    assert_int_equal(a->slots, b->slots);
    for (uint32_t q = 0; q < a->ngroups; q++) {
      assert_int_equal(a->groups[q].slot, b->groups[q].slot);
      assert_int_equal(a->groups[q].first, b->groups[q].first);
      assert_int_equal(a->groups[q].size, b->groups[q].size);
      assert_int_equal(a->groups[q].nseqs, b->groups[q].nseqs);
      assert_memory_equal(a->groups[q].seqs, b->groups[q].seqs,
                          a->groups[q].nseqs * sizeof *a->groups[q].seqs);
    }
    planned++;
    pk_dcp_plan_free(a);
    pk_dcp_plan_free(b);
  }
  /* Most requests are feasible: the test must not pass vacuously. */
  assert_true(planned > 1000);
}

/* AUTO takes the reproduction as a candidate (batches up to
 * DCP_PA_MAX_N): where the reproduction leaves no GPU idle, AUTO leaves
 * none either and its step is at most the reproduction's. */
static void test_auto_not_worse(void **state) {
  (void)state;
  test_rng_t r = {.s = 9};
  uint32_t lengths[300];
  uint32_t compared = 0;
  for (int t = 0; t < 400; t++) {
    pk_dcp_request_t req;
    random_request(&r, &req, lengths, 1 + test_below(&r, 300));
    req.algo = PK_DCP_MEGATRON_PACKING;
    pk_dcp_plan_t *pa = NULL;
    char err[512];
    if (pk_dcp_plan(&req, NULL, &pa, err, sizeof err) != 0)
      continue;
    if (pa->stats.idle_gpu_slots == 0) {
      req.algo = PK_DCP_AUTO;
      pk_dcp_plan_t *au = plan_ok(&req);
      if (au->stats.idle_gpu_slots != 0)
        fail_msg("request %d: AUTO leaves %u GPU-slots idle", t, au->stats.idle_gpu_slots);
      if (au->stats.step_cost > pa->stats.step_cost * (1 + 1e-9))
        fail_msg("request %d: AUTO's step %.6g is above the packing-aware plan's %.6g", t,
                 au->stats.step_cost, pa->stats.step_cost);
      compared++;
      pk_dcp_plan_free(au);
    }
    pk_dcp_plan_free(pa);
  }
  assert_true(compared > 200);
}

/* A batch on which AUTO's own candidates cost 10 % more than the original's
 * grouping (8 x 4 GPUs, cap 1024, zigzag, the default cost): the
 * reproduction packs it in 2 micro-batches, as the original does, and AUTO
 * is now at most as costly. */
static void test_auto_batch_of_the_original(void **state) {
  (void)state;
  static const uint32_t lengths[39] = {224,  928,  320,  592,  224,  736,  1376, 880,  336,  1936,
                                       320,  688,  688,  1600, 1920, 432,  608,  1216, 1648, 1360,
                                       432,  1104, 240,  960,  1024, 1584, 176,  144,  800,  1408,
                                       1008, 736,  1120, 224,  1600, 1024, 768,  992,  1408};
  pk_dcp_request_t req = {.lengths = lengths, .n = 39, .dp = 8, .cp = 4, .max_tokens = 1024};
  req.algo = PK_DCP_MEGATRON_PACKING;
  pk_dcp_plan_t *pa = plan_ok(&req);
  assert_int_equal(pa->slots, 2);
  assert_int_equal(pa->stats.idle_gpu_slots, 0);
  req.algo = PK_DCP_AUTO;
  pk_dcp_plan_t *au = plan_ok(&req);
  assert_true(au->stats.step_cost <= pa->stats.step_cost * (1 + 1e-9));
  pk_dcp_plan_free(pa);
  pk_dcp_plan_free(au);
}

/* 2045 and 3 tokens on 2 GPUs (cap 1024, zigzag): the original puts both in
 * one group of 2 (2045 / 2 + 3 / 2 = 1024 tokens per GPU), 2052 tokens once
 * aligned to 4, over the 2048 the group holds. The slot is rebuilt under
 * the cap: 2045 alone, and 3 in a second micro-batch whose group of 1
 * doubles to fill the pool. */
static void test_slot_rebuilt_under_the_cap(void **state) {
  (void)state;
  static const uint32_t lengths[2] = {3, 2045};
  pk_dcp_request_t req = {.lengths = lengths, .n = 2, .dp = 2, .max_tokens = 1024};
  req.algo = PK_DCP_MEGATRON_PACKING;
  pk_dcp_plan_t *p = plan_ok(&req);
  assert_int_equal(p->slots, 2);
  assert_int_equal(p->ngroups, 2);
  for (uint32_t q = 0; q < 2; q++) {
    assert_int_equal(p->groups[q].size, 2);
    assert_int_equal(p->groups[q].nseqs, 1);
    assert_int_equal(p->groups[q].seqs[0], q == 0 ? 1 : 0);
  }
  pk_dcp_plan_free(p);
}

/* The algorithm by name, both ways, as packctl and the codec's callers
 * spell it. */
static void test_name(void **state) {
  (void)state;
  uint32_t v = 0;
  assert_int_equal(pk_dcp_algo_parse("megatron_packing", &v), 0);
  assert_int_equal(v, PK_DCP_MEGATRON_PACKING);
  assert_string_equal(pk_dcp_algo_name(PK_DCP_MEGATRON_PACKING), "megatron_packing");
  assert_null(pk_dcp_algo_name(PK_DCP_ALGO_COUNT));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_rules),
      cmocka_unit_test(test_auto_not_worse),
      cmocka_unit_test(test_auto_batch_of_the_original),
      cmocka_unit_test(test_slot_rebuilt_under_the_cap),
      cmocka_unit_test(test_name),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
