/* Megatron-Core's packing-aware dynamic-CP scheduler (its dev line's
 * DefaultDynamicCPScheduler), reproduced so that its plans can be set
 * beside AUTO's and be one of AUTO's candidates, with the per-GPU cap kept
 * hard.
 *
 * What it does, slot by slot, on the sequences left (longest first; the
 * leftovers keep that order):
 * - the longest opens a group of the smallest size it needs (the original:
 *   the power of two at or above length / cap, at least the minimum size)
 *   on the lowest GPUs;
 * - every other sequence, from the size it needs and doubling up to the
 *   pool, looks at each group of that size (oldest first) whose GPUs still
 *   hold its length / size under the cap, and at a new group of that size
 *   on the lowest free GPUs; each such place would make the slot's most
 *   loaded GPU carry max(that load, the place's load + length^2 / size),
 *   and the place where that figure is least (the first on ties) wins if
 *   the figure is within 1.05 x (the slot's longest length) x cap;
 *   otherwise the sequence waits for the next slot;
 * - while GPUs are free, the oldest group of the smallest size that can
 *   grow doubles (up to the pool) and the groups after it move up; when
 *   none can, the slot is dropped and rebuilt as one group of the whole
 *   pool holding, in order, every sequence whose length / pool still fits
 *   under the cap.
 * The original counts the cap on unaligned lengths; the slot it builds is
 * kept as it is when every group is within packd's rules (aligned tokens
 * within size x cap, max_seqs, an allowed size). A slot that breaks one,
 * or at which the original would stop (an assertion, or a group grown
 * past the pool's last GPU), is rebuilt with packd's rules in place of the
 * original's: a place must leave the group within the cap and max_seqs at
 * its size, a group grows only if its members fit the larger size, the
 * whole-pool group takes sequences while its aligned tokens fit, and where
 * that takes none the slot keeps its groups and its free GPUs (AUTO gives
 * them work). Groups are laid out largest first in each slot, as aligned
 * blocks: a group's GPUs all carry the same load, so the layout changes
 * no cost. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dcp.h"
#include "knobs.h"

/* The most sizes on one sequence's chain (c0, 2 c0, ... up to a pool of
 * at most DCP_MAX_POOL GPUs). */
#define PA_CHAIN 18

typedef struct pa_grp {
  uint32_t c;  /* GPUs. */
  uint32_t tz; /* c = odd x 2^tz: on a chain of c0 = odd x 2^t exactly when tz >= t. */
  uint32_t odd;
  uint32_t first; /* First GPU while the slot is built (the groups fill a prefix). */
  uint32_t count;
  uint32_t top;  /* Last member added (a stack through below). */
  uint64_t sum;  /* Aligned tokens at c (packd's cap). */
  double packed; /* Sum of length / c, accumulated as the original does (its cap). */
  double load;   /* Sum of length^2 / c: the original's per-GPU estimate. */
} pa_grp_t;

typedef struct pa {
  const dcp_cfg_t *cfg;
  const dcp_items_t *it;
  const pk_limits_t *limits;
  bool packd_rules; /* The rebuild of a slot: packd's rules in place of the original's. */
  pa_grp_t *g;      /* pool: the slot's groups, oldest first. */
  uint32_t ng;
  uint32_t used;   /* GPUs of the slot in groups. */
  double peak;     /* The most loaded GPU's estimate. */
  double room;     /* The most tokens a group of the slot could still take. */
  uint32_t *below; /* n: the member added before it to the same group. */
  uint32_t *c0;    /* n: the original's size for each sequence (needed), at most pool + 1. */
  uint32_t *fit;   /* n: bit j set when the sequence fits c0 x 2^j alone (packd's rules). */
  uint32_t *order; /* pool: the groups by size, largest first. */
  uint32_t tick;
} pa_t;

/* The original's size for a sequence: the power of two at or above
 * length / cap (at least 1), at least the minimum size; computed as it
 * computes it (log2 of the quotient, rounded up), so that the rare
 * quotient just above a power of two rounds as it does there. */
