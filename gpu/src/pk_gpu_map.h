/* The index maps of the packed layout, shared word for word by the host
 * backend (compiled as C) and the CUDA kernels (compiled by nvcc as
 * __host__ __device__ functions), so that both backends compute the same
 * source of every byte. Internal; not installed.
 *
 * Notation (research/gpu.md §1, §4.2, §5): sequence i has slot
 * [cu[i], cu[i+1]) of plen_i tokens in the packed stream of T tokens; the
 * local stream of a CP rank has Tl = T / CP tokens; g is the offset of a
 * token inside its padded slot. */
#ifndef PK_GPU_MAP_H
#define PK_GPU_MAP_H

#include <stdint.h>

#if defined(__CUDACC__)
#define PK_HD __host__ __device__ __forceinline__
#else
#define PK_HD static inline
#endif

/* The metadata of a layout as the kernels see it. The pointers are host
 * pointers in the host backend and device pointers in the CUDA backend. */
typedef struct pk_gpu_meta {
  int32_t n;           /* Sequences. */
  int32_t cp;          /* >= 1. */
  int32_t algo;        /* pk_gpu_cp_algo_t. */
  int32_t batch;       /* B. */
  int64_t seqlen;      /* S. */
  int64_t total;       /* T = cu[n]. */
  int64_t local;       /* Tl = T / cp. */
  const int32_t *rows; /* n rows of the padded batch. */
  const int64_t *cu;   /* n+1 slot offsets. */
} pk_gpu_meta_t;

/* One tensor of a launch, resolved on the host. */
typedef struct pk_gpu_kop {
  const unsigned char *src;
  unsigned char *dst;
  int64_t row_bytes; /* W * elem_size. */
  uint64_t fill;
  uint64_t value;
  int32_t field;
  int32_t esize;
  int32_t vec;   /* Bytes moved at once: a power of two <= 16 that divides row_bytes
                  * and the alignment of src and dst. */
  int32_t lanes; /* CUDA: threads per token row (1..32, a power of two). */
} pk_gpu_kop_t;

/* Bad-data kinds recorded by kernels (pk_gpu_bad_t.kind). */
#define PK_GPU_BAD_LENGTH 1 /* length[row] < 0 or longer than the slot. */
#define PK_GPU_BAD_START 2  /* start[row] < 0 or start + length > S. */
#define PK_GPU_BAD_HOLE 3   /* A mask row whose valid columns are not contiguous. */

/* Sets op->vec (the largest power of two <= 16 dividing the row size and
 * both pointers) and op->lanes (threads per token row on the GPU: enough
 * for one vector each, at most a warp) from row_bytes, src and dst. */
PK_HD void pk_kop_geometry(pk_gpu_kop_t *op) {
  uint64_t bits =
      (uint64_t)op->row_bytes | (uint64_t)(uintptr_t)op->src | (uint64_t)(uintptr_t)op->dst | 16;
  op->vec = (int32_t)(bits & (~bits + 1));
  int64_t units = op->row_bytes / op->vec;
  op->lanes = 1;
  while (op->lanes < 32 && op->lanes < units) {
    op->lanes *= 2;
  }
}

/* The first bad datum seen since the last check. code 0: none. */
typedef struct pk_gpu_bad {
  int32_t code;
  int32_t kind;
  int32_t row;
  int32_t spare;
  int64_t value;
} pk_gpu_bad_t;

/* The last k in [0, n) with cu[k] / div <= j (n > 0, cu[0] == 0 <= j). With
 * repeated boundaries (empty slots) this is the non-empty slot holding j. */
PK_HD int32_t pk_map_find(const int64_t *cu, int32_t n, int64_t div, int64_t j) {
  int32_t lo = 0, hi = n - 1;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo + 1) / 2;
    if (cu[mid] / div <= j) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

/* Local token j (0 <= j < Tl) of CP rank r: returns its sequence and sets *g
 * to its offset in the padded slot. */
