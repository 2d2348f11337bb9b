/* Groups into slots as aligned blocks, then every slot's free GPUs given
 * work (state.h, dcp_place).
 *
 * Placement takes the groups largest size first: then a slot's used GPUs
 * are a multiple of the size being placed (powers of two), so a group fits
 * a slot exactly when the slot has that many free GPUs, and its first GPU
 * is aligned. Among the slots with room a group goes to the one whose
 * costliest group is the least that is still at least its own load (it
 * then costs nothing), else to the one whose costliest group is highest
 * (the smallest rise): groups of like load share slots, which is what keeps
 * a sum of slot maxima low.
 *
 * Filling: while a slot has free GPUs, its costliest group that can either
 * splits in two groups of its size (its sequences dealt by LPT) or grows
 * (doubles; with any-size groups, takes every free GPU). A slot with no
 * group at all takes half of the costliest splittable group of any slot.
 * What no group can take stays idle and the plan reports it. */
#include <math.h>
#include <stdlib.h>

#include "state.h"

static bool place_before(const void *arg, uint32_t x, uint32_t y) {
  const dcp_state_t *s = arg;
  uint32_t cx = s->cfg->size[s->g[x].k], cy = s->cfg->size[s->g[y].k];
  if (cx != cy)
    return cx > cy;
  if (s->g[x].load != s->g[y].load)
    return s->g[x].load > s->g[y].load;
  return x < y;
}

/* Recomputes slot j's first GPUs (largest first, left to right) and its
 * costliest group; false when the sizes do not tile (a block would not be
 * aligned), the state then unchanged but for firsts. buf: the slot's
 * groups in place_before's order on return; key: 2 x pool + 2 scratch
 * keys (a slot that tiles has at most pool groups). */
static bool retile(dcp_state_t *s, uint32_t j, uint32_t *buf, dcp_key_t *key) {
  uint32_t cnt = 0, ns = s->cfg->nsize;
  for (uint32_t q = s->shead[j]; q != UINT32_MAX; q = s->g[q].snext, cnt++)
    if (cnt > s->cfg->pool)
      return false; /* Every group takes a GPU at least. */
  /* In the order the groups joined the slot (the list is a stack): groups
   * of a size usually join costliest first, so runs come in order. */
  uint32_t at = cnt;
  for (uint32_t q = s->shead[j]; q != UINT32_MAX; q = s->g[q].snext)
    key[--at] = (dcp_key_t){.major = ns - 1 - s->g[q].k, .idx = q, .minor = s->g[q].load};
  /* place_before's order: sizes ascend with their index. */
  dcp_sort_keys(key, key + cnt, cnt);
  for (uint32_t r = 0; r < cnt; r++)
    buf[r] = key[r].idx;
  uint32_t pos = 0;
  double mx = 0;
  for (uint32_t r = 0; r < cnt; r++) {
    dcp_grp_t *g = &s->g[buf[r]];
    if (!dcp_start_ok(s->cfg, g->k, pos))
      return false;
    g->first = pos;
    pos += s->cfg->size[g->k];
    mx = fmax(mx, g->load);
  }
  s->used[j] = pos;
  s->smax[j] = mx;
  return true;
}

/* Splits group q: a new group of the same size in slot j takes about half
 * of q's cost (LPT over q's members, costliest first). Returns the new
 * group or UINT32_MAX when out of memory. */
