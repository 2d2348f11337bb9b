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

int dcp_shelf(dcp_state_t *s, const uint32_t *k, const uint32_t *order) {
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
  }
  s->m = slot + 1;
  free(open);
  return 0;
}
