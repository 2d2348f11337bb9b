/* The CUDA kernels of the GPU agent and their launch geometry. Included by
 * cuda_backend.cu (nvcc) and, with small shims for the CUDA built-ins, by
 * tests/gpu/test_kernel_emu.cpp, which runs every thread of the pack and
 * unpack kernels one after another on the host and compares the bytes with
 * the host backend; so the indexing, vector widths, lanes and grid-stride
 * loops are checked even where no GPU exists. Internal; not installed. */
#ifndef PK_CUDA_KERNELS_CUH
#define PK_CUDA_KERNELS_CUH

#include <stdint.h>

#include "pk_gpu.h"
#include "pk_gpu_map.h"

#define PK_CUDA_THREADS 256
#define PK_CUDA_MAX_BLOCKS 65535

/* Kernel parameters whose address is taken are marked __grid_constant__
 * (CUDA 11.7+, sm_70+): the kernels index them in place instead of copying
 * the ~3.6 KB op table into every thread's local memory. */

/* The ops of one launch, passed by value as a kernel parameter (no upload,
 * so the launch can be captured in a graph). */
struct pk_cuda_ops {
  pk_gpu_kop_t op[PK_GPU_MAX_OPS];
};

/* ---- Device helpers -------------------------------------------------- */

__device__ static void record_bad(pk_gpu_bad_t *b, int32_t kind, int32_t row, int64_t value) {
  if (atomicCAS(&b->code, 0, 1) == 0) {
    b->kind = kind;
    b->row = row;
    b->value = value;
  }
}

template <typename T>
__device__ static void copy_units(unsigned char *d, const unsigned char *s, int64_t nbytes,
                                  int lane, int lanes) {
  T *dt = reinterpret_cast<T *>(d);
  const T *st = reinterpret_cast<const T *>(s);
  int64_t n = nbytes / (int64_t)sizeof(T);
  for (int64_t u = lane; u < n; u += lanes) {
    dt[u] = st[u];
  }
}

/* Writes the element `bits` (esize bytes, little-endian) repeated over
 * nbytes, sizeof(T) bytes at a time. */
template <typename T>
__device__ static void fill_units(unsigned char *d, int64_t nbytes, uint64_t bits, int esize,
                                  int lane, int lanes) {
  union {
    unsigned long long q[2];
    T t[16 / sizeof(T)];
  } p;
  unsigned long long e = bits, rep;
  if (esize == 1) {
    rep = (e & 0xffULL) * 0x0101010101010101ULL;
  } else if (esize == 2) {
    rep = (e & 0xffffULL) * 0x0001000100010001ULL;
  } else if (esize == 4) {
    rep = (e & 0xffffffffULL) | ((e & 0xffffffffULL) << 32);
  } else {
    rep = e;
  }
  p.q[0] = rep;
  p.q[1] = rep;
  T *dt = reinterpret_cast<T *>(d);
  int64_t n = nbytes / (int64_t)sizeof(T);
  if ((int)sizeof(T) >= esize) {
    T v = p.t[0];
    for (int64_t u = lane; u < n; u += lanes) {
      dt[u] = v;
    }
  } else {
    int per = esize / (int)sizeof(T);
    for (int64_t u = lane; u < n; u += lanes) {
      dt[u] = p.t[u % per];
    }
  }
}

__device__ static void copy_row(unsigned char *d, const unsigned char *s, int64_t nbytes, int vec,
                                int lane, int lanes) {
  switch (vec) {
  case 16:
    copy_units<uint4>(d, s, nbytes, lane, lanes);
    break;
  case 8:
    copy_units<uint2>(d, s, nbytes, lane, lanes);
    break;
  case 4:
    copy_units<unsigned int>(d, s, nbytes, lane, lanes);
    break;
  case 2:
    copy_units<unsigned short>(d, s, nbytes, lane, lanes);
    break;
  default:
    copy_units<unsigned char>(d, s, nbytes, lane, lanes);
    break;
  }
}

__device__ static void fill_row(unsigned char *d, int64_t nbytes, uint64_t bits, int esize, int vec,
                                int lane, int lanes) {
  switch (vec) {
  case 16:
    fill_units<uint4>(d, nbytes, bits, esize, lane, lanes);
    break;
  case 8:
    fill_units<uint2>(d, nbytes, bits, esize, lane, lanes);
    break;
  case 4:
    fill_units<unsigned int>(d, nbytes, bits, esize, lane, lanes);
    break;
  case 2:
    fill_units<unsigned short>(d, nbytes, bits, esize, lane, lanes);
    break;
  default:
    fill_units<unsigned char>(d, nbytes, bits, esize, lane, lanes);
    break;
  }
}

/* ---- Kernels ----------------------------------------------------------- */