static uint32_t split(dcp_state_t *s, uint32_t q, uint32_t j, uint32_t *mem) {
  uint32_t cnt = 0;
  for (uint32_t i = s->g[q].head; i != UINT32_MAX; i = s->nxt[i])
    mem[cnt++] = i;
  uint32_t h = dcp_state_new_group(s, s->g[q].k);
  if (h == UINT32_MAX)
    return UINT32_MAX;
  dcp_state_set_slot(s, h, j);
  const dcp_cfg_t *cfg = s->cfg;
  const dcp_items_t *it = s->it;
  uint32_t k = s->g[q].k;
  /* Insertion sort by cost descending: a group holds few sequences. */
  for (uint32_t a = 1; a < cnt; a++) {
    uint32_t v = mem[a], b = a;
    while (b > 0 && dcp_item_cost(cfg, it, mem[b - 1], k) < dcp_item_cost(cfg, it, v, k)) {
      mem[b] = mem[b - 1];
      b--;
    }
    mem[b] = v;
  }
  for (uint32_t a = 0; a < cnt; a++)
    dcp_state_remove(s, mem[a]);
  /* Subsets of a group within the cap are within it too. */
  for (uint32_t a = 0; a < cnt; a++) {
    bool to_h = s->g[h].count == 0 || (s->g[q].count > 0 && s->g[h].load < s->g[q].load);
    dcp_state_add(s, to_h ? h : q, mem[a]);
  }
  return h;
}

/* One step of filling slot j: true when a group split or grew. */
static int fill_step(dcp_state_t *s, uint32_t j, uint32_t *buf, dcp_key_t *tmp, uint32_t *mem) {
  const dcp_cfg_t *cfg = s->cfg;
  uint32_t free_gpus = cfg->pool - s->used[j];
  /* Candidates of slot j, costliest first. */
  uint32_t cnt = 0;
  for (uint32_t q = s->shead[j]; q != UINT32_MAX; q = s->g[q].snext)
    buf[cnt++] = q;
  for (uint32_t r = 0; r < cnt; r++) {
    uint32_t best = r;
    for (uint32_t t = r + 1; t < cnt; t++)
      if (s->g[buf[t]].load > s->g[buf[best]].load)
        best = t;
    uint32_t q = buf[best];
    buf[best] = buf[r];
    buf[r] = q;
    uint32_t k = s->g[q].k, c = cfg->size[k];
    if (cfg->sizes == PK_DCP_SIZES_POW2 && c <= free_gpus && s->g[q].count >= 2) {
      uint32_t h = split(s, q, j, mem);
      if (h == UINT32_MAX)
        return PK_ENOMEM;
      if (retile(s, j, buf, tmp))
        return 1;
      /* The sizes do not tile (a pool that is not a power of two): undo. */
      for (uint32_t i = s->g[h].head; i != UINT32_MAX; i = s->g[h].head) {
        dcp_state_remove(s, i);
        dcp_state_add(s, q, i);
      }
      s->shead[j] = s->g[h].snext; /* The new group heads slot j's list. */
      s->ng--;
      retile(s, j, buf, tmp);
      return 0;
    }
    uint32_t grow = cfg->sizes == PK_DCP_SIZES_ANY ? c + free_gpus : 2 * c;
    uint32_t k2 = grow <= c + free_gpus ? dcp_size_index(cfg, grow) : UINT32_MAX;
    if (k2 != UINT32_MAX && dcp_state_fits_at(s, q, k2)) {
      dcp_state_resize(s, q, k2);
      if (retile(s, j, buf, tmp))
        return 1;
      dcp_state_resize(s, q, k);
      retile(s, j, buf, tmp);
    }
  }
  return 0;
}

/* A slot without groups takes half of the costliest group with two or more
 * sequences; failing that, the costliest group of a slot with two or more
 * groups moves there whole (it then grows into the slot). */
static int seed_empty(dcp_state_t *s, uint32_t j, uint32_t *buf, dcp_key_t *tmp, uint32_t *mem) {
  uint32_t best = UINT32_MAX, alone = UINT32_MAX;
  /* A slot holds two groups or more when one of them is narrower than the
   * slot's used GPUs. */
  for (uint32_t q = 0; q < s->ng; q++) {
    uint32_t from = s->g[q].slot;
    if (from == j)
      continue;
    if (s->g[q].count >= 2 && (best == UINT32_MAX || s->g[q].load > s->g[best].load))
      best = q;
    if (s->cfg->size[s->g[q].k] < s->used[from] &&
        (alone == UINT32_MAX || s->g[q].load > s->g[alone].load))
      alone = q;
  }
  if (best == UINT32_MAX && alone == UINT32_MAX)
    return 0;
  uint32_t from;
  if (best != UINT32_MAX) {
    from = s->g[best].slot;
    if (split(s, best, j, mem) == UINT32_MAX)
      return PK_ENOMEM;
  } else {
    from = s->g[alone].slot;
    dcp_state_set_slot(s, alone, j);
  }
  if (!retile(s, j, buf, tmp) || !retile(s, from, buf, tmp))
    return PK_EINTERNAL;
  return 1;
}

