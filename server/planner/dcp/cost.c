/* The proven lower bounds of a dynamic context-parallel plan.
 *
 * Slots: a slot's groups hold at most pool x cap aligned tokens in all and
 * at most max_seqs sequences each, with at most pool / (smallest size)
 * groups; so no plan has fewer than the sequences' least aligned tokens
 * over pool x cap slots, nor fewer than n / (max_seqs x groups per slot).
 *
 * Step: a slot costs its costliest GPU, which is at least per_micro_batch
 * plus the mean over the pool of its groups' other costs (cp_group terms
 * and sequences); summed over slots, at least slots x per_micro_batch plus
 * every sequence's least pool work (c x its per-GPU cost, least over the
 * sizes it may use, plus its share of the cp_group terms, group_share)
 * over the pool. And the slot of the costliest sequence costs at least that
 * sequence alone in its cheapest group; the other slots at least
 * per_micro_batch each. The threshold bound (below) charges the extra work
 * of spreading the costliest sequences; the tall-slot bound (below) charges
 * the work that the slots holding them cannot take because of the per-GPU
 * cap. All grow with the slot count, so the bound at the least slot count
 * holds for every plan. */
#include <math.h>

#include <stdlib.h>

#include "dcp.h"
#include "knobs.h"

static void least(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t i, uint64_t *tokens,
                  double *work);
static double dcp_tall_bound(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t slots,
                             double work, const uint64_t *t, const double *w);

/* The `top` longest sequences, longest first, into idx (a partial
 * selection, O(n x top)); returns how many (min(n, top)). */
static uint32_t longest(const dcp_items_t *it, uint32_t top, uint32_t *idx) {
  uint32_t got = 0;
  for (uint32_t i = 0; i < it->n; i++) {
    uint32_t at = got < top ? got++ : top;
    if (at == top && it->len[i] <= it->len[idx[top - 1]])
      continue;
    if (at == top)
      at = top - 1;
    while (at > 0 && it->len[idx[at - 1]] < it->len[i]) {
      idx[at] = idx[at - 1];
      at--;
    }
    idx[at] = i;
  }
  return got;
}

/* The threshold bound. Every sequence i runs at some size c where it costs
 * h_c(i) per GPU alone (group terms included) and w_c(i) of pool work; the
 * step is at least the largest h (the slot holding it costs that much) and
 * at least the pool work over the pool. For any plan let T be its largest
 * h: then every sequence used a size with h_c(i) <= T, so the pool work is
 * at least the sum of the least w_c(i) over those sizes, and the step is at
 * least max(T, that work / pool) (plus the slots' per_micro_batch). The
 * least of this over every T a plan can have is a bound; T ranges over the
 * h values of the longest sequences, the others counting at their cheapest
 * work whatever T is (which only lowers the bound). Spreading a long
 * sequence lowers h but adds CP work; this bound charges that trade-off,
 * which the work and single-sequence bounds each miss. */
