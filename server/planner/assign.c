/* Drivers that turn a DP algorithm and a micro-batch algorithm into one
 * assignment with the same micro-batch count on every rank (every rank runs
 * the same number of micro-batches in lock step), and FIXED mode. */
#include <stdlib.h>
#include <string.h>

#include "pk_internal.h"

/* Item numbers of every rank, each rank's list in item order. */
typedef struct rank_lists {
  uint32_t *items; /* n, grouped by rank */
  uint32_t *start; /* dp + 1 */
} rank_lists_t;

static int make_rank_lists(const pk_ctx_t *ctx, const uint32_t *rank, rank_lists_t *rl) {
  uint32_t dp = ctx->cfg->dp, n = ctx->n;
  rl->items = pk_malloc_array(n, sizeof *rl->items);
  rl->start = pk_calloc((size_t)dp + 1, sizeof *rl->start);
  if (rl->items == NULL || rl->start == NULL)
    return PK_ENOMEM;
  for (uint32_t k = 0; k < n; k++)
    rl->start[rank[k] + 1]++;
  for (uint32_t r = 0; r < dp; r++)
    rl->start[r + 1] += rl->start[r];
  uint32_t *fill = pk_malloc_array(dp, sizeof *fill);
  if (fill == NULL)
    return PK_ENOMEM;
  memcpy(fill, rl->start, (size_t)dp * sizeof *fill);
  for (uint32_t k = 0; k < n; k++)
    rl->items[fill[rank[k]]++] = k;
  free(fill);
  return 0;
}

static void free_rank_lists(rank_lists_t *rl) {
  free(rl->items);
  free(rl->start);
}

static int dp_assign(const pk_ctx_t *ctx, uint32_t *rank) {
  const pk_cfg_t *cfg = ctx->cfg;
  if (cfg->dp_balance == PK_DP_AUTO)
    return pk_auto_dp(ctx, rank);
  return pk_compat_dp(ctx, cfg->dp_balance, cfg->equal_count, rank);
}

/* Micro-batches one rank into at least `count` micro-batches; *got is the
 * count produced (more when the cap needs more). */
static int micro_assign(const pk_ctx_t *ctx, const uint32_t *items, uint32_t nitems, uint32_t count,
                        uint32_t *micro, uint32_t *got) {
  const pk_cfg_t *cfg = ctx->cfg;
  if (cfg->micro_algo != PK_MICRO_AUTO)
    return pk_compat_micro(ctx, cfg->micro_algo, items, nitems, count, micro, got);
  for (uint32_t c = count; c <= nitems; c++) {
    int rc = pk_auto_micro(ctx, items, nitems, c, micro);
    if (rc == 0) {
      *got = c;
      return 0;
    }
    if (rc != PK_EPRECOND)
      return rc;
  }
  return PK_EPRECOND;
}

int pk_compat_assign(const pk_ctx_t *ctx, pk_assign_t *out, char *err, size_t errlen) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = cfg->dp, n = ctx->n;
  rank_lists_t rl = {0};
  uint32_t *micro = pk_malloc_array(n, sizeof *micro);
  int rc;
  if (micro == NULL) {
    rc = PK_ENOMEM;
    goto fail;
  }
  if ((rc = dp_assign(ctx, out->rank)) != 0 || (rc = make_rank_lists(ctx, out->rank, &rl)) != 0)
    goto fail;
  if (pk_stopped(ctx)) {
    rc = PK_ECANCELED;
    goto fail;
  }
  uint32_t fewest = UINT32_MAX;
  for (uint32_t r = 0; r < dp; r++)
    fewest = PK_MIN(fewest, rl.start[r + 1] - rl.start[r]);
  if (fewest == 0) {
    rc = pk_fail(err, errlen, PK_EPRECOND,
                 "batching.dp_balance %s left a rank without sequences (%u sequences, dp %u)",
                 pk_dp_balance_name(cfg->dp_balance), n, dp);
    goto fail;
  }

  /* Every rank gets the same count: start from the lower bound, raise it to
   * the largest count any rank needs (rounded to the group), and repeat
   * until every rank produced exactly that count. */
  uint32_t target = pk_micro_lower_bound(ctx);
  for (;;) {
    if (target > fewest) {
      rc = pk_fail(err, errlen, PK_EPRECOND,
                   "batching.micro_algo %s needs %u micro-batches per rank, but a rank has only "
                   "%u sequences (dp_balance %s)",
                   pk_micro_algo_name(cfg->micro_algo), target, fewest,
                   pk_dp_balance_name(cfg->dp_balance));
      goto fail;
    }
    uint32_t need = target;
    for (uint32_t r = 0; r < dp; r++) {
      uint32_t s = rl.start[r], cnt = rl.start[r + 1] - s, got = 0;
      rc = micro_assign(ctx, rl.items + s, cnt, target, micro + s, &got);
      if (rc == PK_EPRECOND) {
        rc = pk_fail(err, errlen, PK_EPRECOND,
                     "batching.micro_algo %s cannot fit rank %u's %u sequences under the cap",
                     pk_micro_algo_name(cfg->micro_algo), r, cnt);
        goto fail;
      }
      if (rc == 0 && pk_stopped(ctx))
        rc = PK_ECANCELED; /* Polled per rank: one rank's packing is one pass. */
      if (rc != 0)
        goto fail;
      need = PK_MAX(need, got);
    }
    if (need == target)
      break;
    target = (uint32_t)pk_round_up(need, cfg->group);
  }
  for (uint32_t r = 0; r < dp; r++)
    for (uint32_t q = rl.start[r]; q < rl.start[r + 1]; q++) {
      uint32_t k = rl.items[q];
      out->micro[k] = micro[q];
      out->pos[k] = k;
    }
  out->nmicro = target;
  out->columns = false;
  rc = 0;
