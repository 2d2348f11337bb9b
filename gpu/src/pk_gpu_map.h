/* The index maps of the packed layout, shared word for word by the host
 * backend (compiled as C) and the CUDA kernels (compiled by nvcc as
 * __host__ __device__ functions), so that both backends compute the same
 * source of every byte. Internal; not installed.
 *
 * Notation (docs/design.md, "Layouts"): sequence i has slot
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
  const int64_t *cu;   /* n+1 slot offsets; every offset fits in int32. */
  /* Optional (NULL: search all n slots). The slot search of pk_map_local
   * looks for a key in [0, K) (K = T / cp for zigzag, T otherwise);
   * bucket[b] is the slot of key b << bucket_shift (n - 1 past K), for b in
   * 0..K >> bucket_shift, plus one more entry, so that a key's slot lies in
   * [bucket[b], bucket[b + 1]]: one or two probes instead of log2(n). */
  const int32_t *bucket;
  int32_t bucket_shift;
  int32_t nbuckets; /* Entries in bucket. */
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
  int32_t tile;  /* CUDA, lanes < 32: token rows per thread (pk_cuda_set_tiles). */
  int32_t spare;
} pk_gpu_kop_t;

/* Bad-data kinds recorded by kernels (pk_gpu_bad_t.kind). */
#define PK_GPU_BAD_LENGTH 1 /* length[row] < 0 or longer than the slot. */
#define PK_GPU_BAD_START 2  /* start[row] < 0 or start + length > S. */
#define PK_GPU_BAD_HOLE 3   /* A mask row whose valid columns are not contiguous. */

/* Sets op->vec (the largest power of two <= 16 dividing the row size and
 * both pointers) and op->lanes (threads per token row on the GPU: enough
 * for one vector each, at most a warp) from row_bytes, src and dst; op->tile
 * to 1. */
PK_HD void pk_kop_geometry(pk_gpu_kop_t *op) {
  uint64_t bits =
      (uint64_t)op->row_bytes | (uint64_t)(uintptr_t)op->src | (uint64_t)(uintptr_t)op->dst | 16;
  op->vec = (int32_t)(bits & (~bits + 1));
  int64_t units = op->row_bytes / op->vec;
  op->lanes = 1;
  while (op->lanes < 32 && op->lanes < units) {
    op->lanes *= 2;
  }
  op->tile = 1;
}

/* The first bad datum seen since the last check. code 0: none. */
typedef struct pk_gpu_bad {
  int32_t code;
  int32_t kind;
  int32_t row;
  int32_t spare;
  int64_t value;
} pk_gpu_bad_t;

/* a / b for 0 <= a, 0 < b, both below 2^32 (slot offsets and lengths fit in
 * int32): one 32-bit division, several times cheaper on a GPU than a 64-bit
 * one. */
PK_HD int64_t pk_map_div(int64_t a, int64_t b) {
  return (int64_t)((uint32_t)a / (uint32_t)b);
}

/* The last k in [lo, hi] with cu[k] / div <= j, given that it lies there
 * (cu[lo] / div <= j). With repeated boundaries (empty slots) this is the
 * non-empty slot holding j. */
