/* Megatron-Core's balanced dynamic-CP scheduler, reproduced so that its
 * plans can be set beside AUTO's on the same batches, with one change: the
 * per-GPU cap is hard (the original checks it per sequence only, when it
 * sizes a sequence's group, and packs groups past it).
 *
 * What it does, slot by slot, on the sequences left (longest first at the
 * start, leftovers in the order they were left after that):
 * - size: a sequence needs the smallest group it fits alone (the original:
 *   the power of two at or above length / cap; here the same with the
 *   alignment counted, so that the cap holds);
 * - buckets: the sequences are cut, in order, into as many buckets as there
 *   are distinct needed sizes, each closed once it would pass 1.1 x its
 *   share of the work (length^2 / size), or when the buckets left need the
 *   sequences left;
 * - placement: repeatedly the first bucket whose head can go somewhere
 *   (an existing group of its size, here one with room under the cap, or
 *   enough free GPUs) gives its head to the existing group of that size
 *   whose GPUs are least loaded, or to a new group of the lowest free GPUs
 *   when they are less loaded than that; once a sequence needs less than
 *   the slot's first did, the slot closes as soon as every GPU's load is
 *   within 5 % of the highest;
 * - trimming: while the loads differ by more than 5 % and no GPU is idle,
 *   the last sequence of the most loaded GPU's group goes back to the
 *   leftovers if that narrows the spread;
 * - filling: while GPUs are idle, the oldest group of the smallest size
 *   doubles (up to the pool).
 * Its own work estimate (length^2 / size) drives every decision; the plan
 * is then priced with packd's cost like any other. Groups are laid out
 * largest first in each slot, as aligned blocks. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dcp.h"
#include "knobs.h"

typedef struct meg {
  const dcp_cfg_t *cfg;
  const dcp_items_t *it;
  uint32_t pool;
  /* The current slot. */
  double *exec;      /* pool: estimated load per GPU. */
  uint32_t *gpu_gid; /* pool: group of each GPU, UINT32_MAX when free. */
  uint32_t *gsize;   /* Per group of the slot: size (GPUs). */
  uint32_t *gk;      /* Per group: size index. */
  uint32_t *gfirst;  /* Per group: scratch for the layout. */
  uint64_t *gsum;    /* Per group: aligned tokens at its size. */
  uint32_t *gcount;  /* Per group: sequences. */
  uint32_t *gtop;    /* Per group: last sequence added (a stack through below). */
  double *gload;     /* Per group: the load of each of its GPUs. */
  uint32_t *below;   /* n: the sequence added before it to the same group. */
  uint32_t *seq_gid; /* n: group within the slot. */
  uint32_t ng;
  uint32_t nfree; /* GPUs of the slot in no group. */
  const pk_limits_t *limits;
  uint32_t tick;
} meg_t;

static uint32_t needed(const meg_t *g, uint32_t i) {
  return g->cfg->size[g->it->kmin[i]];
}

static double estimate(const meg_t *g, uint32_t i) {
  double l = g->it->len[i];
  return l * l / needed(g, i);
}

/* The load of group q's GPUs: they start at 0 together (a new group takes
 * free GPUs) and take the same work, so one figure per group is the
 * highest of them. */
static double group_load(const meg_t *g, uint32_t q) {
  return g->gload[q];
}

static void spread(const meg_t *g, double *mx, double *mn, uint32_t *argmax) {
  *mx = -INFINITY;
  *mn = INFINITY;
  for (uint32_t r = 0; r < g->pool; r++) {
    if (g->exec[r] > *mx) {
      *mx = g->exec[r];
      *argmax = r;
    }
    *mn = fmin(*mn, g->exec[r]);
  }
}

static bool has_room(const meg_t *g, uint32_t q, uint32_t i) {
  return dcp_item_fits(g->cfg, g->it, i, g->gk[q], g->gsum[q], g->gcount[q]);
}

static void add_to(meg_t *g, uint32_t q, uint32_t i) {
  double w = estimate(g, i);
  for (uint32_t r = 0; r < g->pool; r++)
    if (g->gpu_gid[r] == q)
      g->exec[r] += w;
  g->gload[q] += w;
  g->gsum[q] += dcp_item_aligned(g->cfg, g->it, i, g->gk[q]);
  g->gcount[q]++;
  g->below[i] = g->gtop[q];
  g->gtop[q] = i;
  g->seq_gid[i] = q;
}