static uint64_t needed(const pa_t *p, uint32_t len) {
  double e = ceil(log2((double)len / (double)p->cfg->cap));
  uint64_t raw = e <= 0 ? 1 : e >= 40 ? (uint64_t)1 << 40 : (uint64_t)1 << (uint32_t)e;
  return PK_MAX(raw, (uint64_t)p->cfg->size[0]);
}

static double workload(uint32_t len, uint32_t c) {
  return (double)((uint64_t)len * len) / c;
}

/* The power of two in c (c >= 1). */
static uint32_t twos(uint32_t c) {
  uint32_t t = 0;
  while (c % 2 == 0) {
    c /= 2;
    t++;
  }
  return t;
}

static void set_size(pa_grp_t *g, uint32_t c) {
  g->c = c;
  g->tz = twos(c);
  g->odd = c >> g->tz;
}

/* Under packd's rules: whether sequence i fits a group of c GPUs alone (c
 * allowed, the aligned length within c x cap). */
static bool fits_alone(const pa_t *p, uint32_t i, uint32_t c) {
  uint32_t k = dcp_size_index(p->cfg, c);
  return k != UINT32_MAX && dcp_item_fits(p->cfg, p->it, i, k, 0, 0);
}

/* Whether group q takes a sequence of `per_gpu` = length / c (the
 * original's cap) or `aligned` tokens (packd's). */
static bool takes(const pa_t *p, const pa_grp_t *q, double per_gpu, uint64_t aligned) {
  if (!p->packd_rules)
    return !(q->packed + per_gpu > (double)p->cfg->cap);
  return q->count < p->cfg->max_seqs && q->sum + aligned <= (uint64_t)q->c * p->cfg->cap;
}

static uint32_t new_group(pa_t *p, uint32_t c) {
  pa_grp_t *q = &p->g[p->ng];
  *q = (pa_grp_t){.first = p->used, .top = UINT32_MAX};
  set_size(q, c);
  p->used += c;
  return p->ng++;
}

static void add(pa_t *p, uint32_t q, uint32_t i) {
  pa_grp_t *g = &p->g[q];
  uint32_t len = p->it->len[i];
  g->packed += (double)len / g->c;
  g->load += workload(len, g->c);
  g->sum += dcp_aligned(p->cfg, g->c, len);
  g->count++;
  p->below[i] = g->top;
  g->top = i;
  p->peak = fmax(p->peak, g->load);
  /* Only the group that took i has less room: the slot's most is
   * recomputed over its groups (at most the pool's). */
  p->room = 0;
  for (uint32_t o = 0; o < p->ng; o++) {
    const pa_grp_t *h = &p->g[o];
    double r = p->packd_rules ? (double)((uint64_t)h->c * p->cfg->cap - h->sum)
                              : ((double)p->cfg->cap - h->packed) * h->c;
    p->room = fmax(p->room, r);
  }
}

/* A place for a sequence: the peak it makes, then the original's scan
 * order (sizes ascending; at one size the groups oldest first, then a new
 * group), whose first place wins a tie. */
typedef struct pa_place {
  double peak;
  uint32_t j; /* Size: c0 x 2^j. */
  uint32_t q; /* Group, or UINT32_MAX for a new one (after the groups). */
} pa_place_t;

static bool earlier(const pa_place_t *a, const pa_place_t *b) {
  if (a->peak != b->peak)
    return a->peak < b->peak;
  if (a->j != b->j)
    return a->j < b->j;
  return a->q < b->q;
}

/* Places sequence i where the slot's peak grows least (see the top);
 * returns false when no place keeps it within wcap. One pass over the
 * groups: a group of size c is a place when c is on i's chain of sizes
 * (c0, 2 c0, ... up to the pool). */
