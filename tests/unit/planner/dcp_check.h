/* Invariant checks of dynamic context-parallel plans (the rules listed in
 * pk_dcp.h), computed from the request alone so that they do not share the
 * planner's code: every index once; every GPU of a slot in at most one
 * group and the idle count right; sizes allowed and aligned; the per-GPU
 * cap and max_seqs; each sequence's group at least its smallest fitting
 * allowed size; cu_seqlens; each group's cost by the documented formula;
 * the step the sum of slot maxima and at or above the proven bound. */
#ifndef PK_TEST_DCP_CHECK_H
#define PK_TEST_DCP_CHECK_H

#include "pk_dcp.h"
#include "plan_check.h"

static inline uint32_t dcp_test_pool(const pk_dcp_request_t *req) {
  return req->dp * (req->cp ? req->cp : 1);
}

static inline bool dcp_test_pow2(uint32_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

static inline bool dcp_test_allowed(const pk_dcp_request_t *req, uint32_t c) {
  uint32_t pool = dcp_test_pool(req), min = req->min_size ? req->min_size : 1;
  if (c < min || c > pool)
    return false;
  return req->sizes == PK_DCP_SIZES_ANY || dcp_test_pow2(c) || c == pool;
}

static inline uint64_t dcp_test_align(const pk_dcp_request_t *req, uint32_t c) {
  uint32_t tp = req->tp ? req->tp : 1;
  if (c == 1)
    return req->sequence_parallel ? tp : 1;
  return (uint64_t)c * tp * (req->cp_algo == PK_CP_ZIGZAG ? 2 : 1);
}

/* The smallest allowed size at which sequence i fits a group alone. */
static inline uint32_t dcp_test_cmin(const pk_dcp_request_t *req, uint32_t i) {
  for (uint32_t c = 1; c <= dcp_test_pool(req); c++)
    if (dcp_test_allowed(req, c) &&
        test_round_up(req->lengths[i], dcp_test_align(req, c)) <= c * req->max_tokens)
      return c;
  return UINT32_MAX;
}

/* The documented per-GPU cost of a group (pk_dcp.h). */
static inline double dcp_test_cost(const pk_dcp_request_t *req, uint32_t c, const uint32_t *seqs,
                                   uint32_t nseqs) {
  double lin = req->cost.base.linear, quad = req->cost.base.quadratic;
  if (lin == 0 && quad == 0) {
    lin = 1;
    quad = 1.0 / 24576;
  }
  double cost = req->cost.base.per_micro_batch + req->cost.cp_group * (c - 1);
  for (uint32_t x = 0; x < nseqs; x++) {
    double a = (double)test_round_up(req->lengths[seqs[x]], dcp_test_align(req, c));
    cost += req->cost.base.per_sequence + (lin * a + quad * a * a) / c +
            req->cost.cp_token * a * (c - 1) / c;
  }
  return cost;
}

static inline void check_dcp_plan(const pk_dcp_request_t *req, const pk_dcp_plan_t *plan) {
  uint32_t pool = dcp_test_pool(req);
  uint32_t max_seqs = req->max_seqs ? req->max_seqs : UINT32_MAX;
  assert_int_equal(plan->pool, pool);
  assert_int_equal(plan->stats.cap_violations, 0);
  assert_true(plan->slots >= 1);
  assert_true(plan->slots >= plan->stats.slots_lower_bound);
  uint8_t *seen = calloc(req->n, 1);
  uint32_t *owner = malloc((size_t)plan->slots * pool * sizeof *owner);
  assert_non_null(seen);
  assert_non_null(owner);
  for (size_t x = 0; x < (size_t)plan->slots * pool; x++)
    owner[x] = UINT32_MAX;
  double step = 0, work = 0;
  for (uint32_t r = 0, slot = 0; slot < plan->slots; slot++) {
    double mx = 0;
    for (; r < plan->ngroups && plan->groups[r].slot == slot; r++) {
      const pk_dcp_group_t *g = &plan->groups[r];
      uint32_t c = g->size;
      /* Sizes and blocks. */
      if (!dcp_test_allowed(req, c))
        fail_msg("slot %u group %u: size %u is not allowed", slot, r, c);
      if (g->first + c > pool)
        fail_msg("slot %u group %u: GPUs %u..%u past the pool", slot, r, g->first,
                 g->first + c - 1);
      if (req->sizes == PK_DCP_SIZES_POW2 && (c == pool ? g->first != 0 : g->first % c != 0))
        fail_msg("slot %u group %u: size %u starts at GPU %u, not aligned", slot, r, c, g->first);
      for (uint32_t x = g->first; x < g->first + c; x++) {
        if (owner[(size_t)slot * pool + x] != UINT32_MAX)
          fail_msg("slot %u: GPU %u in two groups", slot, x);
        owner[(size_t)slot * pool + x] = r;
        assert_int_equal(plan->gpu_group[(size_t)slot * pool + x], r);
      }
      /* Members, layout, the cap. */
      assert_true(g->nseqs >= 1);
      assert_true(g->nseqs <= max_seqs);
      assert_int_equal(g->align, dcp_test_align(req, c));
      assert_int_equal(g->cu_seqlens[0], 0);
      assert_int_equal(g->cu_seqlens_padded[0], 0);
      uint64_t padded = 0;
      for (uint32_t k = 0; k < g->nseqs; k++) {
        uint32_t i = g->seqs[k];
        assert_true(i < req->n);
        if (seen[i])
          fail_msg("sequence %u in two groups", i);
        seen[i] = 1;
        if (c < dcp_test_cmin(req, i))
          fail_msg("sequence %u (%u tokens) in a group of %u, below its smallest %u", i,
                   req->lengths[i], c, dcp_test_cmin(req, i));
        assert_int_equal(g->cu_seqlens[k + 1] - g->cu_seqlens[k], req->lengths[i]);
        uint64_t a = test_round_up(req->lengths[i], g->align);
        assert_int_equal((uint64_t)(g->cu_seqlens_padded[k + 1] - g->cu_seqlens_padded[k]), a);
        padded += a;
      }
      assert_int_equal(g->padded_tokens, padded);
      if (padded > (uint64_t)c * req->max_tokens)
        fail_msg("slot %u group %u: %llu tokens over %u GPUs is over the cap %llu", slot, r,
                 (unsigned long long)padded, c, (unsigned long long)req->max_tokens);
      double cost = dcp_test_cost(req, c, g->seqs, g->nseqs);
      assert_true(fabs(cost - g->cost) <= 1e-9 * (1 + cost));
      mx = fmax(mx, cost);
      work += cost * c;
    }
    step += mx;
  }
  for (size_t i = 0; i < req->n; i++)
    if (!seen[i])
      fail_msg("sequence %zu in no group", i);
  uint32_t idle = 0;
  for (size_t x = 0; x < (size_t)plan->slots * pool; x++) {
    idle += owner[x] == UINT32_MAX;
    if (owner[x] == UINT32_MAX)
      assert_int_equal(plan->gpu_group[x], UINT32_MAX);
  }
  assert_int_equal(plan->stats.idle_gpu_slots, idle);
  assert_true(fabs(step - plan->stats.step_cost) <= 1e-9 * (1 + step));
  assert_true(fabs(work - plan->stats.work) <= 1e-9 * (1 + work));
  assert_true(plan->stats.step_cost_lower_bound <= step * (1 + 1e-9));
  free(seen);
  free(owner);
}

/* The layouts and caps random requests draw from: a property test names
 * its own (pools that are not a power of two, caps tight enough for what it
 * checks). */
typedef struct dcp_test_draw {
  const uint32_t *dps;
  uint32_t ndps;
  const uint64_t *caps;
  uint32_t ncaps;
} dcp_test_draw_t;

/* A random request over n lengths (stored in `lengths`): dp from d, cp 1, 2
 * or 4, TP 1-2, both CP layouts and size rules, sometimes a minimum size
 * and max_seqs, lengths of three shapes (RL-like, tiny, up to the pool's
 * whole cap) and, half the time, a random cost with CP terms. `algo` is
 * left AUTO. */
static inline void dcp_test_random_request(test_rng_t *r, const dcp_test_draw_t *d,
                                           pk_dcp_request_t *req, uint32_t *lengths, uint32_t n) {
  memset(req, 0, sizeof *req);
  static const uint32_t cps[] = {1, 2, 4};
  req->dp = d->dps[test_below(r, d->ndps)];
  req->cp = cps[test_below(r, 3)];
  req->tp = 1 + test_below(r, 2);
  req->cp_algo = test_below(r, 2);
  req->sequence_parallel = test_below(r, 2);
  req->sizes = test_below(r, 2);
  uint32_t pool = req->dp * req->cp;
  if (test_below(r, 4) == 0) {
    uint32_t m = 1 + test_below(r, pool);
    if (req->sizes == PK_DCP_SIZES_POW2)
      while (!dcp_test_pow2(m) && m != pool)
        m--;
    req->min_size = m;
  }
  req->max_tokens = d->caps[test_below(r, d->ncaps)];
  uint32_t shape = test_below(r, 3);
  for (uint32_t i = 0; i < n; i++)
    lengths[i] = shape == 0   ? test_rl_length(r, 32768)
                 : shape == 1 ? 1 + test_below(r, 64)
                              : 1 + test_below(r, (uint32_t)(req->max_tokens * pool));
  req->lengths = lengths;
  req->n = n;
  if (test_below(r, 4) == 0)
    req->max_seqs = 1 + test_below(r, 8);
  if (test_below(r, 2)) {
    req->cost.base.linear = test_uniform(r);
    req->cost.base.quadratic = test_uniform(r) / 8192;
    req->cost.base.per_sequence = test_below(r, 2) ? 100 * test_uniform(r) : 0;
    req->cost.base.per_micro_batch = test_below(r, 2) ? 1000 * test_uniform(r) : 0;
    req->cost.cp_token = test_below(r, 2) ? test_uniform(r) : 0;
    req->cost.cp_group = test_below(r, 2) ? 500 * test_uniform(r) : 0;
  }
}

#endif
