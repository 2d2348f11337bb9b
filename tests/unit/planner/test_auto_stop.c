/* AUTO's cooperative stop, stage by stage: for batches that reach each of
 * its stages (first fit and its repair, completion and the count
 * bisection under max_seqs, the exact search, equal counts, the PADDED
 * candidate table with the cut and level searches, PADDED equal counts),
 * stopping at every poll AUTO makes returns PK_ECANCELED with no plan,
 * never calls the callback again once it said stop, and frees everything
 * (ASan's leak check). A callback that never fires leaves the plan as
 * pk_plan makes it. The long loops poll: a batch of 65536 sequences is
 * polled at least once per PK_AUTO_POLL_EVERY items placed. The trace names
 * the winning candidate, and no improver raises the step cost. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "plan_check.h"

#include "auto/auto.h"
#include "pk_planner.h"

typedef struct stop_case {
  const char *name;
  uint32_t n, dp, cap, resp_cap, max_seqs;
  pk_mode_t mode;
  bool equal_count;
  uint32_t lo, hi;       /* hi > 0: lengths uniform in [lo, hi], else rollouts. */
  const uint32_t *fixed; /* Else these lengths, repeated (fixed_n of them). */
  uint32_t fixed_n;
  const char *winner; /* The candidate the case reaches (the trace's). */
} stop_case_t;

static uint32_t *case_lengths(const stop_case_t *c, uint64_t seed) {
  test_rng_t rng = {seed};
  uint32_t *len = malloc((size_t)c->n * sizeof *len);
  assert_non_null(len);
  for (uint32_t i = 0; i < c->n; i++)
    len[i] = c->fixed != NULL ? c->fixed[i % c->fixed_n]
             : c->hi > 0      ? c->lo + test_below(&rng, c->hi - c->lo + 1)
                              : test_rl_length(&rng, c->resp_cap);
  return len;
}

static pk_request_t case_request(const stop_case_t *c, const uint32_t *len) {
  pk_request_t req = {.lengths = len, .n = c->n};
  req.parallel.dp = c->dp;
  req.batching.max_tokens = c->cap;
  req.batching.max_seqs = c->max_seqs;
  req.batching.mode = c->mode;
  req.batching.equal_count = c->equal_count;
  return req;
}

/* Stops at polls 1 .. 200, then every ~50th up to the last. */
static void stop_everywhere(const stop_case_t *c) {
  uint32_t *len = case_lengths(c, 0x5709 + c->n);
  pk_request_t req = case_request(c, len);
  char err[512];
  stop_counter_t never = {0, UINT64_MAX};
  pk_auto_trace_t trace = {0};
  pk_limits_t lim = {.should_stop = stop_at, .stop_arg = &never, .trace = &trace};
  pk_plan_t *plan = NULL, *plain = NULL;
  assert_int_equal(pk_plan_limited(&req, &lim, &plan, err, sizeof err), 0);
  assert_int_equal(pk_plan(&req, &plain, err, sizeof err), 0);
  assert_true(plan->stats.step_cost == plain->stats.step_cost);
  pk_plan_free(plan);
  pk_plan_free(plain);
  uint64_t polls = never.calls;
  assert_string_equal(trace.winner, c->winner);
  lim.trace = NULL;
  /* Init, the count's stages and the deal each poll at least once. */
  assert_true(polls >= 4);
  test_rng_t rng = {polls};
  for (uint64_t at = 1; at <= polls; at += at < 200 ? 1 : 1 + test_below(&rng, 97)) {
    stop_counter_t sc = {0, at};
    lim.stop_arg = &sc;
    plan = (pk_plan_t *)0x1;
    err[0] = '\0';
    int rc = pk_plan_limited(&req, &lim, &plan, err, sizeof err);
    if (rc != PK_ECANCELED)
      print_error("%s: stop at poll %llu of %llu gave %d\n", c->name, (unsigned long long)at,
                  (unsigned long long)polls, rc);
    assert_int_equal(rc, PK_ECANCELED);
    assert_null(plan);
    assert_non_null(strstr(err, "stopped"));
    assert_int_equal(sc.calls, at);
  }
  free(len);
}

/* 1468 tokens, cap 300: first fit and the column packings need 6
 * micro-batches, the exact search finds 5 (test_auto_exact.c). */
static const uint32_t kExact[] = {61, 69, 75, 85, 81, 82, 79, 77, 79, 88,
                                  59, 64, 85, 78, 54, 62, 88, 66, 60, 76};

