/* Helpers shared by the GPU agent's tests: host-backend shortcuts that pack
 * or unpack one tensor through the public API, and a small deterministic
 * random generator. Everything returned is owned by the caller. */
#ifndef PK_GPU_TEST_UTIL_H
#define PK_GPU_TEST_UTIL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pk_gpu.h"

/* xorshift64*: deterministic, seeded per test. */
typedef struct {
  uint64_t s;
} pkt_rng_t;

static inline uint64_t pkt_next(pkt_rng_t *r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return r->s * 2685821657736338717ULL;
}

/* Uniform in [lo, hi]. */
static inline int64_t pkt_range(pkt_rng_t *r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(pkt_next(r) % (uint64_t)(hi - lo + 1));
}

static inline pk_gpu_layout_desc_t pkt_desc(int32_t batch, int32_t seqlen, int32_t n,
                                            const int32_t *seqs, const int32_t *cu_pad, int32_t cp,
                                            int32_t algo) {
  pk_gpu_layout_desc_t d;
  memset(&d, 0, sizeof d);
  d.batch = batch;
  d.seqlen = seqlen;
  d.nseqs = n;
  d.seqs = seqs;
  d.cu_pad = cu_pad;
  d.cp = cp;
  d.cp_algo = algo;
  return d;
}

static inline pk_gpu_op_t pkt_op(int32_t field, int32_t esize, int64_t width, const void *src,
                                 void *dst, uint64_t fill) {
  pk_gpu_op_t o;
  memset(&o, 0, sizeof o);
  o.field = field;
  o.elem_size = esize;
  o.width = width;
  o.src = src;
  o.dst = dst;
  o.fill_bits = fill;
  o.value_bits = 1;
  return o;
}

#endif
