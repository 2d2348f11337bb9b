/* Small utilities shared by the planner's source files: integer helpers,
 * checked allocation, error messages, deterministic sorting and a seeded
 * pseudo-random generator. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pk_internal.h"

uint64_t pk_round_up(uint64_t x, uint64_t m) {
  if (m <= 1)
    return x;
  return (x + m - 1) / m * m;
}

uint64_t pk_gcd(uint64_t a, uint64_t b) {
  while (b != 0) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

uint64_t pk_lcm(uint64_t a, uint64_t b) {
  if (a == 0 || b == 0)
    return 0;
  return a / pk_gcd(a, b) * b;
}

uint32_t pk_count_above(const double *a, uint32_t n, double v) {
  uint32_t lo = 0, hi = n;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (a[mid] > v)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

void *pk_calloc(size_t count, size_t size) {
  if (count == 0 || size == 0)
    return calloc(1, 1);
  if (count > SIZE_MAX / size)
    return NULL;
  return calloc(count, size);
}

void *pk_malloc_array(size_t count, size_t size) {
  if (count == 0 || size == 0)
    return malloc(1);
  if (count > SIZE_MAX / size)
    return NULL;
  return malloc(count * size);
}

int pk_fail(char *err, size_t errlen, int code, const char *fmt, ...) {
  if (err != NULL && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

const char *pk_strerror(int code) {
  switch (code) {
  case PK_OK:
    return "ok";
  case PK_EINVAL:
    return "invalid argument";
  case PK_EPRECOND:
    return "failed precondition";
  case PK_ENOMEM:
    return "resource exhausted";
  case PK_EINTERNAL:
    return "internal error";
  case PK_EDECODE:
    return "malformed message";
  case PK_ENOTFOUND:
    return "not found";
  case PK_ECANCELED:
    return "cancelled";
  case PK_ELIMIT:
    return "over a configured limit";
  default:
    return "unknown error";
  }
}

/* The sorts below use a merge sort on item numbers with an explicit
 * comparison, so that results never depend on qsort's implementation. */
typedef int (*pk_cmp_fn)(const pk_ctx_t *ctx, uint32_t a, uint32_t b);

static void merge_sort(const pk_ctx_t *ctx, uint32_t *a, uint32_t *tmp, uint32_t n, pk_cmp_fn cmp) {
  if (n < 2)
    return;
  if (n <= 16) {
    for (uint32_t i = 1; i < n; i++) {
      uint32_t v = a[i];
      uint32_t j = i;
      while (j > 0 && cmp(ctx, a[j - 1], v) > 0) {
        a[j] = a[j - 1];
        j--;
      }
      a[j] = v;
    }
    return;
  }
  uint32_t h = n / 2;
  merge_sort(ctx, a, tmp, h, cmp);
  merge_sort(ctx, a + h, tmp, n - h, cmp);
  uint32_t i = 0, j = h, k = 0;
  while (i < h && j < n)
    tmp[k++] = cmp(ctx, a[i], a[j]) <= 0 ? a[i++] : a[j++];
  while (i < h)
    tmp[k++] = a[i++];
  while (j < n)
    tmp[k++] = a[j++];
  for (k = 0; k < n; k++)
    a[k] = tmp[k];
}

static int cmp_cost_desc(const pk_ctx_t *ctx, uint32_t a, uint32_t b) {
  if (ctx->cost[a] != ctx->cost[b])
    return ctx->cost[a] > ctx->cost[b] ? -1 : 1;
  if (ctx->size[a] != ctx->size[b])
    return ctx->size[a] > ctx->size[b] ? -1 : 1;
  return a < b ? -1 : (a > b);
}

static void sort_items(const pk_ctx_t *ctx, uint32_t *items, uint32_t n, pk_cmp_fn cmp) {
  uint32_t *tmp = pk_malloc_array(n, sizeof *tmp);
  if (tmp == NULL) {
    /* Fall back to an in-place insertion sort: slow but correct. */
    for (uint32_t i = 1; i < n; i++) {
      uint32_t v = items[i];
      uint32_t j = i;
      while (j > 0 && cmp(ctx, items[j - 1], v) > 0) {
        items[j] = items[j - 1];
        j--;
      }
      items[j] = v;
    }
    return;
  }
  merge_sort(ctx, items, tmp, n, cmp);
  free(tmp);
}

