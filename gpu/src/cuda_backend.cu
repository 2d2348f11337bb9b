/* The CUDA backend: one launch per call for up to PK_GPU_MAX_OPS tensors,
 * on the context's stream, with no host synchronisation (only
 * pk_gpu_ctx_check and pk_gpu_ctx_sync wait). Every output element is
 * written by exactly one thread group, through the index maps shared with
 * the host backend (pk_gpu_map.h), so both give the same bytes.
 *
 * Work split: blockIdx.y selects the tensor; inside it, groups of `lanes`
 * threads (1..32, chosen on the host from the row width) move a token row
 * `vec` bytes at a time (16-byte loads when row width and pointers allow,
 * down to single bytes for odd rows) in grid-stride loops: a warp per row
 * for wide rows, a warp per tile of consecutive rows for narrow ones
 * (cuda_kernels.cuh has the geometry). */
#include <cuda_runtime.h>

#include <string.h>

#include "cuda_kernels.cuh"
#include "gpu_internal.h"

#define PK_CUDA_CHECK(expr)                                                                        \
  do {                                                                                             \
    cudaError_t e_ = (expr);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      rc = pk_gpu_fail(PK_GPU_EDEVICE, "%s:%d: %s: %s", __FILE__, __LINE__, #expr,                 \
                       cudaGetErrorString(e_));                                                    \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

static cudaStream_t stream_of(pk_gpu_ctx_t *ctx) {
  return (cudaStream_t)ctx->stream;
}

/* Makes the context's device current for this (static) CUDA runtime for the
 * duration of a call and restores the caller's afterwards. The library's
 * runtime keeps its own current device per thread, apart from PyTorch's, so
 * every call that allocates, copies or launches selects it explicitly. */
struct pk_device_guard {
  int prev = -1;
  int dev;
  cudaError_t err = cudaSuccess;
  explicit pk_device_guard(int d) : dev(d) {
    err = cudaGetDevice(&prev);
    if (err == cudaSuccess && prev != dev) {
      err = cudaSetDevice(dev);
    }
  }
  ~pk_device_guard() {
    if (prev >= 0 && prev != dev) {
      cudaSetDevice(prev);
    }
  }
};

#define PK_CUDA_GUARD(ctx)                                                                         \
  pk_device_guard guard_((ctx)->device);                                                           \
  if (guard_.err != cudaSuccess) {                                                                 \
    return pk_gpu_fail(PK_GPU_EDEVICE, "selecting CUDA device %d: %s", (ctx)->device,              \
                       cudaGetErrorString(guard_.err));                                            \
  }

/* ---- Backend table ----------------------------------------------------- */

static int cuda_available(void) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    return pk_gpu_fail(PK_GPU_ENOTSUP,
                       "no CUDA device: no usable GPU or NVIDIA driver here "
                       "(cudaGetDeviceCount: %s)",
                       cudaGetErrorString(e));
  }
  if (n == 0) {
    return pk_gpu_fail(PK_GPU_ENOTSUP, "no CUDA device: cudaGetDeviceCount returned 0");
  }
  return 0;
}

static int ctx_alloc_status(pk_gpu_ctx_t *ctx) {
  PK_CUDA_GUARD(ctx);
  int rc = 0;
  PK_CUDA_CHECK(cudaMalloc(&ctx->dev_bad, sizeof(pk_gpu_bad_t)));
  PK_CUDA_CHECK(cudaMemset(ctx->dev_bad, 0, sizeof(pk_gpu_bad_t)));
out:
  return rc;
}

static int cuda_ctx_init(pk_gpu_ctx_t *ctx, int device) {
  int rc = 0;
  int n = 0;
  PK_CUDA_CHECK(cudaGetDeviceCount(&n));
  PK_GPU_REQUIRE(device >= 0 && device < n, PK_GPU_EINVAL, "device = %d: expected 0..%d", device,
                 n - 1);
  ctx->device = device;
  ctx->stream = NULL;
  rc = ctx_alloc_status(ctx);
out:
  return rc;
}

static void cuda_ctx_fini(pk_gpu_ctx_t *ctx) {
  pk_device_guard guard(ctx->device);
  if (ctx->dev_bad != NULL) {
    cudaFree(ctx->dev_bad);
    ctx->dev_bad = NULL;
  }
}

static int cuda_set_stream(pk_gpu_ctx_t *ctx, void *stream) {
  ctx->stream = stream;
  return 0;
}

static int cuda_sync(pk_gpu_ctx_t *ctx) {
  PK_CUDA_GUARD(ctx);
  int rc = 0;
  PK_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
out:
  return rc;
}