static bool place(pa_t *p, uint32_t i, double wcap) {
  uint32_t len = p->it->len[i], pool = p->cfg->pool, c0 = p->c0[i];
  /* No place when i needs more than the pool, or when every GPU is in a
   * group and none has room for it (with a margin for the original's
   * rounding). */
  if (c0 > pool || (p->used == pool && (double)len > p->room * (1 + DCP_PA_ROOM_TOL) + 1))
    return false;
  /* Per size of the chain: i's estimate, length / c and aligned length. */
  double w[PA_CHAIN], per_gpu[PA_CHAIN];
  uint64_t al[PA_CHAIN];
  uint32_t nj = 0, fit = p->packd_rules ? p->fit[i] : UINT32_MAX;
  for (uint32_t c = c0; c <= pool; c *= 2, nj++) {
    w[nj] = workload(len, c);
    /* Only the rule in force is looked at. */
    if (p->packd_rules)
      al[nj] = dcp_aligned(p->cfg, c, len);
    else
      per_gpu[nj] = (double)len / c;
  }
  uint32_t t0 = twos(c0), odd0 = c0 >> t0;
  pa_place_t best = {.peak = INFINITY, .j = UINT32_MAX, .q = UINT32_MAX};
  for (uint32_t q = 0; q < p->ng; q++) {
    const pa_grp_t *g = &p->g[q];
    if (g->odd != odd0 || g->tz < t0)
      continue;
    uint32_t j = g->tz - t0;
    if (j >= nj || !(fit >> j & 1) || !takes(p, g, per_gpu[j], al[j]))
      continue;
    /* A group's GPUs carry the same load: the peak with i there is the
     * larger of the slot's and theirs plus i. */
    pa_place_t at = {.peak = fmax(p->peak, g->load + w[j]), .j = j, .q = q};
    if (at.peak <= wcap && earlier(&at, &best))
      best = at;
  }
  for (uint32_t j = 0; j < nj; j++) {
    pa_place_t at = {.peak = fmax(p->peak, w[j]), .j = j, .q = UINT32_MAX};
    if ((fit >> j & 1) && pool - p->used >= (c0 << j) && at.peak <= wcap && earlier(&at, &best))
      best = at;
  }
  if (best.j == UINT32_MAX)
    return false;
  add(p, best.q != UINT32_MAX ? best.q : new_group(p, c0 << best.j), i);
  return true;
}

/* Under packd's rules: whether group q's members fit a group of c GPUs,
 * and their aligned tokens there. */
static bool members_fit(const pa_t *p, uint32_t q, uint32_t c, uint64_t *sum) {
  uint32_t k = dcp_size_index(p->cfg, c);
  *sum = 0;
  if (k == UINT32_MAX)
    return false;
  for (uint32_t i = p->g[q].top; i != UINT32_MAX; i = p->below[i])
    *sum += dcp_aligned(p->cfg, c, p->it->len[i]);
  return *sum <= (uint64_t)c * p->cfg->cap;
}

/* Grows the oldest group of the smallest size that can grow. Returns 1
 * when one grew, 0 when none can, -1 when the original would stop (the
 * groups after it pushed past the pool's last GPU). */
static int grow_one(pa_t *p) {
  uint32_t pool = p->cfg->pool, cmin = UINT32_MAX;
  for (uint32_t q = 0; q < p->ng; q++)
    cmin = PK_MIN(cmin, p->g[q].c);
  uint32_t next = cmin > pool / 2 ? pool : 2 * cmin, add = next - cmin;
  for (uint32_t q = 0; q < p->ng; q++) {
    pa_grp_t *g = &p->g[q];
    uint32_t end = g->first + g->c - 1;
    uint64_t sum = 0;
    if (g->c != cmin || end + add >= pool)
      continue;
    if (add > pool - p->used) {
      if (!p->packd_rules)
        return -1;
      continue;
    }
    if (p->packd_rules && !members_fit(p, q, next, &sum))
      continue;
    for (uint32_t o = 0; o < p->ng; o++)
      if (p->g[o].first > end)
        p->g[o].first += add;
    set_size(g, next);
    g->sum = sum; /* Under the original's rules lay_out counts it afresh. */
    p->used += add;
    return 1;
  }
  return 0;
}

/* The slot as one group of the whole pool: rem's sequences in order while
 * they fit (the original's cap on length / pool, or packd's). Returns
 * false, the slot unchanged, when none fits. */
