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

/* Vectors each thread loads before it stores any in the wide kernels (see
 * copy_units). */
#ifndef PK_CUDA_UNROLL
#define PK_CUDA_UNROLL 4
#endif

/* Copies nbytes with `lanes` threads, sizeof(T) bytes per access. With
 * U > 1 each thread issues U loads before the stores: the compiler cannot
 * move a load above an earlier store through pointers that may alias, so a
 * plain loop waits a full memory latency per vector; with the loads grouped,
 * U are in flight per thread. Source and destination never overlap (a pack
 * or unpack reads one tensor and writes another). U > 1 costs registers
 * (nvcc -Xptxas -v shows the two instantiations), so fewer threads are
 * resident, which is why only launches with wide rows use it
 * (pk_cuda_unroll_for). */
template <int U, typename T>
__device__ static void copy_units(unsigned char *d, const unsigned char *s, int64_t nbytes,
                                  int lane, int lanes) {
  T *dt = reinterpret_cast<T *>(d);
  const T *st = reinterpret_cast<const T *>(s);
  int64_t n = nbytes / (int64_t)sizeof(T);
  int64_t u = lane;
  if (U > 1) {
    const int64_t step = (int64_t)lanes * U;
    for (; u + (int64_t)lanes * (U - 1) < n; u += step) {
      T v[U];
      for (int k = 0; k < U; k++) {
        v[k] = st[u + (int64_t)k * lanes];
      }
      for (int k = 0; k < U; k++) {
        dt[u + (int64_t)k * lanes] = v[k];
      }
    }
  }
  for (; u < n; u += lanes) {
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

template <int U>
__device__ static void copy_row(unsigned char *d, const unsigned char *s, int64_t nbytes, int vec,
                                int lane, int lanes) {
  switch (vec) {
  case 16:
    copy_units<U, uint4>(d, s, nbytes, lane, lanes);
    break;
  case 8:
    copy_units<U, uint2>(d, s, nbytes, lane, lanes);
    break;
  case 4:
    copy_units<U, unsigned int>(d, s, nbytes, lane, lanes);
    break;
  case 2:
    copy_units<U, unsigned short>(d, s, nbytes, lane, lanes);
    break;
  default:
    copy_units<U, unsigned char>(d, s, nbytes, lane, lanes);
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

/* The most token rows each thread moves per tile in the narrow kernels
 * (rows that need fewer than 32 lanes): a warp takes op->tile x (32 /
 * lanes) consecutive rows, so the slot search and the span loads are done
 * once per tile rather than once per row. Tiles shrink (pk_cuda_set_tiles)
 * until the launch has at least PK_CUDA_MIN_WARPS warps: with few rows,
 * parallelism matters more. */
#define PK_CUDA_TILE 8
#define PK_CUDA_MIN_WARPS 4096

/* The valid span of slot i with its bounds (c0, c1) and local range. */
struct pk_cuda_slot {
  int32_t i;
  int32_t row;
  int64_t c0, c1, lo, hi, st, len;
};

__device__ static void slot_load(const pk_gpu_meta_t &m, const int32_t *start,
                                 const int32_t *length, int32_t r, int32_t i, bool report,
                                 pk_gpu_bad_t *bad, pk_cuda_slot *q) {
  int64_t badval = 0;
  int32_t badkind;
  q->i = i;
  q->row = m.rows[i];
  q->c0 = m.cu[i];
  q->c1 = m.cu[i + 1];
  pk_map_local_range(&m, r, q->c0, q->c1, &q->lo, &q->hi);
  q->len = pk_map_span(&m, start, length, i, &q->st, &badkind, &badval);
  if (badkind && report) {
    record_bad(bad, badkind, q->row, badval);
  }
}

template <int U>
__global__ static void pack_kernel(const __grid_constant__ pk_gpu_meta_t m, const int32_t *start,
                                   const int32_t *length, int32_t r,
                                   const __grid_constant__ pk_cuda_ops ops, pk_gpu_bad_t *bad) {
  const pk_gpu_kop_t *op = &ops.op[blockIdx.y];
  const int lanes = op->lanes;
  const int lane = (int)(threadIdx.x & (unsigned)(lanes - 1));
  if (lanes == 32) {
    /* Wide rows: one warp per local token row. */
    const int64_t group = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / lanes;
    const int64_t groups = ((int64_t)gridDim.x * blockDim.x) / lanes;
    for (int64_t j = group; j < m.local; j += groups) {
      int64_t g;
      pk_cuda_slot q;
      slot_load(m, start, length, r, pk_map_local(&m, r, j, &g), lane == 0, bad, &q);
      uint64_t bits;
      int64_t col = pk_map_pack_action(op, g, q.len, q.st, &bits);
      unsigned char *d = op->dst + j * op->row_bytes;
      if (col >= 0) {
        copy_row<U>(d, op->src + ((int64_t)q.row * m.seqlen + col) * op->row_bytes, op->row_bytes,
                    op->vec, lane, lanes);
      } else {
        fill_row(d, op->row_bytes, bits, op->esize, op->vec, lane, lanes);
      }
    }
    return;
  }
  /* Narrow rows: tiles of consecutive local tokens; each thread finds the
   * slot of its first token and walks forward across slot ends. */
  const int per = 32 / lanes;
  const int gi = (int)(threadIdx.x & 31u) / lanes;
  const int64_t tile = (int64_t)per * op->tile;
  const int64_t tiles = (m.local + tile - 1) / tile;
  const int64_t warp = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = ((int64_t)gridDim.x * blockDim.x) / 32;
  for (int64_t t = warp; t < tiles; t += warps) {
    int64_t j = t * tile + gi;
    if (j >= m.local) {
      continue;
    }
    int64_t g;
    pk_cuda_slot q;
    slot_load(m, start, length, r, pk_map_local(&m, r, j, &g), lane == 0, bad, &q);
    for (int c = 0; c < op->tile && j < m.local; c++, j += per) {
      while (j >= q.hi) {
        slot_load(m, start, length, r, q.i + 1, lane == 0, bad, &q);
      }
      g = pk_map_local_offset(&m, r, q.c0, q.c1, q.lo, j);
      uint64_t bits;
      int64_t col = pk_map_pack_action(op, g, q.len, q.st, &bits);
      unsigned char *d = op->dst + j * op->row_bytes;
      if (col >= 0) {
        copy_row<1>(d, op->src + ((int64_t)q.row * m.seqlen + col) * op->row_bytes, op->row_bytes,
                    op->vec, lane, lanes);
      } else {
        fill_row(d, op->row_bytes, bits, op->esize, op->vec, lane, lanes);
      }
    }
  }
}

template <int U>
__global__ static void unpack_kernel(const __grid_constant__ pk_gpu_meta_t m, const int32_t *start,
                                     const int32_t *length, int32_t r,
                                     const __grid_constant__ pk_cuda_ops ops, pk_gpu_bad_t *bad) {
  const pk_gpu_kop_t *op = &ops.op[blockIdx.y];
  const int lanes = op->lanes;
  const int lane = (int)(threadIdx.x & (unsigned)(lanes - 1));
  /* Work items: tiles of per x op->tile consecutive columns of one padded
   * row, a warp each; a thread takes every per-th column from its group's
   * first (wide rows: per = 1 and op->tile = 1, a warp per column). */
  const int per = 32 / lanes;
  const int64_t tile = (int64_t)per * op->tile;
  const int64_t tiles_per_row = (m.seqlen + tile - 1) / tile;
  const int64_t items = (int64_t)m.n * tiles_per_row;
  const int64_t unit = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
  const int64_t units = ((int64_t)gridDim.x * blockDim.x) / 32;
  const int gi = (int)(threadIdx.x & 31u) / lanes;
  const bool narrow_div = items <= (int64_t)UINT32_MAX; /* 32-bit division suffices. */
  for (int64_t t = unit; t < items; t += units) {
    int32_t i = narrow_div ? (int32_t)((uint32_t)t / (uint32_t)tiles_per_row)
                           : (int32_t)(t / tiles_per_row);
    int64_t s = (t - (int64_t)i * tiles_per_row) * tile + gi;
    if (s >= m.seqlen) {
      continue;
    }
    int64_t st, badval = 0;
    int32_t badkind;
    int64_t len = pk_map_span(&m, start, length, i, &st, &badkind, &badval);
    const int32_t row = m.rows[i];
    if (badkind && lane == 0 && s == 0) {
      record_bad(bad, badkind, row, badval);
    }
    const int64_t c0 = m.cu[i], c1 = m.cu[i + 1];
    for (int c = 0; c < op->tile && s < m.seqlen; c++, s += per) {
      int64_t src = pk_map_unpack_src_in(&m, r, c0, c1, s, st, len);
      unsigned char *d = op->dst + ((int64_t)row * m.seqlen + s) * op->row_bytes;
      if (src >= 0) {
        copy_row<U>(d, op->src + src * op->row_bytes, op->row_bytes, op->vec, lane, lanes);
      } else {
        fill_row(d, op->row_bytes, op->fill, op->esize, op->vec, lane, lanes);
      }
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

/* The copy unroll of a launch: PK_CUDA_UNROLL when some op moves rows of
 * at least PK_CUDA_UNROLL full 16-byte vectors per lane of a warp (the rows
 * where memory latency, not index arithmetic, limits the kernel), else 1. */
static inline int pk_cuda_unroll_for(const pk_gpu_kop_t *ops, int32_t nops) {
  for (int32_t q = 0; q < nops; q++) {
    if (ops[q].vec == 16 && ops[q].row_bytes >= (int64_t)16 * 32 * PK_CUDA_UNROLL) {
      return PK_CUDA_UNROLL;
    }
  }
  return 1;
}

/* Sets op->tile for a launch over `items` token rows: for narrow rows
 * PK_CUDA_TILE rows per thread, fewer when that would leave fewer than
 * PK_CUDA_MIN_WARPS warps; 1 for wide rows (a warp per row). */
static inline void pk_cuda_set_tiles(pk_gpu_kop_t *ops, int32_t nops, int64_t items) {
  for (int32_t q = 0; q < nops; q++) {
    int64_t per = 32 / ops[q].lanes;
    int64_t t = per == 1 ? 1 : items / (per * PK_CUDA_MIN_WARPS);
    ops[q].tile = (int32_t)(t < 1 ? 1 : t > PK_CUDA_TILE ? PK_CUDA_TILE : t);
  }
}

/* Blocks for the largest op of a launch over `items` token rows (grid-stride
 * loops cover the rest): a warp per row for wide rows, a warp per tile of
 * op->tile x (32 / lanes) rows for narrow ones (pk_cuda_set_tiles first). */
static inline unsigned pk_cuda_blocks_for(const pk_gpu_kop_t *ops, int32_t nops, int64_t items) {
  int64_t most = 1;
  for (int32_t q = 0; q < nops; q++) {
    int64_t tile = (int64_t)(32 / ops[q].lanes) * ops[q].tile;
    int64_t threads = (items + tile - 1) / tile * 32;
    int64_t b = (threads + PK_CUDA_THREADS - 1) / PK_CUDA_THREADS;
    most = b > most ? b : most;
  }
  return (unsigned)(most < PK_CUDA_MAX_BLOCKS ? most : PK_CUDA_MAX_BLOCKS);
}

#endif
