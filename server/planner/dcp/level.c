/* Levelling (state.h, dcp_level): the step is the sum over slots of the
 * costliest group, so only a slot's costliest group is worth lightening.
 * For every slot in turn, a sequence of its costliest group moves to a
 * group of another slot that stays at or under that slot's maximum, or of
 * the same slot that stays under it; failing that, it swaps with a cheaper
 * sequence of a group of another slot under the same rule. Each accepted
 * change lowers the step by more than DCP_LEVEL_EPS of it and keeps every
 * invariant (the cap, max_seqs, kmin, no group emptied), so the search
 * ends; a work budget bounds its time on large batches. */
#include <math.h>
#include <stdlib.h>

#include "knobs.h"
#include "state.h"

typedef struct lv {
  dcp_state_t *s;
  uint32_t *start; /* m + 1: the slot's groups in sg[start[j] .. start[j + 1]). */
  uint32_t *sg;
  /* Snapshots of member lists: a change that is undone puts its sequence
   * back at the head of its list, so lists are never walked while
   * changing. */
  uint32_t *mem_g, *mem_h;
  /* The cost of one sequence at each size index, filled on demand: ucost[k]
   * holds sequence i's when ufor[k] is i + 1. A scan asks for the same few
   * sizes of the same sequence once per group. */
  double *ucost;
  uint32_t *ufor;
  /* Swap scans by blocks of DCP_LEVEL_BLOCK groups (by number), where
   * blocks is set: per block, the members of its groups under their slot's
   * maximum (bopen) and per size index the highest slot maximum over those
   * groups (bmax[b x nsize + k], -INFINITY: none); jopen[b]: the share of
   * bopen of slot jfor[b] - 1. Every change tried (kept or undone: an
   * undone change may leave a load an ulp off) marks the blocks of its two
   * slots stale, and a scan surveys a stale block again when it reaches
   * it: a survey costs what reading the block's groups costs, once per
   * scan at most. */
  bool blocks;
  double *bmax;
  uint64_t *bopen, *jopen;
  uint32_t *jfor;
  bool *stale;
  /* Each slot's blocks (its groups' blocks, each once where its groups
   * are consecutive): slot j's in sblk[bstart[j] .. bstart[j + 1]). */
  uint32_t *bstart, *sblk;
  uint64_t work, budget;
  uint32_t tick;
} lv_t;

static inline double cost_at(lv_t *v, uint32_t i, uint32_t k) {
  if (v->ufor[k] != i + 1) {
    v->ucost[k] = dcp_item_cost(v->s->cfg, v->s->it, i, k);
    v->ufor[k] = i + 1;
  }
  return v->ucost[k];
}

/* The larger of two costs (never NaN), inline: fmax is a library call,
 * and slot_max reads every group of a slot per change tried. */
static inline double most(double a, double b) {
  return b > a ? b : a;
}

static double slot_max(const lv_t *v, uint32_t j) {
  double mx = 0;
  for (uint32_t r = v->start[j]; r < v->start[j + 1]; r++)
    mx = most(mx, v->s->g[v->sg[r]].load);
  return mx;
}

/* The costliest group of slot j and the cost of the others' maximum. */
static uint32_t top(const lv_t *v, uint32_t j, double *second) {
  uint32_t best = UINT32_MAX;
  *second = 0;
  for (uint32_t r = v->start[j]; r < v->start[j + 1]; r++) {
    uint32_t q = v->sg[r];
    if (best == UINT32_MAX || v->s->g[q].load > v->s->g[best].load) {
      if (best != UINT32_MAX)
        *second = most(*second, v->s->g[best].load);
      best = q;
    } else {
      *second = most(*second, v->s->g[q].load);
    }
  }
  return best;
}

static void block_survey(lv_t *v, uint32_t b) {
  const dcp_state_t *s = v->s;
  uint32_t ns = s->cfg->nsize, end = PK_MIN(s->ng, (b + 1) * DCP_LEVEL_BLOCK);
  double *bm = &v->bmax[(size_t)b * ns];
  for (uint32_t k = 0; k < ns; k++)
    bm[k] = -INFINITY;
  v->bopen[b] = 0;
  for (uint32_t h = b * DCP_LEVEL_BLOCK; h < end; h++) {
    double x = s->smax[s->g[h].slot];
    if (x <= s->g[h].load)
      continue;
    v->bopen[b] += s->g[h].count;
    bm[s->g[h].k] = most(bm[s->g[h].k], x);
  }
}

