/* batching.groups_on_rank, part 2 (group_dp.c has the essay and part 1):
 * micro-batches of a rank whose items are fixed, and lock-step columns.
 *
 * PACKED. LPT by cost under the cap: items costliest first, each to the
 * cheapest micro-batch it fits (the top of a heap by cost and its two
 * children are tried, then the first that fits, from a room tree), the
 * first `count` items opening one each; when LPT's even spread leaves an
 * item no room, or the tokens fill more than 99 % of count x cap, first fit
 * decreasing packs instead.
 * PADDED. A micro-batch costs rows x cost(widest row), so rows of like width
 * belong together: the rank's rows, widest first, are cut into `count`
 * contiguous runs at the least run cost that still gives at most `count`
 * greedy runs (bisection; greedy runs are the fewest for a given cost, the
 * cap and max_seqs), and the costliest runs are split where the larger half
 * is cheapest until there are `count`.
 * Columns. Ranks run micro-batch j together, so the step cost is the sum
 * over slots of the costliest rank. For fixed per-rank micro-batches the
 * least step numbers each rank's micro-batches by cost, costliest first
 * (pairing large with large). PACKED plans then lower the levels (see
 * lower_columns). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "group_dp.h"

static bool cost_greater(const void *arg, uint32_t x, uint32_t y) {
  const double *v = arg;
  return v[x] > v[y];
}

static double bin_cost(const pk_cfg_t *cfg, const pk_bin_t *b) {
  return cfg->mode == PK_MODE_PADDED ? (double)b->count * pk_slot_cost(cfg, b->width) : b->cost;
}

static uint64_t room_code(const pk_group_packer_t *pk, uint32_t b) {
  const pk_cfg_t *cfg = pk->ctx->cfg;
  if (pk->bins[b].count >= cfg->max_seqs)
    return 0;
  return cfg->cap == UINT64_MAX ? UINT64_MAX : cfg->cap - pk->bins[b].sum + 1;
}

static void tree_update(pk_group_packer_t *pk, uint32_t b) {
  uint32_t x = pk->leaves + b;
  pk->tree[x] = room_code(pk, b);
  /* Once a node keeps its value, so do all above it. */
  for (x /= 2; x >= 1; x /= 2) {
    uint64_t v = PK_MAX(pk->tree[2 * x], pk->tree[2 * x + 1]);
    if (pk->tree[x] == v)
      break;
    pk->tree[x] = v;
  }
}

/* The first micro-batch item k fits in, or UINT32_MAX. */
static uint32_t tree_first(const pk_group_packer_t *pk, uint32_t k) {
  uint64_t need = pk->ctx->size[k] + 1;
  if (pk->tree[1] < need)
    return UINT32_MAX;
  uint32_t x = 1;
  while (x < pk->leaves)
    x = pk->tree[2 * x] >= need ? 2 * x : 2 * x + 1;
  return x - pk->leaves;
}

/* The heap order: empty micro-batches first (so that none stays empty,
 * even among zero-cost items), then by cost, then by number. */
static bool cheaper(const pk_group_packer_t *pk, uint32_t x, uint32_t y) {
  const pk_bin_t *b = pk->bins;
  if ((b[x].count == 0) != (b[y].count == 0))
    return b[x].count == 0;
  return b[x].cost != b[y].cost ? b[x].cost < b[y].cost : x < y;
}

/* Restores the heap below place h after the cost at h rose. */
static void heap_down(pk_group_packer_t *pk, uint32_t h) {
  for (;;) {
    uint32_t l = 2 * h + 1, top = h;
    if (l < pk->count && cheaper(pk, pk->heap[l], pk->heap[top]))
      top = l;
    if (l + 1 < pk->count && cheaper(pk, pk->heap[l + 1], pk->heap[top]))
      top = l + 1;
    if (top == h)
      return;
    uint32_t t = pk->heap[h];
    pk->heap[h] = pk->heap[top];
    pk->heap[top] = t;
    pk->hpos[pk->heap[h]] = h;
    pk->hpos[pk->heap[top]] = top;
    h = top;
  }
}

