/* The host backend: plain C loops over host memory computing the same bytes
 * as the CUDA kernels, through the same index maps (pk_gpu_map.h). It is the
 * oracle of the CUDA tests and lets every test run without a GPU. */
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"

static int host_available(void) {
  return 0;
}

static int host_ctx_init(pk_gpu_ctx_t *ctx, int device) {
  memset(&ctx->bad, 0, sizeof ctx->bad);
  return 0;
}

static void host_ctx_fini(pk_gpu_ctx_t *ctx) {}

static int host_set_stream(pk_gpu_ctx_t *ctx, void *stream) {
  return 0;
}

static int host_sync(pk_gpu_ctx_t *ctx) {
  return 0;
}

static int host_take_bad(pk_gpu_ctx_t *ctx, pk_gpu_bad_t *bad) {
  *bad = ctx->bad;
  memset(&ctx->bad, 0, sizeof ctx->bad);
  return 0;
}

static int host_mem_alloc(pk_gpu_ctx_t *ctx, size_t bytes, void **out) {
  *out = malloc(bytes == 0 ? 1 : bytes);
  if (*out == NULL) {
    return pk_gpu_fail(PK_GPU_ENOMEM, "host memory of %zu bytes: out of memory", bytes);
  }
  return 0;
}

static void host_mem_free(pk_gpu_ctx_t *ctx, void *p) {
  free(p);
}

static int host_mem_copy(pk_gpu_ctx_t *ctx, void *dst, const void *src, size_t bytes,
                         bool to_backend) {
  if (bytes > 0) {
    memcpy(dst, src, bytes);
  }
  return 0;
}

static int host_mem_set(pk_gpu_ctx_t *ctx, void *dst, int byte, size_t bytes) {
  if (bytes > 0) {
    memset(dst, byte, bytes);
  }
  return 0;
}

static int host_layout_upload(pk_gpu_ctx_t *ctx, pk_gpu_layout_t *layout) {
  layout->dev = layout->host;
  return 0;
}

static void host_layout_free(pk_gpu_ctx_t *ctx, pk_gpu_layout_t *layout) {}

/* Keeps the first bad datum, as the CUDA kernels do with atomicCAS. */
static void record_bad(pk_gpu_ctx_t *ctx, int32_t kind, int32_t row, int64_t value) {
  if (ctx->bad.code == 0) {
    ctx->bad.code = 1;
    ctx->bad.kind = kind;
    ctx->bad.row = row;
    ctx->bad.value = value;
  }
}

static int host_spans(pk_gpu_ctx_t *ctx, const void *mask, int32_t esize, int32_t batch,
                      int32_t seqlen, int32_t *start, int32_t *length) {
  const unsigned char *p = mask;
  for (int32_t b = 0; b < batch; b++) {
    int64_t first = -1, last = -1, count = 0;
    for (int64_t s = 0; s < seqlen; s++) {
      const unsigned char *e = p + ((int64_t)b * seqlen + s) * esize;
      bool on = false;
      for (int32_t k = 0; k < esize; k++) {
        on = on || e[k] != 0;
      }
      if (on) {
        first = first < 0 ? s : first;
        last = s;
        count++;
      }
    }
    start[b] = first < 0 ? 0 : (int32_t)first;
    length[b] = (int32_t)count;
    if (count > 0 && last - first + 1 != count) {
      length[b] = -1;
      record_bad(ctx, PK_GPU_BAD_HOLE, b, first);
    }
  }
  return 0;
}

/* Writes row_bytes bytes of the element `bits` (esize bytes) repeated. */
static void fill_row(unsigned char *dst, int64_t row_bytes, uint64_t bits, int32_t esize) {
  unsigned char e[8];
  for (int k = 0; k < 8; k++) {
    e[k] = (unsigned char)(bits >> (8 * k));
  }
  for (int64_t off = 0; off < row_bytes; off += esize) {
    memcpy(dst + off, e, (size_t)esize);
  }
}

static int host_pack(pk_gpu_ctx_t *ctx, const pk_gpu_layout_t *layout, const int32_t *start,
                     const int32_t *length, int32_t cp_rank, const pk_gpu_kop_t *ops,
                     int32_t nops) {
  const pk_gpu_meta_t *m = &layout->host;
  for (int32_t q = 0; q < nops; q++) {
    const pk_gpu_kop_t *op = &ops[q];
    for (int64_t j = 0; j < m->local; j++) {
      int64_t g, st, badval = 0;
      int32_t bad;
      int32_t i = pk_map_local(m, cp_rank, j, &g);
      int64_t len = pk_map_span(m, start, length, i, &st, &bad, &badval);
      if (bad) {
        record_bad(ctx, bad, m->rows[i], badval);
      }
      uint64_t bits;
      int64_t col = pk_map_pack_action(op, g, len, st, &bits);
      unsigned char *d = op->dst + j * op->row_bytes;
      if (col >= 0) {
        memcpy(d, op->src + ((int64_t)m->rows[i] * m->seqlen + col) * op->row_bytes,
               (size_t)op->row_bytes);
      } else {
        fill_row(d, op->row_bytes, bits, op->esize);
      }
    }
  }
  return 0;
}

static int host_unpack(pk_gpu_ctx_t *ctx, const pk_gpu_layout_t *layout, const int32_t *start,
                       const int32_t *length, int32_t cp_rank, const pk_gpu_kop_t *ops,
                       int32_t nops) {
  const pk_gpu_meta_t *m = &layout->host;
  for (int32_t q = 0; q < nops; q++) {
    const pk_gpu_kop_t *op = &ops[q];
    for (int32_t i = 0; i < m->n; i++) {
      int64_t st, badval = 0;
      int32_t bad;
      int64_t len = pk_map_span(m, start, length, i, &st, &bad, &badval);
      if (bad) {
        record_bad(ctx, bad, m->rows[i], badval);
      }
      for (int64_t s = 0; s < m->seqlen; s++) {
        int64_t src = pk_map_unpack_src(m, cp_rank, i, s, st, len);
        unsigned char *d = op->dst + ((int64_t)m->rows[i] * m->seqlen + s) * op->row_bytes;
        if (src >= 0) {
          memcpy(d, op->src + src * op->row_bytes, (size_t)op->row_bytes);
        } else {
          fill_row(d, op->row_bytes, op->fill, op->esize);
        }
      }
    }
  }
  return 0;
}

const pk_gpu_backend_ops_t pk_gpu_host_backend = {
    .name = "host",
    .available = host_available,
    .ctx_init = host_ctx_init,
    .ctx_fini = host_ctx_fini,
    .set_stream = host_set_stream,
    .sync = host_sync,
    .take_bad = host_take_bad,
    .mem_alloc = host_mem_alloc,
    .mem_free = host_mem_free,
    .mem_copy = host_mem_copy,
    .mem_set = host_mem_set,
    .layout_upload = host_layout_upload,
    .layout_free = host_layout_free,
    .spans = host_spans,
    .pack = host_pack,
    .unpack = host_unpack,
};

#ifndef PK_GPU_WITH_CUDA
const pk_gpu_backend_ops_t *pk_gpu_cuda_backend(void) {
  return NULL;
}
#endif
