/* A random micro-batch layout for the GPU agent's tests (host property
 * tests and CUDA comparisons): rows with zero-length and short (< 2*CP)
 * spans at random columns, a random subset of rows in random order, CP in
 * {1,2,4,8}, TP in {1,2}, zigzag or Ulysses slots. case_free releases what
 * case_make allocates. */
#ifndef PK_GPU_TEST_CASES_H
#define PK_GPU_TEST_CASES_H

#include "gpu_test_util.h"

typedef struct {
  int32_t B, S, n, cp, tp, algo;
  int32_t *seqs, *cu_pad, *start, *length;
  int64_t T, Tl;
} rcase_t;

static inline void case_free(rcase_t *c) {
  free(c->seqs);
  free(c->cu_pad);
  free(c->start);
  free(c->length);
}

/* A random micro-batch layout. */
static inline void case_make(pkt_rng_t *rng, rcase_t *c) {
  static const int32_t cps[4] = {1, 2, 4, 8};
  memset(c, 0, sizeof *c);
  c->B = (int32_t)pkt_range(rng, 1, 10);
  c->S = (int32_t)pkt_range(rng, 0, 24);
  c->cp = cps[pkt_range(rng, 0, 3)];
  c->tp = (int32_t)pkt_range(rng, 1, 2);
  c->algo = (int32_t)pkt_range(rng, 0, 1);
  c->start = (int32_t *)calloc((size_t)c->B, sizeof(int32_t));
  c->length = (int32_t *)calloc((size_t)c->B, sizeof(int32_t));
  c->seqs = (int32_t *)calloc((size_t)c->B, sizeof(int32_t));
  c->cu_pad = (int32_t *)calloc((size_t)c->B + 1, sizeof(int32_t));
  for (int32_t b = 0; b < c->B; b++) {
    int64_t kind = pkt_range(rng, 0, 9);
    int32_t len = kind == 0   ? 0
                  : kind <= 3 ? (int32_t)pkt_range(rng, 0, 2 * c->cp)
                              : (int32_t)pkt_range(rng, 0, c->S);
    len = len > c->S ? c->S : len;
    c->length[b] = len;
    c->start[b] = (int32_t)pkt_range(rng, 0, c->S - len);
  }
  /* A random subset of rows in random order. */
  int32_t *perm = (int32_t *)malloc(sizeof(int32_t) * (size_t)c->B);
  for (int32_t b = 0; b < c->B; b++) {
    perm[b] = b;
  }
  for (int32_t b = c->B - 1; b > 0; b--) {
    int32_t k = (int32_t)pkt_range(rng, 0, b), t = perm[b];
    perm[b] = perm[k];
    perm[k] = t;
  }
  c->n = (int32_t)pkt_range(rng, 0, c->B);
  memcpy(c->seqs, perm, sizeof(int32_t) * (size_t)c->n);
  free(perm);
  /* Slots: aligned to A (verl's rule) plus sometimes extra aligned padding;
   * Ulysses slots may be unaligned with the stream padded at the end. */
  int32_t align =
      c->algo == PK_GPU_CP_ZIGZAG ? (c->cp > 1 ? 2 * c->cp * c->tp : c->tp) : c->cp * c->tp;
  bool loose = c->algo == PK_GPU_CP_ULYSSES && pkt_range(rng, 0, 1);
  int32_t a = loose ? 1 : align;
  for (int32_t i = 0; i < c->n; i++) {
    int32_t len = c->length[c->seqs[i]];
    int32_t plen =
        (len + a - 1) / a * a + (pkt_range(rng, 0, 3) == 0 ? a * (int32_t)pkt_range(rng, 1, 2) : 0);
    c->cu_pad[i + 1] = c->cu_pad[i] + plen;
  }
  if (loose && c->n > 0) {
    int32_t tot = c->cu_pad[c->n];
    c->cu_pad[c->n] = (tot + c->cp - 1) / c->cp * c->cp;
  }
  c->T = c->cu_pad[c->n];
  c->Tl = c->T / c->cp;
}

#endif
