/* AUTO: packd's own DP balancing and micro-batching, planned jointly.
 *
 * Ranks run micro-batch j at the same time (lock step), so what costs time is
 * the costliest rank of every micro-batch slot ("column"): the step cost is
 * the sum of the column levels. AUTO builds M columns of dp micro-batches,
 * M = pk_micro_lower_bound (the fewest the cap, max_seqs, min_micro_batches
 * and microbatch_group allow; grown by one group only when no packing fits),
 * and makes every column level. Items are read largest first (by_size).
 *
 *  PACKED, FIXED aside (assign.c):
 *   - pk_auto_pack_levels: the first column's level is set by the largest item;
 *     items go to the first column where they fit under the cap without
 *     raising its level (cheapest micro-batch first), so the largest items
 *     fill the first columns and every later column's level is set by a
 *     smaller head: the shape of the step bound (bounds.c). Items above every
 *     level go to the column with the most room.
 *   - pk_auto_pack_bins_first, when the batch nearly fills M columns (or the level
 *     packing does not fit): first fit decreasing over all micro-batches,
 *     then micro-batches sorted by cost and dealt in tiers of dp (tier j is
 *     column j). Above 99 % fill one probe pass (ffd_min_micro) gives the
 *     first count first fit fills, and is that count's packing; when that
 *     count is above the bound, pk_auto_tighten tries fewer: micro-batch
 *     completion (auto_complete.c: one micro-batch at a time, its last gap
 *     closed by an exchange of its last items) where it needs fewer, else
 *     first fit, then pk_auto_repair_down (auto_repair.c): the items beyond
 *     a count go in after swaps gather room. The column packings are not
 *     tried at such a count, nor where first fit is already within 0.1 % of
 *     the step bound.
 *   - under max_seqs, where the column packings and first fit fail at the
 *     bound, micro-batch completion (keeping room for later slots) gives a
 *     count; where that is more than a group above and first fit needs as
 *     many, completion's packing is taken at its count, else the least
 *     count is bisected below first fit's.
 *   - pk_auto_pack_best runs the level and the tier packing and keeps the
 *     lower step cost; the second is skipped when the first is within 0.5 %
 *     of the step bound. The tier packing goes first where first fit came
 *     that close (like items).
 *   - with equal_count, pk_auto_pack_tiers: tiers of dp like items, one per
 *     micro-batch, so every rank gets the same count.
 *   - pk_auto_refine_columns: moves and swaps inside each column between its
 *     costliest and cheapest micro-batches while the level falls.
 *   - pk_auto_lower_columns (auto_lower.c): moves items from each column's
 *     costliest micro-batches into micro-batches of other columns that stay
 *     at or below their own level (the first column, whose level is one
 *     long sequence, often has tokens to spare).
 *  PADDED (rows x widest row):
 *   - pk_auto_pack_padded_best (auto_padded.c): runs of like width closed at
 *     a target cost found by bisection, the costliest halved until there are
 *     exactly M x dp of them; where that halved 1 % or more of them, also
 *     exactly M x dp runs with costs in one band as narrow as the count
 *     allows; where the widest rows cost more than the target and leave
 *     their columns room below their level, also column levels (each such
 *     column's runs closed at its head's cost, the rest at their own
 *     target); where the widest row's full run (as many rows as the cap
 *     allows) costs more than the target, also column levels at the cost of
 *     such runs; each dealt in tiers of dp by cost and refined by row moves
 *     inside each column (pk_auto_refine_padded); then, with at most 512 runs
 *     and 32 per tier, the cut search (pk_auto_search_runs, auto_runs.c)
 *     moves the cuts between the best runs; with 2 to 64 micro-batches per
 *     rank, the level search (pk_auto_level_search, auto_levels.c) walks
 *     the width order at moved column levels from the best runs, within a
 *     work budget; the lowest step is kept.
 *   - pk_auto_lower_padded (auto_padded_lower.c): rows leave each column's
 *     costliest micro-batch for micro-batches of other columns that stay
 *     within their own level (not with equal_count).
 *   - with equal_count, pk_auto_pack_padded_tiers: whole tiers per column.
 *  Finally deal_columns gives each column's micro-batches to ranks,
 *  costliest to the rank with the least total so far (DP balance for free:
 *  any permutation inside a column leaves the step cost unchanged).
 *
 * Costs: one O(n) radix sort (pipeline), O(n log dp) per packing try, and
 * bounded refinement per column. */
#include <stdlib.h>
#include <string.h>

#include "auto_internal.h"

