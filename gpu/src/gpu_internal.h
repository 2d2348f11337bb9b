/* Internal interfaces of libpackd_gpu, shared by its source files: the
 * context and layout objects, the backend function table and the error
 * helpers. Not installed. */
#ifndef PK_GPU_INTERNAL_H
#define PK_GPU_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pk_gpu.h"
#include "pk_gpu_map.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The largest CP size (and dynamic-CP group or TP size) a layout accepts:
 * far above any real pool, small enough that every product of sizes in the
 * index maps stays inside int32. */
#define PK_GPU_MAX_CP 1024

/* Records a failure message for pk_gpu_last_error() and returns code. */
int pk_gpu_fail(int code, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* CHECK-style helpers with one exit label named `out` and an int `rc`. */
#define PK_GPU_CHECK(expr)                                                                         \
  do {                                                                                             \
    rc = (expr);                                                                                   \
    if (rc != 0) {                                                                                 \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

#define PK_GPU_REQUIRE(cond, code, ...)                                                            \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      rc = pk_gpu_fail((code), __VA_ARGS__);                                                       \
      goto out;                                                                                    \
    }                                                                                              \
  } while (0)

/* Turns a recorded bad datum into an error message; returns PK_GPU_EINVAL,
 * or 0 when bad->code is 0. */
int pk_gpu_report_bad(const pk_gpu_bad_t *bad);

/* One backend. Every function returns 0 or a negative pk_gpu_error. */
typedef struct pk_gpu_backend_ops {
  const char *name;
  int (*available)(void);
  int (*ctx_init)(pk_gpu_ctx_t *ctx, int device);
  void (*ctx_fini)(pk_gpu_ctx_t *ctx);
  int (*set_stream)(pk_gpu_ctx_t *ctx, void *stream);
  int (*sync)(pk_gpu_ctx_t *ctx);
  /* Copies the first bad datum into *bad and clears it (waits if needed). */
  int (*take_bad)(pk_gpu_ctx_t *ctx, pk_gpu_bad_t *bad);
  int (*mem_alloc)(pk_gpu_ctx_t *ctx, size_t bytes, void **out);
  void (*mem_free)(pk_gpu_ctx_t *ctx, void *p);
  /* to_backend: host -> backend memory, else backend -> host; waits. */
  int (*mem_copy)(pk_gpu_ctx_t *ctx, void *dst, const void *src, size_t bytes, bool to_backend);
  int (*mem_set)(pk_gpu_ctx_t *ctx, void *dst, int byte, size_t bytes);
  /* Makes layout->dev usable by the backend's kernels. */
  int (*layout_upload)(pk_gpu_ctx_t *ctx, pk_gpu_layout_t *layout);
  void (*layout_free)(pk_gpu_ctx_t *ctx, pk_gpu_layout_t *layout);
  int (*spans)(pk_gpu_ctx_t *ctx, const void *mask, int32_t esize, int32_t batch, int32_t seqlen,
               int32_t *start, int32_t *length);
  int (*pack)(pk_gpu_ctx_t *ctx, const pk_gpu_layout_t *layout, const int32_t *start,
              const int32_t *length, int32_t cp_rank, const pk_gpu_kop_t *ops, int32_t nops);
  int (*unpack)(pk_gpu_ctx_t *ctx, const pk_gpu_layout_t *layout, const int32_t *start,
                const int32_t *length, int32_t cp_rank, const pk_gpu_kop_t *ops, int32_t nops);
} pk_gpu_backend_ops_t;

extern const pk_gpu_backend_ops_t pk_gpu_host_backend;
/* NULL when the library was built without CUDA. */
const pk_gpu_backend_ops_t *pk_gpu_cuda_backend(void);

struct pk_gpu_ctx {
  pk_gpu_backend_t kind;
  const pk_gpu_backend_ops_t *ops;
  int device;
  void *stream;     /* cudaStream_t; NULL for the default stream or the host. */
  pk_gpu_bad_t bad; /* Host backend: the first bad datum since the last check. */
  void *dev_bad;    /* CUDA backend: a pk_gpu_bad_t in device memory. */
};

struct pk_gpu_layout {
  pk_gpu_ctx_t *ctx;
  pk_gpu_meta_t host; /* Pointers into host_rows / host_cu / host_bucket. */
  pk_gpu_meta_t dev;  /* The same metadata as the backend reads it. */
  int32_t *host_rows;
  int64_t *host_cu;
  int32_t *host_bucket; /* NULL when host.nbuckets is 0. */
  void *dev_block;      /* CUDA: one device allocation holding rows, cu and bucket. */
};

#ifdef __cplusplus
}
#endif

#endif
