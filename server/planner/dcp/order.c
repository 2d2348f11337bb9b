/* Sorts (dcp.h). Orders of sequences by a cost (dcp_order_desc): a stable LSD
 * radix sort of the costs' bit patterns, a byte at a time, with the bytes
 * that every key shares skipped (the low half only where the high half
 * leaves ties). Costs are finite (validation), so the
 * pattern of a double, its sign bit flipped (or every bit, for a negative),
 * orders as the double does; -0 is taken as +0 so that it ties with it.
 * Sorting by the complement gives the descending order, and stability over
 * the indices in ascending order breaks ties by index: the order of the
 * comparison sorts it replaces, in O(n) passes instead of O(n log n)
 * indirect comparisons. */
#include <string.h>

#include "dcp.h"

#define DCP_RADIX_BITS 8u
#define DCP_RADIX_SIZE (1u << DCP_RADIX_BITS)
#define DCP_RADIX_PASSES (64u / DCP_RADIX_BITS)

/* Ascending in this key is descending in the cost. */
static inline uint64_t desc_key(double v) {
  uint64_t u;
  v += 0.0;
  memcpy(&u, &v, sizeof u);
  u = (u >> 63) != 0 ? ~u : u | (1ull << 63);
  return ~u;
}

/* LSD passes over the bytes first .. DCP_RADIX_PASSES - 1 of the keys
 * (count: their byte histograms), stable, from *a through *b; *a holds the
 * result. */
static void radix(dcp_rank_t **a, dcp_rank_t **b, uint32_t n, uint32_t first,
                  uint32_t count[DCP_RADIX_PASSES][DCP_RADIX_SIZE]) {
  for (uint32_t p = first; p < DCP_RADIX_PASSES; p++) {
    uint32_t shift = p * DCP_RADIX_BITS, sum = 0;
    bool shared = false;
    for (uint32_t d = 0; d < DCP_RADIX_SIZE && !shared; d++)
      shared = count[p][d] == n;
    if (shared)
      continue;
    for (uint32_t d = 0; d < DCP_RADIX_SIZE; d++) {
      uint32_t c = count[p][d];
      count[p][d] = sum;
      sum += c;
    }
    const dcp_rank_t *src = *a;
    dcp_rank_t *dst = *b;
    for (uint32_t x = 0; x < n; x++)
      dst[count[p][(src[x].key >> shift) & (DCP_RADIX_SIZE - 1)]++] = src[x];
    *b = *a;
    *a = dst;
  }
}

/* The high half of the keys first (sign, exponent and the top 20 bits of
 * the mantissa: costs within a millionth of each other share it), then
 * each run of a shared high half put in order by insertion (its entries
 * are in index order, so equal keys stay so and cost no move). Where the
 * moves pass DCP_RADIX_MOVES per key (many near-equal costs), the low
 * half's passes instead. */
#define DCP_RADIX_MOVES 4u

void dcp_order_desc(const double *key, uint32_t n, uint32_t *out, dcp_rank_t *scratch) {
  uint32_t count[DCP_RADIX_PASSES][DCP_RADIX_SIZE];
  memset(count, 0, sizeof count);
  dcp_rank_t *a = scratch, *b = scratch + n;
  for (uint32_t i = 0; i < n; i++) {
    uint64_t u = desc_key(key[i]);
    a[i] = (dcp_rank_t){.key = u, .idx = i};
    for (uint32_t p = DCP_RADIX_PASSES / 2; p < DCP_RADIX_PASSES; p++)
      count[p][(u >> (p * DCP_RADIX_BITS)) & (DCP_RADIX_SIZE - 1)]++;
  }
  radix(&a, &b, n, DCP_RADIX_PASSES / 2, count);
  uint64_t moves = 0;
  for (uint32_t x = 1; x < n && moves <= (uint64_t)DCP_RADIX_MOVES * n; x++) {
    dcp_rank_t v = a[x];
    uint32_t y = x;
    for (; y > 0; y--) {
      const dcp_rank_t *w = &a[y - 1];
      if (w->key >> 32 != v.key >> 32 || w->key < v.key || (w->key == v.key && w->idx < v.idx))
        break;
      a[y] = *w;
    }
    a[y] = v;
    moves += x - y;
  }
  if (moves > (uint64_t)DCP_RADIX_MOVES * n) {
    /* Every pass from the lowest byte: back to index order first. */
    for (uint32_t x = 0; x < n; x++)
      b[a[x].idx] = a[x];
    dcp_rank_t *t = a;
    a = b;
    b = t;
    memset(count, 0, sizeof count);
    for (uint32_t x = 0; x < n; x++)
      for (uint32_t p = 0; p < DCP_RADIX_PASSES; p++)
        count[p][(a[x].key >> (p * DCP_RADIX_BITS)) & (DCP_RADIX_SIZE - 1)]++;
    radix(&a, &b, n, 0, count);
  }
  for (uint32_t x = 0; x < n; x++)
    out[x] = a[x].idx;
}

static inline bool key_before(const dcp_key_t *x, const dcp_key_t *y) {
  if (x->major != y->major)
    return x->major < y->major;
  if (x->minor != y->minor)
    return x->minor > y->minor;
  return x->idx < y->idx;
}

/* Insertion sort of runs of DCP_KEY_RUN, then bottom-up merges; the order
 * is total (indices differ), so it is the order of any correct sort. */
#define DCP_KEY_RUN 16u

void dcp_sort_keys(dcp_key_t *a, dcp_key_t *tmp, uint32_t n) {
  /* Lists built in order or in reverse (a slot's groups are a stack) are
   * common: one pass finds them. */
  uint32_t up = 1, down = 1;
  while (up < n && key_before(&a[up - 1], &a[up]))
    up++;
  if (up >= n)
    return;
  while (down < n && key_before(&a[down], &a[down - 1]))
    down++;
  if (down >= n) {
    for (uint32_t x = 0, y = n - 1; x < y; x++, y--) {
      dcp_key_t t = a[x];
      a[x] = a[y];
      a[y] = t;
    }
    return;
  }
  for (uint32_t lo = 0; lo < n; lo += DCP_KEY_RUN) {
    uint32_t hi = lo + DCP_KEY_RUN < n ? lo + DCP_KEY_RUN : n;
    for (uint32_t x = lo + 1; x < hi; x++) {
      dcp_key_t v = a[x];
      uint32_t y = x;
      for (; y > lo && key_before(&v, &a[y - 1]); y--)
        a[y] = a[y - 1];
      a[y] = v;
    }
  }
  dcp_key_t *src = a, *dst = tmp;
  for (uint32_t w = DCP_KEY_RUN; w < n; w *= 2) {
    for (uint32_t lo = 0; lo < n; lo += 2 * w) {
      uint32_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      uint32_t x = lo, y = mid, o = lo;
      while (x < mid && y < hi)
        dst[o++] = key_before(&src[y], &src[x]) ? src[y++] : src[x++];
      while (x < mid)
        dst[o++] = src[x++];
      while (y < hi)
        dst[o++] = src[y++];
    }
    dcp_key_t *t = src;
    src = dst;
    dst = t;
  }
  if (src != a)
    memcpy(a, src, (size_t)n * sizeof *a);
}