int pk_tree_init(room_tree_t *rt, uint32_t size) {
  rt->leaves = 1;
  while (rt->leaves < size)
    rt->leaves *= 2;
  rt->t = pk_calloc((size_t)rt->leaves * 2, sizeof *rt->t);
  return rt->t == NULL ? PK_ENOMEM : 0;
}

/* Sets entry i and walks up while the maxima change: once a node keeps its
 * value, so do all above it. */
void pk_tree_set(room_tree_t *rt, uint32_t i, uint64_t room) {
  uint32_t p = rt->leaves + i;
  rt->t[p] = room;
  for (p /= 2; p >= 1; p /= 2) {
    uint64_t v = PK_MAX(rt->t[2 * p], rt->t[2 * p + 1]);
    if (rt->t[p] == v)
      break;
    rt->t[p] = v;
  }
}

/* Recomputes every inner node from the leaves (t[leaves + i], written by
 * the caller; unused leaves must hold 0) in O(leaves). */
void pk_tree_rebuild(room_tree_t *rt) {
  for (uint32_t p = rt->leaves - 1; p >= 1; p--)
    rt->t[p] = PK_MAX(rt->t[2 * p], rt->t[2 * p + 1]);
}

/* The first entry at or after `from` with room >= need, or UINT32_MAX. */
uint32_t pk_tree_find(const room_tree_t *rt, uint32_t from, uint64_t need) {
  if (from >= rt->leaves)
    return UINT32_MAX;
  uint32_t p = rt->leaves + from;
  if (rt->t[p] >= need)
    return from;
  /* Climb until a right sibling subtree holds a candidate. */
  for (;;) {
    if (p == 1)
      return UINT32_MAX;
    if ((p & 1) == 0 && rt->t[p + 1] >= need) {
      p = p + 1;
      break;
    }
    p /= 2;
  }
  while (p < rt->leaves)
    p = rt->t[2 * p] >= need ? 2 * p : 2 * p + 1;
  return p - rt->leaves;
}

void pk_head_set(head_tree_t *ht, uint32_t i, double head) {
  uint32_t p = ht->leaves + i;
  ht->t[p] = head;
  for (p /= 2; p >= 1; p /= 2) {
    double v = PK_MAX(ht->t[2 * p], ht->t[2 * p + 1]);
    if (ht->t[p] == v)
      break;
    ht->t[p] = v;
  }
}

/* The first leaf of subtree p with room >= need and head >= cost, or
 * UINT32_MAX: depth first, left to right, skipping every subtree whose
 * maxima fail either test. */
static uint32_t find_room_head_in(const room_tree_t *rt, const head_tree_t *ht, uint32_t p,
                                  uint64_t need, double cost) {
  uint32_t top = p;
  for (;;) {
    if (rt->t[p] >= need && ht->t[p] >= cost) {
      if (p >= rt->leaves)
        return p - rt->leaves;
      p = 2 * p;
      continue;
    }
    /* Next subtree to the right inside top's: up while p is a right child. */
    while (p != top && (p & 1) == 1)
      p /= 2;
    if (p == top)
      return UINT32_MAX;
    p++;
  }
}

/* From the leaf, climbs and searches each right sibling subtree. */
uint32_t pk_find_room_head(const room_tree_t *rt, const head_tree_t *ht, uint32_t from,
                           uint64_t need, double cost) {
  if (from >= rt->leaves)
    return UINT32_MAX;
  uint32_t p = rt->leaves + from;
  uint32_t c = find_room_head_in(rt, ht, p, need, cost);
  for (; c == UINT32_MAX && p > 1; p /= 2)
    if ((p & 1) == 0)
      c = find_room_head_in(rt, ht, p + 1, need, cost);
  return c;
}

/* The room micro-batch i has left (0 when it holds max_seqs items). */
uint64_t pk_auto_bin_room(const auto_state_t *s, uint32_t i) {
  const pk_bin_t *b = &s->bins[i];
  const pk_cfg_t *cfg = s->ctx->cfg;
  if (b->count >= cfg->max_seqs)
    return 0;
  uint64_t f = pk_bin_footprint(cfg, b);
  return f >= cfg->cap ? 0 : cfg->cap - f;
}

double pk_auto_column_level(const auto_state_t *s, uint32_t c) {
  double level = 0;
  for (uint32_t q = 0; q < s->dp; q++)
    level = PK_MAX(level, s->bins[(size_t)c * s->dp + q].cost);
  return level;
}

double pk_auto_step(const auto_state_t *s) {
  double step = 0;
  for (uint32_t c = 0; c < s->m; c++)
    step += pk_auto_column_level(s, c);
  return step;
}

