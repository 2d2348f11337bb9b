/* The proven lower bounds of a dynamic context-parallel plan.
 *
 * Slots: a slot's groups hold at most pool x cap aligned tokens in all and
 * at most max_seqs sequences each, with at most pool / (smallest size)
 * groups; so no plan has fewer than the sequences' least aligned tokens
 * over pool x cap slots, nor fewer than n / (max_seqs x groups per slot).
 *
 * Step: a slot costs its costliest GPU, which is at least per_micro_batch
 * plus the mean over the pool of the sequences' costs in it; summed over
 * slots, at least slots x per_micro_batch plus every sequence's least pool
 * work (c x its per-GPU cost, least over the sizes it may use) over the
 * pool. And the slot of the costliest sequence costs at least that
 * sequence alone in its cheapest group; the other slots at least
 * per_micro_batch each. Both grow with the slot count, so the bound at the
 * least slot count holds for every plan. */
#include <math.h>

#include <stdlib.h>

#include "dcp.h"
#include "knobs.h"

static void least(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t i, uint64_t *tokens,
                  double *work);

/* The threshold bound. Every sequence i runs at some size c where it costs
 * h_c(i) per GPU alone (group terms included) and w_c(i) of pool work; the
 * step is at least the largest h (the slot holding it costs that much) and
 * at least the pool work over the pool. For any plan let T be its largest
 * h: then every sequence used a size with h_c(i) <= T, so the pool work is
 * at least the sum of the least w_c(i) over those sizes, and the step is at
 * least max(T, that work / pool) (plus the slots' per_micro_batch). The
 * least of this over every T a plan can have is a bound; T ranges over the
 * h values of the longest sequences, the others counting at their cheapest
 * work whatever T is (which only lowers the bound). Spreading a long
 * sequence lowers h but adds CP work; this bound charges that trade-off,
 * which the work and single-sequence bounds each miss. */
static double dcp_threshold_bound(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t slots,
                                  double work) {
  uint32_t top = PK_MIN(it->n, DCP_BOUND_TOP);
  uint32_t ns =
      cfg->sizes == PK_DCP_SIZES_ANY ? PK_MIN(cfg->nsize, DCP_BOUND_ANY_SIZES) : cfg->nsize;
  uint32_t *idx = malloc((size_t)top * sizeof *idx);
  double *cheap = malloc((size_t)top * sizeof *cheap);
  double *cand = malloc((size_t)top * ns * sizeof *cand);
  double best = 0;
  if (idx == NULL || cheap == NULL || cand == NULL)
    goto done;
  /* The `top` longest sequences (a partial selection, O(n x top)). */
  uint32_t got = 0;
  for (uint32_t i = 0; i < it->n; i++) {
    uint32_t at = got < top ? got++ : top;
    if (at == top && it->len[i] <= it->len[idx[top - 1]])
      continue;
    if (at == top)
      at = top - 1;
    while (at > 0 && it->len[idx[at - 1]] < it->len[i]) {
      idx[at] = idx[at - 1];
      at--;
    }
    idx[at] = i;
  }
  uint32_t nc = 0;
  for (uint32_t x = 0; x < top; x++) {
    uint64_t t;
    least(cfg, it, idx[x], &t, &cheap[x]);
    for (uint32_t k = it->kmin[idx[x]]; k < cfg->nsize && k < it->kmin[idx[x]] + ns; k++)
      cand[nc++] = dcp_group_base(cfg, cfg->size[k]) + dcp_item_cost(cfg, it, idx[x], k);
  }
  best = INFINITY;
  for (uint32_t q = 0; q < nc; q++) {
    double t_max = cand[q], extra = 0;
    bool feasible = true;
    for (uint32_t x = 0; x < top && feasible; x++) {
      uint32_t i = idx[x];
      double least_w = INFINITY;
      /* With any-size groups only the first sizes from kmin are looked
       * at: the others count as free of extra work, a weaker bound. */
      uint32_t end = PK_MIN(cfg->nsize, it->kmin[i] + ns);
      for (uint32_t k = it->kmin[i]; k < cfg->nsize; k++) {
        double h = dcp_group_base(cfg, cfg->size[k]) + dcp_item_cost(cfg, it, i, k);
        if (h > t_max)
          continue;
        if (k >= end) {
          least_w = cheap[x];
          break;
        }
        least_w = fmin(least_w, cfg->size[k] * dcp_item_cost(cfg, it, i, k));
      }
      if (least_w == INFINITY)
        feasible = false;
      else
        extra += fmax(least_w - cheap[x], 0);
    }
    if (!feasible)
      continue;
    double b = fmax(t_max + (slots - 1) * cfg->base.micro,
                    slots * cfg->base.micro + (work + extra) / cfg->pool);
    best = fmin(best, b);
  }
  if (best == INFINITY)
    best = 0;
done:
  free(idx);
  free(cheap);
  free(cand);
  return best;
}