static void packer_reset(pk_group_packer_t *pk, uint32_t count) {
  pk->count = count;
  pk->leaves = 1;
  while (pk->leaves < count)
    pk->leaves *= 2;
  memset(pk->bins, 0, (size_t)count * sizeof *pk->bins);
  memset(pk->tree, 0, 2 * (size_t)pk->leaves * sizeof *pk->tree);
  for (uint32_t b = 0; b < count; b++) {
    pk->heap[b] = b; /* equal costs, numbers ascending: a heap */
    pk->hpos[b] = b;
    tree_update(pk, b);
  }
}

static void packer_add(pk_group_packer_t *pk, uint32_t b, uint32_t k) {
  pk_bin_add(pk->ctx, &pk->bins[b], k);
  tree_update(pk, b);
  heap_down(pk, pk->hpos[b]);
}

/* Cost LPT under the cap: items costliest first (ord), each to the
 * cheapest micro-batch among the heap's top and its two children (the
 * cheapest and the next cheapest) that it fits, else to the first it fits;
 * the first `count` items open one micro-batch each. */
static int pack_lpt(pk_group_packer_t *pk, const uint32_t *ord, const uint32_t *pos,
                    uint32_t nitems, uint32_t *micro) {
  const pk_ctx_t *ctx = pk->ctx;
  for (uint32_t j = 0; j < nitems; j++) {
    uint32_t k = ord[j], b = UINT32_MAX;
    for (uint32_t h = 0; h < 3 && h < pk->count; h++) {
      uint32_t c = pk->heap[h];
      if (pk_bin_fits(ctx, &pk->bins[c], k) && (b == UINT32_MAX || cheaper(pk, c, b)))
        b = c;
    }
    if (b == UINT32_MAX && (b = tree_first(pk, k)) == UINT32_MAX)
      return PK_EPRECOND;
    packer_add(pk, b, k);
    micro[pos[k]] = b;
  }
  return 0;
}

/* First fit decreasing; micro-batches it leaves empty take the smallest
 * item of the micro-batch with the most items (taking an item out never
 * breaks the cap). */
static int pack_ffd(pk_group_packer_t *pk, const uint32_t *ord, const uint32_t *pos,
                    uint32_t nitems, uint32_t *micro) {
  for (uint32_t j = 0; j < nitems; j++) {
    uint32_t k = ord[j], b = tree_first(pk, k);
    if (b == UINT32_MAX)
      return PK_EPRECOND;
    packer_add(pk, b, k);
    micro[pos[k]] = b;
  }
  for (uint32_t q = 0; q < pk->count; q++) {
    if (pk->bins[q].count > 0)
      continue;
    uint32_t from = 0;
    for (uint32_t x = 1; x < pk->count; x++)
      if (pk->bins[x].count > pk->bins[from].count)
        from = x;
    for (uint32_t j = nitems; j-- > 0;)
      if (micro[pos[ord[j]]] == from) {
        micro[pos[ord[j]]] = q;
        pk->bins[from].count--;
        pk->bins[q].count++;
        break;
      }
  }
  return 0;
}

/* PADDED: the runs of rows (ord: widest first) when each run is as long as
 * the cap, max_seqs and the run cost t allow (rows x cost of the widest
 * row); run starts go to starts[] when not NULL. Returns the run count. */
static uint32_t greedy_runs(const pk_ctx_t *ctx, const uint32_t *ord, uint32_t m, double t,
                            uint32_t *starts) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t runs = 0;
  for (uint32_t i = 0; i < m; runs++) {
    if (starts != NULL)
      starts[runs] = i;
    uint64_t w = ctx->size[ord[i]];
    uint64_t take = PK_MIN(pk_padded_cap_rows(cfg, w), (uint64_t)(m - i));
    double c = pk_slot_cost(cfg, w);
    if (c > 0 && isfinite(t) && t / c < (double)take)
      take = PK_MAX((uint64_t)(t / c), 1);
    i += (uint32_t)take;
  }
  if (starts != NULL)
    starts[runs] = m;
  return runs;
}

static double run_cost(const pk_ctx_t *ctx, const uint32_t *ord, uint32_t s, uint32_t e) {
  return (double)(e - s) * pk_slot_cost(ctx->cfg, ctx->size[ord[s]]);
}

/* PADDED: exactly `count` contiguous runs of ord at the least run cost
 * that gives at most `count` greedy runs (bisection), then the costliest
 * runs of two or more rows split where the larger half is cheapest.
 * starts: count + 1 entries. PK_EPRECOND when the cap needs more runs. */