static double dcp_threshold_bound(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t slots,
                                  double work) {
  uint32_t top = PK_MIN(it->n, DCP_BOUND_TOP);
  uint32_t ns =
      cfg->sizes == PK_DCP_SIZES_ANY ? PK_MIN(cfg->nsize, DCP_BOUND_ANY_SIZES) : cfg->nsize;
  uint32_t *idx = malloc((size_t)top * sizeof *idx);
  double *cheap = malloc((size_t)top * sizeof *cheap);
  double *cand = malloc((size_t)top * ns * sizeof *cand);
  double best = 0;
  if (idx == NULL || cheap == NULL || cand == NULL)
    goto done;
  top = longest(it, top, idx);
  uint32_t nc = 0;
  for (uint32_t x = 0; x < top; x++) {
    uint64_t t;
    least(cfg, it, idx[x], &t, &cheap[x]);
    for (uint32_t k = it->kmin[idx[x]]; k < cfg->nsize && k < it->kmin[idx[x]] + ns; k++)
      cand[nc++] = dcp_group_base(cfg, cfg->size[k]) + dcp_item_cost(cfg, it, idx[x], k);
  }
  best = INFINITY;
  for (uint32_t q = 0; q < nc; q++) {
    double t_max = cand[q], extra = 0;
    bool feasible = true;
    for (uint32_t x = 0; x < top && feasible; x++) {
      uint32_t i = idx[x];
      double least_w = INFINITY;
      /* With any-size groups only the first sizes from kmin are looked
       * at: the others count as free of extra work, a weaker bound. */
      uint32_t end = PK_MIN(cfg->nsize, it->kmin[i] + ns);
      for (uint32_t k = it->kmin[i]; k < cfg->nsize; k++) {
        double h = dcp_group_base(cfg, cfg->size[k]) + dcp_item_cost(cfg, it, i, k);
        if (h > t_max)
          continue;
        if (k >= end) {
          least_w = cheap[x];
          break;
        }
        least_w = fmin(least_w, cfg->size[k] * dcp_item_cost(cfg, it, i, k));
      }
      if (least_w == INFINITY)
        feasible = false;
      else
        extra += fmax(least_w - cheap[x], 0);
    }
    if (!feasible)
      continue;
    double b = fmax(t_max + (slots - 1) * cfg->base.micro,
                    slots * cfg->base.micro + (work + extra) / cfg->pool);
    best = fmin(best, b);
  }
  if (best == INFINITY)
    best = 0;
done:
  free(idx);
  free(cheap);
  free(cand);
  return best;
}

/* The least per-GPU cost of sequence i alone in a group of any size it may
 * use, group terms included. With any-size groups only the first sizes are
 * scanned; past them a size c costs at least the terms that do not fall
 * with c (per_sequence, per_micro_batch, cp_group (c - 1) and
 * cp_token a (c - 1) / c, all nondecreasing in c), which the result never
 * exceeds. */
static double least_height(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t i) {
  uint32_t k0 = it->kmin[i], end = cfg->nsize;
  if (cfg->sizes == PK_DCP_SIZES_ANY)
    end = PK_MIN(cfg->nsize, k0 + DCP_BOUND_ANY_SIZES);
  double h = INFINITY;
  for (uint32_t k = k0; k < end; k++)
    h = fmin(h, dcp_group_base(cfg, cfg->size[k]) + dcp_item_cost(cfg, it, i, k));
  if (end < cfg->nsize) {
    double c = cfg->size[end];
    h = fmin(h, dcp_group_base(cfg, cfg->size[end]) + cfg->base.seq +
                    cfg->cp_token * (double)it->len[i] * (c - 1) / c);
  }
  return h;
}

/* Denser first (arg: least work per least aligned token), ties by index. */
static bool denser(const void *arg, uint32_t x, uint32_t y) {
  const double *d = arg;
  if (d[x] != d[y])
    return d[x] > d[y];
  return x < y;
}

/* Reorders by[0 .. n) so that a prefix holds the densest sequences (d:
 * density, t: least tokens) up to at least `want` tokens, all of them when
 * the batch has fewer, and returns its length: a weighted quickselect,
 * O(n) expected, so that only that prefix needs sorting. A sequence outside
 * the prefix is no denser than every one of the first `want` tokens'. */
static uint32_t densest_prefix(uint32_t *by, uint32_t n, const double *d, const uint64_t *t,
                               uint64_t want) {
  uint32_t lo = 0, hi = n;
  while (hi - lo > 16) {
    double p = d[by[lo + (hi - lo) / 2]];
    /* Three ways: [lo, gt) denser than p, [gt, eq) as dense, [eq, hi) less. */
    uint32_t gt = lo, eq = lo, at = lo, end = hi;
    while (at < end) {
      uint32_t v = by[at];
      if (d[v] > p) {
        by[at] = by[eq];
        by[eq] = by[gt];
        by[gt] = v;
        gt++;
        eq++;
        at++;
      } else if (d[v] == p) {
        by[at] = by[eq];
        by[eq] = v;
        eq++;
        at++;
      } else {
        end--;
        by[at] = by[end];
        by[end] = v;
      }
    }
    uint64_t sum_gt = 0, sum_eq = 0;
    for (uint32_t x = lo; x < gt; x++)
      sum_gt += t[by[x]];
    for (uint32_t x = gt; x < eq; x++)
      sum_eq += t[by[x]];
    if (sum_gt >= want) {
      hi = gt;
    } else if (sum_gt + sum_eq >= want) {
      return eq;
    } else {
      want -= sum_gt + sum_eq;
      lo = eq;
    }
  }
  return hi;
}

