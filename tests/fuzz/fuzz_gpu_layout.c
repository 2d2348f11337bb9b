/* libFuzzer target: the GPU agent's host backend on fuzzed layout arguments
 * (gpu/src/layout.c and host_backend.c): pk_gpu_layout_create with arbitrary
 * batch, seqlen, rows, cu_seqlens_padded, cp and cp_algo; when the layout is
 * accepted, pack and unpack of every CP rank with fuzzed spans, and the host
 * helpers (index map, per-rank real cu_seqlens). Sizes are bounded so that
 * buffers stay small: batch <= 64, seqlen <= 1024, n <= 64, cp <= 16, each
 * padded slot <= 1024 tokens.
 *
 * Input: 8 header bytes (batch, seqlen/4, n, cp, algo, field, elem code,
 * flags: bit 0 shifts rows, bit 1 breaks cu_pad, bit 2 drops start, bits 4-7
 * pick the helper's alignment), then per sequence a row (1 byte), a slot
 * length and a real length (2 bytes each), then per batch row a span start
 * and length (2 bytes each). Missing bytes read as 0. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pk_gpu.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct reader {
  const uint8_t *p;
  size_t left;
} reader_t;

static uint32_t take(reader_t *r, int bytes) {
  uint32_t v = 0;
  for (int i = 0; i < bytes; i++) {
    v <<= 8;
    if (r->left > 0) {
      v |= *r->p++;
      r->left--;
    }
  }
  return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static pk_gpu_ctx_t *ctx;
  if (ctx == NULL && pk_gpu_ctx_create(PK_GPU_BACKEND_HOST, 0, &ctx) != 0)
    abort();
  if (size < 8)
    return 0;
  reader_t r = {data, size};
  int32_t batch = (int32_t)(take(&r, 1) % 65);
  int32_t seqlen = (int32_t)(take(&r, 1) * 4);
  int32_t n = (int32_t)(take(&r, 1) % 65);
  int32_t cp = (int32_t)(take(&r, 1) % 17);  /* 0 means 1. */
  int32_t algo = (int32_t)(take(&r, 1) % 3); /* 2 is invalid on purpose. */
  int32_t field = (int32_t)(take(&r, 1) % 6);
  static const int32_t elems[4] = {1, 2, 4, 8};
  int32_t elem = elems[take(&r, 1) % 4];
  uint32_t flags = take(&r, 1);

  int32_t *seqs = calloc((size_t)n + 1, sizeof *seqs);
  int32_t *cu = calloc((size_t)n + 1, sizeof *cu);
  int32_t *lens = calloc((size_t)n + 1, sizeof *lens);
  int32_t *start = calloc((size_t)batch + 1, sizeof *start);
  int32_t *length = calloc((size_t)batch + 1, sizeof *length);
  pk_gpu_layout_t *layout = NULL;
  if (!seqs || !cu || !lens || !start || !length)
    goto out;
  for (int32_t k = 0; k < n; k++) {
    /* Rows may repeat or leave the batch: create must refuse those. */
    seqs[k] = (int32_t)take(&r, 1) - (flags & 1 ? 1 : 0);
    int32_t slot = (int32_t)(take(&r, 2) % 1025);
    cu[k + 1] = flags & 2 ? cu[k] - 1 + slot : cu[k] + slot;
    lens[k] = (int32_t)(take(&r, 2) % 1025);
  }
  for (int32_t b = 0; b < batch; b++) {
    start[b] = (int32_t)(take(&r, 2) % 1100) - 8;
    length[b] = (int32_t)(take(&r, 2) % 1100) - 8;
  }
  {
    /* The helper that builds cu_seqlens from lengths, on the same lengths. */
    int32_t *cu_real = calloc((size_t)n + 1, sizeof *cu_real);
    int32_t *cu_pad = calloc((size_t)n + 1, sizeof *cu_pad);
    if (cu_real != NULL && cu_pad != NULL)
      (void)pk_gpu_cu_from_lengths(n, lens, (int32_t)(flags >> 4) - 1, cu_real, cu_pad);
    free(cu_real);
    free(cu_pad);
  }
  pk_gpu_layout_desc_t d = {batch, seqlen, n, seqs, cu, cp, algo};
  if (pk_gpu_layout_create(ctx, &d, &layout) != 0)
    goto out;

  int32_t cpn = cp == 0 ? 1 : cp;
  int64_t total = pk_gpu_layout_tokens(layout);
  int64_t local = pk_gpu_layout_local_tokens(layout);
  if (total < 0 || local * cpn != total)
    abort();
  size_t padded = (size_t)batch * (size_t)seqlen * (size_t)elem;
  uint8_t *x = calloc(padded + 1, 1);
  uint8_t *packed = calloc((size_t)total * (size_t)elem + 1, 1);
  int64_t *map = calloc((size_t)local + 1, sizeof *map);
  int32_t *real = calloc((size_t)n + 1, sizeof *real);
  if (x && packed && map && real) {
    for (size_t i = 0; i < padded; i++)
      x[i] = (uint8_t)i;
    for (int32_t rank = 0; rank < cpn; rank++) {
      int no_src = field == PK_GPU_FIELD_POS_OFFSET || field == PK_GPU_FIELD_POS_RESTART ||
                   field == PK_GPU_FIELD_VALID;
      pk_gpu_op_t op = {field, elem, 1, no_src ? NULL : x, packed, 0xff, 1};
      (void)pk_gpu_pack(ctx, layout, flags & 4 ? NULL : start, length, rank, &op, 1);
      pk_gpu_op_t un = {PK_GPU_FIELD_COPY, elem, 1, packed, x, 0, 0};
      (void)pk_gpu_unpack(ctx, layout, flags & 4 ? NULL : start, length, rank, &un, 1);
      (void)pk_gpu_cp_index_map(n, cu, cpn, algo, rank, map);
      (void)pk_gpu_cp_real_cu(n, lens, cu, cpn, algo, rank, real);
    }
    /* Unpack of every rank's part gathered in rank order. */
    pk_gpu_op_t all = {PK_GPU_FIELD_COPY, elem, 1, packed, x, 0, 0};
    (void)pk_gpu_unpack(ctx, layout, start, length, -1, &all, 1);
    (void)pk_gpu_ctx_check(ctx);
  }
  free(x);
  free(packed);
  free(map);
  free(real);
out:
  pk_gpu_layout_destroy(layout);
  free(seqs);
  free(cu);
  free(lens);
  free(start);
  free(length);
  return 0;
}