static int padded_runs(const pk_ctx_t *ctx, const uint32_t *ord, uint32_t m, uint32_t count,
                       uint32_t *starts) {
  if (greedy_runs(ctx, ord, m, INFINITY, NULL) > count)
    return PK_EPRECOND;
  double lo = 0, hi = run_cost(ctx, ord, 0, m);
  for (int it = 0; it < 100 && hi - lo > 1e-9 * hi; it++) {
    double mid = lo + (hi - lo) / 2;
    if (greedy_runs(ctx, ord, m, mid, NULL) <= count)
      hi = mid;
    else
      lo = mid;
  }
  uint32_t runs = greedy_runs(ctx, ord, m, hi, starts);
  if (runs > count) /* hi was the whole list's cost, which the cap cut. */
    runs = greedy_runs(ctx, ord, m, INFINITY, starts);
  while (runs < count) {
    uint32_t top = UINT32_MAX;
    for (uint32_t r = 0; r < runs; r++)
      if (starts[r + 1] - starts[r] >= 2 &&
          (top == UINT32_MAX || run_cost(ctx, ord, starts[r], starts[r + 1]) >
                                    run_cost(ctx, ord, starts[top], starts[top + 1])))
        top = r;
    if (top == UINT32_MAX)
      return PK_EINTERNAL; /* count <= m: a run of two rows exists. */
    uint32_t s = starts[top], e = starts[top + 1], cut = s + 1;
    double cut_cost = INFINITY;
    for (uint32_t p = s + 1; p < e; p++) {
      double c = PK_MAX(run_cost(ctx, ord, s, p), run_cost(ctx, ord, p, e));
      if (c < cut_cost) {
        cut_cost = c;
        cut = p;
      }
    }
    memmove(starts + top + 2, starts + top + 1, (size_t)(runs - top) * sizeof *starts);
    starts[top + 1] = cut;
    runs++;
  }
  return 0;
}

/* micro_algo AUTO: packs a rank's items (ord: by size descending; pos:
 * item -> place in the rank's list) into exactly `count` micro-batches.
 * PK_EPRECOND when they do not fit. */
static int pack_auto(pk_group_packer_t *pk, const uint32_t *ord, const uint32_t *pos,
                     uint32_t nitems, uint32_t count, uint32_t *micro) {
  const pk_ctx_t *ctx = pk->ctx;
  if (count == 0 || count > nitems)
    return PK_EPRECOND;
  if (ctx->cfg->mode == PK_MODE_PADDED) {
    int rc = padded_runs(ctx, ord, nitems, count, pk->starts);
    if (rc != 0)
      return rc;
    for (uint32_t r = 0; r < count; r++)
      for (uint32_t i = pk->starts[r]; i < pk->starts[r + 1]; i++)
        micro[pos[ord[i]]] = r;
    return 0;
  }
  /* Above 99 % token fill LPT's even spread leaves no room for the last
   * items: first fit decreasing packs first. */
  const pk_cfg_t *cfg = ctx->cfg;
  uint64_t sum = 0;
  for (uint32_t j = 0; j < nitems; j++)
    sum += ctx->size[ord[j]];
  bool full = cfg->cap != UINT64_MAX && (double)sum > 0.99 * (double)count * (double)cfg->cap;
  int rc = PK_EPRECOND;
  if (!full) {
    packer_reset(pk, count);
    rc = pack_lpt(pk, ord, pos, nitems, micro);
  }
  if (rc == PK_EPRECOND) {
    packer_reset(pk, count);
    rc = pack_ffd(pk, ord, pos, nitems, micro);
  }
  return rc;
}

/* Packs a rank into the least count >= count that fits; *got is that
 * count. micro_algo AUTO starts at the rank's own simple bounds (tokens
 * over the cap, items above half the cap, max_seqs). */