int dcp_place(dcp_state_t *s) {
  const dcp_cfg_t *cfg = s->cfg;
  uint32_t n = s->it->n;
  /* Scratch for sorting the groups: at most n plus one per split (a split
   * needs a group of two sequences). */
  uint32_t *buf = pk_malloc_array((size_t)2 * n + 1, sizeof *buf);
  uint32_t *tmp = pk_malloc_array((size_t)2 * n + 1, sizeof *tmp);
  int rc = 0;
  if (buf == NULL || tmp == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  for (uint32_t q = 0; q < s->ng; q++)
    buf[q] = q;
  pk_merge_sort_u32(buf, tmp, s->ng, place_before, s);
  for (uint32_t r = 0; r < s->ng; r++) {
    dcp_grp_t *g = &s->g[buf[r]];
    uint32_t c = cfg->size[g->k];
    uint32_t best = UINT32_MAX;
    bool best_above = false;
    for (uint32_t j = 0; j < s->m; j++) {
      if (s->used[j] + c > cfg->pool || !dcp_start_ok(cfg, g->k, s->used[j]))
        continue;
      bool above = s->smax[j] >= g->load && s->used[j] > 0;
      if (best == UINT32_MAX || (above && !best_above) ||
          (above && best_above && s->smax[j] < s->smax[best]) ||
          (!above && !best_above && s->smax[j] > s->smax[best])) {
        best = j;
        best_above = above;
      }
    }
    if (best == UINT32_MAX) {
      rc = 1;
      goto done;
    }
    dcp_state_set_slot(s, buf[r], best);
    g->first = s->used[best];
    s->used[best] += c;
    s->smax[best] = fmax(s->smax[best], g->load);
  }
  rc = dcp_fill(s);
done:
  free(buf);
  free(tmp);
  return rc;
}

int dcp_fill(dcp_state_t *s) {
  const dcp_cfg_t *cfg = s->cfg;
  uint32_t n = s->it->n;
  uint32_t *buf = pk_malloc_array((size_t)2 * n + 1, sizeof *buf);
  dcp_key_t *tmp = pk_malloc_array((size_t)2 * cfg->pool + 2, sizeof *tmp);
  uint32_t *mem = pk_malloc_array(n, sizeof *mem);
  int rc = 0;
  if (buf == NULL || tmp == NULL || mem == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  for (uint32_t j = 0; j < s->m; j++)
    if (!retile(s, j, buf, tmp)) {
      rc = PK_EINTERNAL;
      goto done;
    }
  /* Empty slots first: seeding one takes GPUs from another slot, which the
   * filling below gives work again. */
  for (uint32_t j = 0; j < s->m; j++) {
    if (s->used[j] == 0) {
      rc = seed_empty(s, j, buf, tmp, mem);
      if (rc < 0)
        goto done;
    }
  }
  for (uint32_t j = 0; j < s->m; j++) {
    if (pk_limits_stopped(s->limits)) {
      rc = PK_ECANCELED;
      goto done;
    }
    while (s->used[j] > 0 && s->used[j] < cfg->pool) {
      rc = fill_step(s, j, buf, tmp, mem);
      if (rc < 0)
        goto done;
      if (rc == 0)
        break;
    }
    rc = 0;
  }
done:
  free(buf);
  free(tmp);
  free(mem);
  return rc;
}
