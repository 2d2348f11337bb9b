/* The public entry points for contexts and operations: argument checks, the
 * resolution of pk_gpu_op_t into kernel ops, and dispatch to the backend
 * table. Backends see only validated arguments. */
#include <stdlib.h>
#include <string.h>

#include "gpu_internal.h"

static const pk_gpu_backend_ops_t *backend_ops(pk_gpu_backend_t backend) {
  if (backend == PK_GPU_BACKEND_HOST) {
    return &pk_gpu_host_backend;
  }
  if (backend == PK_GPU_BACKEND_CUDA) {
    return pk_gpu_cuda_backend();
  }
  return NULL;
}

int pk_gpu_backend_available(pk_gpu_backend_t backend) {
  if (backend != PK_GPU_BACKEND_HOST && backend != PK_GPU_BACKEND_CUDA) {
    return pk_gpu_fail(PK_GPU_EINVAL, "backend = %d: expected 0 (host) or 1 (cuda)", (int)backend);
  }
  const pk_gpu_backend_ops_t *ops = backend_ops(backend);
  if (ops == NULL) {
    return pk_gpu_fail(PK_GPU_ENOTSUP, "backend cuda: libpackd_gpu was built without CUDA "
                                       "(configure gpu/ with nvcc found and PK_GPU_CUDA=ON)");
  }
  return ops->available();
}

int pk_gpu_ctx_create(pk_gpu_backend_t backend, int device, pk_gpu_ctx_t **out) {
  int rc = 0;
  pk_gpu_ctx_t *ctx = NULL;
  PK_GPU_REQUIRE(out != NULL, PK_GPU_EINVAL, "out = NULL: a place for the context is required");
  *out = NULL;
  PK_GPU_CHECK(pk_gpu_backend_available(backend));
  ctx = calloc(1, sizeof *ctx);
  PK_GPU_REQUIRE(ctx != NULL, PK_GPU_ENOMEM, "context: out of memory");
  ctx->kind = backend;
  ctx->ops = backend_ops(backend);
  ctx->device = device;
  PK_GPU_CHECK(ctx->ops->ctx_init(ctx, device));
  *out = ctx;
  ctx = NULL;
out:
  free(ctx);
  return rc;
}

void pk_gpu_ctx_destroy(pk_gpu_ctx_t *ctx) {
  if (ctx == NULL) {
    return;
  }
  ctx->ops->ctx_fini(ctx);
  free(ctx);
}

pk_gpu_backend_t pk_gpu_ctx_backend(const pk_gpu_ctx_t *ctx) {
  return ctx->kind;
}

int pk_gpu_ctx_set_stream(pk_gpu_ctx_t *ctx, void *stream) {
  if (ctx == NULL) {
    return pk_gpu_fail(PK_GPU_EINVAL, "ctx = NULL");
  }
  return ctx->ops->set_stream(ctx, stream);
}

int pk_gpu_ctx_sync(pk_gpu_ctx_t *ctx) {
  if (ctx == NULL) {
    return pk_gpu_fail(PK_GPU_EINVAL, "ctx = NULL");
  }
  return ctx->ops->sync(ctx);
}

int pk_gpu_ctx_check(pk_gpu_ctx_t *ctx) {
  if (ctx == NULL) {
    return pk_gpu_fail(PK_GPU_EINVAL, "ctx = NULL");
  }
  pk_gpu_bad_t bad;
  int rc = ctx->ops->take_bad(ctx, &bad);
  if (rc != 0) {
    return rc;
  }
  return pk_gpu_report_bad(&bad);
}

int pk_gpu_mem_alloc(pk_gpu_ctx_t *ctx, size_t bytes, void **out) {
  if (ctx == NULL || out == NULL) {
    return pk_gpu_fail(PK_GPU_EINVAL, "ctx and out are required");
  }
  return ctx->ops->mem_alloc(ctx, bytes, out);
}

void pk_gpu_mem_free(pk_gpu_ctx_t *ctx, void *p) {
  if (ctx != NULL && p != NULL) {
    ctx->ops->mem_free(ctx, p);
  }
}

int pk_gpu_mem_upload(pk_gpu_ctx_t *ctx, void *dst, const void *src, size_t bytes) {
  if (ctx == NULL || ((dst == NULL || src == NULL) && bytes > 0)) {
    return pk_gpu_fail(PK_GPU_EINVAL, "ctx, dst and src are required");
  }
  return ctx->ops->mem_copy(ctx, dst, src, bytes, true);
}