/* After a change tried between slots ja and jb: their groups' blocks. */
static void resurvey(lv_t *v, uint32_t ja, uint32_t jb) {
  if (!v->blocks)
    return;
  uint32_t slots[2] = {ja, jb};
  for (uint32_t x = 0; x < 2; x++)
    for (uint32_t r = v->bstart[slots[x]]; r < v->bstart[slots[x] + 1]; r++)
      v->stale[v->sblk[r]] = true;
}

/* jopen for slot j, in the blocks that hold its groups. */
static void slot_open(lv_t *v, uint32_t j) {
  const dcp_state_t *s = v->s;
  for (uint32_t r = v->start[j]; r < v->start[j + 1]; r++) {
    v->jopen[v->sg[r] / DCP_LEVEL_BLOCK] = 0;
    v->jfor[v->sg[r] / DCP_LEVEL_BLOCK] = j + 1;
  }
  for (uint32_t r = v->start[j]; r < v->start[j + 1]; r++) {
    const dcp_grp_t *g = &s->g[v->sg[r]];
    if (s->smax[j] > g->load)
      v->jopen[v->sg[r] / DCP_LEVEL_BLOCK] += g->count;
  }
}

/* Whether no group of block b can take a swap with sequence i: at every
 * size, i's cost there plus the group terms passes the block's highest
 * slot maximum of a group with room by more than the per-group check's
 * tolerance, twice over, so that check (which reads the same quantities
 * up to rounding) passes every group of the block over, and the scan
 * only counts their members. */
static bool block_closed(lv_t *v, uint32_t b, uint32_t i) {
  const dcp_cfg_t *cfg = v->s->cfg;
  if (v->stale[b]) {
    block_survey(v, b);
    v->stale[b] = false;
  }
  const double *bm = &v->bmax[(size_t)b * cfg->nsize];
  for (uint32_t k = 0; k < cfg->nsize; k++) {
    if (bm[k] == -INFINITY)
      continue;
    double ui = cost_at(v, i, k), base = dcp_group_base(cfg, cfg->size[k]);
    if (!(ui + base - bm[k] > 2 * DCP_LEVEL_SKIP_TOL * (ui + bm[k] + base)))
      return false;
  }
  return true;
}

/* Moves sequence i to group h and keeps it there when the step falls. */
static bool try_move(lv_t *v, uint32_t i, uint32_t h) {
  dcp_state_t *s = v->s;
  uint32_t g = s->group[i];
  uint32_t jg = s->g[g].slot, jh = s->g[h].slot;
  double before = s->smax[jg] + (jh != jg ? s->smax[jh] : 0);
  dcp_state_remove(s, i);
  dcp_state_add(s, h, i);
  double mg = slot_max(v, jg), mh = jh != jg ? slot_max(v, jh) : 0;
  if (mg + mh < before - DCP_LEVEL_EPS * (before + 1)) {
    s->smax[jg] = mg;
    if (jh != jg)
      s->smax[jh] = mh;
    resurvey(v, jg, jh);
    return true;
  }
  dcp_state_remove(s, i);
  dcp_state_add(s, g, i);
  resurvey(v, jg, jh);
  return false;
}

static bool try_swap(lv_t *v, uint32_t i, uint32_t i2) {
  dcp_state_t *s = v->s;
  uint32_t g = s->group[i], h = s->group[i2];
  uint32_t jg = s->g[g].slot, jh = s->g[h].slot;
  double before = s->smax[jg] + (jh != jg ? s->smax[jh] : 0);
  dcp_state_remove(s, i);
  dcp_state_remove(s, i2);
  bool ok = dcp_item_fits(s->cfg, s->it, i2, s->g[g].k, s->g[g].sum, s->g[g].count) &&
            dcp_item_fits(s->cfg, s->it, i, s->g[h].k, s->g[h].sum, s->g[h].count);
  if (ok) {
    dcp_state_add(s, g, i2);
    dcp_state_add(s, h, i);
    double mg = slot_max(v, jg), mh = jh != jg ? slot_max(v, jh) : 0;
    if (mg + mh < before - DCP_LEVEL_EPS * (before + 1)) {
      s->smax[jg] = mg;
      if (jh != jg)
        s->smax[jh] = mh;
      resurvey(v, jg, jh);
      return true;
    }
    dcp_state_remove(s, i2);
    dcp_state_remove(s, i);
  }
  dcp_state_add(s, g, i);
  dcp_state_add(s, h, i2);
  resurvey(v, jg, jh);
  return false;
}