fail:
  if (rc == PK_ENOMEM)
    pk_fail(err, errlen, rc, "%u sequences: out of memory", n);
  free(micro);
  free_rank_lists(&rl);
  return rc;
}

/* FIXED: every rank gets n/dp sequences (the caller checked divisibility),
 * cut into micro-batches of micro_batch_size. With dp_balance AUTO the
 * micro-batches are lock-step columns: rank r's j-th micro-batch holds the
 * tiers j*mbs .. (j+1)*mbs-1 of the cost-sorted items. */
int pk_fixed_assign(const pk_ctx_t *ctx, pk_assign_t *out, char *err, size_t errlen) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = cfg->dp, n = ctx->n, mbs = cfg->micro_batch_size;
  uint32_t per_rank = n / dp;
  if (per_rank % mbs != 0)
    return pk_fail(err, errlen, PK_EPRECOND,
                   "batching.micro_batch_size: %u does not divide the %u sequences per rank "
                   "(%u sequences, dp %u)",
                   mbs, per_rank, n, dp);
  uint32_t m = per_rank / mbs;
  if (m < cfg->min_micro || m % cfg->group != 0)
    return pk_fail(err, errlen, PK_EPRECOND,
                   "batching.micro_batch_size: %u gives %u micro-batches per rank, which is %s",
                   mbs, m,
                   m < cfg->min_micro ? "below batching.min_micro_batches"
                                      : "not a multiple of parallel.microbatch_group");
  rank_lists_t rl = {0};
  uint32_t *order = NULL;
  int rc = 0;
  if (cfg->dp_balance == PK_DP_AUTO) {
    /* Tiers of dp items by cost; tier t goes to micro-batch t / mbs of every
     * rank, its costliest item to the rank whose micro-batch is cheapest. */
    order = pk_malloc_array(n, sizeof *order);
    double *bin_cost = pk_calloc((size_t)dp * m, sizeof *bin_cost);
    uint32_t *ranks = pk_malloc_array(dp, sizeof *ranks);
    if (order == NULL || bin_cost == NULL || ranks == NULL) {
      free(bin_cost);
      free(ranks);
      rc = PK_ENOMEM;
      goto done;
    }
    for (uint32_t k = 0; k < n; k++)
      order[k] = k;
    pk_sort_by_cost_desc(ctx, order, n);
    for (uint32_t t = 0; t < per_rank; t++) {
      uint32_t j = t / mbs;
      for (uint32_t r = 0; r < dp; r++)
        ranks[r] = r;
      /* Insertion sort of ranks by this micro-batch's cost: dp is the tier
       * width, and the list is nearly sorted after the first tier. */
      for (uint32_t i = 1; i < dp; i++) {
        uint32_t v = ranks[i], q = i;
        while (q > 0 && bin_cost[(size_t)ranks[q - 1] * m + j] > bin_cost[(size_t)v * m + j]) {
          ranks[q] = ranks[q - 1];
          q--;
        }
        ranks[q] = v;
      }
      for (uint32_t i = 0; i < dp; i++) {
        uint32_t k = order[(size_t)t * dp + i];
        out->rank[k] = ranks[i];
        out->micro[k] = j;
        out->pos[k] = k;
        bin_cost[(size_t)ranks[i] * m + j] += ctx->cost[k];
      }
    }
    free(bin_cost);
    free(ranks);
    out->columns = true;
  } else {
    if ((rc = pk_compat_dp(ctx, cfg->dp_balance, true, out->rank)) != 0 ||
        (rc = make_rank_lists(ctx, out->rank, &rl)) != 0)
      goto done;
    for (uint32_t r = 0; r < dp; r++) {
      if (rl.start[r + 1] - rl.start[r] != per_rank) {
        rc = PK_EINTERNAL;
        goto done;
      }
      for (uint32_t q = 0; q < per_rank; q++) {
        uint32_t k = rl.items[rl.start[r] + q];
        out->micro[k] = q / mbs;
        out->pos[k] = k;
      }
    }
    out->columns = false;
  }
  out->nmicro = m;
  /* FIXED cannot raise the count: a micro-batch over the cap is an error. */
  {
    pk_bin_t *bins = pk_calloc((size_t)dp * m, sizeof *bins);
    if (bins == NULL) {
      rc = PK_ENOMEM;
      goto done;
    }
    for (uint32_t k = 0; k < n && rc == 0; k++) {
      pk_bin_t *b = &bins[(size_t)out->rank[k] * m + out->micro[k]];
      if (!pk_bin_fits(ctx, b, k))
        rc = pk_fail(err, errlen, PK_EPRECOND,
                     "batching.micro_batch_size: %u sequences per micro-batch exceed "
                     "batching.max_tokens or max_seqs on rank %u, micro-batch %u (FIXED mode "
                     "cannot raise the count; use mode PACKED)",
                     mbs, out->rank[k], out->micro[k]);
      pk_bin_add(ctx, b, k);
    }
    free(bins);
  }
done:
  if (rc == PK_ENOMEM)
    pk_fail(err, errlen, rc, "%u sequences: out of memory", n);
  free(order);
  free_rank_lists(&rl);
  return rc;
}