PK_HD int32_t pk_map_find_in(const int64_t *cu, int32_t lo, int32_t hi, int64_t div, int64_t j) {
  while (lo < hi) {
    int32_t mid = lo + (hi - lo + 1) / 2;
    if ((div == 1 ? cu[mid] : pk_map_div(cu[mid], div)) <= j) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

/* The slot of key j (0 <= j < K, see pk_gpu_meta_t.bucket) for the divisor
 * div of the layout: 1, or cp for zigzag. */
PK_HD int32_t pk_map_find(const pk_gpu_meta_t *m, int64_t div, int64_t j) {
  if (m->bucket != NULL) {
    int64_t b = j >> m->bucket_shift;
    if (b + 1 < m->nbuckets) {
      return pk_map_find_in(m->cu, m->bucket[b], m->bucket[b + 1], div, j);
    }
  }
  return pk_map_find_in(m->cu, 0, m->n - 1, div, j);
}

/* The part of the slot [c0, c1) (c0 = cu[i], c1 = cu[i + 1]) in the local
 * stream of CP rank r, as local indices [*lo, *hi) (ulysses: may lie
 * outside 0..Tl, then the rank holds none or part of it). */
PK_HD void pk_map_local_range(const pk_gpu_meta_t *m, int32_t r, int64_t c0, int64_t c1,
                              int64_t *lo, int64_t *hi) {
  if (m->cp > 1 && m->algo == 0) { /* zigzag */
    *lo = pk_map_div(c0, m->cp);
    *hi = pk_map_div(c1, m->cp);
  } else { /* one rank, or ulysses */
    int64_t base = m->cp > 1 ? (int64_t)r * m->local : 0;
    *lo = c0 - base;
    *hi = c1 - base;
  }
}

/* The offset in its padded slot [c0, c1) of local token j of rank r, given
 * the slot's local start lo (pk_map_local_range). */
PK_HD int64_t pk_map_local_offset(const pk_gpu_meta_t *m, int32_t r, int64_t c0, int64_t c1,
                                  int64_t lo, int64_t j) {
  int64_t o = j - lo;
  if (m->cp == 1 || m->algo != 0) {
    return o;
  }
  int64_t cp = m->cp;
  int64_t c = pk_map_div(c1 - c0, 2 * cp);
  return o < c ? r * c + o : (2 * cp - 1 - r) * c + (o - c);
}

/* The divisor of the slot search: cp for zigzag (keys are local indices,
 * slot bounds cu / cp), else 1 (keys are packed indices); the keys run over
 * [0, total / divisor). */
PK_HD int64_t pk_map_search_div(const pk_gpu_meta_t *m) {
  return m->cp > 1 && m->algo == 0 ? m->cp : 1;
}

/* Local token j (0 <= j < Tl) of CP rank r: returns its sequence and sets *g
 * to its offset in the padded slot. */
PK_HD int32_t pk_map_local(const pk_gpu_meta_t *m, int32_t r, int64_t j, int64_t *g) {
  int32_t i = m->cp > 1 && m->algo != 0 ? pk_map_find(m, 1, (int64_t)r * m->local + j) /* ulysses */
                                        : pk_map_find(m, pk_map_search_div(m), j);
  int64_t c0 = m->cu[i], c1 = m->cu[i + 1], lo, hi;
  pk_map_local_range(m, r, c0, c1, &lo, &hi);
  *g = pk_map_local_offset(m, r, c0, c1, lo, j);
  return i;
}

/* Sets m->bucket_shift (about one slot per bucket, at least 16 keys per
 * bucket) and m->nbuckets (0 when there is nothing to search) for the
 * bucket table of pk_gpu_meta_t. Host only. */
static inline void pk_map_bucket_count(pk_gpu_meta_t *m) {
  int64_t keys = m->total / pk_map_search_div(m);
  m->bucket_shift = 4;
  m->nbuckets = 0;
  if (m->n < 2 || keys < 1) {
    return;
  }
  while (m->bucket_shift < 30 && ((int64_t)1 << (m->bucket_shift + 1)) * m->n <= keys) {
    m->bucket_shift++;
  }
  m->nbuckets = (int32_t)((keys - 1) >> m->bucket_shift) + 2;
}

/* Fills bucket (m->nbuckets entries, from pk_map_bucket_count). Host only. */
static inline void pk_map_bucket_fill(const pk_gpu_meta_t *m, int32_t *bucket) {
  int64_t div = pk_map_search_div(m);
  int64_t keys = m->total / div;
  for (int32_t b = 0; b < m->nbuckets; b++) {
    int64_t key = (int64_t)b << m->bucket_shift;
    bucket[b] = key < keys ? pk_map_find_in(m->cu, 0, m->n - 1, div, key) : m->n - 1;
  }
}

/* Offset g of the sequence in slot [c0, c1): returns the CP rank holding
 * it and sets *loc to its index in that rank's local stream. */
PK_HD int32_t pk_map_owner_in(const pk_gpu_meta_t *m, int64_t c0, int64_t c1, int64_t g,
                              int64_t *loc) {
  if (m->cp == 1) {
    *loc = c0 + g;
    return 0;
  }
  if (m->algo == 0) {
    int64_t cp = m->cp;
    int64_t c = pk_map_div(c1 - c0, 2 * cp);
    int64_t k = pk_map_div(g, c), o = g - k * c;
    if (k < cp) {
      *loc = pk_map_div(c0, cp) + o;
      return (int32_t)k;
    }
    *loc = pk_map_div(c0, cp) + c + o;
    return (int32_t)(2 * cp - 1 - k);
  }
  int64_t p = c0 + g;
  int64_t owner = pk_map_div(p, m->local);
  *loc = p - owner * m->local;
  return (int32_t)owner;
}

/* Offset g of sequence i: returns the CP rank holding it and sets *loc to
 * its index in that rank's local stream. */
PK_HD int32_t pk_map_owner(const pk_gpu_meta_t *m, int32_t i, int64_t g, int64_t *loc) {
  return pk_map_owner_in(m, m->cu[i], m->cu[i + 1], g, loc);
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

/* The source row of unpack for column s of the sequence in slot [c0, c1)
 * (span [st, st+len)): an index into src, or -1 when the slot gets the fill
 * element. cp_rank -1: src is the gathered stream [T, W]. */
PK_HD int64_t pk_map_unpack_src_in(const pk_gpu_meta_t *m, int32_t cp_rank, int64_t c0, int64_t c1,
                                   int64_t s, int64_t st, int64_t len) {
  int64_t t = s - st;
  if (t < 0 || t >= len) {
    return -1;
  }
  int64_t loc;
  int32_t owner = pk_map_owner_in(m, c0, c1, t, &loc);
  if (cp_rank < 0) {
    return (int64_t)owner * m->local + loc;
  }
  return owner == cp_rank ? loc : -1;
}

/* The same for sequence i. */
PK_HD int64_t pk_map_unpack_src(const pk_gpu_meta_t *m, int32_t cp_rank, int32_t i, int64_t s,
                                int64_t st, int64_t len) {
  return pk_map_unpack_src_in(m, cp_rank, m->cu[i], m->cu[i + 1], s, st, len);
}

#endif
