/* DP balancing by the peers' algorithms:
 *   NONE           contiguous split in input order (OpenRLHF, dispatchers
 *                  without balancing);
 *   KK, KK_EQUAL   Karmarkar-Karp on costs, free or equal counts (verl,
 *                  ROLL batch_balance);
 *   LPT, LPT_EQUAL heap LPT on costs, free or equal counts (MindSpeed-RL
 *                  heapq_partition);
 *   SORTED_STRIDE  sort by length ascending, deal positions r, r+dp, ...
 *                  (ROLL and NeMo-RL dynamic batching).
 * KK and LPT balance ctx->cost (the request's cost model; tokens only when
 * quadratic is 0), where MindSpeed-RL balances raw tokens. */
#include <stdlib.h>

#include "compat_kk.h"
#include "pk_internal.h"

/* NONE: the first ceil(n/dp) items go to rank 0 and so on; the first n % dp
 * ranks get one item more than the others. */
static void dp_contiguous(uint32_t n, uint32_t dp, uint32_t *rank) {
  uint32_t base = n / dp, extra = n % dp, k = 0;
  for (uint32_t r = 0; r < dp; r++) {
    uint32_t take = base + (r < extra ? 1 : 0);
    for (uint32_t t = 0; t < take; t++)
      rank[k++] = r;
  }
}

typedef struct len_key {
  uint32_t len;
  uint32_t item;
} len_key_t;

static int len_key_cmp(const void *pa, const void *pb) {
  const len_key_t *a = pa, *b = pb;
  if (a->len != b->len)
    return a->len < b->len ? -1 : 1;
  return a->item < b->item ? -1 : (a->item > b->item ? 1 : 0);
}

/* SORTED_STRIDE: stable ascending sort by real length (ROLL sorts by the
 * attention-mask sum), then sorted position p goes to rank p % dp. */
static int dp_sorted_stride(const pk_ctx_t *ctx, uint32_t dp, uint32_t *rank) {
  uint32_t n = ctx->n;
  len_key_t *keys = pk_malloc_array(n, sizeof(len_key_t));
  if (keys == NULL)
    return PK_ENOMEM;
  for (uint32_t k = 0; k < n; k++)
    keys[k] = (len_key_t){.len = ctx->len[k], .item = k};
  qsort(keys, n, sizeof(len_key_t), len_key_cmp);
  for (uint32_t p = 0; p < n; p++)
    rank[keys[p].item] = p % dp;
  free(keys);
  return 0;
}

/* A group of the LPT heap: its cost sum and item count; the heap key is
 * (sum, count, group number), smallest first, as in MindSpeed-RL. */
typedef struct lpt_group {
  double sum;
  uint32_t count;
} lpt_group_t;

static bool lpt_before(const void *arg, uint32_t a, uint32_t b) {
  const lpt_group_t *g = arg;
  if (g[a].sum != g[b].sum)
    return g[a].sum < g[b].sum;
  if (g[a].count != g[b].count)
    return g[a].count < g[b].count;
  return a < b;
}

static void lpt_heapify(const lpt_group_t *g, uint32_t *heap, uint32_t n) {
  for (uint32_t i = n / 2; i-- > 0;)
    pk_heap_down(heap, n, i, lpt_before, g);
}

/* LPT: items by cost descending; each goes to the group with the smallest
 * (sum, count, number). With `equal` a group leaves the heap once it holds
 * its share: n/dp items when dp divides n; otherwise floor(n/dp) + 1 items
 * for the first n % dp groups that reach it and floor(n/dp) for the rest, so
 * counts differ by at most one (MindSpeed-RL raises an error there). */
static int dp_lpt(const pk_ctx_t *ctx, uint32_t dp, bool equal, uint32_t *rank) {
  uint32_t n = ctx->n;
  int rc = PK_ENOMEM;
  uint32_t *order = pk_malloc_array(n, sizeof(uint32_t));
  uint32_t *heap = pk_malloc_array(dp, sizeof(uint32_t));
  lpt_group_t *g = pk_calloc(dp, sizeof(lpt_group_t));
  if (order == NULL || heap == NULL || g == NULL)
    goto done;
  for (uint32_t k = 0; k < n; k++)
    order[k] = k;
  pk_sort_by_cost_desc(ctx, order, n);
  for (uint32_t r = 0; r < dp; r++)
    heap[r] = r;
  uint32_t nheap = dp;
  uint32_t lo = n / dp, extra = n % dp, used = 0;

  uint32_t tick = 0;
  for (uint32_t t = 0; t < n; t++) {
    if (nheap == 0) {
      rc = PK_EINTERNAL;
      goto done;
    }
    if (pk_stop_tick(ctx, &tick)) {
      rc = PK_ECANCELED;
      goto done;
    }
    uint32_t r = heap[0];
    uint32_t k = order[t];
    rank[k] = r;
    g[r].sum += ctx->cost[k];
    g[r].count++;
    bool full = false;
    if (equal) {
      if (g[r].count == lo + 1) {
        full = true;
        used++;
      } else if (g[r].count == lo && used == extra) {
        full = true;
      }
    }
    if (full) {
      heap[0] = heap[--nheap];
    }
    if (nheap > 0)
      pk_heap_down(heap, nheap, 0, lpt_before, g);
    if (equal && full && used == extra && g[r].count == lo + 1 && extra > 0) {
      /* The last larger share was just taken: every group that already holds
       * floor(n/dp) items is full now. */
      uint32_t keep = 0;
      for (uint32_t i = 0; i < nheap; i++)
        if (g[heap[i]].count < lo)
          heap[keep++] = heap[i];
      nheap = keep;
      lpt_heapify(g, heap, nheap);
    }
  }
  rc = 0;

done:
  free(order);
  free(heap);
  free(g);
  return rc;
}

int pk_compat_dp(const pk_ctx_t *ctx, uint32_t algo, bool equal_count, uint32_t *rank) {
  uint32_t dp = ctx->cfg->dp;
  uint32_t n = ctx->n;
  if (dp == 0)
    return PK_EINTERNAL;
  if (n == 0)
    return 0;
  switch (algo) {
  case PK_DP_NONE:
    dp_contiguous(n, dp, rank);
    return 0;
  case PK_DP_SORTED_STRIDE:
    return dp_sorted_stride(ctx, dp, rank);
  case PK_DP_KK:
  case PK_DP_KK_EQUAL: {
    int rc = pk_kk_partition(ctx->cost, n, dp, equal_count || algo == PK_DP_KK_EQUAL, rank);
    /* Bad costs are a bug of the caller, not of the request. */
    return rc == PK_EINVAL ? PK_EINTERNAL : rc;
  }
  case PK_DP_LPT:
  case PK_DP_LPT_EQUAL:
    return dp_lpt(ctx, dp, equal_count || algo == PK_DP_LPT_EQUAL, rank);
  default:
    /* AUTO is planned by auto/driver.c and never reaches this function. */
    return PK_EINTERNAL;
  }
}