/* Cuts rem[0 .. nrem) into buckets: bstart[b] .. bstart[b + 1] (at most
 * nrem of them: the work rule may close more buckets than sizes). */
static uint32_t buckets(const meg_t *g, const uint32_t *rem, uint32_t nrem, uint32_t *bstart,
                        uint8_t *seen) {
  uint32_t kinds = 0;
  memset(seen, 0, g->cfg->nsize);
  for (uint32_t x = 0; x < nrem; x++)
    if (!seen[g->it->kmin[rem[x]]]) {
      seen[g->it->kmin[rem[x]]] = 1;
      kinds++;
    }
  double total = 0;
  for (uint32_t x = 0; x < nrem; x++)
    total += estimate(g, rem[x]);
  double target = total / kinds, cur_work = 0;
  uint32_t nb = 0;
  int64_t remaining_k = kinds;
  bstart[0] = 0;
  for (uint32_t x = 0; x < nrem; x++) {
    double w = estimate(g, rem[x]);
    bool cur = x > bstart[nb];
    /* Signed: the original's count of buckets still owed goes negative
     * once the work rule has closed more buckets than sizes. */
    if (cur && (cur_work + w > target * DCP_MEG_BUCKET_OVER ||
                (int64_t)nrem - x <= (int64_t)remaining_k - nb)) {
      bstart[++nb] = x;
      cur_work = 0;
      remaining_k--;
    }
    cur_work += w;
  }
  bstart[++nb] = nrem;
  return nb;
}

/* The existing group of size c with the least loaded GPUs that has room
 * for i, or UINT32_MAX. */
static uint32_t best_existing(const meg_t *g, uint32_t c, uint32_t i, double *load) {
  uint32_t best = UINT32_MAX;
  *load = INFINITY;
  for (uint32_t q = 0; q < g->ng; q++) {
    if (g->gsize[q] != c || !has_room(g, q, i))
      continue;
    double l = group_load(g, q);
    if (l < *load) {
      *load = l;
      best = q;
    }
  }
  return best;
}

static uint32_t free_count(const meg_t *g) {
  return g->nfree;
}

/* One slot from rem (updated to the leftovers). Writes the slot's groups
 * into out. */
