/* Dynamic-CP AUTO: from the slot-count bound upward, at each count m:
 *
 * 1. size: every sequence takes the size at which its pool work is least
 *    (at least its kmin); a sequence whose per-GPU cost there is above the
 *    level a slot would have if the work were spread evenly (pool work /
 *    (m x pool)) takes the smallest size that brings it under that level,
 *    or the size at which it alone costs least: one long sequence must not
 *    set a slot's time for the whole pool.
 * 2. count: the sequences of one size form a class; each class gets as many
 *    groups as its work over the level asks for (at least what its tokens,
 *    the cap and max_seqs need), then the counts are trimmed or raised
 *    until the groups' GPUs fill the m x pool GPU-slots;
 * 3. pack: each class is dealt into its groups, costliest sequence first to
 *    the least loaded group with room (LPT under the cap, a heap);
 * 4. place (slots.c): groups into slots as aligned blocks, idle GPUs
 *    filled;
 * 5. level (level.c): sequences moved and swapped between groups while the
 *    step falls.
 *
 * The count with the least step wins; the search stops once the bound at
 * the next count (which grows with the count) is no better than the best
 * step. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "state.h"

/* Counts above the bound tried after the first that packs (each costs a
 * full plan; the bound usually stops the search sooner). */
#define DCP_EXTRA_COUNTS 3u

typedef struct sort_arg {
  const uint32_t *k;
  const double *cost;
} sort_arg_t;

/* By size index, then cost descending, then index. */
static bool class_before(const void *arg, uint32_t x, uint32_t y) {
  const sort_arg_t *a = arg;
  if (a->k[x] != a->k[y])
    return a->k[x] < a->k[y];
  if (a->cost[x] != a->cost[y])
    return a->cost[x] > a->cost[y];
  return x < y;
}

/* Heap order of a class's groups: least load first, then fewest members. */
static bool lighter(const void *arg, uint32_t x, uint32_t y) {
  const dcp_grp_t *g = arg;
  if (g[x].load != g[y].load)
    return g[x].load < g[y].load;
  return x < y;
}

typedef struct scratch {
  uint32_t *k;     /* n: chosen size index. */
  double *cost;    /* n: per-GPU cost at it. */
  uint32_t *order; /* n: by class, cost descending. */
  uint32_t *tmp;   /* n. */
  uint32_t *heap;  /* n. */
  uint64_t *ngrp;  /* nsize: groups per class. */
  uint64_t *lo;    /* nsize: least groups per class. */
  uint64_t *cnt;   /* nsize. */
  double *work;    /* nsize. */
} scratch_t;

/* The size at which sequence i's pool work is least (from kmin; with any
 * size allowed only kmin and the next few sizes are looked at, pool work
 * growing with c but for padding). */
static uint32_t cheapest(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t i) {
  uint32_t best = it->kmin[i];
  double bw = cfg->size[best] * dcp_item_cost(cfg, it, i, best);
  uint32_t end = cfg->sizes == PK_DCP_SIZES_ANY ? PK_MIN(cfg->nsize, best + 4) : cfg->nsize;
  for (uint32_t k = best + 1; k < end; k++) {
    double w = cfg->size[k] * dcp_item_cost(cfg, it, i, k);
    if (w < bw) {
      bw = w;
      best = k;
    }
  }
  return best;
}

/* Step 1: sizes for slot count m; returns the level used. */
static double choose_sizes(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t m,
                           const uint32_t *k0, scratch_t *w) {
  double work = 0;
  for (uint32_t i = 0; i < it->n; i++)
    work += cfg->size[k0[i]] * dcp_item_cost(cfg, it, i, k0[i]);
  double level = work / ((double)m * cfg->pool);
  for (uint32_t i = 0; i < it->n; i++) {
    uint32_t k = k0[i];
    double c = dcp_item_cost(cfg, it, i, k);
    if (c > level) {
      uint32_t best = k;
      double alone = dcp_group_base(cfg, cfg->size[k]) + c;
      for (uint32_t q = k + 1; q < cfg->nsize; q++) {
        double cq = dcp_item_cost(cfg, it, i, q);
        if (cq <= level) {
          best = q;
          break;
        }
        double aq = dcp_group_base(cfg, cfg->size[q]) + cq;
        if (aq < alone) {
          alone = aq;
          best = q;
        }
      }
      k = best;
      c = dcp_item_cost(cfg, it, i, k);
    }
    w->k[i] = k;
    w->cost[i] = c;
  }
  return level;
}

/* Step 2: groups per class so that their GPUs fill m x pool. Returns false
 * when even the least counts need more GPUs. */