static bool whole_pool(pa_t *p, const uint32_t *rem, uint32_t nrem, uint32_t *left,
                       uint32_t *nleft) {
  uint32_t pool = p->cfg->pool;
  pa_grp_t one = {.top = UINT32_MAX};
  set_size(&one, pool);
  uint32_t nl = 0, x = 0;
  /* The selection is greedy: it takes none exactly when no sequence fits
   * alone, which is looked at first so that left stays as it is then. (A
   * sequence within the cap at the pool fits the pool: it is allowed.) */
  while (x < nrem && !takes(p, &one, (double)p->it->len[rem[x]] / pool,
                            dcp_aligned(p->cfg, pool, p->it->len[rem[x]])))
    x++;
  if (x == nrem)
    return false;
  for (x = 0; x < nrem; x++) {
    uint32_t i = rem[x], len = p->it->len[i];
    if (!takes(p, &one, (double)len / pool, dcp_aligned(p->cfg, pool, len))) {
      left[nl++] = i;
      continue;
    }
    one.packed += (double)len / pool;
    one.sum += dcp_aligned(p->cfg, pool, len);
    one.count++;
    p->below[i] = one.top;
    one.top = i;
  }
  p->g[0] = one;
  p->ng = 1;
  p->used = pool;
  *nleft = nl;
  return true;
}

/* One slot from rem[0 .. nrem) (longest first) into p->g, the sequences
 * left into left. Returns 0, 1 when the original would stop, or
 * PK_ECANCELED. */
static int build_slot(pa_t *p, const uint32_t *rem, uint32_t nrem, uint32_t *left,
                      uint32_t *nleft) {
  const dcp_cfg_t *cfg = p->cfg;
  uint32_t pool = cfg->pool, first = rem[0], len0 = p->it->len[first];
  p->ng = 0;
  p->used = 0;
  p->peak = 0;
  *nleft = 0;
  uint64_t c0 = p->c0[first];
  if (p->packd_rules) {
    while (c0 <= pool && !fits_alone(p, first, (uint32_t)c0))
      c0 *= 2;
    if (c0 > pool)
      c0 = cfg->size[p->it->kmin[first]];
  } else if (c0 > pool) {
    return 1;
  }
  add(p, new_group(p, (uint32_t)c0), first);
  double wcap = (double)len0 * (double)cfg->cap * (1.0 + DCP_PA_WORK_OVER);
  uint32_t shortest = p->it->len[rem[nrem - 1]];
  for (uint32_t x = 1; x < nrem; x++) {
    /* Once every GPU is in a group and no group has room for the shortest
     * sequence left (with a margin for the original's rounding), the rest
     * wait for the next slot, as they would one by one. */
    if (p->used == pool && (double)shortest > p->room * (1 + DCP_PA_ROOM_TOL) + 1) {
      memcpy(left + *nleft, rem + x, (size_t)(nrem - x) * sizeof *rem);
      *nleft += nrem - x;
      break;
    }
    /* Each sequence scans the slot's groups at every size: polled as the
     * planner's other long loops. */
    if (++p->tick % DCP_POLL_PACKAWARE == 0 && pk_limits_stopped(p->limits))
      return PK_ECANCELED;
    if (!place(p, rem[x], wcap))
      left[(*nleft)++] = rem[x];
  }
  while (p->used < pool) {
    int grew = grow_one(p);
    if (grew < 0)
      return 1;
    if (grew > 0)
      continue;
    if (!whole_pool(p, rem, nrem, left, nleft) && !p->packd_rules)
      return 1;
    break;
  }
  return 0;
}

/* Lays the slot's groups out largest first (ties oldest first) and says
 * whether every group keeps packd's rules there. */
static bool lay_out(pa_t *p) {
  const dcp_cfg_t *cfg = p->cfg;
  for (uint32_t q = 0; q < p->ng; q++) {
    uint32_t b = q;
    while (b > 0 && p->g[p->order[b - 1]].c < p->g[q].c) {
      p->order[b] = p->order[b - 1];
      b--;
    }
    p->order[b] = q;
  }
  bool ok = true;
  for (uint32_t r = 0, pos = 0; r < p->ng; r++) {
    pa_grp_t *g = &p->g[p->order[r]];
    uint32_t k = dcp_size_index(cfg, g->c);
    g->first = pos;
    pos += g->c;
    uint64_t sum = 0;
    for (uint32_t i = g->top; i != UINT32_MAX; i = p->below[i])
      sum += dcp_aligned(cfg, g->c, p->it->len[i]);
    ok = ok && k != UINT32_MAX && dcp_start_ok(cfg, k, g->first) && g->count <= cfg->max_seqs &&
         sum <= (uint64_t)g->c * cfg->cap;
  }
  return ok;
}