static const stop_case_t cases[] = {
    /* PACKED, nearly full (the stress setting of bench/planner: a fifth of
     * the sequences above half the cap): first fit, tightening, repair. */
    {"packed-full", 4096, 1, 8192, 7168, 0, PK_MODE_PACKED, false, 0, 0, NULL, 0, "tighten"},
    {"packed-full-dp4", 4096, 4, 8192, 7168, 0, PK_MODE_PACKED, false, 0, 0, NULL, 0, "tighten"},
    /* PACKED with room: the column packings, refine and lower. */
    {"packed", 2048, 16, 32768, 15360, 0, PK_MODE_PACKED, false, 0, 0, NULL, 0, "level-columns"},
    {"packed-dp2", 2048, 2, 16384, 15360, 0, PK_MODE_PACKED, false, 0, 0, NULL, 0, "tighten"},
    /* max_seqs: completion and the count search. */
    {"max-seqs", 2048, 8, 16384, 15360, 4, PK_MODE_PACKED, false, 0, 0, NULL, 0, "completion"},
    {"max-seqs-dp1", 4096, 1, 16384, 15360, 4, PK_MODE_PACKED, false, 0, 0, NULL, 0, "completion"},
    /* equal_count: the tier packing. */
    {"equal", 1024, 8, 16384, 15360, 0, PK_MODE_PACKED, true, 0, 0, NULL, 0, "tier-columns"},
    /* Small tight batches: the exact search. */
    {"exact", 20, 1, 300, 0, 0, PK_MODE_PACKED, false, 0, 0, kExact, 20, "exact"},
    {"exact-dp4", 80, 4, 300, 0, 0, PK_MODE_PACKED, false, 0, 0, kExact, 20, "exact"},
    {"exact-verl", 24, 1, 300, 0, 0, PK_MODE_PACKED, false, 50, 90, NULL, 0, "level-columns"},
    /* PADDED: the candidate table (cut search with few runs per tier, level
     * search with 2 to 64 columns). */
    {"padded", 1024, 8, 16384, 15360, 0, PK_MODE_PADDED, false, 0, 0, NULL, 0, "halved"},
    {"padded-dp64", 4096, 64, 32768, 15360, 0, PK_MODE_PADDED, false, 0, 0, NULL, 0, "cap-levels"},
    {"padded-equal", 1024, 8, 16384, 15360, 0, PK_MODE_PADDED, true, 0, 0, NULL, 0, "padded-tiers"},
};

static void test_stop_every_stage(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    stop_everywhere(&cases[i]);
}

/* The placement of a large batch polls every PK_AUTO_POLL_EVERY items: a
 * batch of 65536 sequences polls at least 65536 / PK_AUTO_POLL_EVERY times
 * (first fit alone places every item once). */
static void test_long_loops_poll(void **state) {
  (void)state;
  stop_case_t c = {"large", 65536, 64, 16384, 15360, 0, PK_MODE_PACKED, false, 0, 0, NULL, 0, NULL};
  uint32_t *len = case_lengths(&c, 7);
  pk_request_t req = case_request(&c, len);
  char err[512];
  stop_counter_t never = {0, UINT64_MAX};
  pk_limits_t lim = {.should_stop = stop_at, .stop_arg = &never};
  pk_plan_t *plan = NULL;
  assert_int_equal(pk_plan_limited(&req, &lim, &plan, err, sizeof err), 0);
  pk_plan_free(plan);
  assert_true(never.calls >= 65536 / PK_AUTO_POLL_EVERY);
  /* Stopped at a poll inside the placement, it returns at once. */
  stop_counter_t sc = {0, never.calls / 2};
  lim.stop_arg = &sc;
  assert_int_equal(pk_plan_limited(&req, &lim, &plan, err, sizeof err), PK_ECANCELED);
  assert_int_equal(sc.calls, never.calls / 2);
  free(len);
}

/* The trace: a winner from the overview's names, the count the plan has,
 * improvers that never raise the step cost, and every candidate's fate. */
static void test_trace(void **state) {
  (void)state;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint32_t *len = case_lengths(&cases[i], 0x77 + i);
    pk_request_t req = case_request(&cases[i], len);
    char err[512];
    pk_plan_t *plan = NULL;
    pk_auto_trace_t trace = {0};
    const pk_auto_trace_t *t = &trace;
    const pk_limits_t lim = {.trace = &trace};
    assert_int_equal(pk_plan_limited(&req, &lim, &plan, err, sizeof err), 0);
    assert_non_null(t->winner);
    assert_int_equal(t->m, plan->stats.micro_batches_per_rank);
    bool winner_seen = false;
    for (uint32_t s = 0; s < t->nstages; s++) {
      const pk_auto_stage_rec_t *r = &t->stage[s];
      bool improver = strcmp(r->name, "refine") == 0 || strcmp(r->name, "lower") == 0 ||
                      strcmp(r->name, "lower-padded") == 0;
      if (improver)
        assert_true(r->after <= r->before * (1 + 1e-12));
      /* Every candidate's fate is recorded; a skipped one says why, and
       * the winner was the best when it ran. */
      assert_true(improver == (r->fate == PK_FATE_RAN));
      assert_true((r->fate == PK_FATE_SKIPPED) == (r->why != NULL));
      winner_seen |= strcmp(r->name, t->winner) == 0 && r->fate == PK_FATE_BEST;
    }
    assert_true(winner_seen || strcmp(t->winner, "padded-tiers") == 0);
    pk_plan_free(plan);
    free(len);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_stop_every_stage),
      cmocka_unit_test(test_long_loops_poll),
      cmocka_unit_test(test_trace),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