static int cuda_take_bad(pk_gpu_ctx_t *ctx, pk_gpu_bad_t *bad) {
  PK_CUDA_GUARD(ctx);
  int rc = 0;
  memset(bad, 0, sizeof *bad);
  PK_CUDA_CHECK(
      cudaMemcpyAsync(bad, ctx->dev_bad, sizeof *bad, cudaMemcpyDeviceToHost, stream_of(ctx)));
  PK_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
  PK_CUDA_CHECK(cudaMemsetAsync(ctx->dev_bad, 0, sizeof *bad, stream_of(ctx)));
out:
  return rc;
}

static int cuda_mem_alloc(pk_gpu_ctx_t *ctx, size_t bytes, void **out) {
  PK_CUDA_GUARD(ctx);
  int rc = 0;
  *out = NULL;
  PK_CUDA_CHECK(cudaMalloc(out, bytes == 0 ? 1 : bytes));
out:
  return rc;
}

static void cuda_mem_free(pk_gpu_ctx_t *ctx, void *p) {
  pk_device_guard guard(ctx->device);
  cudaFree(p);
}

static int cuda_mem_copy(pk_gpu_ctx_t *ctx, void *dst, const void *src, size_t bytes,
                         bool to_backend) {
  PK_CUDA_GUARD(ctx);
  int rc = 0;
  PK_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes,
                                to_backend ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost,
                                stream_of(ctx)));
  PK_CUDA_CHECK(cudaStreamSynchronize(stream_of(ctx)));
out:
  return rc;
}

static int cuda_mem_set(pk_gpu_ctx_t *ctx, void *dst, int byte, size_t bytes) {
  PK_CUDA_GUARD(ctx);
  int rc = 0;
  PK_CUDA_CHECK(cudaMemsetAsync(dst, byte, bytes, stream_of(ctx)));
out:
  return rc;
}

/* Layout metadata travels as kernel parameters, PK_CUDA_CHUNK bytes per
 * launch: no pinned staging buffer, no pageable copy that could wait for the
 * stream, and the upload is stream-ordered and graph-capturable. */
#define PK_CUDA_CHUNK 3072

struct pk_cuda_chunk {
  uint32_t bytes;
  unsigned char data[PK_CUDA_CHUNK];
};

__global__ static void upload_kernel(pk_cuda_chunk c, unsigned char *dst) {
  for (uint32_t k = threadIdx.x; k < c.bytes; k += blockDim.x) {
    dst[k] = c.data[k];
  }
}

static int upload(pk_gpu_ctx_t *ctx, unsigned char *dst, const void *src, size_t bytes) {
  int rc = 0;
  pk_cuda_chunk c;
  for (size_t off = 0; off < bytes; off += PK_CUDA_CHUNK) {
    size_t n = bytes - off < PK_CUDA_CHUNK ? bytes - off : PK_CUDA_CHUNK;
    c.bytes = (uint32_t)n;
    memcpy(c.data, (const unsigned char *)src + off, n);
    upload_kernel<<<1, 256, 0, stream_of(ctx)>>>(c, dst + off);
    PK_CUDA_CHECK(cudaGetLastError());
  }
out:
  return rc;
}

static int cuda_layout_upload(pk_gpu_ctx_t *ctx, pk_gpu_layout_t *l) {
  PK_CUDA_GUARD(ctx);
  int rc = 0;
  size_t n1 = (size_t)l->host.n + 1;
  size_t rows_bytes = (sizeof(int32_t) * n1 + 15) / 16 * 16;
  size_t cu_bytes = sizeof(int64_t) * n1;
  size_t bucket_bytes = sizeof(int32_t) * (size_t)l->host.nbuckets;
  unsigned char *block = NULL;
  PK_CUDA_CHECK(
      cudaMallocAsync((void **)&block, rows_bytes + cu_bytes + bucket_bytes, stream_of(ctx)));
  l->dev_block = block;
  PK_GPU_CHECK(upload(ctx, block, l->host_rows, sizeof(int32_t) * n1));
  PK_GPU_CHECK(upload(ctx, block + rows_bytes, l->host_cu, cu_bytes));
  PK_GPU_CHECK(upload(ctx, block + rows_bytes + cu_bytes, l->host_bucket, bucket_bytes));
  l->dev = l->host;
  l->dev.rows = (const int32_t *)block;
  l->dev.cu = (const int64_t *)(block + rows_bytes);
  l->dev.bucket = bucket_bytes > 0 ? (const int32_t *)(block + rows_bytes + cu_bytes) : NULL;
out:
  return rc;
}