static int one_slot(meg_t *g, uint32_t *rem, uint32_t *nrem, uint32_t *bstart, uint32_t *bfront,
                    uint8_t *seen, uint32_t *left, uint32_t slot, dcp_assign_t *out) {
  const dcp_cfg_t *cfg = g->cfg;
  uint32_t pool = g->pool;
  for (uint32_t r = 0; r < pool; r++) {
    g->exec[r] = 0;
    g->gpu_gid[r] = UINT32_MAX;
  }
  g->ng = 0;
  g->nfree = pool;
  uint32_t nb = buckets(g, rem, *nrem, bstart, seen);
  for (uint32_t b = 0; b < nb; b++)
    bfront[b] = bstart[b];
  uint32_t lead = 0; /* Leading empty buckets are dropped. */
  uint32_t prev_needed = 0;
  bool check = false;
  for (;;) {
    /* A slot of a large pool places many sequences, each scanning the
     * pool's groups: the caller's stop is polled as in the planner's other
     * long loops. */
    if (++g->tick % DCP_POLL_MEGATRON == 0 && pk_limits_stopped(g->limits))
      return PK_ECANCELED;
    uint32_t pick = UINT32_MAX, pb = 0;
    for (uint32_t b = lead; b < nb && pick == UINT32_MAX; b++) {
      if (bfront[b] == bstart[b + 1])
        continue;
      uint32_t i = rem[bfront[b]];
      double l;
      if (best_existing(g, needed(g, i), i, &l) != UINT32_MAX || free_count(g) >= needed(g, i)) {
        pick = i;
        pb = b;
      }
    }
    if (pick == UINT32_MAX)
      break;
    uint32_t c = needed(g, pick);
    if (prev_needed == 0)
      prev_needed = c;
    double best_load;
    uint32_t q = best_existing(g, c, pick, &best_load);
    if (free_count(g) >= c) {
      /* The lowest free GPUs: every free GPU of a slot has load 0. */
      double new_load = 0;
      if (new_load < best_load) {
        q = g->ng++;
        g->gsize[q] = c;
        g->gk[q] = g->it->kmin[pick];
        g->gsum[q] = 0;
        g->gcount[q] = 0;
        g->gtop[q] = UINT32_MAX;
        g->gload[q] = 0;
        for (uint32_t r = 0, taken = 0; r < pool && taken < c; r++)
          if (g->gpu_gid[r] == UINT32_MAX) {
            g->gpu_gid[r] = q;
            taken++;
          }
        g->nfree -= c;
      }
    }
    add_to(g, q, pick);
    bfront[pb]++;
    while (lead < nb && bfront[lead] == bstart[lead + 1])
      lead++;
    if (c < prev_needed)
      check = true;
    double mx, mn;
    uint32_t am = 0;
    spread(g, &mx, &mn, &am);
    if (check && lead < nb && mx - mn <= DCP_MEG_SLACK * mx)
      break;
  }
  uint32_t nleft = 0;
  for (uint32_t b = lead; b < nb; b++)
    for (uint32_t x = bfront[b]; x < bstart[b + 1]; x++)
      left[nleft++] = rem[x];
  /* Trimming. */
  for (;;) {
    double mx, mn;
    uint32_t am = 0;
    spread(g, &mx, &mn, &am);
    if (mx - mn <= DCP_MEG_SLACK * mx || mn == 0)
      break;
    uint32_t q = g->gpu_gid[am];
    if (g->gcount[q] <= 1)
      break;
    uint32_t i = g->gtop[q];
    double w = estimate(g, i), pmx = -INFINITY, pmn = INFINITY;
    for (uint32_t r = 0; r < pool; r++) {
      double e = g->exec[r] - (g->gpu_gid[r] == q ? w : 0);
      pmx = fmax(pmx, e);
      pmn = fmin(pmn, e);
    }
    if (!(pmx - pmn < mx - mn))
      break;
    for (uint32_t r = 0; r < pool; r++)
      if (g->gpu_gid[r] == q)
        g->exec[r] -= w;
    g->gload[q] -= w;
    g->gtop[q] = g->below[i];
    g->gsum[q] -= dcp_item_aligned(cfg, g->it, i, g->gk[q]);
    g->gcount[q]--;
    left[nleft++] = i;
  }
  /* Filling idle GPUs: the oldest group of the smallest size doubles. */
  while (free_count(g) > 0) {
    uint32_t q = UINT32_MAX;
    for (uint32_t p = 0; p < g->ng; p++)
      if (q == UINT32_MAX || g->gsize[p] < g->gsize[q])
        q = p;
    uint32_t c2 = PK_MIN(2 * g->gsize[q], pool);
    uint32_t k2 = dcp_size_index(cfg, c2);
    uint32_t add = c2 - g->gsize[q];
    uint64_t sum = 0;
    for (uint32_t i = g->gtop[q]; i != UINT32_MAX && k2 != UINT32_MAX; i = g->below[i])
      sum += dcp_item_aligned(cfg, g->it, i, k2);
    /* The original stops here with an assertion when the GPUs are too few;
     * the cap can stop it too (alignment grows with the size). */
    if (k2 == UINT32_MAX || add > free_count(g) || sum > (uint64_t)c2 * cfg->cap)
      break;
    g->gsum[q] = sum;
    for (uint32_t r = 0, taken = 0; r < pool && taken < add; r++)
      if (g->gpu_gid[r] == UINT32_MAX) {
        g->gpu_gid[r] = q;
        taken++;
      }
    g->nfree -= add;
    g->gsize[q] = c2;
    g->gk[q] = k2;
  }
  /* Sequences kept, and the slot's groups as aligned blocks, largest first
   * (a group's GPUs all carry the same load, so the layout changes no
   * cost). */
  uint32_t base = out->ngroups;
  for (uint32_t q = 0; q < g->ng; q++) {
    if (dcp_assign_add(out, g->gk[q], slot, 0) == UINT32_MAX)
      return PK_ENOMEM;
    for (uint32_t i = g->gtop[q]; i != UINT32_MAX; i = g->below[i])
      out->seq_group[i] = base + q;
  }
  /* Insertion sort of the slot's groups by size, largest first (ties by
   * age); then left to right. */
  uint32_t *order = g->gfirst; /* Free for reuse once the slot is done. */
  for (uint32_t q = 0; q < g->ng; q++) {
    uint32_t b = q;
    while (b > 0 && g->gsize[order[b - 1]] < g->gsize[q]) {
      order[b] = order[b - 1];
      b--;
    }
    order[b] = q;
  }
  for (uint32_t r = 0, pos = 0; r < g->ng; r++) {
    out->first[base + order[r]] = pos;
    pos += g->gsize[order[r]];
  }
  memcpy(rem, left, (size_t)nleft * sizeof *rem);
  *nrem = nleft;
  return 0;
}

