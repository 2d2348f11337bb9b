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

#include "dcp.h"

/* The least aligned length and pool work of sequence i over the sizes it
 * may use. With any-size groups the scan over every size would be n x pool,
 * so the bound uses the real length and the smallest usable size there,
 * which every term only raises. */
static void least(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t i, uint64_t *tokens,
                  double *work) {
  uint32_t k0 = it->kmin[i];
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
  double by_work = slots * cfg->base.micro + work / cfg->pool;
  /* A sequence's per-GPU cost at every size grows with its length, and a
   * longer sequence may use no more sizes than a shorter one, so the
   * longest sequence is the costliest alone. */
  double alone = INFINITY;
  for (uint32_t k = it->kmin[longest]; k < cfg->nsize; k++)
    alone = fmin(alone, dcp_group_base(cfg, cfg->size[k]) + dcp_item_cost(cfg, it, longest, k));
  double by_one = alone + (slots - 1) * cfg->base.micro;
  return fmax(by_work, by_one);
}