int pk_group_pack_rank(pk_group_packer_t *pk, const uint32_t *items, const uint32_t *ord,
                       const uint32_t *pos, uint32_t nitems, uint32_t count, uint32_t *micro,
                       uint32_t *got) {
  const pk_ctx_t *ctx = pk->ctx;
  const pk_cfg_t *cfg = ctx->cfg;
  if (cfg->micro_algo != PK_MICRO_AUTO)
    return pk_compat_micro(ctx, cfg->micro_algo, items, nitems, count, micro, got);
  uint64_t c = PK_MAX(count, 1);
  if (cfg->mode == PK_MODE_PACKED && cfg->cap != UINT64_MAX) {
    uint64_t sum = 0, large = 0;
    for (uint32_t j = 0; j < nitems; j++) {
      sum += ctx->size[ord[j]];
      large += ctx->size[ord[j]] > cfg->cap / 2;
    }
    c = PK_MAX(c, (sum + cfg->cap - 1) / cfg->cap);
    c = PK_MAX(c, large);
  }
  if (cfg->max_seqs != UINT32_MAX)
    c = PK_MAX(c, ((uint64_t)nitems + cfg->max_seqs - 1) / cfg->max_seqs);
  if (cfg->mode == PK_MODE_PADDED) /* greedy runs are the fewest */
    c = PK_MAX(c, greedy_runs(ctx, ord, nitems, INFINITY, NULL));
  for (; c <= nitems; c++) {
    int rc = pack_auto(pk, ord, pos, nitems, (uint32_t)c, micro);
    if (rc != PK_EPRECOND) {
      *got = (uint32_t)c;
      return rc;
    }
  }
  return PK_EPRECOND; /* One item per micro-batch always fits: a bug. */
}

/* micro_algo AUTO: each rank's micro-batches renumbered by cost, costliest
 * first (ties by the old number), so slot j pairs the j-th costliest. */
static int number_by_cost(const pk_ctx_t *ctx, const uint32_t *items, const uint32_t *rstart,
                          uint32_t *micro, uint32_t m) {
  const pk_cfg_t *cfg = ctx->cfg;
  pk_bin_t *bins = pk_malloc_array(m, sizeof *bins);
  double *cost = pk_malloc_array(m, sizeof *cost);
  uint32_t *ids = pk_malloc_array(m, sizeof *ids);
  uint32_t *tmp = pk_malloc_array(m, sizeof *tmp);
  uint32_t *slot = pk_malloc_array(m, sizeof *slot);
  int rc = PK_ENOMEM;
  if (bins == NULL || cost == NULL || ids == NULL || tmp == NULL || slot == NULL)
    goto done;
  for (uint32_t r = 0; r < cfg->dp; r++) {
    memset(bins, 0, (size_t)m * sizeof *bins);
    for (uint32_t q = rstart[r]; q < rstart[r + 1]; q++)
      pk_bin_add(ctx, &bins[micro[q]], items[q]);
    for (uint32_t j = 0; j < m; j++) {
      cost[j] = bin_cost(cfg, &bins[j]);
      ids[j] = j;
    }
    pk_merge_sort_u32(ids, tmp, m, cost_greater, cost);
    for (uint32_t j = 0; j < m; j++)
      slot[ids[j]] = j;
    for (uint32_t q = rstart[r]; q < rstart[r + 1]; q++)
      micro[q] = slot[micro[q]];
  }
  rc = 0;
done:
  free(bins);
  free(cost);
  free(ids);
  free(tmp);
  free(slot);
  return rc;
}

/* PACKED lock-step lowering (micro_algo AUTO), on micro-batches numbered
 * by cost: column j's level T_j is the costliest micro-batch j of any rank.
 * A column whose level one rank alone sets is lowered by moving one item of
 * that micro-batch, or exchanging it for a cheaper one, into another
 * micro-batch of the same rank that stays within the cap, max_seqs and its
 * own column's level. No level rises and the lowered one falls, so the step
 * cost (the sum of the levels) falls at every change and the search ends;
 * a work budget bounds it. Ranks whose costs are uneven (a first micro-batch
 * that is one long sequence, or first fit's packing near a full cap) then
 * set the column shape, and the other ranks fill their micro-batches up to
 * it instead of levelling each rank on its own.
 *
 * Each rank's items sit in seg, grouped by micro-batch and by size
 * ascending inside one (cost is nondecreasing in size, so cost ascending
 * too): the exchange partner in a micro-batch is found by binary search. */
#define GROUP_LOWER_WORK (1ull << 21)

