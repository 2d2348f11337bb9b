/* Orders of sequences by a cost (dcp.h, dcp_order_desc): a stable LSD
 * radix sort of the costs' bit patterns, a byte at a time, with the bytes
 * that every key shares skipped. Costs are finite (validation), so the
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

void dcp_order_desc(const double *key, uint32_t n, uint32_t *out, uint32_t *tmp) {
  uint32_t count[DCP_RADIX_PASSES][DCP_RADIX_SIZE];
  memset(count, 0, sizeof count);
  for (uint32_t i = 0; i < n; i++) {
    uint64_t u = desc_key(key[i]);
    for (uint32_t p = 0; p < DCP_RADIX_PASSES; p++)
      count[p][(u >> (p * DCP_RADIX_BITS)) & (DCP_RADIX_SIZE - 1)]++;
  }
  for (uint32_t i = 0; i < n; i++)
    out[i] = i;
  uint32_t *src = out, *dst = tmp;
  for (uint32_t p = 0; p < DCP_RADIX_PASSES; p++) {
    uint32_t shift = p * DCP_RADIX_BITS, sum = 0;
    bool shared = false;
    for (uint32_t b = 0; b < DCP_RADIX_SIZE && !shared; b++)
      shared = count[p][b] == n;
    if (shared)
      continue;
    for (uint32_t b = 0; b < DCP_RADIX_SIZE; b++) {
      uint32_t c = count[p][b];
      count[p][b] = sum;
      sum += c;
    }
    for (uint32_t x = 0; x < n; x++) {
      uint32_t i = src[x];
      dst[count[p][(desc_key(key[i]) >> shift) & (DCP_RADIX_SIZE - 1)]++] = i;
    }
    uint32_t *t = src;
    src = dst;
    dst = t;
  }
  if (src != out)
    memcpy(out, src, (size_t)n * sizeof *out);
}
