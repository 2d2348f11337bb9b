/* Runs the CUDA kernels of gpu/src/cuda_kernels.cuh on the host: every
 * thread of every block of a launch, one after another (pack and unpack use
 * no barriers), or as real threads with a barrier (spans), through small
 * shims for the CUDA built-ins. The bytes must equal the host backend's.
 * This checks the kernels' indexing, vector widths, lanes and grid-stride
 * loops on machines without a GPU; tests/gpu/test_cuda.c checks the real
 * thing where a GPU exists. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __grid_constant__

struct emu_dim3 {
  unsigned x, y, z;
};
static thread_local emu_dim3 threadIdx, blockIdx;
static emu_dim3 blockDim, gridDim;
struct uint4 {
  unsigned x, y, z, w;
};
struct uint2 {
  unsigned x, y;
};
static pthread_barrier_t emu_barrier;
static void __syncthreads() {
  pthread_barrier_wait(&emu_barrier);
}
static int atomicCAS(int *p, int cmp, int val) {
  __atomic_compare_exchange_n(p, &cmp, val, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  return cmp;
}
static int atomicMin(int *p, int v) {
  int old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (v < old &&
         !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
static int atomicMax(int *p, int v) {
  int old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (v > old &&
         !__atomic_compare_exchange_n(p, &old, v, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {
  }
  return old;
}
static int atomicAdd(int *p, int v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}

#include "cuda_kernels.cuh"
#include "gpu_internal.h"
#include "gpu_test_cases.h"

static int failures;

#define EXPECT(cond, ...)                                                                          \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      failures++;                                                                                  \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                                         \
      fprintf(stderr, __VA_ARGS__);                                                                \
      fprintf(stderr, " [%s]\n", pk_gpu_last_error());                                             \
      if (failures > 20) {                                                                         \
        exit(1);                                                                                   \
      }                                                                                            \
    }                                                                                              \
  } while (0)

/* A launch of pack (unpack = false) or unpack with grid (bx, nops) x threads;
 * the kernels with the copy unroll when `wide` (whatever the rows' width, so
 * both instantiations run on every shape). */
static void emu_launch(bool unpack, unsigned bx, unsigned threads, const pk_gpu_meta_t &m,
                       const int32_t *start, const int32_t *length, int32_t r,
                       const pk_cuda_ops &ops, int32_t nops, pk_gpu_bad_t *bad, bool wide = false) {
  gridDim = {bx, (unsigned)nops, 1};
  blockDim = {threads, 1, 1};
  for (unsigned y = 0; y < (unsigned)nops; y++) {
    for (unsigned x = 0; x < bx; x++) {
      for (unsigned t = 0; t < threads; t++) {
        blockIdx = {x, y, 0};
        threadIdx = {t, 0, 0};
        if (unpack && wide) {
          unpack_kernel<PK_CUDA_UNROLL>(m, start, length, r, ops, bad);
        } else if (unpack) {
          unpack_kernel<1>(m, start, length, r, ops, bad);
        } else if (wide) {
          pack_kernel<PK_CUDA_UNROLL>(m, start, length, r, ops, bad);
        } else {
          pack_kernel<1>(m, start, length, r, ops, bad);
        }
      }
    }
  }
}

static pk_gpu_kop_t to_kop(const pk_gpu_op_t &o) {
  pk_gpu_kop_t k;
  memset(&k, 0, sizeof k);
  bool src = o.field == PK_GPU_FIELD_COPY || o.field == PK_GPU_FIELD_LABELS;
  k.src = src ? (const unsigned char *)o.src : NULL;
  k.dst = (unsigned char *)o.dst;
  k.row_bytes = o.width * o.elem_size;
  k.fill = o.fill_bits;
  k.value = o.value_bits;
  k.field = o.field;
  k.esize = o.elem_size;
  pk_kop_geometry(&k);
  return k;
}