/* The least aligned length and pool work of sequence i over the sizes it
 * may use. With any-size groups the scan over every size would be n x pool,
 * so the bound uses the real length and the smallest usable size there,
 * which every term only raises. */
static void least(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t i, uint64_t *tokens,
                  double *work) {
  uint32_t k0 = it->kmin[i];
  if (cfg->sizes == PK_DCP_SIZES_POW2 && (cfg->pool & (cfg->pool - 1)) == 0) {
    /* Every size a power of two: each size's alignment divides the next
     * one's, so the aligned length, and with it every term of the pool
     * work, only grows with the size. The least is at the smallest. */
    *tokens = dcp_item_aligned(cfg, it, i, k0);
    *work = cfg->size[k0] * dcp_seq_cost(cfg, cfg->size[k0], *tokens);
    return;
  }
  if (cfg->sizes == PK_DCP_SIZES_ANY) {
    uint32_t c = cfg->size[k0];
    uint64_t l = it->len[i];
    *tokens = l;
    *work = c * cfg->base.seq + pk_token_cost(&cfg->base, l) + cfg->cp_token * (double)l * (c - 1);
    return;
  }
  *tokens = UINT64_MAX;
  *work = INFINITY;
  for (uint32_t k = k0; k < cfg->nsize; k++) {
    uint64_t a = dcp_item_aligned(cfg, it, i, k);
    double w = cfg->size[k] * dcp_seq_cost(cfg, cfg->size[k], a);
    *tokens = PK_MIN(*tokens, a);
    *work = fmin(*work, w);
  }
}

uint32_t dcp_slots_lower_bound(const dcp_cfg_t *cfg, const dcp_items_t *it) {
  uint64_t tokens = 0;
  for (uint32_t i = 0; i < it->n; i++) {
    uint64_t t;
    double w;
    least(cfg, it, i, &t, &w);
    tokens += t;
  }
  uint64_t per_slot = (uint64_t)cfg->pool * cfg->cap;
  uint64_t m = (tokens + per_slot - 1) / per_slot;
  if (cfg->max_seqs != UINT32_MAX) {
    uint64_t per = (uint64_t)cfg->max_seqs * (cfg->pool / cfg->size[0]);
    m = PK_MAX(m, (it->n + per - 1) / per);
  }
  return (uint32_t)PK_MAX(m, 1);
}

double dcp_step_lower_bound(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t slots) {
  double work = 0;
  uint32_t longest = 0;
  for (uint32_t i = 0; i < it->n; i++) {
    uint64_t t;
    double w;
    least(cfg, it, i, &t, &w);
    work += w;
    if (it->len[i] > it->len[longest])
      longest = i;
  }
  double micro = cfg->base.micro;
  double by_work = slots * micro + work / cfg->pool;
  /* A sequence's per-GPU cost at every size grows with its length, and a
   * longer sequence may use no more sizes than a shorter one, so the
   * longest sequence is the costliest alone. */
  double alone = INFINITY;
  for (uint32_t k = it->kmin[longest]; k < cfg->nsize; k++)
    alone = fmin(alone, dcp_group_base(cfg, cfg->size[k]) + dcp_item_cost(cfg, it, longest, k));
  double by_one = alone + (slots - 1) * micro;
  return fmax(fmax(by_work, by_one), dcp_threshold_bound(cfg, it, slots, work));
}
