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

typedef struct pa_grp {
  uint32_t c;     /* GPUs. */
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
  uint32_t *below; /* n: the member added before it to the same group. */
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

/* Under packd's rules: whether sequence i fits a group of c GPUs alone (c
 * allowed, the aligned length within c x cap). */
static bool fits_alone(const pa_t *p, uint32_t i, uint32_t c) {
  uint32_t k = dcp_size_index(p->cfg, c);
  return k != UINT32_MAX && dcp_item_fits(p->cfg, p->it, i, k, 0, 0);
}

/* Whether group q (of size c) takes sequence i: the original's cap on
 * length / c, or packd's. */
static bool takes(const pa_t *p, const pa_grp_t *q, uint32_t i) {
  uint32_t len = p->it->len[i];
  if (!p->packd_rules)
    return !(q->packed + (double)len / q->c > (double)p->cfg->cap);
  return q->count < p->cfg->max_seqs &&
         q->sum + dcp_aligned(p->cfg, q->c, len) <= (uint64_t)q->c * p->cfg->cap;
}

static uint32_t new_group(pa_t *p, uint32_t c) {
  pa_grp_t *q = &p->g[p->ng];
  *q = (pa_grp_t){.c = c, .first = p->used, .top = UINT32_MAX};
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
}

/* Places sequence i where the slot's peak grows least (see the top);
 * returns false when no place keeps it within wcap. */
static bool place(pa_t *p, uint32_t i, double wcap) {
  uint32_t len = p->it->len[i], pool = p->cfg->pool;
  uint32_t best_q = UINT32_MAX, best_c = 0;
  double best = INFINITY;
  for (uint64_t c64 = needed(p, len); c64 <= pool; c64 *= 2) {
    uint32_t c = (uint32_t)c64;
    if (p->packd_rules && !fits_alone(p, i, c))
      continue;
    double w = workload(len, c);
    for (uint32_t q = 0; q < p->ng; q++) {
      if (p->g[q].c != c || !takes(p, &p->g[q], i))
        continue;
      /* A group's GPUs carry the same load: the peak with i there is the
       * larger of the slot's and theirs plus i. */
      double proj = fmax(p->peak, p->g[q].load + w);
      if (proj <= wcap && proj < best) {
        best = proj;
        best_q = q;
        best_c = c;
      }
    }
    if (pool - p->used >= c) {
      double proj = fmax(p->peak, w);
      if (proj <= wcap && proj < best) {
        best = proj;
        best_q = UINT32_MAX;
        best_c = c;
      }
    }
  }
  if (best_c == 0)
    return false;
  add(p, best_q != UINT32_MAX ? best_q : new_group(p, best_c), i);
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
    g->c = next;
    g->sum = sum;
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
  pa_grp_t one = {.c = pool, .top = UINT32_MAX};
  uint32_t nl = 0, x = 0;
  /* The selection is greedy: it takes none exactly when no sequence fits
   * alone, which is looked at first so that left stays as it is then. */
  while (x < nrem && !(p->packd_rules ? fits_alone(p, rem[x], pool) && takes(p, &one, rem[x])
                                      : (double)p->it->len[rem[x]] / pool <= (double)p->cfg->cap))
    x++;
  if (x == nrem)
    return false;
  for (x = 0; x < nrem; x++) {
    uint32_t i = rem[x], len = p->it->len[i];
    bool fit = p->packd_rules ? fits_alone(p, i, pool) && takes(p, &one, i)
                              : one.packed + (double)len / pool <= (double)p->cfg->cap;
    if (!fit) {
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
  uint64_t c0 = needed(p, len0);
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
  for (uint32_t x = 1; x < nrem; x++) {
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
  uint32_t *rem = pk_malloc_array(n, sizeof *rem);
  uint32_t *left = pk_malloc_array(n, sizeof *left);
  int rc = 0;
  if (p.g == NULL || p.order == NULL || p.below == NULL || rem == NULL || left == NULL) {
    rc = pk_fail(err, errlen, PK_ENOMEM, "lengths: out of memory for %u sequences", n);
    goto done;
  }
  for (uint32_t i = 0; i < n; i++)
    rem[i] = i;
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
  free(rem);
  free(left);
  return rc;
}