/* The tall-slot bound. Let A be the q + 1 longest sequences and tau the
 * least single-sequence height (least_height) among them, h0 the largest.
 * Every slot that holds a sequence of A costs at least tau (at least h0 for
 * the one holding the longest); say r slots hold A (1 <= r <= q + 1, and
 * r x pool x cap is at least A's least tokens). Their GPUs hold at most
 * pool x cap aligned tokens each slot (the cap, summed over the pool), so
 * the least work of the sequences they hold is at most D(r x pool x cap):
 * the most least work of any set of sequences of that many least tokens,
 * which the densest sequences first (work per token), the last one cut,
 * bound from above (a fractional knapsack). Every other slot costs at least
 * per_micro_batch plus the least work it holds over the pool (its
 * costliest GPU is at least the mean), so those slots cost at least
 * (work - D) / pool in all. A plan's step is then at least
 *   h0 + (r - 1) tau_r + (slots - r)+ per_micro_batch + (work - D)+ / pool,
 * with tau_r x (r - 1) the sum of the r - 1 least heights of A (the slots
 * other than the longest's hold one of A each at least); the least of this
 * over the r a plan may have is a bound, and so the largest of those over
 * q. It bites when the longest sequences need tall slots (a long sequence
 * spread over a few GPUs) while the cap keeps the other GPUs of those slots
 * from taking their share of the work: the work then needs other slots. */
static double dcp_tall_bound(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t slots,
                             double work, const uint64_t *t, const double *w) {
  uint32_t n = it->n, top = PK_MIN(n, DCP_BOUND_TALL_TOP);
  uint32_t *idx = pk_malloc_array(top, sizeof *idx);
  double *h = pk_malloc_array(top, sizeof *h);
  double *dcap = pk_malloc_array(top, sizeof *dcap);
  uint32_t *by = pk_malloc_array(n, sizeof *by);
  uint32_t *tmp = pk_malloc_array(n, sizeof *tmp);
  double *d = pk_malloc_array(n, sizeof *d);
  double best = 0;
  if (idx == NULL || h == NULL || dcap == NULL || by == NULL || tmp == NULL || d == NULL)
    goto done;
  top = longest(it, top, idx);
  for (uint32_t x = 0; x < top; x++)
    h[x] = least_height(cfg, it, idx[x]);
  for (uint32_t i = 0; i < n; i++) {
    d[i] = w[i] / (double)t[i];
    by[i] = i;
  }
  /* Only the densest top x pool x cap tokens are ever taken: select them,
   * then sort those alone. */
  uint64_t per_slot = (uint64_t)cfg->pool * cfg->cap, taken = 0;
  uint32_t cnt = densest_prefix(by, n, d, t, per_slot * top);
  pk_merge_sort_u32(by, tmp, cnt, denser, d);
  /* D(r x pool x cap) for r = 1 .. top, one pass over the densest. */
  double got = 0;
  uint32_t at = 0;
  for (uint32_t r = 1; r <= top; r++) {
    uint64_t want = per_slot * r;
    while (at < cnt && taken + t[by[at]] <= want) {
      taken += t[by[at]];
      got += w[by[at]];
      at++;
    }
    double part = at < cnt ? w[by[at]] * (double)(want - taken) / (double)t[by[at]] : 0;
    dcap[r - 1] = got + part;
  }
  double micro = cfg->base.micro;
  uint64_t tokens = 0;
  for (uint32_t q = 0; q < top; q++) {
    tokens += t[idx[q]];
    uint64_t rmin = PK_MAX((tokens + per_slot - 1) / per_slot, 1);
    /* The r - 1 least heights of A, summed from the shortest up. */
    double least_r = INFINITY, lows = 0;
    for (uint32_t r = 1; r <= q + 1; r++) {
      if (r >= 2)
        lows += h[q + 2 - r];
      if (r < rmin)
        continue;
      double rest = r < slots ? (slots - r) * micro : 0;
      double f = h[0] + lows + rest + fmax(work - dcap[r - 1], 0) / cfg->pool;
      least_r = fmin(least_r, f);
    }
    if (least_r != INFINITY)
      best = fmax(best, least_r);
  }
done:
  free(idx);
  free(h);
  free(dcap);
  free(by);
  free(tmp);
  free(d);
  return best;
}