/* An insertion sort: micro-batches are read only up to `limit` items. */
uint32_t pk_auto_sorted_items(const auto_state_t *s, const uint32_t *head, const uint32_t *next,
                              uint32_t bin, uint32_t limit, uint32_t *out) {
  const uint64_t *size = s->ctx->size;
  uint32_t count = 0;
  for (uint32_t b = head[bin]; b != UINT32_MAX && count < limit; b = next[b]) {
    uint32_t at = count++;
    while (at > 0 && size[out[at - 1]] > size[b]) {
      out[at] = out[at - 1];
      at--;
    }
    out[at] = b;
  }
  return count;
}

/* Orders the dp bins of a column (slot numbers in s->slots): by cost
 * ascending (by_foot false) or by footprint ascending (by_foot true), ties by
 * the other key, then slot. The keys are read once into s->keys; a merge
 * sort: deterministic and O(dp log dp). */
typedef struct slot_order {
  const slot_key_t *keys;
  bool by_foot;
} slot_order_t;

static bool slot_before(const void *arg, uint32_t a, uint32_t b) {
  const slot_order_t *o = arg;
  const slot_key_t *x = &o->keys[a], *y = &o->keys[b];
  if (o->by_foot && x->foot != y->foot)
    return x->foot < y->foot;
  if (x->cost != y->cost)
    return x->cost < y->cost;
  if (x->foot != y->foot)
    return x->foot < y->foot;
  return a < b;
}

void pk_auto_sort_slots(auto_state_t *s, uint32_t base, bool by_foot) {
  for (uint32_t i = 0; i < s->dp; i++) {
    const pk_bin_t *b = &s->bins[base + i];
    s->keys[i] = (slot_key_t){.cost = b->cost, .foot = pk_bin_footprint(s->ctx->cfg, b)};
    s->slots[i] = i;
  }
  slot_order_t o = {s->keys, by_foot};
  pk_merge_sort_u32(s->slots, s->tmp, s->dp, slot_before, &o);
}

/* Places a whole tier (dp items, costliest first) into column c, or returns
 * false and changes nothing. */
bool pk_auto_place_tier(auto_state_t *s, uint32_t c, const uint32_t *items) {
  uint32_t base = c * s->dp;
  for (int attempt = 0; attempt < 2; attempt++) {
    pk_auto_sort_slots(s, base, attempt == 1);
    bool ok = true;
    for (uint32_t i = 0; i < s->dp && ok; i++)
      ok = pk_bin_fits(s->ctx, &s->bins[base + s->slots[i]], items[i]);
    if (!ok)
      continue;
    uint64_t foot = s->col_foot[c];
    for (uint32_t i = 0; i < s->dp; i++) {
      pk_bin_t *b = &s->bins[base + s->slots[i]];
      pk_bin_add(s->ctx, b, items[i]);
      s->item_bin[items[i]] = base + s->slots[i];
      foot = PK_MAX(foot, pk_bin_footprint(s->ctx->cfg, b));
    }
    s->col_foot[c] = foot;
    /* A column with a full micro-batch (count or tokens) takes no tier. */
    uint64_t room = UINT64_MAX;
    for (uint32_t q = 0; q < s->dp; q++)
      room = PK_MIN(room, pk_auto_bin_room(s, base + q));
    pk_tree_set(&s->cols, c, room);
    return true;
  }
  return false;
}

/* Phase 3: items one by one, largest first, to the first micro-batch with
 * room. */
int pk_auto_place_rest(auto_state_t *s, const uint32_t *items, uint32_t count) {
  if (count == 0)
    return 0;
  uint32_t nbins = s->m * s->dp;
  for (uint32_t i = 0; i < s->bins_rt.leaves; i++)
    s->bins_rt.t[s->bins_rt.leaves + i] = i < nbins ? pk_auto_bin_room(s, i) : 0;
  pk_tree_rebuild(&s->bins_rt);
  for (uint32_t j = 0; j < count; j++) {
    if ((j + 1) % PK_STOP_EVERY == 0 && pk_stopped(s->ctx))
      return PK_ECANCELED;
    uint32_t k = items[j];
    uint64_t need = s->ctx->cfg->mode == PK_MODE_PADDED ? 1 : PK_MAX(s->ctx->size[k], 1);
    uint32_t at = 0, tries = 0;
    for (;;) {
      at = pk_tree_find(&s->bins_rt, at, need);
      if (at == UINT32_MAX || at >= nbins || tries++ >= PK_AUTO_TRIES)
        return PK_EPRECOND;
      if (pk_bin_fits(s->ctx, &s->bins[at], k))
        break;
      at++;
    }
    pk_bin_add(s->ctx, &s->bins[at], k);
    s->item_bin[k] = at;
    pk_tree_set(&s->bins_rt, at, pk_auto_bin_room(s, at));
  }
  return 0;
}

