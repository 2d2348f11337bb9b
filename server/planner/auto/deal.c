/* The last stage of AUTO, the deal: each column's micro-batches go to
 * ranks, costliest to the rank with the least total so far. Any permutation
 * inside a column leaves the step cost unchanged (the column's level is its
 * costliest micro-batch whichever rank runs it), so this balances the ranks'
 * totals for free. Also AUTO's DP part and micro-batch part on their own
 * (pk_auto_dp, pk_auto_micro), used when AUTO is paired with a peer's
 * algorithm. */
#include <stdlib.h>
#include <string.h>

#include "auto.h"

/* Comparators over a double array indexed by the sorted values. */
static bool value_greater(const void *arg, uint32_t x, uint32_t y) {
  const double *v = arg;
  return v[x] > v[y];
}

static bool value_less(const void *arg, uint32_t x, uint32_t y) {
  const double *v = arg;
  return v[x] < v[y];
}

/* Deals the micro-batches of every column to ranks  and writes
 * the assignment. */
int pk_auto_deal(auto_state_t *s, pk_assign_t *out) {
  uint32_t dp = s->dp, m = s->m, n = s->ctx->n;
  double *rank_cost = pk_calloc(dp, sizeof *rank_cost);
  double *col_max = pk_malloc_array(m, sizeof *col_max);
  uint32_t *cols = pk_malloc_array(m, sizeof *cols);
  uint32_t *ctmp = pk_malloc_array(m, sizeof *ctmp);
  uint32_t *ranks = pk_malloc_array(dp, sizeof *ranks);
  uint32_t *slot_rank = pk_malloc_array((size_t)m * dp, sizeof *slot_rank);
  int rc = 0;
  if (rank_cost == NULL || col_max == NULL || cols == NULL || ctmp == NULL || ranks == NULL ||
      slot_rank == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  for (uint32_t c = 0; c < m; c++) {
    cols[c] = c;
    col_max[c] = 0;
    for (uint32_t q = 0; q < dp; q++)
      col_max[c] = PK_MAX(col_max[c], s->bins[(size_t)c * dp + q].cost);
  }
  /* Columns by their maximum, descending (merge sort, stable). */
  pk_merge_sort_u32(cols, ctmp, m, value_greater, col_max);
  for (uint32_t ci = 0; ci < m && rc == 0; ci++) {
    if (pk_auto_tick(s->stop, dp)) {
      rc = PK_ECANCELED;
      break;
    }
    uint32_t c = cols[ci];
    uint32_t base = c * dp;
    /* Micro-batches of the column, costliest first: pk_auto_sort_slots gives
     * ascending cost, so walk it backwards. */
    pk_auto_sort_slots(s, base, false);
    /* Ranks by total cost ascending (insertion into a merge-sorted list). */
    for (uint32_t r = 0; r < dp; r++)
      ranks[r] = r;
    pk_merge_sort_u32(ranks, s->tmp, dp, value_less, rank_cost);
    for (uint32_t i = 0; i < dp; i++) {
      uint32_t slot = s->slots[dp - 1 - i];
      slot_rank[base + slot] = ranks[i];
      rank_cost[ranks[i]] += s->bins[base + slot].cost;
    }
  }
  for (uint32_t k = 0; k < n && rc == 0; k++) {
    if (pk_auto_tick_loop(s->stop, k)) {
      rc = PK_ECANCELED;
      break;
    }
    uint32_t bin = s->item_bin[k];
    out->rank[k] = slot_rank[bin];
    out->micro[k] = bin / dp;
    out->pos[k] = k;
  }
  out->nmicro = m;
  out->columns = true;
done:
  free(rank_cost);
  free(col_max);
  free(cols);
  free(ctmp);
  free(ranks);
  free(slot_rank);
  return rc;
}

int pk_auto_dp(const pk_ctx_t *ctx, uint32_t *rank) {
  uint32_t dp = ctx->cfg->dp, n = ctx->n;
  uint32_t *order = pk_malloc_array(n, sizeof *order);
  uint32_t *ranks = pk_malloc_array(dp, sizeof *ranks);
  uint32_t *tmp = pk_malloc_array(dp, sizeof *tmp);
  double *total = pk_calloc(dp, sizeof *total);
  int rc = 0;
  if (order == NULL || ranks == NULL || tmp == NULL || total == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  for (uint32_t k = 0; k < n; k++)
    order[k] = k;
  pk_sort_by_cost_desc(ctx, order, n);
  for (uint32_t t = 0; t < n; t += dp) {
    for (uint32_t r = 0; r < dp; r++)
      ranks[r] = r;
    pk_merge_sort_u32(ranks, tmp, dp, value_less, total);
    for (uint32_t i = 0; i < dp && t + i < n; i++) {
      uint32_t k = order[t + i];
      rank[k] = ranks[i];
      total[ranks[i]] += ctx->cost[k];
    }
  }
done:
  free(order);
  free(ranks);
  free(tmp);
  free(total);
  return rc;
}

int pk_auto_micro(const pk_ctx_t *ctx, const uint32_t *items, uint32_t nitems, uint32_t count,
                  uint32_t *micro) {
  if (count == 0 || count > nitems)
    return PK_EPRECOND;
  pk_bin_t *bins = pk_calloc(count, sizeof *bins);
  uint32_t *order = pk_malloc_array(nitems, sizeof *order);
  uint32_t *pos = pk_malloc_array(ctx->n, sizeof *pos);
  int rc = 0;
  if (bins == NULL || order == NULL || pos == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  for (uint32_t j = 0; j < nitems; j++) {
    order[j] = items[j];
    pos[items[j]] = j;
  }
  pk_sort_by_cost_desc(ctx, order, nitems);
  /* LPT: each item, costliest first, to the cheapest micro-batch with room;
   * the first `count` items open one micro-batch each. */
  for (uint32_t j = 0; j < nitems; j++) {
    uint32_t k = order[j];
    uint32_t best = UINT32_MAX;
    for (uint32_t q = 0; q < count; q++) {
      if (!pk_bin_fits(ctx, &bins[q], k))
        continue;
      if (best == UINT32_MAX || bins[q].count == 0 ||
          (bins[best].count != 0 && bins[q].cost < bins[best].cost)) {
        best = q;
        if (bins[q].count == 0)
          break;
      }
    }
    if (best == UINT32_MAX) {
      rc = PK_EPRECOND;
      goto done;
    }
    pk_bin_add(ctx, &bins[best], k);
    micro[pos[k]] = best;
  }
done:
  free(bins);
  free(order);
  free(pos);
  return rc;
}
