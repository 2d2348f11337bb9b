/* Test fixture for the compatibility algorithms (test_compat_*.c): builds a
 * pk_cfg_t and a pk_ctx_t from a list of lengths the way the planner does
 * (size = aligned length, or row width rounded to lcm(round, A) in PADDED
 * mode; cost = pk_slot_cost: per_sequence + linear * a + quadratic * a^2)
 * and checks assignments against the plan rules. The fixture owns its
 * arrays; fx_free releases them. */
#ifndef PK_COMPAT_FIXTURE_H
#define PK_COMPAT_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pk_internal.h"

typedef struct fx {
  pk_cfg_t cfg;
  pk_ctx_t ctx;
  uint32_t n;
  uint32_t *idx, *len;
  uint64_t *size;
  double *cost;
} fx_t;

/* Defaults: align 1, round 1, no caps, cost 1 + 1/24576 quadratic. */
static inline void fx_cfg_default(pk_cfg_t *c, uint32_t dp, uint32_t mode, uint64_t max_tokens) {
  memset(c, 0, sizeof(*c));
  c->dp = dp;
  c->tp = c->cp = c->pp = c->vpp = 1;
  c->align = 1;
  c->group = 1;
  c->mode = mode;
  c->mini_batches = 1;
  c->cap = max_tokens ? max_tokens : UINT64_MAX;
  c->max_seqs = UINT32_MAX;
  c->min_micro = 1;
  c->round = 1;
  c->total_multiple = 1;
  c->lin = 1.0;
  c->quad = 1.0 / 24576.0;
}

static inline uint64_t fx_round_up(uint64_t x, uint64_t m) {
  return (x + m - 1) / m * m;
}

static inline uint64_t fx_gcd(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* (Re)computes sizes and costs from f->cfg and the lengths. */
static inline void fx_build(fx_t *f) {
  uint64_t m = f->cfg.align;
  if (f->cfg.mode == PK_MODE_PADDED)
    m = m / fx_gcd(m, f->cfg.round) * f->cfg.round;
  for (uint32_t k = 0; k < f->n; k++) {
    uint64_t a = fx_round_up(f->len[k], m);
    f->size[k] = a;
    f->cost[k] = pk_slot_cost(&f->cfg, a);
  }
  f->ctx = (pk_ctx_t){
      .cfg = &f->cfg, .n = f->n, .idx = f->idx, .size = f->size, .cost = f->cost, .len = f->len};
}

static inline void fx_init(fx_t *f, const uint32_t *lens, uint32_t n, uint32_t dp, uint32_t mode,
                           uint64_t max_tokens) {
  f->n = n;
  fx_cfg_default(&f->cfg, dp, mode, max_tokens);
  f->idx = calloc(n ? n : 1, sizeof(uint32_t));
  f->len = calloc(n ? n : 1, sizeof(uint32_t));
  f->size = calloc(n ? n : 1, sizeof(uint64_t));
  f->cost = calloc(n ? n : 1, sizeof(double));
  assert_non_null(f->idx);
  assert_non_null(f->len);
  assert_non_null(f->size);
  assert_non_null(f->cost);
  for (uint32_t k = 0; k < n; k++) {
    f->idx[k] = k;
    f->len[k] = lens[k];
  }
  fx_build(f);
}

static inline void fx_free(fx_t *f) {
  free(f->idx);
  free(f->len);
  free(f->size);
  free(f->cost);
  memset(f, 0, sizeof(*f));
}

/* The item numbers by size descending, ties by item number (the order the
 * packers take; insertion sort, for small test batches). */
static inline void fx_size_order(const fx_t *f, uint32_t *order) {
  for (uint32_t i = 0; i < f->n; i++)
    order[i] = i;
  for (uint32_t i = 1; i < f->n; i++)
    for (uint32_t j = i; j > 0 && f->size[order[j - 1]] < f->size[order[j]]; j--) {
      uint32_t t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
}

/* A small deterministic generator (splitmix64) for property tests. */
static inline uint64_t fx_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static inline uint32_t fx_below(uint64_t *s, uint32_t bound) {
  return (uint32_t)(fx_rand(s) % bound);
}

/* Lengths with an RL-rollout-like long tail: mostly short, some long, a few
 * at `max_len`, some zero-length when `zeros`. */
static inline void fx_random_lengths(uint64_t *s, uint32_t *lens, uint32_t n, uint32_t max_len,
                                     int zeros) {
  for (uint32_t k = 0; k < n; k++) {
    uint32_t pick = fx_below(s, 100);
    uint32_t v;
    if (zeros && pick < 3)
      v = 0;
    else if (pick < 8)
      v = max_len;
    else if (pick < 40)
      v = 1 + fx_below(s, max_len);
    else
      v = 1 + fx_below(s, max_len / 8 + 1);
    lens[k] = v;
  }
}

#endif