/* One improving change on slot j's costliest group; false when none. */
static uint32_t members(const dcp_state_t *s, uint32_t q, uint32_t *out) {
  uint32_t cnt = 0;
  for (uint32_t i = s->g[q].head; i != UINT32_MAX; i = s->nxt[i])
    out[cnt++] = i;
  return cnt;
}

static bool improve(lv_t *v, uint32_t j) {
  dcp_state_t *s = v->s;
  const dcp_cfg_t *cfg = s->cfg;
  const dcp_items_t *it = s->it;
  double second;
  uint32_t g = top(v, j, &second);
  if (g == UINT32_MAX || s->g[g].load <= second)
    return false; /* Another group as costly: lightening one gains nothing. */
  uint32_t kg = s->g[g].k;
  uint32_t ng = members(s, g, v->mem_g);
  if (ng >= 2) {
    for (uint32_t x = 0; x < ng; x++) {
      uint32_t i = v->mem_g[x];
      double u = dcp_item_cost(cfg, it, i, kg);
      if (fmax(s->g[g].load - u, second) >= s->smax[j])
        continue;
      for (uint32_t h = 0; h < s->ng; h++) {
        if (v->work++ > v->budget)
          return false;
        if (h == g)
          continue;
        uint32_t jh = s->g[h].slot;
        double room = s->smax[jh] - s->g[h].load;
        if (room <= 0 || !dcp_item_fits(cfg, it, i, s->g[h].k, s->g[h].sum, s->g[h].count))
          continue;
        if (cost_at(v, i, s->g[h].k) > room && jh != j)
          continue;
        if (try_move(v, i, h))
          return true;
      }
    }
  }
  /* Swaps with a cheaper sequence of a group of another slot with room. */
  for (uint32_t x = 0; x < ng; x++) {
    uint32_t i = v->mem_g[x];
    double u = dcp_item_cost(cfg, it, i, kg);
    if (v->blocks)
      slot_open(v, j);
    for (uint32_t h = 0; h < s->ng; h++) {
      uint32_t b = h / DCP_LEVEL_BLOCK;
      if (v->blocks && h % DCP_LEVEL_BLOCK == 0 && block_closed(v, b, i)) {
        /* The block's groups would only be counted: its members under
         * their slot's maximum but slot j's. */
        uint64_t count = v->bopen[b] - (v->jfor[b] == j + 1 ? v->jopen[b] : 0);
        if (v->work + count > v->budget + 1) {
          v->work = v->budget + 2;
          return false;
        }
        v->work += count;
        h += DCP_LEVEL_BLOCK - 1;
        continue;
      }
      uint32_t jh = s->g[h].slot;
      if (jh == j || s->smax[jh] <= s->g[h].load)
        continue;
      /* No member of h costs more than h's sequences together (its load
       * less its group terms), so where i's rise over that is above h's
       * room by more than rounding, no pair below passes: their work is
       * counted without reading them. */
      double ui = cost_at(v, i, s->g[h].k);
      double rest = s->g[h].load - dcp_group_base(cfg, cfg->size[s->g[h].k]);
      if (ui - rest > (s->smax[jh] - s->g[h].load) + DCP_LEVEL_SKIP_TOL * (ui + s->smax[jh])) {
        if (v->work + s->g[h].count > v->budget + 1) {
          v->work = v->budget + 2;
          return false;
        }
        v->work += s->g[h].count;
        continue;
      }
      uint32_t nh = members(s, h, v->mem_h);
      for (uint32_t y = 0; y < nh; y++) {
        uint32_t i2 = v->mem_h[y];
        if (v->work++ > v->budget)
          return false;
        if (dcp_item_cost(cfg, it, i2, kg) >= u)
          continue;
        double gain = u - dcp_item_cost(cfg, it, i2, kg);
        double rise = ui - dcp_item_cost(cfg, it, i2, s->g[h].k);
        if (rise > s->smax[jh] - s->g[h].load || gain <= 0)
          continue;
        if (try_swap(v, i, i2))
          return true;
        if (v->blocks)
          slot_open(v, j); /* Undone: slot j's loads may be an ulp off. */
      }
    }
  }
  return false;
}