static void compare(const unsigned char *a, const unsigned char *b, size_t n, const char *what,
                    int t) {
  for (size_t k = 0; k < n; k++) {
    if (a[k] != b[k]) {
      EXPECT(0, "case %d %s: byte %zu host %02x kernel %02x", t, what, k, a[k], b[k]);
      return;
    }
  }
}

static void test_pack_unpack(pk_gpu_ctx_t *ctx) {
  pkt_rng_t rng = {0xe4u};
  static const int es[4] = {1, 2, 4, 8};
  static const int64_t ws[8] = {1, 3, 7, 8, 33, 64, 257, 1000};
  for (int t = 0; t < 300; t++) {
    rcase_t c;
    case_make(&rng, &c);
    int esize = es[t % 4];
    int64_t W = ws[(t / 4) % 8];
    size_t mis = (size_t)(t % 5 == 0 ? t % 16 : 0);
    size_t rb = (size_t)W * esize, xb = rb * (size_t)c.B * c.S, tl = (size_t)c.Tl;
    unsigned char *x = (unsigned char *)malloc(xb + mis + 1);
    for (size_t k = 0; k < xb + mis + 1; k++) {
      x[k] = (unsigned char)pkt_next(&rng);
    }
    int64_t *ids = (int64_t *)malloc(8 * ((size_t)c.B * c.S + 1));
    for (size_t k = 0; k < (size_t)c.B * c.S; k++) {
      ids[k] = (int64_t)(pkt_next(&rng) % 1000);
    }
    pk_gpu_layout_desc_t d = pkt_desc(c.B, c.S, c.n, c.seqs, c.cu_pad, c.cp, c.algo);
    pk_gpu_layout_t *l = NULL;
    EXPECT(pk_gpu_layout_create(ctx, &d, &l) == 0, "layout");
    size_t sizes[5] = {rb * tl + mis + 1, 8 * tl + 1, 8 * tl + 1, 4 * tl + 1, 2 * tl + 1};
    unsigned char *gathered = (unsigned char *)malloc(rb * (size_t)c.T + 1);
    for (int32_t r = 0; r < c.cp; r++) {
      unsigned char *h[5], *e[5];
      for (int k = 0; k < 5; k++) {
        h[k] = (unsigned char *)malloc(sizes[k]);
        e[k] = (unsigned char *)malloc(sizes[k]);
        memset(h[k], 0xab, sizes[k]);
        memset(e[k], 0xab, sizes[k]);
      }
      uint64_t fill = pkt_next(&rng);
      pk_gpu_op_t ops[5] = {
          pkt_op(PK_GPU_FIELD_COPY, esize, W, x + mis, h[0] + mis, fill),
          pkt_op(PK_GPU_FIELD_LABELS, 8, 1, ids, h[1], (uint64_t)(int64_t)-100),
          pkt_op(PK_GPU_FIELD_POS_OFFSET, 8, 1, NULL, h[2], 0),
          pkt_op(PK_GPU_FIELD_POS_RESTART, 4, 1, NULL, h[3], 0),
          pkt_op(PK_GPU_FIELD_VALID, 2, 1, NULL, h[4], 0),
      };
      EXPECT(pk_gpu_pack(ctx, l, c.start, c.length, r, ops, 5) == 0, "host pack");
      pk_cuda_ops k;
      memset(&k, 0, sizeof k);
      for (int q = 0; q < 5; q++) {
        pk_gpu_op_t o = ops[q];
        o.dst = q == 0 ? (void *)(e[0] + mis) : (void *)e[q];
        k.op[q] = to_kop(o);
      }
      pk_gpu_bad_t bad;
      memset(&bad, 0, sizeof bad);
      /* The real geometry, then a tiny grid that forces the stride loops. */
      bool small = t % 2 == 1;
      /* The real tiles with the real grid; forced tiles of 1..PK_CUDA_TILE
       * rows with the tiny one (the test's batches are too small to get
       * more than one row per thread on their own). */
      pk_cuda_set_tiles(k.op, 5, c.Tl);
      unsigned bx = pk_cuda_blocks_for(k.op, 5, c.Tl);
      for (int q = 0; small && q < 5; q++) {
        k.op[q].tile = 1 + (t / 2 + q) % PK_CUDA_TILE;
      }
      emu_launch(false, small ? 1 : bx, small ? 32 : PK_CUDA_THREADS, l->host, c.start, c.length, r,
                 k, 5, &bad, (t & 2) != 0);
      EXPECT(bad.code == 0, "bad data in a valid case");
      for (int q = 0; q < 5; q++) {
        compare(h[q], e[q], sizes[q], q == 0 ? "pack" : "pack field", t);
      }
      memcpy(gathered + rb * tl * (size_t)r, h[0] + mis, rb * tl);
      for (int q = 0; q < 5; q++) {
        free(h[q]);
        free(e[q]);
      }
    }
    /* Gathered unpack. */
    unsigned char *hb = (unsigned char *)malloc(xb + 1), *eb = (unsigned char *)malloc(xb + 1);
    memset(hb, 0x5c, xb + 1);
    memset(eb, 0x5c, xb + 1);
    pk_gpu_op_t u = pkt_op(PK_GPU_FIELD_COPY, esize, W, gathered, hb, 0);
    EXPECT(pk_gpu_unpack(ctx, l, c.start, c.length, -1, &u, 1) == 0, "host unpack");
    u.dst = eb;
    pk_cuda_ops k;
    memset(&k, 0, sizeof k);
    k.op[0] = to_kop(u);
    pk_gpu_bad_t bad;
    memset(&bad, 0, sizeof bad);
    pk_cuda_set_tiles(k.op, 1, (int64_t)c.n * c.S);
    unsigned bx = pk_cuda_blocks_for(k.op, 1, (int64_t)c.n * c.S);
    if (t % 3 == 0) {
      k.op[0].tile = 1 + (t / 3) % PK_CUDA_TILE;
    }
    emu_launch(true, t % 3 == 0 ? 1 : bx, t % 3 == 0 ? 64 : PK_CUDA_THREADS, l->host, c.start,
               c.length, -1, k, 1, &bad, (t & 2) != 0);
    compare(hb, eb, xb + 1, "gathered unpack", t);
    free(hb);
    free(eb);
    free(gathered);
    free(x);
    free(ids);
    pk_gpu_layout_destroy(l);
    case_free(&c);
  }
}