int dcp_megatron(const dcp_cfg_t *cfg, const dcp_items_t *it, const pk_limits_t *limits,
                 dcp_assign_t *out, char *err, size_t errlen) {
  uint32_t n = it->n, pool = cfg->pool;
  meg_t g = {.cfg = cfg, .it = it, .pool = pool, .limits = limits};
  g.exec = pk_malloc_array(pool, sizeof *g.exec);
  g.gpu_gid = pk_malloc_array(pool, sizeof *g.gpu_gid);
  g.gsize = pk_malloc_array(pool, sizeof *g.gsize);
  g.gk = pk_malloc_array(pool, sizeof *g.gk);
  g.gfirst = pk_malloc_array(pool, sizeof *g.gfirst);
  g.gsum = pk_malloc_array(pool, sizeof *g.gsum);
  g.gcount = pk_malloc_array(pool, sizeof *g.gcount);
  g.gtop = pk_malloc_array(pool, sizeof *g.gtop);
  g.gload = pk_malloc_array(pool, sizeof *g.gload);
  g.below = pk_malloc_array(n, sizeof *g.below);
  g.seq_gid = pk_malloc_array(n, sizeof *g.seq_gid);
  uint32_t *rem = pk_malloc_array(n, sizeof *rem);
  uint32_t *tmp = pk_malloc_array(n, sizeof *tmp);
  uint32_t *left = pk_malloc_array(n, sizeof *left);
  uint32_t *bstart = pk_malloc_array((size_t)n + 2, sizeof *bstart);
  uint32_t *bfront = pk_malloc_array((size_t)n + 2, sizeof *bfront);
  uint8_t *seen = pk_malloc_array(cfg->nsize, 1);
  int rc = 0;
  if (g.exec == NULL || g.gpu_gid == NULL || g.gsize == NULL || g.gk == NULL || g.gfirst == NULL ||
      g.gsum == NULL || g.gcount == NULL || g.gtop == NULL || g.gload == NULL || g.below == NULL ||
      g.seq_gid == NULL || rem == NULL || tmp == NULL || left == NULL || bstart == NULL ||
      bfront == NULL || seen == NULL) {
    rc = pk_fail(err, errlen, PK_ENOMEM, "lengths: out of memory for %u sequences", n);
    goto done;
  }
  /* Longest first; equal lengths keep their order (a stable sort). */
  for (uint32_t i = 0; i < n; i++)
    rem[i] = i;
  for (uint32_t w = 1; w < n; w *= 2) {
    for (uint32_t lo = 0; lo < n; lo += 2 * w) {
      uint32_t mid = PK_MIN(lo + w, n), hi = PK_MIN(lo + 2 * w, n), a = lo, b = mid, o = lo;
      while (a < mid || b < hi)
        tmp[o++] =
            (b >= hi || (a < mid && it->len[rem[a]] >= it->len[rem[b]])) ? rem[a++] : rem[b++];
    }
    memcpy(rem, tmp, (size_t)n * sizeof *rem);
  }
  uint32_t nrem = n, slot = 0;
  while (nrem > 0) {
    if (pk_limits_stopped(limits)) {
      rc = pk_fail(err, errlen, PK_ECANCELED, "planning stopped by the caller");
      goto done;
    }
    rc = one_slot(&g, rem, &nrem, bstart, bfront, seen, left, slot++, out);
    if (rc != 0) {
      pk_fail(err, errlen, rc,
              rc == PK_ECANCELED ? "planning stopped by the caller"
                                 : "lengths: out of memory for %u sequences",
              n);
      goto done;
    }
  }
  out->slots = slot;
done:
  free(g.exec);
  free(g.gpu_gid);
  free(g.gsize);
  free(g.gk);
  free(g.gfirst);
  free(g.gsum);
  free(g.gcount);
  free(g.gtop);
  free(g.gload);
  free(g.below);
  free(g.seq_gid);
  free(rem);
  free(tmp);
  free(left);
  free(bstart);
  free(bfront);
  free(seen);
  return rc;
}
