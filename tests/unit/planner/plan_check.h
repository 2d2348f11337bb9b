/* Invariant checks every plan must pass (the rules every plan obeys: the
 * cap, max_seqs, every index once, equal counts, the bounds), shared by the planner tests. Each
 * check fails the running cmocka test with a message naming what broke. */
#ifndef PK_TEST_PLAN_CHECK_H
#define PK_TEST_PLAN_CHECK_H

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pk_planner.h"

/* A deterministic generator for test inputs. */
typedef struct test_rng {
  uint64_t s;
} test_rng_t;

static inline uint64_t test_next(test_rng_t *r) {
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static inline double test_uniform(test_rng_t *r) {
  return (double)(test_next(r) >> 11) / 9007199254740992.0;
}

static inline uint32_t test_below(test_rng_t *r, uint32_t n) {
  return n == 0 ? 0 : (uint32_t)(test_next(r) % n);
}

/* RL-rollout-like lengths: prompt U[64, 1024) + log-normal response (median
 * 1500) capped at `resp_cap`, with 3 % at the cap. */
static inline uint32_t test_rl_length(test_rng_t *r, uint32_t resp_cap) {
  double u1 = test_uniform(r) + 1e-12, u2 = test_uniform(r);
  double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
  double resp = exp(log(1500.0) + z);
  if (resp > resp_cap || test_uniform(r) < 0.03)
    resp = resp_cap;
  return 64 + test_below(r, 960) + (uint32_t)resp;
}

static inline uint64_t test_round_up(uint64_t x, uint64_t m) {
  return m <= 1 ? x : (x + m - 1) / m * m;
}

/* Checks every rule of a plan against its request. */
static inline void check_plan(const pk_request_t *req, const pk_plan_t *plan) {
  uint32_t dp = req->parallel.dp;
  uint32_t cp = req->parallel.cp ? req->parallel.cp : 1;
  uint32_t nmini = req->batching.mini_batches ? req->batching.mini_batches : 1;
  uint32_t align = pk_alignment(req);
  uint32_t group = req->parallel.microbatch_group
                       ? req->parallel.microbatch_group
                       : ((req->parallel.vpp > 1) ? (req->parallel.pp ? req->parallel.pp : 1) : 1);
  uint32_t min_micro = req->batching.min_micro_batches ? req->batching.min_micro_batches : 1;
  /* The cost model with its defaults: a micro-batch costs per_micro_batch
   * plus, for every slot of a aligned tokens, per_sequence + lin a + quad
   * a^2. */
  double lin = req->cost.linear, quad = req->cost.quadratic;
  if (lin == 0 && quad == 0) {
    lin = 1;
    quad = 1.0 / 24576;
  }
  double total_cost = 0, step_cost = 0;
  assert_true(align > 0);
  assert_int_equal(plan->dp, dp);
  assert_int_equal(plan->mini_batches, nmini);
  assert_int_equal(plan->stats.cap_violations, 0);

  uint8_t *seen = calloc(req->n, 1);
  assert_non_null(seen);
  uint32_t *per_rank = calloc(dp, sizeof *per_rank);
  assert_non_null(per_rank);
  for (uint32_t m = 0; m < nmini; m++) {
    uint32_t count = pk_plan_cell(plan, 0, m)->nmicros;
    assert_true(count >= min_micro);
    assert_int_equal(count % group, 0);
    double loss_sum = 0;
    uint64_t loss_tokens = 0;
    for (uint32_t r = 0; r < dp; r++) {
      const pk_cell_t *cell = pk_plan_cell(plan, r, m);
      /* Rule 2: the same count on every rank. */
      assert_int_equal(cell->nmicros, count);
      for (uint32_t j = 0; j < cell->nmicros; j++) {
        const pk_micro_t *mb = &cell->micros[j];
        assert_true(mb->nseqs > 0);
        assert_int_equal(mb->cu_seqlens[0], 0);
        assert_int_equal(mb->cu_seqlens_padded[0], 0);
        uint64_t tokens = 0;
        double cost = req->cost.per_micro_batch;
        for (uint32_t q = 0; q < mb->nseqs; q++) {
          uint32_t s = mb->seqs[q];
          assert_true(s < req->n);
          /* Rule 1: every index exactly once. */
          assert_int_equal(seen[s], 0);
          seen[s] = 1;
          per_rank[r]++;
          uint32_t len = req->lengths[s];
          tokens += len;
          loss_tokens += req->n_loss_tokens ? req->loss_tokens[s] : len;
          /* Rule 4: real lengths, aligned slots, both consistent. */
          assert_int_equal(mb->cu_seqlens[q + 1] - mb->cu_seqlens[q], (int32_t)len);
          int32_t slot = mb->cu_seqlens_padded[q + 1] - mb->cu_seqlens_padded[q];
          assert_true(slot >= (int32_t)len);
          cost += req->cost.per_sequence + lin * slot + quad * (double)slot * slot;
          assert_int_equal(mb->cu_seqlens_padded[q + 1] % (int32_t)align, 0);
          if (req->batching.mode != PK_MODE_PADDED && q + 1 < mb->nseqs)
            assert_int_equal(slot, (int32_t)test_round_up(len, align));
          assert_true((uint32_t)slot <= mb->max_seqlen);
        }
        assert_int_equal(mb->tokens, tokens);
        assert_int_equal((uint64_t)mb->padded_tokens, (uint64_t)mb->cu_seqlens_padded[mb->nseqs]);
        /* Rule 3: the hard caps. */
        if (req->batching.max_tokens)
          assert_true(mb->padded_tokens / cp <= req->batching.max_tokens);
        if (req->batching.max_seqs)
          assert_true(mb->nseqs <= req->batching.max_seqs);
        if (req->layout.total_multiple > 1)
          assert_int_equal(mb->padded_tokens % req->layout.total_multiple, 0);
        loss_sum += mb->loss_scale;
        if (fabs(mb->cost - cost) > 1e-9 * (1 + cost))
          fail_msg("rank %u mini %u micro %u: cost %.9g, the cost model gives %.9g", r, m, j,
                   mb->cost, cost);
        total_cost += cost;
      }
    }
    for (uint32_t j = 0; j < count; j++) {
      double level = 0;
      for (uint32_t r = 0; r < dp; r++)
        level = fmax(level, pk_plan_cell(plan, r, m)->micros[j].cost);
      step_cost += level;
    }
    if (loss_tokens > 0)
      assert_true(fabs(loss_sum - 1.0) < 1e-9);
  }
  for (size_t i = 0; i < req->n; i++)
    assert_int_equal(seen[i], 1);
  if (req->batching.equal_count)
    for (uint32_t r = 1; r < dp; r++)
      assert_int_equal(per_rank[r], per_rank[0]);
  /* The bounds are proven, so no plan of any algorithm beats them. */
  const pk_stats_t *st = &plan->stats;
  assert_true(fabs(st->total_cost - total_cost) <= 1e-9 * (1 + total_cost));
  assert_true(fabs(st->step_cost - step_cost) <= 1e-9 * (1 + step_cost));
  assert_true(st->micro_batches_per_rank >= st->micro_batches_lower_bound);
  assert_true(st->step_cost >= st->step_cost_lower_bound * (1 - 1e-9));
  assert_true(st->lockstep_efficiency <= st->lockstep_efficiency_bound + 1e-9);
  free(seen);
  free(per_rank);
}

/* Two plans of the same request must be identical (rule 5). */
static inline void check_same_plan(const pk_plan_t *a, const pk_plan_t *b) {
  assert_int_equal(a->dp, b->dp);
  assert_int_equal(a->mini_batches, b->mini_batches);
  for (uint32_t r = 0; r < a->dp; r++)
    for (uint32_t m = 0; m < a->mini_batches; m++) {
      const pk_cell_t *x = pk_plan_cell(a, r, m), *y = pk_plan_cell(b, r, m);
      assert_int_equal(x->nmicros, y->nmicros);
      for (uint32_t j = 0; j < x->nmicros; j++) {
        assert_int_equal(x->micros[j].nseqs, y->micros[j].nseqs);
        assert_memory_equal(x->micros[j].seqs, y->micros[j].seqs,
                            x->micros[j].nseqs * sizeof(uint32_t));
        assert_memory_equal(x->micros[j].cu_seqlens_padded, y->micros[j].cu_seqlens_padded,
                            (x->micros[j].nseqs + 1) * sizeof(int32_t));
      }
    }
}

/* A pk_limits_t.should_stop callback that answers "stop" from its `at`-th
 * call on, counting the calls (the stop tests stop at every poll). */
typedef struct stop_counter {
  uint64_t calls;
  uint64_t at;
} stop_counter_t;

static inline int stop_at(void *arg) {
  stop_counter_t *c = arg;
  return ++c->calls >= c->at;
}

#endif