void pk_auto_bin_lists(const auto_state_t *s, uint32_t *head, uint32_t *next) {
  for (uint32_t i = 0; i < s->m * s->dp; i++)
    head[i] = UINT32_MAX;
  for (uint32_t k = s->ctx->n; k-- > 0;) {
    next[k] = head[s->item_bin[k]];
    head[s->item_bin[k]] = k;
  }
}

static void list_remove(uint32_t *head, uint32_t *next, uint32_t i, uint32_t k) {
  uint32_t *p = &head[i];
  while (*p != k)
    p = &next[*p];
  *p = next[k];
}

void pk_auto_move_item(auto_state_t *s, uint32_t *head, uint32_t *next, uint32_t k, uint32_t to) {
  const pk_ctx_t *ctx = s->ctx;
  uint32_t from = s->item_bin[k];
  list_remove(head, next, from, k);
  next[k] = head[to];
  head[to] = k;
  s->item_bin[k] = to;
  pk_bin_t *a = &s->bins[from];
  a->sum -= ctx->size[k];
  a->count--;
  a->cost -= ctx->cost[k];
  a->width = 0;
  for (uint32_t q = head[from]; q != UINT32_MAX; q = next[q])
    a->width = PK_MAX(a->width, ctx->size[q]);
  pk_bin_add(ctx, &s->bins[to], k);
}

/* Comparators over a double array indexed by the sorted values. */
static bool value_greater(const void *arg, uint32_t x, uint32_t y) {
  const double *v = arg;
  return v[x] > v[y];
}

static bool value_less(const void *arg, uint32_t x, uint32_t y) {
  const double *v = arg;
  return v[x] < v[y];
}

/* Deals the micro-batches of every column to ranks (step 4 above) and writes
 * the assignment. */