PK_HD int32_t pk_map_local(const pk_gpu_meta_t *m, int32_t r, int64_t j, int64_t *g) {
  if (m->cp == 1) {
    int32_t i = pk_map_find(m->cu, m->n, 1, j);
    *g = j - m->cu[i];
    return i;
  }
  if (m->algo == 0) { /* zigzag */
    int64_t cp = m->cp;
    int32_t i = pk_map_find(m->cu, m->n, cp, j);
    int64_t o = j - m->cu[i] / cp;
    int64_t c = (m->cu[i + 1] - m->cu[i]) / (2 * cp);
    *g = o < c ? r * c + o : (2 * cp - 1 - r) * c + (o - c);
    return i;
  }
  int64_t p = (int64_t)r * m->local + j; /* ulysses */
  int32_t i = pk_map_find(m->cu, m->n, 1, p);
  *g = p - m->cu[i];
  return i;
}

/* Offset g of sequence i: returns the CP rank holding it and sets *loc to its
 * index in that rank's local stream. */
PK_HD int32_t pk_map_owner(const pk_gpu_meta_t *m, int32_t i, int64_t g, int64_t *loc) {
  if (m->cp == 1) {
    *loc = m->cu[i] + g;
    return 0;
  }
  if (m->algo == 0) {
    int64_t cp = m->cp;
    int64_t c = (m->cu[i + 1] - m->cu[i]) / (2 * cp);
    int64_t k = g / c, o = g % c;
    if (k < cp) {
      *loc = m->cu[i] / cp + o;
      return (int32_t)k;
    }
    *loc = m->cu[i] / cp + c + o;
    return (int32_t)(2 * cp - 1 - k);
  }
  int64_t p = m->cu[i] + g;
  *loc = p % m->local;
  return (int32_t)(p / m->local);
}

/* The valid span of sequence i: sets *st and returns the valid length, or
 * returns 0 and sets *bad to a PK_GPU_BAD_* kind (with *badval the offending
 * value) when the span does not fit its slot or the padded row. */
PK_HD int64_t pk_map_span(const pk_gpu_meta_t *m, const int32_t *start, const int32_t *length,
                          int32_t i, int64_t *st, int32_t *bad, int64_t *badval) {
  int32_t row = m->rows[i];
  int64_t len = length[row];
  int64_t s0 = start ? start[row] : 0;
  int64_t plen = m->cu[i + 1] - m->cu[i];
  *st = 0;
  *bad = 0;
  if (len < 0 || len > plen) {
    *bad = PK_GPU_BAD_LENGTH;
    *badval = len;
    return 0;
  }
  if (s0 < 0 || s0 + len > m->seqlen) {
    *bad = PK_GPU_BAD_START;
    *badval = s0;
    return 0;
  }
  *st = s0;
  return len;
}

/* What pack writes at offset g of a slot whose valid span is [st, st+len):
 * returns the source column of the padded row to copy, or -1 and sets *bits
 * to the element to write. */
PK_HD int64_t pk_map_pack_action(const pk_gpu_kop_t *op, int64_t g, int64_t len, int64_t st,
                                 uint64_t *bits) {
  *bits = op->fill;
  switch (op->field) {
  case 0: /* COPY */
    return g < len ? st + g : -1;
  case 1: /* LABELS */
    return g + 1 < len ? st + g + 1 : -1;
  case 2: /* POS_OFFSET */
    *bits = (uint64_t)g;
    return -1;
  case 3: /* POS_RESTART */
    *bits = (uint64_t)(g < len ? g : g - len);
    return -1;
  default: /* VALID */
    if (g < len) {
      *bits = op->value;
    }
    return -1;
  }
}

/* The source row of unpack for column s of sequence i (span [st, st+len)):
 * an index into src, or -1 when the slot gets the fill element. cp_rank -1:
 * src is the gathered stream [T, W]. */
PK_HD int64_t pk_map_unpack_src(const pk_gpu_meta_t *m, int32_t cp_rank, int32_t i, int64_t s,
                                int64_t st, int64_t len) {
  int64_t t = s - st;
  if (t < 0 || t >= len) {
    return -1;
  }
  int64_t loc;
  int32_t owner = pk_map_owner(m, i, t, &loc);
  if (cp_rank < 0) {
    return (int64_t)owner * m->local + loc;
  }
  return owner == cp_rank ? loc : -1;
}

#endif