static void cuda_layout_free(pk_gpu_ctx_t *ctx, pk_gpu_layout_t *l) {
  pk_device_guard guard(ctx->device);
  if (l->dev_block != NULL) {
    /* Stream-ordered: kernels queued before this still see the metadata. */
    cudaFreeAsync(l->dev_block, stream_of(ctx));
    l->dev_block = NULL;
  }
}

static int cuda_spans(pk_gpu_ctx_t *ctx, const void *mask, int32_t esize, int32_t batch,
                      int32_t seqlen, int32_t *start, int32_t *length) {
  PK_CUDA_GUARD(ctx);
  int rc = 0;
  unsigned blocks = (unsigned)(batch < PK_CUDA_MAX_BLOCKS ? batch : PK_CUDA_MAX_BLOCKS);
  spans_kernel<<<blocks, PK_CUDA_THREADS, 0, stream_of(ctx)>>>(
      mask, esize, batch, seqlen, start, length, (pk_gpu_bad_t *)ctx->dev_bad);
  PK_CUDA_CHECK(cudaGetLastError());
out:
  return rc;
}

static int cuda_pack(pk_gpu_ctx_t *ctx, const pk_gpu_layout_t *l, const int32_t *start,
                     const int32_t *length, int32_t cp_rank, const pk_gpu_kop_t *ops,
                     int32_t nops) {
  PK_CUDA_GUARD(ctx);
  int rc = 0;
  pk_cuda_ops k;
  memset(&k, 0, sizeof k);
  memcpy(k.op, ops, sizeof(pk_gpu_kop_t) * (size_t)nops);
  pk_cuda_set_tiles(k.op, nops, l->host.local);
  dim3 grid(pk_cuda_blocks_for(k.op, nops, l->host.local), (unsigned)nops);
  if (pk_cuda_unroll_for(ops, nops) > 1) {
    pack_kernel<PK_CUDA_UNROLL><<<grid, PK_CUDA_THREADS, 0, stream_of(ctx)>>>(
        l->dev, start, length, cp_rank, k, (pk_gpu_bad_t *)ctx->dev_bad);
  } else {
    pack_kernel<1><<<grid, PK_CUDA_THREADS, 0, stream_of(ctx)>>>(l->dev, start, length, cp_rank, k,
                                                                 (pk_gpu_bad_t *)ctx->dev_bad);
  }
  PK_CUDA_CHECK(cudaGetLastError());
out:
  return rc;
}

static int cuda_unpack(pk_gpu_ctx_t *ctx, const pk_gpu_layout_t *l, const int32_t *start,
                       const int32_t *length, int32_t cp_rank, const pk_gpu_kop_t *ops,
                       int32_t nops) {
  PK_CUDA_GUARD(ctx);
  int rc = 0;
  pk_cuda_ops k;
  memset(&k, 0, sizeof k);
  memcpy(k.op, ops, sizeof(pk_gpu_kop_t) * (size_t)nops);
  int64_t items = (int64_t)l->host.n * l->host.seqlen;
  pk_cuda_set_tiles(k.op, nops, items);
  dim3 grid(pk_cuda_blocks_for(k.op, nops, items), (unsigned)nops);
  if (pk_cuda_unroll_for(ops, nops) > 1) {
    unpack_kernel<PK_CUDA_UNROLL><<<grid, PK_CUDA_THREADS, 0, stream_of(ctx)>>>(
        l->dev, start, length, cp_rank, k, (pk_gpu_bad_t *)ctx->dev_bad);
  } else {
    unpack_kernel<1><<<grid, PK_CUDA_THREADS, 0, stream_of(ctx)>>>(l->dev, start, length, cp_rank,
                                                                   k, (pk_gpu_bad_t *)ctx->dev_bad);
  }
  PK_CUDA_CHECK(cudaGetLastError());
out:
  return rc;
}

static const pk_gpu_backend_ops_t cuda_backend = {
    "cuda",           cuda_available, cuda_ctx_init, cuda_ctx_fini,
    cuda_set_stream,  cuda_sync,      cuda_take_bad, cuda_mem_alloc,
    cuda_mem_free,    cuda_mem_copy,  cuda_mem_set,  cuda_layout_upload,
    cuda_layout_free, cuda_spans,     cuda_pack,     cuda_unpack,
};

extern "C" const pk_gpu_backend_ops_t *pk_gpu_cuda_backend(void) {
  return &cuda_backend;
}