static int deal_columns(auto_state_t *s, pk_assign_t *out) {
  uint32_t dp = s->dp, m = s->m, n = s->ctx->n;
  double *rank_cost = pk_calloc(dp, sizeof *rank_cost);
  double *col_max = pk_malloc_array(m, sizeof *col_max);
  uint32_t *cols = pk_malloc_array(m, sizeof *cols);
  uint32_t *ctmp = pk_malloc_array(m, sizeof *ctmp);
  uint32_t *ranks = pk_malloc_array(dp, sizeof *ranks);
  uint32_t *slot_rank = pk_malloc_array((size_t)m * dp, sizeof *slot_rank);
  int rc = 0;
  if (rank_cost == NULL || col_max == NULL || cols == NULL || ctmp == NULL || ranks == NULL ||
      slot_rank == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  for (uint32_t c = 0; c < m; c++) {
    cols[c] = c;
    col_max[c] = 0;
    for (uint32_t q = 0; q < dp; q++)
      col_max[c] = PK_MAX(col_max[c], s->bins[(size_t)c * dp + q].cost);
  }
  /* Columns by their maximum, descending (merge sort, stable). */
  pk_merge_sort_u32(cols, ctmp, m, value_greater, col_max);
  for (uint32_t ci = 0; ci < m; ci++) {
    uint32_t c = cols[ci];
    uint32_t base = c * dp;
    /* Micro-batches of the column, costliest first: pk_auto_sort_slots gives
     * ascending cost, so walk it backwards. */
    pk_auto_sort_slots(s, base, false);
    /* Ranks by total cost ascending (insertion into a merge-sorted list). */
    for (uint32_t r = 0; r < dp; r++)
      ranks[r] = r;
    pk_merge_sort_u32(ranks, s->tmp, dp, value_less, rank_cost);
    for (uint32_t i = 0; i < dp; i++) {
      uint32_t slot = s->slots[dp - 1 - i];
      slot_rank[base + slot] = ranks[i];
      rank_cost[ranks[i]] += s->bins[base + slot].cost;
    }
  }
  for (uint32_t k = 0; k < n; k++) {
    uint32_t bin = s->item_bin[k];
    out->rank[k] = slot_rank[bin];
    out->micro[k] = bin / dp;
    out->pos[k] = k;
  }
  out->nmicro = m;
  out->columns = true;
done:
  free(rank_cost);
  free(col_max);
  free(cols);
  free(ctmp);
  free(ranks);
  free(slot_rank);
  return rc;
}

/* The fewest micro-batches per rank first fit decreasing needs: one first
 * fit pass over all max_m x dp micro-batches (first fit over fewer is the
 * same pass cut short, so it fits exactly when the pass used no
 * micro-batch beyond them). The pass stays in s->bins and s->item_bin: it
 * is the first fit packing for every count from the result up.
 * UINT32_MAX when even max_m does not fit. */
static uint32_t ffd_min_micro(auto_state_t *s, const uint32_t *order, uint32_t max_m) {
  uint32_t n = s->ctx->n, saved_m = s->m;
  s->m = max_m;
  memset(s->bins, 0, (size_t)max_m * s->dp * sizeof *s->bins);
  int rc = pk_auto_place_rest(s, order, n);
  s->m = saved_m;
  if (rc != 0)
    return UINT32_MAX;
  uint32_t used = 0;
  for (uint32_t k = 0; k < n; k++)
    used = PK_MAX(used, s->item_bin[k] + 1);
  return (used + s->dp - 1) / s->dp;
}

int pk_auto_assign(const pk_ctx_t *ctx, pk_assign_t *out, char *err, size_t errlen) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = cfg->dp, n = ctx->n;
  uint32_t max_m = n / dp;
  uint32_t m = pk_micro_lower_bound(ctx);
  auto_state_t s = {.ctx = ctx, .dp = dp};
  pk_bin_t *saved_bins = NULL, *ffd_bins = NULL;
  uint32_t *saved_item_bin = NULL, *ffd_item_bin = NULL;
  int rc = 0;
  uint32_t *order = pk_malloc_array(n, sizeof *order);
  s.bins = pk_malloc_array((size_t)max_m * dp, sizeof *s.bins);
  s.col_foot = pk_malloc_array(max_m, sizeof *s.col_foot);
  s.slots = pk_malloc_array(dp, sizeof *s.slots);
  s.tmp = pk_malloc_array(dp, sizeof *s.tmp);
  s.keys = pk_malloc_array(dp, sizeof *s.keys);
  s.item_bin = pk_malloc_array(n, sizeof *s.item_bin);
  if (order == NULL || s.bins == NULL || s.col_foot == NULL || s.slots == NULL || s.tmp == NULL ||
      s.keys == NULL || s.item_bin == NULL || pk_tree_init(&s.cols, max_m) != 0 ||
      pk_tree_init(&s.col_room, max_m) != 0 || pk_tree_init(&s.bins_rt, max_m * dp) != 0) {
    rc = pk_fail(err, errlen, PK_ENOMEM, "%u sequences: out of memory", n);
    goto done;
  }
  saved_bins = pk_malloc_array((size_t)max_m * dp, sizeof *saved_bins);
  saved_item_bin = pk_malloc_array(n, sizeof *saved_item_bin);
  if (saved_bins == NULL || saved_item_bin == NULL) {
    rc = pk_fail(err, errlen, PK_ENOMEM, "%u sequences: out of memory", n);
    goto done;
  }
  uint64_t total_size = 0;
  for (uint32_t k = 0; k < n; k++)
    total_size += ctx->size[k];
  if (ctx->by_size != NULL) {
    memcpy(order, ctx->by_size, (size_t)n * sizeof *order);
  } else {
    for (uint32_t k = 0; k < n; k++)
      order[k] = k;
    pk_sort_by_cost_desc(ctx, order, n);
  }

  if (cfg->mode == PK_MODE_PADDED && !cfg->equal_count) {
    for (; m <= max_m; m += cfg->group) {
      rc = pk_auto_pack_padded_best(&s, order, m, saved_bins, saved_item_bin);
      if (rc != PK_EPRECOND)
        break;
    }
    if (rc == PK_EPRECOND || m > max_m)
      rc = pk_fail(err, errlen, PK_EPRECOND,
                   "%u sequences cannot be packed for parallel.dp %u under batching.max_tokens "
                   "and max_seqs in PADDED mode with at most %u micro-batches per rank",
                   n, dp, max_m);
    else if (rc != 0)
      pk_fail(err, errlen, rc, "%u sequences: out of memory", n);
    if (rc == 0) {
      /* The packing (deal_groups) left s.m at m. */
      rc = pk_auto_lower_padded(&s);
      if (rc != 0)
        pk_fail(err, errlen, rc, "%u sequences: out of memory", n);
    }
    if (rc != 0)
      goto done;
    goto deal;
  }
  if (cfg->mode == PK_MODE_PADDED) {
    rc = pk_auto_pack_padded_tiers(&s, order, m, max_m, &m);
    if (rc == PK_EPRECOND)
      rc = pk_fail(err, errlen, PK_EPRECOND,
                   "%u sequences cannot be packed for parallel.dp %u under batching.max_tokens "
                   "and max_seqs in PADDED mode with at most %u micro-batches per rank",
                   n, dp, max_m);
    if (rc != 0)
      goto done;
    goto deal;
  }
  /* The exact search's steps, shared by every count it is tried at. */
  pk_exact_budget_t exact = {.steps = PK_EXACT_STEPS};
  uint32_t exact_m = 0;    /* The last count it was tried at (0: none). */
  uint32_t ffd_m = 0;      /* 0: not probed yet. */
  uint32_t complete_m = 0; /* The count completion needed (max_seqs). */
  /* The bisection's ends: the last count that failed, the least that fit
   * (0: not bisecting). */
  uint32_t bis_lo = 0, bis_hi = 0;
  for (;;) {
    if (pk_stopped(ctx)) {
      rc = PK_ECANCELED;
      goto done;
    }
    if (m > max_m || m == 0) {
      rc = pk_fail(err, errlen, PK_EPRECOND,
                   "%u sequences cannot be packed for parallel.dp %u under batching.max_tokens "
                   "and max_seqs with at most %u micro-batches per rank (each micro-batch needs "
                   "a sequence); raise the cap or send more sequences",
                   n, dp, max_m);
      goto done;
    }
    s.m = m;
    if (cfg->equal_count) {
      rc = pk_auto_pack_tiers(&s, order);
      if (rc == PK_EPRECOND) {
        exact_m = m;
        rc = pk_auto_exact(&s, order, m, &exact);
      }
    } else if ((double)total_size > 0.99 * (double)m * dp * (double)cfg->cap) {
      /* Nearly full: first fit decreasing, the tightest packer here, goes
       * first; when it fails the column packings (less tight) are not
       * tried at this count. When it fits, they are tried and the better is
       * kept if one fits too (better columns); else the first fit packing,
       * kept aside, is restored. One probe pass (ffd_min_micro) tells the
       * counts first fit cannot fill, so those are not packed at all. */
      if (ffd_bins == NULL) {
        ffd_bins = pk_malloc_array((size_t)max_m * dp, sizeof *ffd_bins);
        ffd_item_bin = pk_malloc_array(n, sizeof *ffd_item_bin);
        if (ffd_bins == NULL || ffd_item_bin == NULL) {
          rc = pk_fail(err, errlen, PK_ENOMEM, "%u sequences: out of memory", n);
          goto done;
        }
      }
      bool repaired = false;
      if (ffd_m == 0) {
        /* The probe's packing is first fit at the first count it fits. */
        ffd_m = ffd_min_micro(&s, order, max_m);
        uint32_t bound = m;
        while (ffd_m != UINT32_MAX && m < ffd_m && m <= max_m)
          m += cfg->group;
        if (ffd_m == UINT32_MAX || m > max_m)
          continue; /* Fails at the top of the loop. */
        if (m > bound) {
          /* First fit needs more than the bound: repair it, or pack by
           * completion, at fewer. */
          uint32_t fit = m;
          rc = pk_auto_tighten(&s, order, bound, m, cfg->group, saved_bins, saved_item_bin, &fit);
          if (rc != 0) {
            pk_fail(err, errlen, rc, "%u sequences: out of memory", n);
            goto done;
          }
          repaired = fit < m;
          if (repaired)
            ffd_m = m = fit;
        }
        /* Still above the bound: the exact search (small batches), from
         * the bound up while it proves counts infeasible. Its packing is
         * in columns already. */
        bool exact_found = false;
        for (uint32_t c = bound; c < m && !exact_found; c += cfg->group) {
          pk_exact_budget_t before = exact;
          exact_m = c;
          rc = pk_auto_exact(&s, order, c, &exact);
          if (rc == PK_ENOMEM) {
            pk_fail(err, errlen, rc, "%u sequences: out of memory", n);
            goto done;
          }
          exact_found = rc == 0;
          /* Not run (a large batch), or out of steps: no count above. */
          if (exact.runs == before.runs || exact.exhausted != before.exhausted)
            break;
        }
        if (exact_found) {
          repaired = true;
          ffd_m = m = s.m;
        }
        s.m = m;
        rc = exact_found ? 0 : pk_auto_bins_finish(&s, order);
      } else {
        rc = m < ffd_m ? PK_EPRECOND : pk_auto_pack_bins_first(&s, order);
      }
      if (rc == 0) {
        /* Kept aside, so that it need not be packed again. The column
         * packings are less tight than first fit: below the count first fit
         * fills on its own (a repaired count) they are not tried, nor where
         * first fit is already within PK_AUTO_GOOD_ENOUGH of the step bound
         * (they could gain at most that much). Where they are tried and
         * fit, they are kept: their columns refine better (measured). Where
         * first fit is within PK_AUTO_CLOSE, the tier packing goes first. */
        size_t nbins = (size_t)m * dp;
        memcpy(ffd_bins, s.bins, nbins * sizeof *ffd_bins);
        memcpy(ffd_item_bin, s.item_bin, (size_t)n * sizeof *ffd_item_bin);
        double ffd_step = pk_auto_step(&s);
        double bound = pk_step_lower_bound(ctx, m, ffd_step);
        bool good = ffd_step <= bound * (1 + PK_AUTO_GOOD_ENOUGH);
        bool close = ffd_step <= bound * (1 + PK_AUTO_CLOSE);
        rc = repaired || good ? PK_EPRECOND
                              : pk_auto_pack_best(&s, order, close, saved_bins, saved_item_bin);
        if (rc == PK_EPRECOND) {
          memcpy(s.bins, ffd_bins, nbins * sizeof *ffd_bins);
          memcpy(s.item_bin, ffd_item_bin, (size_t)n * sizeof *ffd_item_bin);
          rc = 0;
        }
      }
    } else {
      rc = pk_auto_pack_best(&s, order, false, saved_bins, saved_item_bin);
      if (rc == PK_EPRECOND)
        rc = pk_auto_pack_bins_first(&s, order);
      if (rc == PK_EPRECOND && cfg->max_seqs != UINT32_MAX && m >= complete_m) {
        /* max_seqs: the column packings and first fit fill micro-batches
         * by tokens and run out of count first; completion keeps room for
         * later slots. Where it needs more than m, the counts below
         * its own are not packed by it again. */
        uint32_t used = 0;
        rc = pk_auto_pack_complete(&s, order, m * dp, max_m * dp, s.bins, s.item_bin, &used);
        if (rc == PK_EPRECOND)
          complete_m = UINT32_MAX; /* Not within max_m either. */
        if (rc == 0) {
          complete_m = (uint32_t)pk_round_up((used + dp - 1) / dp, cfg->group);
          /* Above m: completion's packing stays in s unless the exact
           * search (small batches) packs at m, in columns. */
          bool exact_found = false;
          if (complete_m > m && exact_m != m) {
            exact_m = m;
            int e = pk_auto_exact(&s, order, m, &exact);
            if (e == PK_ENOMEM) {
              pk_fail(err, errlen, e, "%u sequences: out of memory", n);
              goto done;
            }
            exact_found = e == 0;
          }
          if (exact_found) {
            rc = 0;
          } else if (complete_m > m + cfg->group && bis_hi == 0) {
            /* Far above m: first fit, the tightest of the other packings,
             * tells in one pass the count it needs. At or above
             * completion's, no count between fits by them in practice (the
             * bench's max_seqs 4 batches never did), so completion's
             * packing is taken at its own count; below, the least count is
             * bisected in (m, first fit's] (below). */
            size_t kept = (size_t)complete_m * dp;
            memcpy(saved_bins, s.bins, kept * sizeof *saved_bins);
            memcpy(saved_item_bin, s.item_bin, (size_t)n * sizeof *saved_item_bin);
            uint32_t ffd = ffd_min_micro(&s, order, max_m);
            if (ffd >= complete_m) {
              memcpy(s.bins, saved_bins, kept * sizeof *saved_bins);
              memset(s.bins + kept, 0, ((size_t)max_m * dp - kept) * sizeof *s.bins);
              memcpy(s.item_bin, saved_item_bin, (size_t)n * sizeof *saved_item_bin);
              m = complete_m;
            } else {
              bis_hi = ffd; /* bis_lo = m below. */
            }
          }
          if (!exact_found) {
            s.m = m;
            rc = complete_m <= m ? pk_auto_bins_finish(&s, order) : PK_EPRECOND;
          }
        }
      }
      if (rc == PK_EPRECOND && exact_m != m) {
        /* Every packing above missed m: the exact search (small
         * batches). */
        exact_m = m;
        rc = pk_auto_exact(&s, order, m, &exact);
      }
    }
    if (rc == 0 && pk_stopped(ctx))
      rc = PK_ECANCELED;
    if (rc == 0)
      rc = pk_auto_refine_columns(&s);
    if (rc == 0 && pk_stopped(ctx))
      rc = PK_ECANCELED;
    if (rc == 0)
      rc = pk_auto_lower_columns(&s);
    if (rc == PK_ECANCELED)
      goto done;
    if (rc != 0 && rc != PK_EPRECOND) {
      pk_fail(err, errlen, rc, "%u sequences: out of memory", n);
      goto done;
    }
    /* Where first fit has said it fits at bis_hi (below completion's
     * count, see above) and the packings fail below it, the least count
     * that fits is searched by bisection over (the last count that failed,
     * bis_hi], not one group at a time: under max_seqs the counts can lie
     * hundreds of groups apart (65536 RL sequences, max_seqs 4: the count
     * bound 16384, completion about 18000 micro-batches, and each failed
     * count cost two whole packings, 25 s in all; the note on issue 2,
     * session 19). The packing at the least count is made again at the
     * end (each try overwrites the state); every try is deterministic, but
     * should that try fail, the search goes on one group at a time from
     * there. */
    if (rc == 0 && (bis_hi == 0 || m <= bis_lo + cfg->group))
      break;
    if (rc == 0)
      bis_hi = m;
    else if (bis_hi != 0 && m >= bis_hi)
      bis_hi = 0;
    else if (bis_hi != 0)
      bis_lo = m;
    if (bis_hi == 0)
      m += cfg->group;
    else if (bis_hi - bis_lo <= cfg->group)
      m = bis_hi;
    else
      m = bis_lo + (bis_hi - bis_lo) / cfg->group / 2 * cfg->group;
  }
deal:
  if (pk_stopped(ctx)) {
    rc = PK_ECANCELED;
    goto done;
  }
  rc = deal_columns(&s, out);
  if (rc != 0)
    pk_fail(err, errlen, rc, "%u sequences: out of memory", n);
done:
  free(saved_bins);
  free(saved_item_bin);
  free(ffd_bins);
  free(ffd_item_bin);
  free(order);
  free(s.bins);
  free(s.col_foot);
  free(s.cols.t);
  free(s.bins_rt.t);
  free(s.col_room.t);
  free(s.slots);
  free(s.tmp);
  free(s.keys);
  free(s.item_bin);
  return rc;
}