/* Sequence i's share of its group's cp_group terms, `tokens` being its
 * least aligned length: a group of c GPUs holds at most c x cap aligned
 * tokens and costs the pool c x cp_group (c - 1), so at least
 * cp_group (c - 1) / cap per token, and c is at least the sequence's
 * smallest size. Charging each sequence cp_group (c_min - 1) / cap per
 * least token therefore never exceeds the cp_group work a plan pays. */
static double group_share(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t i,
                          uint64_t tokens) {
  return cfg->cp_group * (double)(cfg->size[it->kmin[i]] - 1) * (double)tokens / (double)cfg->cap;
}

/* The least aligned length and pool work of sequence i over the sizes it
 * may use (its sequence terms; group_share is added apart). With any-size
 * groups the scan over every size would be n x pool, so the bound uses the
 * real length and the smallest usable size there, which every term only
 * raises. */
static void least(const dcp_cfg_t *cfg, const dcp_items_t *it, uint32_t i, uint64_t *tokens,
                  double *work) {
  uint32_t k0 = it->kmin[i];
  if (cfg->sizes == PK_DCP_SIZES_POW2 && (cfg->pool & (cfg->pool - 1)) == 0) {
    /* Every size a power of two: each size's alignment divides the next
     * one's, so the aligned length, and with it every term of the pool
     * work, only grows with the size. The least is at the smallest. */
    *tokens = dcp_item_aligned(cfg, it, i, k0);
    *work = cfg->size[k0] * dcp_seq_cost(cfg, cfg->size[k0], *tokens);
    return;
  }
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
  /* Every sequence's least tokens and work, kept for the tall-slot bound
   * (which is skipped when out of memory: a bound only weakens). */
  uint64_t *ts = pk_malloc_array(it->n, sizeof *ts);
  double *ws = pk_malloc_array(it->n, sizeof *ws);
  for (uint32_t i = 0; i < it->n; i++) {
    uint64_t t;
    double w;
    least(cfg, it, i, &t, &w);
    w += group_share(cfg, it, i, t); /* Whatever the size: see group_share. */
    work += w;
    if (ts != NULL && ws != NULL) {
      ts[i] = t;
      ws[i] = w;
    }
    if (it->len[i] > it->len[longest])
      longest = i;
  }
  double micro = cfg->base.micro;
  double by_work = slots * micro + work / cfg->pool;
  /* A sequence's per-GPU cost at every size grows with its length, and a
   * longer sequence may use no more sizes than a shorter one, so the
   * longest sequence is the costliest alone. */
  double alone = INFINITY;
  for (uint32_t k = it->kmin[longest]; k < cfg->nsize; k++)
    alone = fmin(alone, dcp_group_base(cfg, cfg->size[k]) + dcp_item_cost(cfg, it, longest, k));
  double by_one = alone + (slots - 1) * micro;
  double b = fmax(fmax(by_work, by_one), dcp_threshold_bound(cfg, it, slots, work));
  if (ts != NULL && ws != NULL)
    b = fmax(b, dcp_tall_bound(cfg, it, slots, work, ts, ws));
  free(ts);
  free(ws);
  return b;
}