int pk_gpu_mem_download(pk_gpu_ctx_t *ctx, void *dst, const void *src, size_t bytes) {
  if (ctx == NULL || ((dst == NULL || src == NULL) && bytes > 0)) {
    return pk_gpu_fail(PK_GPU_EINVAL, "ctx, dst and src are required");
  }
  return ctx->ops->mem_copy(ctx, dst, src, bytes, false);
}

int pk_gpu_mem_set(pk_gpu_ctx_t *ctx, void *dst, int byte, size_t bytes) {
  if (ctx == NULL || (dst == NULL && bytes > 0)) {
    return pk_gpu_fail(PK_GPU_EINVAL, "ctx and dst are required");
  }
  return ctx->ops->mem_set(ctx, dst, byte, bytes);
}

/* After a host-backend call, returns the bad datum it recorded (if any). */
static int host_result(pk_gpu_ctx_t *ctx, int rc) {
  if (rc != 0 || ctx->kind != PK_GPU_BACKEND_HOST) {
    return rc;
  }
  return pk_gpu_ctx_check(ctx);
}

int pk_gpu_spans(pk_gpu_ctx_t *ctx, const void *mask, int32_t elem_size, int32_t batch,
                 int32_t seqlen, int32_t *start, int32_t *length) {
  int rc = 0;
  PK_GPU_REQUIRE(ctx != NULL, PK_GPU_EINVAL, "ctx = NULL");
  PK_GPU_REQUIRE(elem_size == 1 || elem_size == 2 || elem_size == 4 || elem_size == 8,
                 PK_GPU_EINVAL, "mask elem_size = %d: expected 1, 2, 4 or 8 bytes", (int)elem_size);
  PK_GPU_REQUIRE(batch >= 0, PK_GPU_EINVAL, "batch = %d: must be >= 0", (int)batch);
  PK_GPU_REQUIRE(seqlen >= 0, PK_GPU_EINVAL, "seqlen = %d: must be >= 0", (int)seqlen);
  PK_GPU_REQUIRE(mask != NULL || (int64_t)batch * seqlen == 0, PK_GPU_EINVAL,
                 "mask = NULL with batch = %d, seqlen = %d", (int)batch, (int)seqlen);
  PK_GPU_REQUIRE((uintptr_t)mask % (uintptr_t)elem_size == 0, PK_GPU_EINVAL,
                 "mask = %p: not aligned to its elem_size = %d", mask, (int)elem_size);
  PK_GPU_REQUIRE((start != NULL && length != NULL) || batch == 0, PK_GPU_EINVAL,
                 "start/length = NULL with batch = %d: both outputs are required", (int)batch);
  if (batch == 0) {
    goto out;
  }
  rc = host_result(ctx, ctx->ops->spans(ctx, mask, elem_size, batch, seqlen, start, length));
out:
  return rc;
}

/* Resolves and checks ops for pack (unpack = false) or unpack. */
static int resolve_ops(const pk_gpu_layout_t *layout, bool unpack, int32_t cp_rank,
                       const pk_gpu_op_t *ops, int32_t nops, pk_gpu_kop_t *k) {
  int rc = 0;
  const pk_gpu_meta_t *m = &layout->host;
  /* Pointers are required only when the call reads or writes through them
   * (an empty torch tensor has data_ptr() == 0). */
  bool writes = unpack ? (m->n > 0 && m->seqlen > 0) : m->local > 0;
  bool reads = unpack ? (writes && m->total > 0) : m->local > 0;
  PK_GPU_REQUIRE(nops >= 0 && nops <= PK_GPU_MAX_OPS, PK_GPU_EINVAL,
                 "nops = %d: expected 0..%d tensors per call", (int)nops, PK_GPU_MAX_OPS);
  PK_GPU_REQUIRE(ops != NULL || nops == 0, PK_GPU_EINVAL, "ops = NULL with nops = %d", (int)nops);
  for (int32_t i = 0; i < nops; i++) {
    const pk_gpu_op_t *o = &ops[i];
    int32_t es = o->elem_size;
    PK_GPU_REQUIRE(o->field >= PK_GPU_FIELD_COPY && o->field <= PK_GPU_FIELD_VALID, PK_GPU_EINVAL,
                   "ops[%d].field = %d: expected 0..4", (int)i, (int)o->field);
    PK_GPU_REQUIRE(!unpack || o->field == PK_GPU_FIELD_COPY, PK_GPU_EINVAL,
                   "ops[%d].field = %d: unpack only moves tensors (field COPY = 0)", (int)i,
                   (int)o->field);
    PK_GPU_REQUIRE(es == 1 || es == 2 || es == 4 || es == 8, PK_GPU_EINVAL,
                   "ops[%d].elem_size = %d: expected 1, 2, 4 or 8 bytes", (int)i, (int)es);
    PK_GPU_REQUIRE(o->width >= 1 && o->width <= (INT64_MAX / 64), PK_GPU_EINVAL,
                   "ops[%d].width = %lld: expected >= 1 elements per token", (int)i,
                   (long long)o->width);
    bool pos = o->field == PK_GPU_FIELD_POS_OFFSET || o->field == PK_GPU_FIELD_POS_RESTART;
    PK_GPU_REQUIRE(!pos || (o->width == 1 && (es == 4 || es == 8)), PK_GPU_EINVAL,
                   "ops[%d]: position ids need width 1 and elem_size 4 or 8 (got %lld, %d)", (int)i,
                   (long long)o->width, (int)es);
    bool needs_src = o->field == PK_GPU_FIELD_COPY || o->field == PK_GPU_FIELD_LABELS;
    PK_GPU_REQUIRE(!needs_src || o->src != NULL || !reads, PK_GPU_EINVAL,
                   "ops[%d].src = NULL: this field reads a tensor", (int)i);
    PK_GPU_REQUIRE(o->dst != NULL || !writes, PK_GPU_EINVAL, "ops[%d].dst = NULL", (int)i);
    k[i].src = needs_src ? o->src : NULL;
    k[i].dst = o->dst;
    k[i].row_bytes = o->width * es;
    k[i].fill = o->fill_bits;
    k[i].value = o->value_bits;
    k[i].field = o->field;
    k[i].esize = es;
    pk_kop_geometry(&k[i]);
  }
out:
  return rc;
}