typedef struct lower {
  const pk_ctx_t *ctx;
  uint32_t m;
  uint32_t *seg;    /* n: rank r's items at rstart[r] .. rstart[r + 1] */
  uint32_t *bstart; /* dp x (m + 1): micro-batch t of rank r at seg[bstart[t] ..
                       bstart[t + 1]) */
  pk_bin_t *bins;   /* dp x m */
  double *level;    /* m */
  uint64_t work;
} lower_t;

static bool size_before(const pk_ctx_t *ctx, uint32_t x, uint32_t y) {
  return ctx->size[x] != ctx->size[y] ? ctx->size[x] < ctx->size[y] : x < y;
}

/* Takes seg[p] out of micro-batch j of the rank whose offsets are bs. */
static uint32_t seg_remove(lower_t *lw, uint32_t *bs, uint32_t j, uint32_t p) {
  uint32_t k = lw->seg[p], end = bs[lw->m];
  memmove(lw->seg + p, lw->seg + p + 1, (size_t)(end - p - 1) * sizeof *lw->seg);
  for (uint32_t t = j + 1; t <= lw->m; t++)
    bs[t]--; /* the rank's last place is free until seg_insert */
  lw->work += end - p;
  return k;
}

static void seg_insert(lower_t *lw, uint32_t *bs, uint32_t t, uint32_t k) {
  uint32_t lo = bs[t], hi = bs[t + 1], end = bs[lw->m];
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (size_before(lw->ctx, lw->seg[mid], k))
      lo = mid + 1;
    else
      hi = mid;
  }
  memmove(lw->seg + lo + 1, lw->seg + lo, (size_t)(end - lo) * sizeof *lw->seg);
  lw->seg[lo] = k;
  for (uint32_t x = t + 1; x <= lw->m; x++)
    bs[x]++;
  lw->work += end - lo;
}

/* The first place in seg[lo .. hi) whose item satisfies `ok`, a predicate
 * that is false and then true along the segment. */
#define FIRST_TRUE(lo, hi, ok)                                                                     \
  do {                                                                                             \
    while (lo < hi) {                                                                              \
      uint32_t mid = lo + (hi - lo) / 2, kb = lw->seg[mid];                                        \
      (void)kb;                                                                                    \
      if (ok)                                                                                      \
        hi = mid;                                                                                  \
      else                                                                                         \
        lo = mid + 1;                                                                              \
    }                                                                                              \
  } while (0)

typedef struct lower_move {
  double fall, d;
  uint32_t pa, pb, to; /* pb: UINT32_MAX for a move */
} lower_move_t;

static void consider(lower_move_t *best, double fall, double d, uint32_t pa, uint32_t pb,
                     uint32_t to, double tol) {
  if (fall > best->fall + tol || (fall > best->fall - tol && fall > tol && d < best->d))
    *best = (lower_move_t){fall, d, pa, pb, to};
}

/* The best change in micro-batch j of rank r: the largest fall of column j's
 * level (to `second`, the next costliest rank's, at most), then the least
 * cost moved. best->fall stays 0 when there is none. */
static void lower_best(lower_t *lw, uint32_t r, uint32_t j, double second, lower_move_t *best) {
  const pk_ctx_t *ctx = lw->ctx;
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t m = lw->m;
  const uint32_t *bs = lw->bstart + (size_t)r * (m + 1);
  const pk_bin_t *bins = lw->bins + (size_t)r * m;
  double cj = bins[j].cost, tol = 1e-12 * cj, want = cj - second;
  *best = (lower_move_t){0, INFINITY, 0, UINT32_MAX, 0};
  for (uint32_t pa = bs[j]; pa < bs[j + 1]; pa++) {
    uint32_t ka = lw->seg[pa];
    double wa = ctx->cost[ka];
    uint64_t sa = ctx->size[ka];
    if (!(wa > tol))
      continue;
    for (uint32_t t = 0; t < m; t++) {
      if (t == j)
        continue;
      double room = lw->level[t] - bins[t].cost;
      uint64_t sroom = cfg->cap - bins[t].sum, smin = sa > sroom ? sa - sroom : 0;
      lw->work++;
      if (bins[j].count >= 2 && wa <= room && sa <= sroom && bins[t].count < cfg->max_seqs)
        consider(best, lw->level[j] - PK_MAX(second, cj - wa), wa, pa, UINT32_MAX, t, tol);
      /* Exchanges: kb of t with wa - room <= w(kb) < wa and room for the
       * size difference; the one whose d = wa - w(kb) reaches `want` with
       * the least excess, else the largest d. */
      uint32_t lo = bs[t], hi = bs[t + 1];
      FIRST_TRUE(lo, hi, ctx->cost[kb] >= wa - room && ctx->size[kb] >= smin);
      uint32_t top = lo, end = bs[t + 1];
      FIRST_TRUE(top, end, ctx->cost[kb] >= wa - tol);
      if (lo >= top)
        continue;
      uint32_t sat = lo, sat_end = top;
      FIRST_TRUE(sat, sat_end, ctx->cost[kb] > wa - want);
      uint32_t pb = sat > lo ? sat - 1 : lo;
      double d = wa - ctx->cost[lw->seg[pb]];
      lw->work += 3;
      consider(best, lw->level[j] - PK_MAX(second, cj - d), d, pa, pb, t, tol);
    }
  }
}