static bool count_groups(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t m, double level,
                         scratch_t *w) {
  uint32_t ns = cfg->nsize;
  uint64_t *vol = w->lo; /* Tokens first, then the least counts. */
  for (uint32_t k = 0; k < ns; k++) {
    w->cnt[k] = 0;
    w->work[k] = 0;
    vol[k] = 0;
  }
  for (uint32_t i = 0; i < it->n; i++) {
    uint32_t k = w->k[i];
    w->cnt[k]++;
    w->work[k] += cfg->size[k] * w->cost[i];
    vol[k] += dcp_item_aligned(cfg, it, i, k);
  }
  uint64_t width = 0, room = (uint64_t)m * cfg->pool;
  for (uint32_t k = 0; k < ns; k++) {
    uint64_t c = cfg->size[k];
    if (w->cnt[k] == 0) {
      w->lo[k] = w->ngrp[k] = 0;
      continue;
    }
    uint64_t lo = (vol[k] + c * cfg->cap - 1) / (c * cfg->cap);
    if (cfg->max_seqs != UINT32_MAX)
      lo = PK_MAX(lo, (w->cnt[k] + cfg->max_seqs - 1) / cfg->max_seqs);
    lo = PK_MAX(lo, 1);
    double want = level > 0 ? w->work[k] / (c * level) : 1;
    uint64_t g = want >= (double)w->cnt[k] ? w->cnt[k] : (uint64_t)llround(want);
    w->lo[k] = lo;
    w->ngrp[k] = PK_MIN(PK_MAX(g, lo), w->cnt[k]);
    width += w->ngrp[k] * c;
  }
  /* Too wide: drop a group from the class whose level rises least. */
  while (width > room) {
    uint32_t best = UINT32_MAX;
    double bl = INFINITY;
    for (uint32_t k = 0; k < ns; k++) {
      if (w->ngrp[k] <= w->lo[k])
        continue;
      double l = w->work[k] / ((double)(w->ngrp[k] - 1) * cfg->size[k]);
      if (l < bl) {
        bl = l;
        best = k;
      }
    }
    if (best == UINT32_MAX)
      return false;
    w->ngrp[best]--;
    width -= cfg->size[best];
  }
  /* Room left: a group more for the class with the highest level that
   * still fits (idle GPUs left after this are filled by slots.c). */
  while (width < room) {
    uint32_t best = UINT32_MAX;
    double bl = -1;
    for (uint32_t k = 0; k < ns; k++) {
      if (w->ngrp[k] >= w->cnt[k] || width + cfg->size[k] > room)
        continue;
      double l = w->work[k] / ((double)w->ngrp[k] * cfg->size[k]);
      if (l > bl) {
        bl = l;
        best = k;
      }
    }
    if (best == UINT32_MAX)
      break;
    w->ngrp[best]++;
    width += cfg->size[best];
  }
  return true;
}

/* Step 3: LPT of every class into its groups. Returns 0, 1 when a
 * sequence finds no group with room, or PK_ENOMEM. */
static int pack(dcp_state_t *s, scratch_t *w) {
  const dcp_cfg_t *cfg = s->cfg;
  const dcp_items_t *it = s->it;
  uint32_t n = it->n;
  sort_arg_t arg = {.k = w->k, .cost = w->cost};
  for (uint32_t i = 0; i < n; i++)
    w->order[i] = i;
  pk_merge_sort_u32(w->order, w->tmp, n, class_before, &arg);
  uint32_t j = 0;
  while (j < n) {
    uint32_t k = w->k[w->order[j]];
    uint32_t first = s->ng, count = (uint32_t)w->ngrp[k];
    for (uint32_t q = 0; q < count; q++) {
      if (dcp_state_new_group(s, k) == UINT32_MAX)
        return PK_ENOMEM;
      w->heap[q] = first + q;
    }
    for (; j < n && w->k[w->order[j]] == k; j++) {
      uint32_t i = w->order[j];
      uint32_t grp = w->heap[0];
      if (!dcp_item_fits(cfg, it, i, k, s->g[grp].sum, s->g[grp].count)) {
        /* The lightest group is full: the lightest with room, if any. */
        grp = UINT32_MAX;
        for (uint32_t q = first; q < first + count; q++)
          if (dcp_item_fits(cfg, it, i, k, s->g[q].sum, s->g[q].count) &&
              (grp == UINT32_MAX || s->g[q].load < s->g[grp].load))
            grp = q;
        if (grp == UINT32_MAX)
          return 1;
      }
      dcp_state_add(s, grp, i);
      /* The group's load only rose: sift it down from where it is (the
       * root but for the rare full-group case above). */
      uint32_t q = 0;
      while (w->heap[q] != grp)
        q++;
      pk_heap_down(w->heap, count, q, lighter, s->g);
    }
  }
  /* A class with more groups than sequences never happens (counts are at
   * most the class size), and LPT opens every group with one sequence. */
  return 0;
}