/* Bad spans: the kernel records one and writes the row as empty. */
static void test_bad_span(pk_gpu_ctx_t *ctx) {
  const int32_t seqs[2] = {0, 1}, cu[3] = {0, 4, 8}, len[2] = {3, 5};
  int64_t x[12], h[8], e[8];
  for (int k = 0; k < 12; k++) {
    x[k] = k + 1;
  }
  pk_gpu_layout_desc_t d = pkt_desc(2, 6, 2, seqs, cu, 1, PK_GPU_CP_ZIGZAG);
  pk_gpu_layout_t *l = NULL;
  EXPECT(pk_gpu_layout_create(ctx, &d, &l) == 0, "layout");
  pk_gpu_op_t op = pkt_op(PK_GPU_FIELD_COPY, 8, 1, x, h, 0);
  EXPECT(pk_gpu_pack(ctx, l, NULL, len, 0, &op, 1) == PK_GPU_EINVAL, "host reports");
  op.dst = e;
  pk_cuda_ops k;
  memset(&k, 0, sizeof k);
  k.op[0] = to_kop(op);
  pk_gpu_bad_t bad;
  memset(&bad, 0, sizeof bad);
  emu_launch(false, 1, PK_CUDA_THREADS, l->host, NULL, len, 0, k, 1, &bad);
  EXPECT(bad.code == 1 && bad.kind == PK_GPU_BAD_LENGTH && bad.row == 1 && bad.value == 5,
         "kernel records the bad span (kind %d row %d value %lld)", bad.kind, bad.row,
         (long long)bad.value);
  compare((unsigned char *)h, (unsigned char *)e, sizeof h, "bad span", 0);
  pk_gpu_layout_destroy(l);
}