int pk_auto_dp(const pk_ctx_t *ctx, uint32_t *rank) {
  uint32_t dp = ctx->cfg->dp, n = ctx->n;
  uint32_t *order = pk_malloc_array(n, sizeof *order);
  uint32_t *ranks = pk_malloc_array(dp, sizeof *ranks);
  uint32_t *tmp = pk_malloc_array(dp, sizeof *tmp);
  double *total = pk_calloc(dp, sizeof *total);
  int rc = 0;
  if (order == NULL || ranks == NULL || tmp == NULL || total == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  for (uint32_t k = 0; k < n; k++)
    order[k] = k;
  pk_sort_by_cost_desc(ctx, order, n);
  for (uint32_t t = 0; t < n; t += dp) {
    for (uint32_t r = 0; r < dp; r++)
      ranks[r] = r;
    pk_merge_sort_u32(ranks, tmp, dp, value_less, total);
    for (uint32_t i = 0; i < dp && t + i < n; i++) {
      uint32_t k = order[t + i];
      rank[k] = ranks[i];
      total[ranks[i]] += ctx->cost[k];
    }
  }
done:
  free(order);
  free(ranks);
  free(tmp);
  free(total);
  return rc;
}

int pk_auto_micro(const pk_ctx_t *ctx, const uint32_t *items, uint32_t nitems, uint32_t count,
                  uint32_t *micro) {
  if (count == 0 || count > nitems)
    return PK_EPRECOND;
  pk_bin_t *bins = pk_calloc(count, sizeof *bins);
  uint32_t *order = pk_malloc_array(nitems, sizeof *order);
  uint32_t *pos = pk_malloc_array(ctx->n, sizeof *pos);
  int rc = 0;
  if (bins == NULL || order == NULL || pos == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  for (uint32_t j = 0; j < nitems; j++) {
    order[j] = items[j];
    pos[items[j]] = j;
  }
  pk_sort_by_cost_desc(ctx, order, nitems);
  /* LPT: each item, costliest first, to the cheapest micro-batch with room;
   * the first `count` items open one micro-batch each. */
  for (uint32_t j = 0; j < nitems; j++) {
    uint32_t k = order[j];
    uint32_t best = UINT32_MAX;
    for (uint32_t q = 0; q < count; q++) {
      if (!pk_bin_fits(ctx, &bins[q], k))
        continue;
      if (best == UINT32_MAX || bins[q].count == 0 ||
          (bins[best].count != 0 && bins[q].cost < bins[best].cost)) {
        best = q;
        if (bins[q].count == 0)
          break;
      }
    }
    if (best == UINT32_MAX) {
      rc = PK_EPRECOND;
      goto done;
    }
    pk_bin_add(ctx, &bins[best], k);
    micro[pos[k]] = best;
  }
done:
  free(bins);
  free(order);
  free(pos);
  return rc;
}