static void lower_apply(lower_t *lw, uint32_t r, uint32_t j, const lower_move_t *mv) {
  const pk_ctx_t *ctx = lw->ctx;
  uint32_t m = lw->m, to = mv->to;
  uint32_t *bs = lw->bstart + (size_t)r * (m + 1);
  pk_bin_t *bj = &lw->bins[(size_t)r * m + j], *bt = &lw->bins[(size_t)r * m + to];
  uint32_t ka = lw->seg[mv->pa], kb = mv->pb != UINT32_MAX ? lw->seg[mv->pb] : UINT32_MAX;
  /* Remove the later place first so that the earlier one stays valid. */
  if (kb != UINT32_MAX && mv->pb > mv->pa) {
    seg_remove(lw, bs, to, mv->pb);
    seg_remove(lw, bs, j, mv->pa);
  } else {
    seg_remove(lw, bs, j, mv->pa);
    if (kb != UINT32_MAX)
      seg_remove(lw, bs, to, mv->pb);
  }
  seg_insert(lw, bs, to, ka);
  bj->sum -= ctx->size[ka], bj->cost -= ctx->cost[ka], bj->count--;
  bt->sum += ctx->size[ka], bt->cost += ctx->cost[ka], bt->count++;
  if (kb != UINT32_MAX) {
    seg_insert(lw, bs, j, kb);
    bt->sum -= ctx->size[kb], bt->cost -= ctx->cost[kb], bt->count--;
    bj->sum += ctx->size[kb], bj->cost += ctx->cost[kb], bj->count++;
  }
}

typedef struct seg_order {
  const pk_ctx_t *ctx;
  const uint32_t *bin; /* by item */
} seg_order_t;

static bool seg_before(const void *arg, uint32_t x, uint32_t y) {
  const seg_order_t *o = arg;
  if (o->bin[x] != o->bin[y])
    return o->bin[x] < o->bin[y];
  return size_before(o->ctx, x, y);
}