static int emit(const pa_t *p, uint32_t slot, dcp_assign_t *out) {
  for (uint32_t q = 0; q < p->ng; q++) {
    const pa_grp_t *g = &p->g[q];
    uint32_t id = dcp_assign_add(out, dcp_size_index(p->cfg, g->c), slot, g->first);
    if (id == UINT32_MAX)
      return PK_ENOMEM;
    for (uint32_t i = g->top; i != UINT32_MAX; i = p->below[i])
      out->seq_group[i] = id;
  }
  return 0;
}

/* Longest first; equal lengths keep their order (a stable sort). */
static bool longer(const void *arg, uint32_t x, uint32_t y) {
  const uint32_t *len = arg;
  return len[x] > len[y];
}

int dcp_megatron_packing(const dcp_cfg_t *cfg, const dcp_items_t *it, const pk_limits_t *limits,
                         dcp_assign_t *out, char *err, size_t errlen) {
  uint32_t n = it->n, pool = cfg->pool;
  pa_t p = {.cfg = cfg, .it = it, .limits = limits};
  p.g = pk_malloc_array(pool, sizeof *p.g);
  p.order = pk_malloc_array(pool, sizeof *p.order);
  p.below = pk_malloc_array(n, sizeof *p.below);
  p.c0 = pk_malloc_array(n, sizeof *p.c0);
  p.fit = pk_malloc_array(n, sizeof *p.fit);
  uint32_t *rem = pk_malloc_array(n, sizeof *rem);
  uint32_t *left = pk_malloc_array(n, sizeof *left);
  int rc = 0;
  if (p.g == NULL || p.order == NULL || p.below == NULL || p.c0 == NULL || p.fit == NULL ||
      rem == NULL || left == NULL) {
    rc = pk_fail(err, errlen, PK_ENOMEM, "lengths: out of memory for %u sequences", n);
    goto done;
  }
  for (uint32_t i = 0; i < n; i++) {
    rem[i] = i;
    p.c0[i] = (uint32_t)PK_MIN(needed(&p, it->len[i]), (uint64_t)pool + 1);
    p.fit[i] = 0;
    for (uint32_t c = p.c0[i], j = 0; c <= pool; c *= 2, j++)
      p.fit[i] |= (uint32_t)fits_alone(&p, i, c) << j;
  }
  pk_merge_sort_u32(rem, left, n, longer, (void *)it->len);
  uint32_t nrem = n, slot = 0;
  while (nrem > 0) {
    if (pk_limits_stopped(limits)) {
      rc = PK_ECANCELED;
      break;
    }
    uint32_t nleft = 0;
    p.packd_rules = false;
    rc = build_slot(&p, rem, nrem, left, &nleft);
    if (rc == 1 || (rc == 0 && !lay_out(&p))) {
      /* The original's slot breaks packd's rules, or the original stops:
       * the slot again under packd's rules (which always place the
       * slot's longest sequence and keep every rule). */
      p.packd_rules = true;
      rc = build_slot(&p, rem, nrem, left, &nleft);
      if (rc == 0 && !lay_out(&p))
        rc = PK_EINTERNAL;
    }
    if (rc == 0)
      rc = emit(&p, slot++, out);
    if (rc != 0)
      break;
    memcpy(rem, left, (size_t)nleft * sizeof *rem);
    nrem = nleft;
  }
  out->slots = slot;
  if (rc == PK_ECANCELED)
    pk_fail(err, errlen, rc, "planning stopped by the caller");
  else if (rc == PK_ENOMEM)
    pk_fail(err, errlen, rc, "lengths: out of memory for %u sequences", n);
  else if (rc != 0)
    pk_fail(err, errlen, rc, "dynamic CP: internal error %d (megatron_packing)", rc);
done:
  free(p.g);
  free(p.order);
  free(p.below);
  free(p.c0);
  free(p.fit);
  free(rem);
  free(left);
  return rc;
}