__global__ static void pack_kernel(const __grid_constant__ pk_gpu_meta_t m, const int32_t *start,
                                   const int32_t *length, int32_t r,
                                   const __grid_constant__ pk_cuda_ops ops, pk_gpu_bad_t *bad) {
  const pk_gpu_kop_t *op = &ops.op[blockIdx.y];
  const int lanes = op->lanes;
  const int lane = (int)(threadIdx.x & (unsigned)(lanes - 1));
  const int64_t group = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / lanes;
  const int64_t groups = ((int64_t)gridDim.x * blockDim.x) / lanes;
  for (int64_t j = group; j < m.local; j += groups) {
    int64_t g, st, badval = 0;
    int32_t badkind;
    int32_t i = pk_map_local(&m, r, j, &g);
    int64_t len = pk_map_span(&m, start, length, i, &st, &badkind, &badval);
    if (badkind && lane == 0) {
      record_bad(bad, badkind, m.rows[i], badval);
    }
    uint64_t bits;
    int64_t col = pk_map_pack_action(op, g, len, st, &bits);
    unsigned char *d = op->dst + j * op->row_bytes;
    if (col >= 0) {
      copy_row(d, op->src + ((int64_t)m.rows[i] * m.seqlen + col) * op->row_bytes, op->row_bytes,
               op->vec, lane, lanes);
    } else {
      fill_row(d, op->row_bytes, bits, op->esize, op->vec, lane, lanes);
    }
  }
}

__global__ static void unpack_kernel(const __grid_constant__ pk_gpu_meta_t m, const int32_t *start,
                                     const int32_t *length, int32_t r,
                                     const __grid_constant__ pk_cuda_ops ops, pk_gpu_bad_t *bad) {
  const pk_gpu_kop_t *op = &ops.op[blockIdx.y];
  const int lanes = op->lanes;
  const int lane = (int)(threadIdx.x & (unsigned)(lanes - 1));
  const int64_t group = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / lanes;
  const int64_t groups = ((int64_t)gridDim.x * blockDim.x) / lanes;
  const int64_t rows = (int64_t)m.n * m.seqlen;
  for (int64_t k = group; k < rows; k += groups) {
    int32_t i = (int32_t)(k / m.seqlen);
    int64_t s = k % m.seqlen;
    int64_t st, badval = 0;
    int32_t badkind;
    int64_t len = pk_map_span(&m, start, length, i, &st, &badkind, &badval);
    if (badkind && lane == 0 && s == 0) {
      record_bad(bad, badkind, m.rows[i], badval);
    }
    int64_t src = pk_map_unpack_src(&m, r, i, s, st, len);
    unsigned char *d = op->dst + ((int64_t)m.rows[i] * m.seqlen + s) * op->row_bytes;
    if (src >= 0) {
      copy_row(d, op->src + src * op->row_bytes, op->row_bytes, op->vec, lane, lanes);
    } else {
      fill_row(d, op->row_bytes, op->fill, op->esize, op->vec, lane, lanes);
    }
  }
}

template <typename T> __device__ static bool mask_on(const void *mask, int64_t idx) {
  return reinterpret_cast<const T *>(mask)[idx] != 0;
}

/* One block per mask row (grid-stride over rows). */
__global__ static void spans_kernel(const void *mask, int32_t esize, int32_t batch, int32_t seqlen,
                                    int32_t *start, int32_t *length, pk_gpu_bad_t *bad) {
  __shared__ int s_first, s_last, s_count;
  for (int32_t b = blockIdx.x; b < batch; b += gridDim.x) {
    if (threadIdx.x == 0) {
      s_first = seqlen;
      s_last = -1;
      s_count = 0;
    }
    __syncthreads();
    int first = seqlen, last = -1, count = 0;
    for (int32_t s = threadIdx.x; s < seqlen; s += blockDim.x) {
      int64_t idx = (int64_t)b * seqlen + s;
      bool on;
      if (esize == 1) {
        on = mask_on<unsigned char>(mask, idx);
      } else if (esize == 2) {
        on = mask_on<unsigned short>(mask, idx);
      } else if (esize == 4) {
        on = mask_on<unsigned int>(mask, idx);
      } else {
        on = mask_on<unsigned long long>(mask, idx);
      }
      if (on) {
        first = first < s ? first : s;
        last = s;
        count++;
      }
    }
    if (count > 0) {
      atomicMin(&s_first, first);
      atomicMax(&s_last, last);
      atomicAdd(&s_count, count);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      start[b] = s_count > 0 ? s_first : 0;
      length[b] = s_count;
      if (s_count > 0 && s_last - s_first + 1 != s_count) {
        length[b] = -1;
        record_bad(bad, PK_GPU_BAD_HOLE, b, s_first);
      }
    }
    __syncthreads();
  }
}

/* Blocks for the largest op of a launch (grid-stride loops cover the rest). */
static inline unsigned pk_cuda_blocks_for(const pk_gpu_kop_t *ops, int32_t nops, int64_t items) {
  int64_t most = 1;
  for (int32_t q = 0; q < nops; q++) {
    int64_t threads = items * ops[q].lanes;
    int64_t b = (threads + PK_CUDA_THREADS - 1) / PK_CUDA_THREADS;
    most = b > most ? b : most;
  }
  return (unsigned)(most < PK_CUDA_MAX_BLOCKS ? most : PK_CUDA_MAX_BLOCKS);
}

#endif