static void scratch_free(scratch_t *w) {
  free(w->k);
  free(w->cost);
  free(w->order);
  free(w->tmp);
  free(w->heap);
  free(w->ngrp);
  free(w->lo);
  free(w->cnt);
  free(w->work);
}

/* One plan at m slots into s (initialised here). Returns 0, 1 when m slots
 * are too few for this way of planning, or a negative code. */
static int plan_at(const dcp_cfg_t *cfg, const dcp_items_t *it, const pk_limits_t *limits,
                   uint32_t m, const uint32_t *k0, scratch_t *w, dcp_state_t *s) {
  int rc = dcp_state_init(s, cfg, it, limits, m);
  if (rc != 0)
    return rc;
  double level = choose_sizes(cfg, it, m, k0, w);
  if (!count_groups(cfg, it, m, level, w))
    return 1;
  rc = pack(s, w);
  if (rc != 0)
    return rc;
  if (pk_limits_stopped(limits))
    return PK_ECANCELED;
  rc = dcp_place(s);
  if (rc != 0)
    return rc;
  return dcp_level(s);
}

int dcp_auto(const dcp_cfg_t *cfg, const dcp_items_t *it, const pk_limits_t *limits,
             dcp_assign_t *out, char *err, size_t errlen) {
  uint32_t n = it->n, ns = cfg->nsize;
  scratch_t w = {0};
  uint32_t *k0 = pk_malloc_array(n, sizeof *k0);
  w.k = pk_malloc_array(n, sizeof *w.k);
  w.cost = pk_malloc_array(n, sizeof *w.cost);
  w.order = pk_malloc_array(n, sizeof *w.order);
  w.tmp = pk_malloc_array(n, sizeof *w.tmp);
  w.heap = pk_malloc_array(n, sizeof *w.heap);
  w.ngrp = pk_malloc_array(ns, sizeof *w.ngrp);
  w.lo = pk_malloc_array(ns, sizeof *w.lo);
  w.cnt = pk_malloc_array(ns, sizeof *w.cnt);
  w.work = pk_malloc_array(ns, sizeof *w.work);
  dcp_state_t best = {0}, cur = {0};
  double best_step = INFINITY;
  int rc = 0;
  if (k0 == NULL || w.k == NULL || w.cost == NULL || w.order == NULL || w.tmp == NULL ||
      w.heap == NULL || w.ngrp == NULL || w.lo == NULL || w.cnt == NULL || w.work == NULL) {
    rc = pk_fail(err, errlen, PK_ENOMEM, "lengths: out of memory for %u sequences", n);
    goto done;
  }
  for (uint32_t i = 0; i < n; i++)
    k0[i] = cheapest(cfg, it, i);
  uint32_t m = dcp_slots_lower_bound(cfg, it), extra = 0;
  /* Every count up to n packs (one sequence per group fits alone), so the
   * loop ends; counts above n are never needed. */
  for (; m <= n && extra <= DCP_EXTRA_COUNTS; m++) {
    if (best.g != NULL && dcp_step_lower_bound(cfg, it, m) >= best_step * (1 - 1e-9))
      break;
    rc = plan_at(cfg, it, limits, m, k0, &w, &cur);
    if (rc < 0) {
      if (rc == PK_ENOMEM)
        pk_fail(err, errlen, rc, "lengths: out of memory for %u sequences", n);
      else if (rc == PK_ECANCELED)
        pk_fail(err, errlen, rc, "planning stopped by the caller");
      goto done;
    }
    if (rc == 0) {
      double step = dcp_state_step(&cur);
      if (step < best_step) {
        best_step = step;
        dcp_state_free(&best);
        best = cur;
        memset(&cur, 0, sizeof cur);
      }
    }
    dcp_state_free(&cur);
    if (best.g != NULL)
      extra++;
    rc = 0;
  }
  if (best.g == NULL) {
    rc = pk_fail(err, errlen, PK_EINTERNAL, "dynamic CP: no slot count up to %u packs", n);
    goto done;
  }
  rc = dcp_state_export(&best, out);
  if (rc != 0)
    pk_fail(err, errlen, rc, "lengths: out of memory for %u sequences", n);
done:
  dcp_state_free(&best);
  dcp_state_free(&cur);
  free(k0);
  scratch_free(&w);
  return rc;
}
