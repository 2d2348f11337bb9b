/* Test fixture for the codec tests: a deterministic random generator and
 * random PlanRequest messages built the way a client builds them (every part
 * malloc'd, freed with packd__v1__plan_request__free_unpacked). */
#ifndef PK_CODEC_FIXTURE_H
#define PK_CODEC_FIXTURE_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "codec.h"

/* splitmix64. */
static inline uint64_t fx_rand(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static inline uint32_t fx_below(uint64_t *s, uint32_t bound) {
  return (uint32_t)(fx_rand(s) % bound);
}

static inline void *fx_alloc(size_t n, size_t size) {
  void *p = calloc(n == 0 ? 1 : n, size);
  assert_non_null(p);
  return p;
}

static inline Packd__V1__PlanRequest *fx_request_new(void) {
  Packd__V1__PlanRequest *m = fx_alloc(1, sizeof *m);
  packd__v1__plan_request__init(m);
  return m;
}

static inline char *fx_strdup(const char *s) {
  char *c = fx_alloc(strlen(s) + 1, 1);
  memcpy(c, s, strlen(s) + 1);
  return c;
}

/* Sets lengths (n entries, values below max_len), optionally loss tokens. */
static inline void fx_set_lengths(Packd__V1__PlanRequest *m, const uint32_t *lens, size_t n) {
  free(m->lengths);
  m->lengths = fx_alloc(n, sizeof *m->lengths);
  memcpy(m->lengths, lens, n * sizeof *lens);
  m->n_lengths = n;
}

static inline Packd__V1__Parallel *fx_parallel(Packd__V1__PlanRequest *m) {
  if (m->parallel == NULL) {
    m->parallel = fx_alloc(1, sizeof *m->parallel);
    packd__v1__parallel__init(m->parallel);
  }
  return m->parallel;
}

static inline Packd__V1__Batching *fx_batching(Packd__V1__PlanRequest *m) {
  if (m->batching == NULL) {
    m->batching = fx_alloc(1, sizeof *m->batching);
    packd__v1__batching__init(m->batching);
  }
  return m->batching;
}

static inline Packd__V1__Cost *fx_cost(Packd__V1__PlanRequest *m) {
  if (m->cost == NULL) {
    m->cost = fx_alloc(1, sizeof *m->cost);
    packd__v1__cost__init(m->cost);
  }
  return m->cost;
}

static inline Packd__V1__Layout *fx_layout(Packd__V1__PlanRequest *m) {
  if (m->layout == NULL) {
    m->layout = fx_alloc(1, sizeof *m->layout);
    packd__v1__layout__init(m->layout);
  }
  return m->layout;
}

/* A random request: every field random (any value the wire allows, not only
 * valid ones), each sub-message present with probability 3/4. */
static inline Packd__V1__PlanRequest *fx_random_request(uint64_t *s) {
  Packd__V1__PlanRequest *m = fx_request_new();
  size_t n = fx_below(s, 300);
  m->n_lengths = n;
  m->lengths = fx_alloc(n, sizeof(uint32_t));
  for (size_t i = 0; i < n; i++)
    m->lengths[i] = fx_below(s, 4) == 0 ? (uint32_t)fx_rand(s) : fx_below(s, 20000);
  if (fx_below(s, 2)) {
    m->n_loss_tokens = n;
    m->loss_tokens = fx_alloc(n, sizeof(uint32_t));
    for (size_t i = 0; i < n; i++)
      m->loss_tokens[i] = fx_below(s, 20000);
  }
  if (fx_below(s, 2)) {
    m->n_groups = n;
    m->groups = fx_alloc(n, sizeof(uint64_t));
    for (size_t i = 0; i < n; i++)
      m->groups[i] = fx_rand(s);
  }
  if (fx_below(s, 2))
    m->job = fx_strdup("job-under-test");
  if (fx_below(s, 4)) {
    Packd__V1__Parallel *p = fx_parallel(m);
    p->dp = fx_below(s, 70);
    p->tp = fx_below(s, 9);
    p->cp = fx_below(s, 9);
    p->pp = fx_below(s, 9);
    p->vpp = fx_below(s, 5);
    p->cp_algo = (Packd__V1__CpAlgo)fx_below(s, 3);
    p->sequence_parallel = fx_below(s, 2);
    p->num_heads = fx_below(s, 65);
    p->microbatch_group = fx_below(s, 5);
  }
  if (fx_below(s, 4)) {
    Packd__V1__Batching *b = fx_batching(m);
    b->mini_batches = fx_below(s, 5);
    b->shuffle = fx_below(s, 2);
    b->dp_balance = (Packd__V1__DpBalance)fx_below(s, 8);
    b->equal_count = fx_below(s, 2);
    b->mode = (Packd__V1__Mode)fx_below(s, 4);
    b->max_tokens = fx_below(s, 2) ? fx_rand(s) : fx_below(s, 40000);
    b->max_seqs = fx_below(s, 20);
    b->micro_batch_size = fx_below(s, 20);
    b->min_micro_batches = fx_below(s, 6);
    b->round = fx_below(s, 64);
    b->micro_algo = (Packd__V1__MicroAlgo)fx_below(s, 7);
    b->order = (Packd__V1__Order)fx_below(s, 4);
    b->keep_groups = fx_below(s, 2);
    b->groups_on_rank = fx_below(s, 2);
  }
  if (fx_below(s, 4)) {
    Packd__V1__Cost *c = fx_cost(m);
    c->linear = (double)fx_below(s, 1000) / 7.0;
    c->quadratic = (double)fx_below(s, 1000) / 123456.0;
    c->per_sequence = fx_below(s, 2) ? (double)fx_below(s, 1000) / 3.0 : 0;
    c->per_micro_batch = fx_below(s, 2) ? (double)fx_below(s, 1000) / 9.0 : 0;
  }
  if (fx_below(s, 4)) {
    Packd__V1__Layout *l = fx_layout(m);
    l->align = fx_below(s, 33);
    l->pad_multiple = fx_below(s, 33);
    l->total_multiple = fx_below(s, 129);
    l->fixed_shape = fx_below(s, 2);
  }
  m->seed = fx_below(s, 2) ? fx_rand(s) : 0;
  return m;
}

/* Packs m into a new buffer (free with free()). */
static inline uint8_t *fx_pack(const Packd__V1__PlanRequest *m, size_t *len) {
  *len = packd__v1__plan_request__get_packed_size(m);
  uint8_t *buf = fx_alloc(*len, 1);
  assert_int_equal(packd__v1__plan_request__pack(m, buf), *len);
  return buf;
}

/* The plan id of a request given as bytes. */
static inline void fx_id_of_bytes(const uint8_t *buf, size_t len, char id[33]) {
  Packd__V1__PlanRequest *msg = NULL;
  pk_request_t req;
  char err[256];
  assert_int_equal(pk_codec_decode_request(buf, len, &msg, &req, err, sizeof err), PK_OK);
  pk_codec_plan_id(msg, id, 33);
  pk_codec_free_request(msg);
}

#endif