/* micro[q] is the micro-batch of items[q]; rewritten in place. */
static int lower_columns(const pk_ctx_t *ctx, const uint32_t *items, const uint32_t *rstart,
                         uint32_t *micro, uint32_t m) {
  uint32_t dp = ctx->cfg->dp, n = ctx->n;
  int rc = PK_ENOMEM;
  lower_t lw = {.ctx = ctx, .m = m};
  uint32_t *bin = pk_malloc_array(n, sizeof *bin), *tmp = pk_malloc_array(n, sizeof *tmp);
  lw.seg = pk_malloc_array(n, sizeof *lw.seg);
  lw.bstart = pk_malloc_array((size_t)dp * (m + 1), sizeof *lw.bstart);
  lw.bins = pk_calloc((size_t)dp * m, sizeof *lw.bins);
  lw.level = pk_malloc_array(m, sizeof *lw.level);
  if (bin == NULL || tmp == NULL || lw.seg == NULL || lw.bstart == NULL || lw.bins == NULL ||
      lw.level == NULL)
    goto done;
  seg_order_t so = {ctx, bin};
  for (uint32_t r = 0; r < dp; r++) {
    uint32_t *bs = lw.bstart + (size_t)r * (m + 1);
    memset(bs, 0, ((size_t)m + 1) * sizeof *bs);
    for (uint32_t q = rstart[r]; q < rstart[r + 1]; q++) {
      bin[items[q]] = micro[q];
      lw.seg[q] = items[q];
      bs[micro[q] + 1]++;
      pk_bin_add(ctx, &lw.bins[(size_t)r * m + micro[q]], items[q]);
    }
    bs[0] = rstart[r];
    for (uint32_t t = 0; t < m; t++)
      bs[t + 1] += bs[t];
    pk_merge_sort_u32(lw.seg + rstart[r], tmp, rstart[r + 1] - rstart[r], seg_before, &so);
  }
  bool changed = true;
  while (changed && lw.work < GROUP_LOWER_WORK) {
    changed = false;
    for (uint32_t j = 0; j < m; j++) {
      lw.level[j] = 0;
      for (uint32_t r = 0; r < dp; r++)
        lw.level[j] = PK_MAX(lw.level[j], lw.bins[(size_t)r * m + j].cost);
    }
    for (uint32_t j = 0; j < m && lw.work < GROUP_LOWER_WORK; j++) {
      for (;;) {
        /* The rank that sets the level, and the next costliest. */
        uint32_t top = UINT32_MAX, ties = 0;
        double second = 0;
        for (uint32_t r = 0; r < dp; r++) {
          double c = lw.bins[(size_t)r * m + j].cost;
          if (c == lw.level[j])
            top = ties++ == 0 ? r : top;
          else
            second = PK_MAX(second, c);
        }
        lw.work += dp;
        lower_move_t mv;
        if (ties != 1 || lw.work >= GROUP_LOWER_WORK)
          break;
        lower_best(&lw, top, j, second, &mv);
        if (!(mv.fall > 0))
          break;
        lower_apply(&lw, top, j, &mv);
        lw.level[j] = PK_MAX(second, lw.bins[(size_t)top * m + j].cost);
        changed = true;
      }
    }
  }
  /* Back to micro[] by the items' places. */
  for (uint32_t r = 0; r < dp; r++) {
    const uint32_t *bs = lw.bstart + (size_t)r * (m + 1);
    for (uint32_t t = 0; t < m; t++)
      for (uint32_t p = bs[t]; p < bs[t + 1]; p++)
        bin[lw.seg[p]] = t;
  }
  for (uint32_t q = 0; q < n; q++)
    micro[q] = bin[items[q]];
  rc = 0;
done:
  free(bin);
  free(tmp);
  free(lw.seg);
  free(lw.bstart);
  free(lw.bins);
  free(lw.level);
  return rc;
}

int pk_group_columns(const pk_ctx_t *ctx, const uint32_t *items, const uint32_t *rstart,
                     uint32_t *micro, uint32_t m) {
  int rc = number_by_cost(ctx, items, rstart, micro, m);
  /* Lowering keeps each rank's micro-batches; numbering them again by cost
   * can only lower the step further. */
  if (rc == 0 && ctx->cfg->mode == PK_MODE_PACKED && m > 1 &&
      (rc = lower_columns(ctx, items, rstart, micro, m)) == 0)
    rc = number_by_cost(ctx, items, rstart, micro, m);
  return rc;
}

int pk_group_packer_init(pk_group_packer_t *pk, const pk_ctx_t *ctx) {
  size_t n = ctx->n;
  *pk = (pk_group_packer_t){.ctx = ctx};
  pk->bins = pk_malloc_array(n, sizeof *pk->bins);
  pk->tree = pk_malloc_array(4 * n, sizeof *pk->tree);
  pk->heap = pk_malloc_array(n, sizeof *pk->heap);
  pk->hpos = pk_malloc_array(n, sizeof *pk->hpos);
  pk->starts = pk_malloc_array(n + 1, sizeof *pk->starts);
  if (pk->bins == NULL || pk->tree == NULL || pk->heap == NULL || pk->hpos == NULL ||
      pk->starts == NULL) {
    pk_group_packer_free(pk);
    return PK_ENOMEM;
  }
  return 0;
}

void pk_group_packer_free(pk_group_packer_t *pk) {
  free(pk->bins);
  free(pk->tree);
  free(pk->heap);
  free(pk->hpos);
  free(pk->starts);
  *pk = (pk_group_packer_t){0};
}