/* spans_kernel with real threads (it synchronises). */
struct span_job {
  unsigned bx, tx;
  const void *mask;
  int32_t esize, B, S;
  int32_t *start, *length;
  pk_gpu_bad_t *bad;
};

static void *span_thread(void *arg) {
  span_job *j = (span_job *)arg;
  blockIdx = {j->bx, 0, 0};
  threadIdx = {j->tx, 0, 0};
  spans_kernel(j->mask, j->esize, j->B, j->S, j->start, j->length, j->bad);
  return NULL;
}

static void test_spans(pk_gpu_ctx_t *ctx) {
  pkt_rng_t rng = {0x59a};
  static const int es[4] = {1, 2, 4, 8};
  const unsigned threads = 8, blocks = 3;
  for (int t = 0; t < 60; t++) {
    int32_t B = (int32_t)pkt_range(&rng, 1, 9), S = (int32_t)pkt_range(&rng, 0, 40);
    int esize = es[t % 4];
    unsigned char *mask = (unsigned char *)calloc((size_t)B * S * esize + 8, 1);
    for (int32_t b = 0; b < B; b++) {
      int32_t len = (int32_t)pkt_range(&rng, 0, S), st = (int32_t)pkt_range(&rng, 0, S - len);
      for (int32_t s = st; s < st + len; s++) {
        mask[((size_t)b * S + s) * esize + (size_t)pkt_range(&rng, 0, esize - 1)] = 7;
      }
      if (len > 2 && t % 4 == 1) {
        memset(mask + ((size_t)b * S + st + 1) * esize, 0, (size_t)esize);
      }
    }
    int32_t hs[9], hl[9], ks[9], kl[9];
    int hrc = pk_gpu_spans(ctx, mask, esize, B, S, hs, hl);
    pk_gpu_bad_t bad;
    memset(&bad, 0, sizeof bad);
    gridDim = {blocks, 1, 1};
    blockDim = {threads, 1, 1};
    pthread_barrier_init(&emu_barrier, NULL, threads);
    for (unsigned bx = 0; bx < blocks; bx++) {
      pthread_t th[8];
      span_job jobs[8];
      for (unsigned tx = 0; tx < threads; tx++) {
        jobs[tx] = span_job{bx, tx, mask, esize, B, S, ks, kl, &bad};
        pthread_create(&th[tx], NULL, span_thread, &jobs[tx]);
      }
      for (unsigned tx = 0; tx < threads; tx++) {
        pthread_join(th[tx], NULL);
      }
    }
    pthread_barrier_destroy(&emu_barrier);
    EXPECT((hrc != 0) == (bad.code != 0), "case %d: host rc %d, kernel bad %d", t, hrc, bad.code);
    compare((unsigned char *)hs, (unsigned char *)ks, 4 * (size_t)B, "spans start", t);
    compare((unsigned char *)hl, (unsigned char *)kl, 4 * (size_t)B, "spans length", t);
    free(mask);
  }
}

/* Dynamic-CP groups: the pack kernel's shard of ids and its VALID mask
 * (value 0 on real tokens, 1 on padding) for group layouts of every size,
 * tp 1..2, zigzag and contiguous, equal the host backend's shard and verl's
 * padding mask (pk_gpu_dcp_padding_mask). */
