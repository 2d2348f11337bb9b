/* Splitting groups into halves (state.h, dcp_split). A group of c GPUs
 * whose sequences also fit two groups of c/2 (its aligned halves: a group
 * of a power of two starts at a multiple of its size, so each half starts
 * at a multiple of c/2) splits when neither half costs more than the
 * slot's costliest group: the token work per GPU is the same, the CP terms
 * shrink, so the step never rises and usually the pool work falls. The
 * halves may split again. This turns a fixed-CP plan into a dynamic one
 * without changing its slots. */
#include <math.h>
#include <stdlib.h>

#include "knobs.h"
#include "state.h"

/* Deals q's members mem[0 .. cnt) (costliest first at size index kh) into
 * q and a new group h, both at kh: LPT under the cap. Returns h, or
 * UINT32_MAX (q unchanged) when a member does not fit either half, or when
 * out of memory (*oom set). */
static uint32_t halve(dcp_state_t *s, uint32_t q, uint32_t kh, uint32_t *mem, uint32_t cnt,
                      bool *oom) {
  const dcp_cfg_t *cfg = s->cfg;
  const dcp_items_t *it = s->it;
  uint64_t sum[2] = {0, 0};
  uint32_t count[2] = {0, 0};
  double load[2] = {0, 0};
  uint8_t *side = malloc(cnt ? cnt : 1);
  if (side == NULL) {
    *oom = true;
    return UINT32_MAX;
  }
  for (uint32_t x = 0; x < cnt; x++) {
    uint32_t i = mem[x];
    int a = load[0] <= load[1] ? 0 : 1, b = 1 - a;
    if (!dcp_item_fits(cfg, it, i, kh, sum[a], count[a]))
      a = b;
    if (!dcp_item_fits(cfg, it, i, kh, sum[a], count[a])) {
      free(side);
      return UINT32_MAX;
    }
    side[x] = (uint8_t)a;
    sum[a] += dcp_item_aligned(cfg, it, i, kh);
    count[a]++;
    load[a] += dcp_item_cost(cfg, it, i, kh);
  }
  if (count[0] == 0 || count[1] == 0) {
    free(side);
    return UINT32_MAX;
  }
  uint32_t h = dcp_state_new_group(s, kh);
  if (h == UINT32_MAX) {
    free(side);
    *oom = true;
    return UINT32_MAX;
  }
  uint32_t slot = s->g[q].slot, first = s->g[q].first, half = cfg->size[kh];
  dcp_state_set_slot(s, h, slot);
  for (uint32_t x = 0; x < cnt; x++)
    dcp_state_remove(s, mem[x]);
  dcp_state_resize(s, q, kh);
  s->g[h].first = first + half;
  for (uint32_t x = 0; x < cnt; x++)
    dcp_state_add(s, side[x] ? h : q, mem[x]);
  free(side);
  return h;
}

int dcp_split(dcp_state_t *s) {
  const dcp_cfg_t *cfg = s->cfg;
  if (cfg->sizes != PK_DCP_SIZES_POW2)
    return 0; /* Any-size groups grow and shrink freely in the filling. */
  /* Halves hold fewer members than the group they come from. */
  uint32_t most = 1;
  for (uint32_t q = 0; q < s->ng; q++)
    most = PK_MAX(most, s->g[q].count);
  uint32_t *mem = pk_malloc_array(most, sizeof *mem);
  dcp_key_t *key = pk_malloc_array(2 * (size_t)most, sizeof *key);
  int rc = 0;
  if (mem == NULL || key == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  dcp_state_step(s); /* smax per slot. */
  /* New groups are appended and visited too: halves split again. */
  for (uint32_t q = 0; q < s->ng; q++) {
    if ((q + 1) % DCP_POLL_ITEMS == 0 && pk_limits_stopped(s->limits)) {
      rc = PK_ECANCELED;
      goto done;
    }
    dcp_grp_t *g = &s->g[q];
    uint32_t c = cfg->size[g->k];
    /* A whole pool that is not a power of two has no allowed halves (an
     * odd one's c / 2 rounds down to an allowed size whose two halves
     * would leave a GPU idle). */
    uint32_t kh = UINT32_MAX;
    if (c >= 2 && c % 2 == 0) /* Sizes ascend: the half is usually the size below. */
      kh = g->k > 0 && cfg->size[g->k - 1] == c / 2 ? g->k - 1 : dcp_size_index(cfg, c / 2);
    if (kh == UINT32_MAX || g->count < 2)
      continue;
    uint32_t cnt = 0;
    bool fits = true;
    for (uint32_t i = g->head; i != UINT32_MAX && fits; i = s->nxt[i]) {
      fits = s->it->kmin[i] <= kh;
      key[cnt++] = (dcp_key_t){.idx = i, .minor = dcp_item_cost(cfg, s->it, i, kh)};
    }
    if (!fits)
      continue;
    /* Costliest first at the half size, ties by index. */
    dcp_sort_keys(key, key + cnt, cnt);
    for (uint32_t x = 0; x < cnt; x++)
      mem[x] = key[x].idx;
    uint32_t k_old = g->k, slot = g->slot;
    double before = g->load;
    bool oom = false;
    uint32_t h = halve(s, q, kh, mem, cnt, &oom);
    if (oom) {
      rc = PK_ENOMEM;
      goto done;
    }
    if (h == UINT32_MAX)
      continue;
    double worst = fmax(s->g[q].load, s->g[h].load);
    if (worst <= s->smax[slot] && (worst < before || s->g[q].load + s->g[h].load < 2 * before))
      continue; /* Kept: the slot's maximum did not rise. */
    /* Undo: the members back into q at its old size, h dropped (it is the
     * last group and the head of its slot's list). */
    for (uint32_t i = s->g[h].head; i != UINT32_MAX; i = s->g[h].head) {
      dcp_state_remove(s, i);
      dcp_state_add(s, q, i);
    }
    s->shead[slot] = s->g[h].snext;
    s->ng--;
    dcp_state_resize(s, q, k_old);
  }
done:
  free(mem);
  free(key);
  return rc;
}