static int check_call(pk_gpu_ctx_t *ctx, const pk_gpu_layout_t *layout, const int32_t *length) {
  if (ctx == NULL || layout == NULL) {
    return pk_gpu_fail(PK_GPU_EINVAL, "ctx and layout are required (got %p, %p)", (void *)ctx,
                       (const void *)layout);
  }
  if (layout->ctx != ctx) {
    return pk_gpu_fail(PK_GPU_EINVAL, "layout belongs to another context");
  }
  if (length == NULL && layout->host.n > 0) {
    return pk_gpu_fail(PK_GPU_EINVAL, "length = NULL: the valid length of every row is required");
  }
  return 0;
}

int pk_gpu_pack(pk_gpu_ctx_t *ctx, const pk_gpu_layout_t *layout, const int32_t *start,
                const int32_t *length, int32_t cp_rank, const pk_gpu_op_t *ops, int32_t nops) {
  int rc = 0;
  pk_gpu_kop_t k[PK_GPU_MAX_OPS];
  PK_GPU_CHECK(check_call(ctx, layout, length));
  PK_GPU_REQUIRE(cp_rank >= 0 && cp_rank < layout->host.cp, PK_GPU_EINVAL,
                 "cp_rank = %d: expected 0..%d for cp = %d", (int)cp_rank, (int)layout->host.cp - 1,
                 (int)layout->host.cp);
  PK_GPU_CHECK(resolve_ops(layout, false, cp_rank, ops, nops, k));
  if (nops == 0 || layout->host.local == 0) {
    goto out;
  }
  rc = host_result(ctx, ctx->ops->pack(ctx, layout, start, length, cp_rank, k, nops));
out:
  return rc;
}

int pk_gpu_unpack(pk_gpu_ctx_t *ctx, const pk_gpu_layout_t *layout, const int32_t *start,
                  const int32_t *length, int32_t cp_rank, const pk_gpu_op_t *ops, int32_t nops) {
  int rc = 0;
  pk_gpu_kop_t k[PK_GPU_MAX_OPS];
  PK_GPU_CHECK(check_call(ctx, layout, length));
  PK_GPU_REQUIRE(cp_rank >= -1 && cp_rank < layout->host.cp, PK_GPU_EINVAL,
                 "cp_rank = %d: expected -1 (all ranks gathered) or 0..%d for cp = %d",
                 (int)cp_rank, (int)layout->host.cp - 1, (int)layout->host.cp);
  PK_GPU_CHECK(resolve_ops(layout, true, cp_rank, ops, nops, k));
  if (nops == 0 || layout->host.n == 0 || layout->host.seqlen == 0) {
    goto out;
  }
  rc = host_result(ctx, ctx->ops->unpack(ctx, layout, start, length, cp_rank, k, nops));
out:
  return rc;
}