static void test_dcp_groups(pk_gpu_ctx_t *ctx) {
  pkt_rng_t rng = {0xdc9e};
  for (int t = 0; t < 96; t++) {
    int32_t c = 1 << (t % 4), algo = (t / 4) % 2, tp = 1 + (t / 8) % 2;
    int32_t n = (int32_t)pkt_range(&rng, 0, 6), len[6], cu_real[7], cu[7], seqs[6];
    int32_t start[8] = {0}, length[8] = {0}, B = 8, S = 1;
    for (int32_t i = 0; i < n; i++) {
      len[i] = (int32_t)pkt_range(&rng, 0, 45);
      S = len[i] + 2 > S ? len[i] + 2 : S;
      seqs[i] = 7 - i;
    }
    int32_t mlr = n > 0 && t % 3 == 0 ? 2 * (int32_t)pkt_range(&rng, 1, 12) : 0;
    EXPECT(pk_gpu_dcp_cu(n, len, c, tp, algo, mlr, cu_real, cu) == 0, "dcp_cu");
    for (int32_t i = 0; i < n; i++) {
      length[seqs[i]] = len[i];
      start[seqs[i]] = (int32_t)pkt_range(&rng, 0, S - len[i]);
    }
    int64_t *ids = (int64_t *)malloc(8 * (size_t)B * (size_t)S);
    for (int64_t k = 0; k < (int64_t)B * S; k++) {
      ids[k] = (int64_t)pkt_next(&rng);
    }
    pk_gpu_layout_desc_t d = pkt_desc(B, S, n, seqs, cu, c, algo);
    pk_gpu_layout_t *l = NULL;
    EXPECT(pk_gpu_layout_create(ctx, &d, &l) == 0, "group layout");
    size_t tl = (size_t)pk_gpu_layout_local_tokens(l);
    for (int32_t r = 0; r < c; r++) {
      unsigned char *hx = (unsigned char *)malloc(8 * tl + 1),
                    *ex = (unsigned char *)malloc(8 * tl + 1);
      unsigned char *em = (unsigned char *)malloc(tl + 1), *want = (unsigned char *)malloc(tl + 1);
      memset(hx, 0xab, 8 * tl + 1);
      memset(ex, 0xab, 8 * tl + 1);
      memset(em, 0xab, tl + 1);
      pk_gpu_op_t hop = pkt_op(PK_GPU_FIELD_COPY, 8, 1, ids, hx, 0);
      EXPECT(pk_gpu_pack(ctx, l, start, length, r, &hop, 1) == 0, "host pack");
      pk_gpu_op_t mop = pkt_op(PK_GPU_FIELD_VALID, 1, 1, NULL, em, 1);
      mop.value_bits = 0;
      pk_cuda_ops k;
      memset(&k, 0, sizeof k);
      pk_gpu_op_t kx = hop;
      kx.dst = ex;
      k.op[0] = to_kop(kx);
      k.op[1] = to_kop(mop);
      pk_gpu_bad_t bad;
      memset(&bad, 0, sizeof bad);
      pk_cuda_set_tiles(k.op, 2, (int64_t)tl);
      unsigned bx = pk_cuda_blocks_for(k.op, 2, (int64_t)tl);
      emu_launch(false, t % 2 ? 1 : bx, t % 2 ? 32 : PK_CUDA_THREADS, l->host, start, length, r, k,
                 2, &bad, (t & 2) != 0);
      EXPECT(bad.code == 0, "bad data in a valid group");
      compare(hx, ex, 8 * tl + 1, "group shard", t);
      EXPECT(pk_gpu_dcp_padding_mask(n, len, cu, c, algo, r, want) == 0, "dcp mask");
      compare(want, em, tl, "group padding mask", t);
      EXPECT(em[tl] == 0xab, "case %d: mask written past its end", t);
      free(hx);
      free(ex);
      free(em);
      free(want);
    }
    pk_gpu_layout_destroy(l);
    free(ids);
  }
}

int main(void) {
  pk_gpu_ctx_t *ctx = NULL;
  if (pk_gpu_ctx_create(PK_GPU_BACKEND_HOST, 0, &ctx) != 0) {
    fprintf(stderr, "context: %s\n", pk_gpu_last_error());
    return 1;
  }
  test_pack_unpack(ctx);
  test_bad_span(ctx);
  test_spans(ctx);
  test_dcp_groups(ctx);
  pk_gpu_ctx_destroy(ctx);
  printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
  return failures ? 1 : 0;
}
