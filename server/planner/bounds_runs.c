/* PADDED: what micro-batches hold, through runs of the size-descending
 * order, for the step bound (bounds.c, (b) in PADDED mode), by the cutting
 * plane search of bounds_dual.c. */
#include <math.h>
#include <stdlib.h>

#include "bounds_internal.h"

/* PADDED: the most item cost g micro-batches hold, through runs. A
 * micro-batch whose widest row is w holds at most R(w) = min(cap / w,
 * max_seqs) rows. Among the selections of at most g micro-batches holding
 * the most cost, one is made of runs of the size-descending order, each
 * opened by an item i and taking the R(w_i) items from i on (fewer at the
 * end): take the first item i any micro-batch holds, give its micro-batch
 * the items i .. i + R(w_i) - 1 (the costliest of the items from i on, none
 * wider than w_i), and hand that micro-batch's former items to the others
 * in place of the ones it took, dropping the rest; no micro-batch widens,
 * and the items gained cost at least as much as the ones dropped and are at
 * least as many. By induction on the items after the run, so it is.
 *
 * The best run selection with any number of runs, each charged lambda, is
 * an O(n) recursion over the items from the last: h(i) = max(h(i + 1),
 * cost of run i - lambda + h(end of run i)). For every lambda >= 0 the
 * most cost g micro-batches hold is at most h(0) + lambda x g (weak
 * duality), so any lambda gives a valid bound; runs_hold searches for a
 * good one (the runs h takes fall as lambda grows). */
typedef struct runs_dual {
  uint32_t n;
  const uint32_t *end; /* Where the run opened by item i ends. */
  const double *pre;   /* Prefix sums of the costs in by order. */
  const double *vmax;  /* The costliest run opened at i or later. */
  double total;        /* pre[n]. */
  uint32_t greedy;     /* Runs of the greedy walk from the first item. */
  double *h;
  uint32_t *runs;
} runs_dual_t;

/* h(0) for lambda > 0; *runs gets the runs its selection takes. No run
 * opened at or after i0, the first i with vmax[i] <= lambda, is worth its
 * charge, so h is 0 from there and the recursion starts at i0. */
static double runs_dual_value(void *arg, double lambda, uint32_t *runs) {
  runs_dual_t *d = arg;
  uint32_t i0 = pk_count_above(d->vmax, d->n, lambda);
  d->h[i0] = 0;
  d->runs[i0] = 0;
  for (uint32_t i = i0; i-- > 0;) {
    uint32_t e = PK_MIN(d->end[i], i0);
    double take = d->pre[d->end[i]] - d->pre[i] - lambda + d->h[e];
    bool opens = take > d->h[i + 1];
    d->h[i] = opens ? take : d->h[i + 1];
    d->runs[i] = opens ? d->runs[e] + 1 : d->runs[i + 1];
  }
  *runs = d->runs[0];
  return d->h[0];
}

/* The least U_k the runs allow: min over lambda >= 0 of B(lambda) = h(0) +
 * lambda x g (pk_dual_least). At lambda = 0 every item is taken: B = total,
 * and the greedy walk is a selection doing so, so g minus its runs is a
 * slope there; at the costliest run's cost no run pays: h = 0. */
static double runs_hold(runs_dual_t *d, double g) {
  double top = d->vmax[0];
  return pk_dual_least(runs_dual_value, d, g, (pk_dual_end_t){0, d->total, g - d->greedy},
                       (pk_dual_end_t){top, top * g, g});
}

static bool potential_higher(const void *arg, uint32_t x, uint32_t y) {
  const double *pot = arg;
  return pot[x] > pot[y];
}

/* Raises best (the step bound) with U_k from runs (runs_hold) where that
 * can raise it. The greedy runs from the widest item are a selection of
 * runs, so U_k from runs is at least the cost the first k x dp of them
 * hold; that caps how far each k can raise the bound, and the k are tried
 * from the most promising down until none can (at most 8 of them: each
 * costs a few O(n) passes) or best is within 0.5 % of known_step. Out of
 * memory leaves best as it is. */
double pk_padded_runs_sharpen(const pk_ctx_t *ctx, const uint32_t *by, const double *lvl,
                              const double *cap_cost, uint32_t m, double total, double best,
                              double known_step) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t n = ctx->n;
  double dp = cfg->dp;
  uint32_t *end = pk_malloc_array((size_t)n + 1, sizeof *end);
  double *pre = pk_malloc_array((size_t)n + 1, sizeof *pre);
  double *h = pk_malloc_array((size_t)n + 1, sizeof *h);
  uint32_t *runs = pk_malloc_array((size_t)n + 1, sizeof *runs);
  double *vmax = pk_malloc_array((size_t)n + 1, sizeof *vmax);
  double *prefix = pk_malloc_array((size_t)m + 1, sizeof *prefix);
  double *pot = pk_malloc_array((size_t)m + 1, sizeof *pot);
  uint32_t *ks = pk_malloc_array((size_t)m + 1, sizeof *ks);
  uint32_t *tmp = pk_malloc_array((size_t)m + 1, sizeof *tmp);
  if (end == NULL || pre == NULL || h == NULL || runs == NULL || vmax == NULL || prefix == NULL ||
      pot == NULL || ks == NULL || tmp == NULL)
    goto done;
  pre[0] = 0;
  for (uint32_t i = 0; i < n; i++) {
    end[i] = pk_run_end(ctx, by, i);
    pre[i + 1] = pre[i] + ctx->cost[by[i]];
  }
  vmax[n] = 0;
  for (uint32_t i = n; i-- > 0;)
    vmax[i] = PK_MAX(vmax[i + 1], pre[end[i]] - pre[i]);
  prefix[0] = 0;
  for (uint32_t k = 1; k <= m; k++)
    prefix[k] = prefix[k - 1] + lvl[k];
  /* pot[k]: the most k can give, with U_k no lower than the greedy runs'
   * cost (nor than cap_cost[k] when that is lower). */
  uint32_t at = 0, greedy = 0;
  for (uint32_t k = 1; k <= m; k++) {
    while (at < n && greedy < (uint64_t)k * cfg->dp) {
      at = end[at];
      greedy++;
    }
    double floor_u = PK_MIN(pre[at], cap_cost[k]);
    double suffix = PK_MAX(prefix[m] - prefix[k], 0.0);
    pot[k] = prefix[k] + PK_MAX((total - floor_u) / dp, suffix);
    ks[k - 1] = k;
  }
  while (at < n) {
    at = end[at];
    greedy++;
  }
  pk_merge_sort_u32(ks, tmp, m, potential_higher, pot);
  runs_dual_t d = {.n = n,
                   .end = end,
                   .pre = pre,
                   .vmax = vmax,
                   .total = pre[n],
                   .greedy = greedy,
                   .h = h,
                   .runs = runs};
  for (uint32_t q = 0; q < m && q < 8; q++) {
    uint32_t k = ks[q];
    if (pot[k] <= best * (1 + 1e-12) || best * 1.005 >= known_step)
      break;
    double u = PK_MIN(cap_cost[k], runs_hold(&d, (double)k * dp));
    double suffix = PK_MAX(prefix[m] - prefix[k], 0.0);
    best = PK_MAX(best, prefix[k] + PK_MAX((total - u) / dp, suffix));
  }
done:
  free(end);
  free(pre);
  free(h);
  free(runs);
  free(vmax);
  free(prefix);
  free(pot);
  free(ks);
  free(tmp);
  return best;
}
