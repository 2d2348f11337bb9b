/* Shelf packing of one size policy (state.h, dcp_shelf). The step is a sum
 * of slot maxima, like the height of a strip cut into shelves: taking the
 * sequences costliest first, each slot's height is set by its first
 * sequence and the rest of the slot is filled with sequences no costlier,
 * side by side in new groups while GPUs are free, then stacked onto the
 * least loaded group of their size that stays under the height and within
 * the cap. A slot is closed when a sequence fits nowhere in it; the next
 * slot opens with that sequence. Slots therefore hold sequences of like
 * cost, and a slot's waste is bounded by the spread of its costs. Time:
 * O(n x groups of one size in a slot). */
#include <math.h>
#include <stdlib.h>

#include "knobs.h"
#include "state.h"

/* What slot j of a shelf plan costs at least, however the filling and the
 * splitting change it later: both keep every sequence in its slot (they
 * split and grow groups in place; seeding only fills empty slots), so the
 * slot costs at least its longest sequence alone at its cheapest size (a
 * sequence's per-GPU cost at every size grows with its length, and a
 * longer one may use no more sizes) and at least its sequences' least pool
 * work over the pool (work: each at its smallest size with its real
 * length, which every term only raises). */
static double slot_floor(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t longest,
                         double work) {
  double alone = INFINITY;
  for (uint32_t k = it->kmin[longest]; k < cfg->nsize; k++)
    alone = fmin(alone, dcp_group_base(cfg, cfg->size[k]) + dcp_item_cost(cfg, it, longest, k));
  return fmax(alone, work / cfg->pool);
}

int dcp_shelf(dcp_state_t *s, const uint32_t *k, const uint32_t *order, double beat) {
  const dcp_cfg_t *cfg = s->cfg;
  const dcp_items_t *it = s->it;
  uint32_t n = it->n, pool = cfg->pool;
  /* The open slot's groups, in opening order. */
  uint32_t *open = pk_malloc_array(pool, sizeof *open);
  if (open == NULL)
    return PK_ENOMEM;
  uint32_t slot = UINT32_MAX, nopen = 0, used = 0;
  double height = 0;
  /* A whole-pool group of a pool that is not a power of two stands alone;
   * other sizes fit wherever the widths add up (largest first they tile,
   * see slots.c). Such a group can only open its slot. */
  bool odd_pool = cfg->sizes == PK_DCP_SIZES_POW2 && (pool & (pool - 1)) != 0, whole = false;
  /* The floor of the closed slots and the open slot's longest sequence and
   * least work (slot_floor), where there is a step to beat. */
  bool bounded = beat < INFINITY && cfg->nsize <= DCP_SHELF_BOUND_SIZES;
  double floors = 0, work = 0;
  uint32_t longest = UINT32_MAX;
  for (uint32_t x = 0; x < n; x++) {
    if ((x + 1) % DCP_POLL_ITEMS == 0 && pk_limits_stopped(s->limits)) {
      free(open);
      return PK_ECANCELED;
    }
    uint32_t i = order[x], ki = k[i], c = cfg->size[ki];
    double u = dcp_item_cost(cfg, it, i, ki);
    uint32_t grp = UINT32_MAX;
    if (slot != UINT32_MAX) {
      if (used + c <= pool && !(odd_pool && c == pool) && !whole) {
        grp = dcp_state_new_group(s, ki);
        if (grp == UINT32_MAX) {
          free(open);
          return PK_ENOMEM;
        }
        dcp_state_set_slot(s, grp, slot);
        open[nopen++] = grp;
        used += c;
      } else {
        double best = INFINITY;
        for (uint32_t r = 0; r < nopen; r++) {
          const dcp_grp_t *g = &s->g[open[r]];
          if (g->k == ki && g->load + u <= height && g->load < best &&
              dcp_item_fits(cfg, it, i, ki, g->sum, g->count)) {
            best = g->load;
            grp = open[r];
          }
        }
      }
    }
    if (grp == UINT32_MAX && bounded && slot != UINT32_MAX) {
      floors += slot_floor(cfg, it, longest, work);
      work = 0;
      longest = UINT32_MAX;
      if (floors > beat * (1 + DCP_SHELF_BOUND_TOL)) {
        s->m = slot + 1;
        free(open);
        return 1;
      }
    }
    if (grp == UINT32_MAX) {
      slot = slot == UINT32_MAX ? 0 : slot + 1;
      grp = dcp_state_new_group(s, ki);
      if (grp == UINT32_MAX) {
        free(open);
        return PK_ENOMEM;
      }
      dcp_state_set_slot(s, grp, slot);
      open[0] = grp;
      nopen = 1;
      used = c;
      whole = odd_pool && c == pool;
      height = dcp_group_base(cfg, c) + u;
    }
    dcp_state_add_known(s, grp, i, dcp_item_aligned(cfg, it, i, ki), u); /* grp is of size ki. */
    if (bounded) {
      uint32_t c0 = cfg->size[it->kmin[i]];
      double len = it->len[i];
      work += c0 * cfg->base.seq + pk_token_cost(&cfg->base, it->len[i]) +
              cfg->cp_token * len * (c0 - 1);
      if (longest == UINT32_MAX || it->len[i] > it->len[longest])
        longest = i;
    }
  }
  s->m = slot + 1;
  free(open);
  if (bounded && slot != UINT32_MAX &&
      floors + slot_floor(cfg, it, longest, work) > beat * (1 + DCP_SHELF_BOUND_TOL))
    return 1;
  return 0;
}