int dcp_level(dcp_state_t *s) {
  lv_t v = {.s = s};
  v.budget = PK_MIN(PK_MAX((uint64_t)DCP_LEVEL_PER_SEQ * s->it->n, DCP_LEVEL_MIN_BUDGET),
                    DCP_LEVEL_BUDGET);
  v.start = pk_calloc((size_t)s->m + 1, sizeof *v.start);
  v.sg = pk_malloc_array(s->ng + 1, sizeof *v.sg);
  v.mem_g = pk_malloc_array(s->it->n, sizeof *v.mem_g);
  v.mem_h = pk_malloc_array(s->it->n, sizeof *v.mem_h);
  v.ucost = pk_malloc_array(s->cfg->nsize, sizeof *v.ucost);
  v.ufor = pk_calloc(s->cfg->nsize, sizeof *v.ufor);
  v.blocks = s->cfg->nsize <= DCP_LEVEL_SURVEY_SIZES;
  uint32_t nblocks = v.blocks ? s->ng / DCP_LEVEL_BLOCK + 1 : 1;
  v.bmax = pk_malloc_array((size_t)nblocks * s->cfg->nsize, sizeof *v.bmax);
  v.bopen = pk_malloc_array(nblocks, sizeof *v.bopen);
  v.jopen = pk_malloc_array(nblocks, sizeof *v.jopen);
  v.jfor = pk_calloc(nblocks, sizeof *v.jfor);
  v.stale = pk_malloc_array(nblocks, sizeof *v.stale);
  v.bstart = pk_malloc_array((size_t)s->m + 1, sizeof *v.bstart);
  v.sblk = pk_malloc_array(s->ng + 1, sizeof *v.sblk);
  int rc = 0;
  if (v.start == NULL || v.sg == NULL || v.mem_g == NULL || v.mem_h == NULL || v.ucost == NULL ||
      v.ufor == NULL || v.bmax == NULL || v.bopen == NULL || v.jopen == NULL || v.jfor == NULL ||
      v.stale == NULL || v.bstart == NULL || v.sblk == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  for (uint32_t q = 0; q < s->ng; q++)
    v.start[s->g[q].slot + 1]++;
  for (uint32_t j = 0; j < s->m; j++)
    v.start[j + 1] += v.start[j];
  for (uint32_t q = 0; q < s->ng; q++)
    v.sg[v.start[s->g[q].slot]++] = q;
  for (uint32_t j = s->m; j > 0; j--)
    v.start[j] = v.start[j - 1];
  v.start[0] = 0;
  uint32_t t = 0;
  for (uint32_t j = 0; j < s->m; j++) {
    v.bstart[j] = t;
    for (uint32_t r = v.start[j]; r < v.start[j + 1]; r++)
      if (t == v.bstart[j] || v.sblk[t - 1] != v.sg[r] / DCP_LEVEL_BLOCK)
        v.sblk[t++] = v.sg[r] / DCP_LEVEL_BLOCK;
  }
  v.bstart[s->m] = t;
  dcp_state_step(s);
  for (uint32_t b = 0; b < nblocks; b++)
    v.stale[b] = true;
  for (uint32_t pass = 0; pass < DCP_LEVEL_PASSES && v.work <= v.budget; pass++) {
    bool any = false;
    for (uint32_t j = 0; j < s->m; j++) {
      while (v.work <= v.budget && improve(&v, j)) {
        any = true;
        if (++v.tick % DCP_POLL_LEVEL == 0 && pk_limits_stopped(s->limits)) {
          rc = PK_ECANCELED;
          goto done;
        }
      }
    }
    if (!any || pk_limits_stopped(s->limits))
      break;
  }
  if (pk_limits_stopped(s->limits))
    rc = PK_ECANCELED;
done:
  free(v.start);
  free(v.sg);
  free(v.mem_g);
  free(v.mem_h);
  free(v.ucost);
  free(v.ufor);
  free(v.bmax);
  free(v.bopen);
  free(v.jopen);
  free(v.jfor);
  free(v.stale);
  free(v.bstart);
  free(v.sblk);
  return rc;
}