/* Costs are pk_slot_cost of the sizes, a nondecreasing function, so "cost
 * descending, then size descending, then item number" is "size descending,
 * then item number". A stable LSD radix sort on the complemented size does
 * it in O(n) passes of 11 bits, after the items are put in item-number order
 * (a scan over the mini-batch, so ties come out by item number). */
#define PK_RADIX_BITS 11
#define PK_RADIX_SIZE (1u << PK_RADIX_BITS)
void pk_sort_by_cost_desc(const pk_ctx_t *ctx, uint32_t *items, uint32_t n) {
  if (n < 64) {
    sort_items(ctx, items, n, cmp_cost_desc);
    return;
  }
  uint32_t *tmp = pk_malloc_array(n, sizeof *tmp);
  uint32_t *count = pk_calloc(PK_RADIX_SIZE, sizeof *count);
  uint8_t *present = pk_calloc(ctx->n, 1);
  if (tmp == NULL || count == NULL || present == NULL) {
    free(tmp);
    free(count);
    free(present);
    sort_items(ctx, items, n, cmp_cost_desc);
    return;
  }
  uint64_t hi = 0, lo = UINT64_MAX;
  for (uint32_t i = 0; i < n; i++) {
    present[items[i]] = 1;
    hi = PK_MAX(hi, ctx->size[items[i]]);
    lo = PK_MIN(lo, ctx->size[items[i]]);
  }
  uint32_t f = 0;
  for (uint32_t k = 0; k < ctx->n; k++)
    if (present[k])
      items[f++] = k;
  /* Key: hi - size (descending size, ascending key), only the bits that
   * vary. */
  uint64_t span = hi - lo;
  for (unsigned shift = 0; shift < 64 && (span >> shift) != 0; shift += PK_RADIX_BITS) {
    memset(count, 0, PK_RADIX_SIZE * sizeof *count);
    for (uint32_t i = 0; i < n; i++)
      count[((hi - ctx->size[items[i]]) >> shift) & (PK_RADIX_SIZE - 1)]++;
    uint32_t sum = 0;
    for (uint32_t d = 0; d < PK_RADIX_SIZE; d++) {
      uint32_t c = count[d];
      count[d] = sum;
      sum += c;
    }
    for (uint32_t i = 0; i < n; i++) {
      uint32_t k = items[i];
      tmp[count[((hi - ctx->size[k]) >> shift) & (PK_RADIX_SIZE - 1)]++] = k;
    }
    memcpy(items, tmp, (size_t)n * sizeof *items);
  }
  free(tmp);
  free(count);
  free(present);
}

void pk_heap_down(uint32_t *heap, uint32_t size, uint32_t i, pk_before_fn before, const void *arg) {
  for (;;) {
    uint32_t l = 2 * i + 1, top = i;
    if (l < size && before(arg, heap[l], heap[top]))
      top = l;
    if (l + 1 < size && before(arg, heap[l + 1], heap[top]))
      top = l + 1;
    if (top == i)
      return;
    uint32_t x = heap[i];
    heap[i] = heap[top];
    heap[top] = x;
    i = top;
  }
}

void pk_heap_up(uint32_t *heap, uint32_t i, pk_before_fn before, const void *arg) {
  while (i > 0) {
    uint32_t p = (i - 1) / 2;
    if (!before(arg, heap[i], heap[p]))
      return;
    uint32_t x = heap[i];
    heap[i] = heap[p];
    heap[p] = x;
    i = p;
  }
}

void pk_merge_sort_u32(uint32_t *a, uint32_t *tmp, uint32_t n, pk_before_fn before,
                       const void *arg) {
  for (uint32_t w = 1; w < n; w *= 2) {
    for (uint32_t lo = 0; lo < n; lo += 2 * w) {
      uint32_t mid = PK_MIN(lo + w, n), hi = PK_MIN(lo + 2 * w, n);
      uint32_t i = lo, j = mid, k = lo;
      while (i < mid && j < hi)
        tmp[k++] = before(arg, a[j], a[i]) ? a[j++] : a[i++];
      while (i < mid)
        tmp[k++] = a[i++];
      while (j < hi)
        tmp[k++] = a[j++];
    }
    memcpy(a, tmp, (size_t)n * sizeof *a);
  }
}

uint64_t pk_rng_next(pk_rng_t *rng) {
  uint64_t z = (rng->state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t pk_rng_below(pk_rng_t *rng, uint64_t bound) {
  if (bound <= 1)
    return 0;
  /* Rejection sampling keeps the draw unbiased. */
  uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do {
    x = pk_rng_next(rng);
  } while (x >= limit);
  return x % bound;
}
