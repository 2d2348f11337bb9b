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
 *   - pack_levels: the first column's level is set by the largest item;
 *     items go to the first column where they fit under the cap without
 *     raising its level (cheapest micro-batch first), so the largest items
 *     fill the first columns and every later column's level is set by a
 *     smaller head: the shape of the step bound (bounds.c). Items above every
 *     level go to the column with the most room.
 *   - pack_bins_first, when the batch nearly fills M columns (or the level
 *     packing does not fit): first fit decreasing over all micro-batches,
 *     then micro-batches sorted by cost and dealt in tiers of dp (tier j is
 *     column j).
 *   - with equal_count, try_pack: tiers of dp like items, one per
 *     micro-batch, so every rank gets the same count.
 *   - refine_columns: moves and swaps inside each column between its
 *     costliest and cheapest micro-batches while the level falls.
 *  PADDED (rows x widest row):
 *   - pack_padded_groups: runs of like width closed at a target cost found
 *     by bisection, exactly M x dp of them, dealt in tiers of dp by cost;
 *     refine_padded then moves rows inside each column.
 *   - with equal_count, pack_padded: whole tiers per column.
 *  Finally deal_columns gives each column's micro-batches to ranks,
 *  costliest to the rank with the least total so far (DP balance for free:
 *  any permutation inside a column leaves the step cost unchanged).
 *
 * Costs: one O(n) radix sort (pipeline), O(n log dp) per packing try, and
 * bounded refinement per column. */
#include <stdlib.h>
#include <string.h>

#include "pk_internal.h"

/* Candidate columns or micro-batches tried for one tier or item. */
#define PK_AUTO_TRIES 16

/* A max segment tree over room left, to find the first column or
 * micro-batch with at least a given room in O(log size). */
typedef struct room_tree {
  uint32_t leaves; /* A power of two >= size. */
  uint64_t *t;     /* 2 * leaves; t[leaves + i] is the room of entry i. */
} room_tree_t;

static int tree_init(room_tree_t *rt, uint32_t size) {
  rt->leaves = 1;
  while (rt->leaves < size)
    rt->leaves *= 2;
  rt->t = pk_calloc((size_t)rt->leaves * 2, sizeof *rt->t);
  return rt->t == NULL ? PK_ENOMEM : 0;
}

static void tree_set(room_tree_t *rt, uint32_t i, uint64_t room) {
  uint32_t p = rt->leaves + i;
  rt->t[p] = room;
  for (p /= 2; p >= 1; p /= 2)
    rt->t[p] = PK_MAX(rt->t[2 * p], rt->t[2 * p + 1]);
}

/* The first entry at or after `from` with room >= need, or UINT32_MAX. */
static uint32_t tree_find(const room_tree_t *rt, uint32_t from, uint64_t need) {
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

typedef struct auto_state {
  const pk_ctx_t *ctx;
  uint32_t dp, m;
  pk_bin_t *bins;       /* m * dp, bin = column * dp + slot. */
  uint64_t *col_foot;   /* Largest micro-batch footprint of the column. */
  uint32_t *slots;      /* dp scratch. */
  uint32_t *tmp;        /* dp scratch. */
  uint32_t *item_bin;   /* n */
  room_tree_t cols;     /* Per column: room of its fullest micro-batch (tiers)
                         * or of its roomiest one plus one (level packing). */
  room_tree_t bins_rt;  /* Room of each micro-batch (phase 3). */
  room_tree_t col_room; /* Token room left per column (level packing). */
} auto_state_t;

/* The room micro-batch i has left (0 when it holds max_seqs items). */
static uint64_t bin_room(const auto_state_t *s, uint32_t i) {
  const pk_bin_t *b = &s->bins[i];
  const pk_cfg_t *cfg = s->ctx->cfg;
  if (b->count >= cfg->max_seqs)
    return 0;
  uint64_t f = pk_bin_footprint(cfg, b);
  return f >= cfg->cap ? 0 : cfg->cap - f;
}

/* Orders the dp bins of a column (slot numbers in s->slots): by cost
 * ascending (by_foot false) or by footprint ascending (by_foot true), ties by
 * the other key, then slot. A merge sort: deterministic and O(dp log dp). */
static bool slot_less(const auto_state_t *s, uint32_t base, uint32_t a, uint32_t b, bool by_foot) {
  const pk_bin_t *x = &s->bins[base + a], *y = &s->bins[base + b];
  uint64_t fx = pk_bin_footprint(s->ctx->cfg, x), fy = pk_bin_footprint(s->ctx->cfg, y);
  if (by_foot && fx != fy)
    return fx < fy;
  if (x->cost != y->cost)
    return x->cost < y->cost;
  if (fx != fy)
    return fx < fy;
  return a < b;
}

typedef struct slot_order {
  const auto_state_t *s;
  uint32_t base;
  bool by_foot;
} slot_order_t;

static bool slot_before(const void *arg, uint32_t a, uint32_t b) {
  const slot_order_t *o = arg;
  return slot_less(o->s, o->base, a, b, o->by_foot);
}

static void sort_slots(auto_state_t *s, uint32_t base, bool by_foot) {
  for (uint32_t i = 0; i < s->dp; i++)
    s->slots[i] = i;
  slot_order_t o = {s, base, by_foot};
  pk_merge_sort_u32(s->slots, s->tmp, s->dp, slot_before, &o);
}

/* Places a whole tier (dp items, costliest first) into column c, or returns
 * false and changes nothing. */
static bool place_tier(auto_state_t *s, uint32_t c, const uint32_t *items) {
  uint32_t base = c * s->dp;
  for (int attempt = 0; attempt < 2; attempt++) {
    sort_slots(s, base, attempt == 1);
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
      room = PK_MIN(room, bin_room(s, base + q));
    tree_set(&s->cols, c, room);
    return true;
  }
  return false;
}

/* Phase 3: items one by one, largest first, to the first micro-batch with
 * room. */
static int place_rest(auto_state_t *s, const uint32_t *items, uint32_t count) {
  if (count == 0)
    return 0;
  uint32_t nbins = s->m * s->dp;
  for (uint32_t i = 0; i < nbins; i++)
    tree_set(&s->bins_rt, i, bin_room(s, i));
  for (uint32_t j = 0; j < count; j++) {
    uint32_t k = items[j];
    uint64_t need = s->ctx->cfg->mode == PK_MODE_PADDED ? 1 : PK_MAX(s->ctx->size[k], 1);
    uint32_t at = 0, tries = 0;
    for (;;) {
      at = tree_find(&s->bins_rt, at, need);
      if (at == UINT32_MAX || at >= nbins || tries++ >= PK_AUTO_TRIES)
        return PK_EPRECOND;
      if (pk_bin_fits(s->ctx, &s->bins[at], k))
        break;
      at++;
    }
    pk_bin_add(s->ctx, &s->bins[at], k);
    s->item_bin[k] = at;
    tree_set(&s->bins_rt, at, bin_room(s, at));
  }
  return 0;
}

/* Per-column trees over the dp micro-batches: the cheapest one and the one
 * with the most room, each in O(log dp) per update. */
typedef struct col_trees {
  uint32_t leaves;   /* A power of two >= dp. */
  double *cost;      /* m * 2 * leaves: min cost of the subtree. */
  uint32_t *cost_at; /* The slot holding it. */
  uint64_t *room;    /* Max room + 1 of the subtree (0: full). */
  uint32_t *room_at;
} col_trees_t;

static void col_set(col_trees_t *ct, uint32_t c, uint32_t slot, double cost, uint64_t room) {
  size_t base = (size_t)c * 2 * ct->leaves;
  uint32_t p = ct->leaves + slot;
  ct->cost[base + p] = cost;
  ct->cost_at[base + p] = slot;
  ct->room[base + p] = room;
  ct->room_at[base + p] = slot;
  for (p /= 2; p >= 1; p /= 2) {
    size_t l = base + 2 * p, r = l + 1;
    bool left_cost = ct->cost[l] <= ct->cost[r];
    ct->cost[base + p] = left_cost ? ct->cost[l] : ct->cost[r];
    ct->cost_at[base + p] = left_cost ? ct->cost_at[l] : ct->cost_at[r];
    bool left_room = ct->room[l] >= ct->room[r];
    ct->room[base + p] = left_room ? ct->room[l] : ct->room[r];
    ct->room_at[base + p] = left_room ? ct->room_at[l] : ct->room_at[r];
  }
}

/* The room of micro-batch i plus one, so that a zero-size item needs 1:
 * 0 when it holds max_seqs items. */
static uint64_t room1(const auto_state_t *s, uint32_t i) {
  const pk_bin_t *b = &s->bins[i];
  const pk_cfg_t *cfg = s->ctx->cfg;
  if (b->count >= cfg->max_seqs)
    return 0;
  if (b->sum >= cfg->cap)
    return 1;
  uint64_t room = cfg->cap - b->sum;
  return room == UINT64_MAX ? room : room + 1;
}

/* PACKED, without equal_count: column levels set by their largest items.
 * Items, largest first, go to the first column where they fit under the
 * cap without raising the column's level (its costliest micro-batch; an
 * empty column takes any item and the item sets its level): the cheapest
 * micro-batch of the column, else the one with the most room. So the
 * largest items fill the first columns as far as the cap and their level
 * allow, which is the shape of the step bound (bounds.c), and the level of
 * every later column is set by a smaller head. An item that fits under no
 * level goes to the column with the most token room left in total (its
 * micro-batches can all grow, so its level rises evenly rather than one
 * roomy micro-batch rising alone), to its cheapest micro-batch with room;
 * else to the first micro-batch with room. When it fits nowhere, or a
 * micro-batch stays empty, this try fails (the caller falls back to
 * pack_bins_first). */
static int pack_levels(auto_state_t *s, const uint32_t *order) {
  const pk_ctx_t *ctx = s->ctx;
  uint32_t dp = s->dp, m = s->m, n = ctx->n;
  col_trees_t ct = {.leaves = 1};
  while (ct.leaves < dp)
    ct.leaves *= 2;
  size_t tn = (size_t)m * 2 * ct.leaves;
  ct.cost = pk_malloc_array(tn, sizeof *ct.cost);
  ct.cost_at = pk_malloc_array(tn, sizeof *ct.cost_at);
  ct.room = pk_calloc(tn, sizeof *ct.room);
  ct.room_at = pk_calloc(tn, sizeof *ct.room_at);
  double *level = pk_calloc(m, sizeof *level);
  uint64_t *col_room = pk_malloc_array(m, sizeof *col_room);
  uint64_t cfg_cap = ctx->cfg->cap;
  int rc = 0;
  if (ct.cost == NULL || ct.cost_at == NULL || ct.room == NULL || ct.room_at == NULL ||
      level == NULL || col_room == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  memset(s->bins, 0, (size_t)m * dp * sizeof *s->bins);
  memset(s->cols.t, 0, (size_t)s->cols.leaves * 2 * sizeof *s->cols.t);
  for (size_t i = 0; i < tn; i++)
    ct.cost[i] = 1e308;
  memset(s->bins_rt.t, 0, (size_t)s->bins_rt.leaves * 2 * sizeof *s->bins_rt.t);
  memset(s->col_room.t, 0, (size_t)s->col_room.leaves * 2 * sizeof *s->col_room.t);
  for (uint32_t c = 0; c < m; c++) {
    col_room[c] = cfg_cap >= UINT64_MAX / 2 / dp ? UINT64_MAX / 2 / m : cfg_cap * dp;
    tree_set(&s->col_room, c, col_room[c]);
    for (uint32_t q = 0; q < dp; q++) {
      col_set(&ct, c, q, 0, room1(s, c * dp + q));
      tree_set(&s->bins_rt, c * dp + q, room1(s, c * dp + q));
    }
    tree_set(&s->cols, c, ct.room[(size_t)c * 2 * ct.leaves + 1]);
  }
  double left_cost = 0;
  uint32_t opened = 0;
  for (uint32_t k = 0; k < n; k++)
    left_cost += ctx->cost[k];
  for (uint32_t j = 0; j < n; j++) {
    uint32_t k = order[j];
    uint64_t need = ctx->size[k] + 1;
    double ck = ctx->cost[k];
    uint32_t bin = UINT32_MAX, at = 0;
    for (uint32_t tries = 0; tries < PK_AUTO_TRIES; tries++) {
      uint32_t c = tree_find(&s->cols, at, need);
      if (c == UINT32_MAX || c >= m)
        break;
      size_t root = (size_t)c * 2 * ct.leaves + 1;
      uint32_t cheap = c * dp + ct.cost_at[root], roomy = c * dp + ct.room_at[root];
      double limit = level[c] * (1 + 1e-12);
      if (level[c] == 0 || (room1(s, cheap) >= need && s->bins[cheap].cost + ck <= limit)) {
        bin = cheap;
        break;
      }
      if (s->bins[roomy].cost + ck <= limit) {
        bin = roomy;
        break;
      }
      at = c + 1;
    }
    if (bin == UINT32_MAX && s->col_room.t[1] > 0) {
      /* Above every level: the column with the most room left in total
       * (its micro-batches can all grow, so its level rises evenly). */
      uint32_t c = tree_find(&s->col_room, 0, s->col_room.t[1]);
      size_t root = (size_t)c * 2 * ct.leaves + 1;
      uint32_t cheap = c * dp + ct.cost_at[root], roomy = c * dp + ct.room_at[root];
      if (room1(s, cheap) >= need)
        bin = cheap;
      else if (room1(s, roomy) >= need)
        bin = roomy;
    }
    if (bin == UINT32_MAX) {
      /* Above every level: the first micro-batch with room (first fit
       * keeps the token packing tight when the cap binds). */
      bin = tree_find(&s->bins_rt, 0, need);
      if (bin == UINT32_MAX || bin >= m * dp) {
        rc = PK_EPRECOND;
        goto done;
      }
    }
    uint32_t c = bin / dp;
    pk_bin_add(ctx, &s->bins[bin], k);
    s->item_bin[k] = bin;
    if (level[c] == 0 && opened < m) {
      /* A column opens: its level is its head's cost, or the mean level
       * the columns not yet open would need for the cost not yet placed,
       * whichever is larger (so that early columns take their share when
       * the batch is cost-heavy, not only their head's). */
      double share = left_cost / ((double)(m - opened) * dp);
      level[c] = PK_MAX(ck, share);
      opened++;
    }
    level[c] = PK_MAX(level[c], s->bins[bin].cost);
    left_cost -= ck;
    col_set(&ct, c, bin % dp, s->bins[bin].cost, room1(s, bin));
    tree_set(&s->bins_rt, bin, room1(s, bin));
    col_room[c] -= PK_MIN(col_room[c], ctx->size[k]);
    tree_set(&s->col_room, c, col_room[c]);
    tree_set(&s->cols, c, ct.room[(size_t)c * 2 * ct.leaves + 1]);
  }
  for (uint32_t i = 0; i < m * dp; i++)
    if (s->bins[i].count == 0) {
      rc = PK_EPRECOND;
      break;
    }
done:
  free(ct.cost);
  free(ct.cost_at);
  free(ct.room);
  free(ct.room_at);
  free(level);
  free(col_room);
  return rc;
}

/* PACKED fallback when the cap leaves almost no room: micro-batches first,
 * columns after. First fit decreasing over all m x dp micro-batches packs
 * the tokens tightest; micro-batches left empty take the smallest item of
 * the fullest multi-item ones; then the micro-batches, sorted by cost, are
 * dealt in tiers of dp (tier j is column j), so the micro-batches of a
 * column cost nearly the same. */
static bool bin_costlier(const void *arg, uint32_t x, uint32_t y) {
  const pk_bin_t *bins = arg;
  return bins[x].cost > bins[y].cost;
}

static int pack_bins_first(auto_state_t *s, const uint32_t *order) {
  const pk_ctx_t *ctx = s->ctx;
  uint32_t dp = s->dp, m = s->m, n = ctx->n, nbins = m * dp;
  memset(s->bins, 0, (size_t)nbins * sizeof *s->bins);
  int rc = place_rest(s, order, n);
  if (rc != 0)
    return rc;
  uint32_t *perm = pk_malloc_array(nbins, sizeof *perm);
  uint32_t *tmp = pk_malloc_array(nbins, sizeof *tmp);
  uint32_t *head = pk_malloc_array(nbins, sizeof *head);
  pk_bin_t *moved = pk_malloc_array(nbins, sizeof *moved);
  if (perm == NULL || tmp == NULL || head == NULL || moved == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  /* Empty micro-batches: each takes the smallest item of a micro-batch
   * with two or more. Per micro-batch a stack of its items, smallest on
   * top (order is size-descending, so the last pushed is the smallest). */
  uint32_t *next = pk_malloc_array(n, sizeof *next);
  if (next == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  for (uint32_t i = 0; i < nbins; i++)
    head[i] = UINT32_MAX;
  for (uint32_t j = 0; j < n; j++) {
    uint32_t k = order[j], b = s->item_bin[k];
    next[k] = head[b];
    head[b] = k;
  }
  uint32_t donor = 0;
  for (uint32_t i = 0; i < nbins && rc == 0; i++) {
    if (s->bins[i].count != 0)
      continue;
    while (donor < nbins && s->bins[donor].count < 2)
      donor++;
    if (donor == nbins) {
      rc = PK_EPRECOND;
      break;
    }
    uint32_t k = head[donor];
    head[donor] = next[k];
    pk_bin_t *d = &s->bins[donor];
    d->sum -= ctx->size[k];
    d->cost -= ctx->cost[k];
    d->count--;
    /* The width is only used in PADDED mode, which does not come here. */
    pk_bin_add(ctx, &s->bins[i], k);
    s->item_bin[k] = i;
  }
  free(next);
  if (rc != 0)
    goto done;
  /* Micro-batches by cost, descending (stable merge sort). */
  for (uint32_t i = 0; i < nbins; i++)
    perm[i] = i;
  pk_merge_sort_u32(perm, tmp, nbins, bin_costlier, s->bins);
  /* tmp: old bin -> new bin. */
  for (uint32_t q = 0; q < nbins; q++) {
    tmp[perm[q]] = q;
    moved[q] = s->bins[perm[q]];
  }
  memcpy(s->bins, moved, (size_t)nbins * sizeof *s->bins);
  for (uint32_t k = 0; k < n; k++)
    s->item_bin[k] = tmp[s->item_bin[k]];
done:
  free(perm);
  free(tmp);
  free(head);
  free(moved);
  return rc;
}

/* One packing try with m columns. Returns 0, PK_EPRECOND (does not fit) or
 * PK_ENOMEM. */
static int try_pack(auto_state_t *s, const uint32_t *order) {
  const pk_ctx_t *ctx = s->ctx;
  uint32_t dp = s->dp, m = s->m, n = ctx->n;
  memset(s->bins, 0, (size_t)m * dp * sizeof *s->bins);
  memset(s->col_foot, 0, (size_t)m * sizeof *s->col_foot);
  memset(s->cols.t, 0, (size_t)s->cols.leaves * 2 * sizeof *s->cols.t);
  memset(s->bins_rt.t, 0, (size_t)s->bins_rt.leaves * 2 * sizeof *s->bins_rt.t);
  uint32_t tiers = n / dp, t = 0;
  for (; t < tiers; t++) {
    const uint32_t *items = order + (size_t)t * dp;
    if (t < m) {
      if (!place_tier(s, t, items))
        return PK_EPRECOND; /* Cannot happen: every item fits alone. */
      continue;
    }
    /* The smallest item of the tier goes to the fullest micro-batch at
     * best, so a column needs at least that much room. */
    uint64_t need = PK_MAX(ctx->size[items[dp - 1]], 1);
    if (ctx->cfg->mode == PK_MODE_PADDED)
      need = 1;
    bool placed = false;
    uint32_t at = 0;
    for (uint32_t tries = 0; tries < PK_AUTO_TRIES; tries++) {
      at = tree_find(&s->cols, at, need);
      if (at == UINT32_MAX || at >= m)
        break;
      if (place_tier(s, at, items)) {
        placed = true;
        break;
      }
      at++;
    }
    if (!placed)
      break;
  }
  /* With equal counts every tier must stay whole. */
  if (t < tiers && ctx->cfg->equal_count)
    return PK_EPRECOND;
  return place_rest(s, order + (size_t)t * dp, n - t * dp);
}

/* PADDED mode: a micro-batch costs rows x its widest row, so rows of like
 * width must share micro-batches. Columns are runs of consecutive tiers
 * (sorted by width, descending): each column takes tiers while rows x the
 * width of its first (widest) tier fits the cap (greedy runs are optimal
 * for sorted widths), then the widest runs are split in two until there are
 * M columns. Left-over items (n mod dp) go where they widen least. */
static int pack_padded(auto_state_t *s, const uint32_t *order, uint32_t m, uint32_t max_m,
                       uint32_t *m_out) {
  const pk_ctx_t *ctx = s->ctx;
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = s->dp, n = ctx->n, tiers = n / dp;
  uint32_t *bounds = pk_malloc_array((size_t)max_m + 2, sizeof *bounds);
  if (bounds == NULL)
    return PK_ENOMEM;
  uint32_t used = 0;
  for (uint32_t a = 0; a < tiers;) {
    uint64_t width = ctx->size[order[(size_t)a * dp]];
    uint32_t b = a + 1;
    while (b < tiers && (uint64_t)(b - a + 1) * width <= cfg->cap && b - a + 1 <= cfg->max_seqs)
      b++;
    if (used >= max_m) {
      free(bounds);
      return PK_EPRECOND;
    }
    bounds[used++] = a;
    a = b;
  }
  bounds[used] = tiers;
  m = PK_MAX(m, (uint32_t)pk_round_up(used, cfg->group));
  int rc = PK_EPRECOND;
  for (; m <= max_m; m += cfg->group) {
    /* Split the widest multi-tier runs until there are m columns. */
    while (used < m) {
      uint32_t best = UINT32_MAX;
      uint64_t best_foot = 0;
      for (uint32_t c = 0; c < used; c++) {
        uint32_t rows = bounds[c + 1] - bounds[c];
        uint64_t foot = (uint64_t)rows * ctx->size[order[(size_t)bounds[c] * dp]];
        if (rows >= 2 && (best == UINT32_MAX || foot > best_foot)) {
          best = c;
          best_foot = foot;
        }
      }
      if (best == UINT32_MAX)
        break;
      memmove(&bounds[best + 2], &bounds[best + 1], (size_t)(used - best) * sizeof *bounds);
      bounds[best + 1] = bounds[best] + (bounds[best + 2] - bounds[best]) / 2;
      used++;
    }
    if (used != m)
      break;
    s->m = m;
    memset(s->bins, 0, (size_t)m * dp * sizeof *s->bins);
    memset(s->col_foot, 0, (size_t)m * sizeof *s->col_foot);
    bool ok = true;
    for (uint32_t c = 0; c < m && ok; c++)
      for (uint32_t t = bounds[c]; t < bounds[c + 1] && ok; t++)
        ok = place_tier(s, c, order + (size_t)t * dp);
    for (uint32_t i = tiers * dp; i < n && ok; i++) {
      uint32_t k = order[i], best = UINT32_MAX;
      uint64_t best_grow = 0;
      for (uint32_t q = 0; q < m * dp; q++) {
        if (!pk_bin_fits(ctx, &s->bins[q], k))
          continue;
        pk_bin_t after = s->bins[q];
        pk_bin_add(ctx, &after, k);
        uint64_t grow = pk_bin_footprint(cfg, &after) - pk_bin_footprint(cfg, &s->bins[q]);
        if (best == UINT32_MAX || grow < best_grow) {
          best = q;
          best_grow = grow;
        }
      }
      if (best == UINT32_MAX) {
        ok = false;
        break;
      }
      pk_bin_add(ctx, &s->bins[best], k);
      s->item_bin[k] = best;
    }
    if (ok) {
      rc = 0;
      break;
    }
  }
  free(bounds);
  *m_out = m;
  return rc;
}

/* PADDED mode without equal_count: groups of like width, then tiers of
 * groups.
 *
 * A PADDED micro-batch costs rows x c(width), so a group of consecutive
 * items in width order wastes the least padding. Groups are runs of the
 * width-sorted items, each closed at a target cost T: the run opened by
 * width w takes min(T / c(w), cap / w, max_seqs) rows (at least one). The
 * smallest T giving at most M x dp groups is found by bisection (the count
 * only falls as T grows, and T = infinity is the exact greedy grouping of
 * pk_micro_lower_bound, so M = that bound always works); the costliest
 * multi-row groups are then halved until there are exactly M x dp. Groups
 * sorted by cost, descending, are dealt in tiers of dp: tier j is column j,
 * so the micro-batches that run together cost nearly the same. */
typedef struct padded_group {
  uint32_t first, rows; /* A run of the width-sorted order. */
  double cost;          /* rows x c(widest). */
} padded_group_t;

/* Number of groups for target cost t (stops counting above limit). */
static uint32_t count_groups(const pk_ctx_t *ctx, const uint32_t *order, double t, uint32_t limit,
                             padded_group_t *out) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t n = ctx->n, g = 0;
  for (uint32_t i = 0; i < n;) {
    uint64_t w = ctx->size[order[i]];
    double c = ctx->cost[order[i]];
    uint64_t rows = cfg->max_seqs;
    if (w > 0)
      rows = PK_MIN(rows, cfg->cap / w);
    if (c > 0 && t / c < (double)rows)
      rows = (uint64_t)(t / c);
    if (rows == 0)
      rows = 1;
    if (rows > n - i)
      rows = n - i;
    if (g >= limit)
      return limit + 1;
    if (out != NULL)
      out[g] = (padded_group_t){i, (uint32_t)rows, (double)rows * c};
    g++;
    i += (uint32_t)rows;
  }
  return g;
}

static bool group_costlier(const void *arg, uint32_t x, uint32_t y) {
  const padded_group_t *grp = arg;
  return grp[x].cost > grp[y].cost;
}

static int pack_padded_groups(auto_state_t *s, const uint32_t *order, uint32_t m) {
  const pk_ctx_t *ctx = s->ctx;
  uint32_t dp = s->dp, target = m * dp;
  padded_group_t *grp = pk_malloc_array(target, sizeof *grp);
  uint32_t *gi = pk_malloc_array(target, sizeof *gi);
  uint32_t *gtmp = pk_malloc_array(target, sizeof *gtmp);
  int rc = 0;
  if (grp == NULL || gi == NULL || gtmp == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  /* Bisection on T between the costliest item and the total cost. */
  double lo = 0, hi = 0;
  for (uint32_t k = 0; k < ctx->n; k++)
    hi += ctx->cost[k];
  hi = hi * 2 + 1;
  if (count_groups(ctx, order, hi, target, NULL) > target) {
    rc = PK_EPRECOND;
    goto done;
  }
  for (int it = 0; it < 60 && hi - lo > hi * 1e-9; it++) {
    double mid = (lo + hi) / 2;
    if (count_groups(ctx, order, mid, target, NULL) <= target)
      hi = mid;
    else
      lo = mid;
  }
  uint32_t g = count_groups(ctx, order, hi, target, grp);
  /* Halve the costliest multi-row groups until there are exactly target;
   * each halving adds one group. n >= target, so one always exists. */
  while (g < target) {
    uint32_t best = UINT32_MAX;
    for (uint32_t q = 0; q < g; q++)
      if (grp[q].rows >= 2 && (best == UINT32_MAX || grp[q].cost > grp[best].cost))
        best = q;
    if (best == UINT32_MAX) {
      rc = PK_EPRECOND;
      goto done;
    }
    padded_group_t *b = &grp[best];
    uint32_t keep = b->rows - b->rows / 2, moved = b->rows / 2;
    uint32_t second = b->first + keep;
    b->rows = keep;
    b->cost = (double)keep * ctx->cost[order[b->first]];
    grp[g++] = (padded_group_t){second, moved, (double)moved * ctx->cost[order[second]]};
  }
  /* Groups by cost, descending (stable merge sort), then tier j -> column j. */
  for (uint32_t q = 0; q < g; q++)
    gi[q] = q;
  pk_merge_sort_u32(gi, gtmp, g, group_costlier, grp);
  s->m = m;
  memset(s->bins, 0, (size_t)m * dp * sizeof *s->bins);
  for (uint32_t q = 0; q < g; q++) {
    const padded_group_t *b = &grp[gi[q]];
    uint32_t bin = q; /* Column q / dp, slot q % dp. */
    for (uint32_t r = 0; r < b->rows; r++) {
      uint32_t k = order[b->first + r];
      pk_bin_add(ctx, &s->bins[bin], k);
      s->item_bin[k] = bin;
    }
  }
done:
  free(grp);
  free(gi);
  free(gtmp);
  return rc;
}

/* The footprint bin i would have with item `out` replaced by item `in`
 * (either may be UINT32_MAX for none). */
static uint64_t foot_after(const auto_state_t *s, const uint32_t *head, const uint32_t *next,
                           uint32_t i, uint32_t out, uint32_t in) {
  const pk_ctx_t *ctx = s->ctx;
  const pk_bin_t *b = &s->bins[i];
  if (ctx->cfg->mode != PK_MODE_PADDED) {
    uint64_t f = b->sum;
    if (out != UINT32_MAX)
      f -= ctx->size[out];
    if (in != UINT32_MAX)
      f += ctx->size[in];
    return f;
  }
  uint64_t w = in != UINT32_MAX ? ctx->size[in] : 0;
  for (uint32_t k = head[i]; k != UINT32_MAX; k = next[k])
    if (k != out && ctx->size[k] > w)
      w = ctx->size[k];
  uint32_t cnt = b->count - (out != UINT32_MAX) + (in != UINT32_MAX);
  return (uint64_t)cnt * w;
}

static void list_remove(uint32_t *head, uint32_t *next, uint32_t i, uint32_t k) {
  uint32_t *p = &head[i];
  while (*p != k)
    p = &next[*p];
  *p = next[k];
}

static void move_item(auto_state_t *s, uint32_t *head, uint32_t *next, uint32_t k, uint32_t to) {
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

/* Lock-step refinement: inside every column, repeatedly take the costliest
 * micro-batch and move one item to, or swap one pair with, one of the
 * cheapest micro-batches of the column when that lowers the column's
 * maximum and keeps both under the cap. Moves are skipped with equal_count
 * (they change counts); swaps keep counts. Bounded work per column: with
 * one or two columns (DP balancing alone, as verl's balance_batch asks) the
 * search is wider and runs until the column is level within 1e-6; with many
 * columns it is narrower and stops within 5e-4 of the column's mean (a
 * column's share of the step cost is small, and time grows with m). */
#define PK_REFINE_PARTNERS 4
#define PK_REFINE_SCAN 48
static int refine_columns(auto_state_t *s) {
  const pk_ctx_t *ctx = s->ctx;
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = s->dp, m = s->m, n = ctx->n;
  /* PADDED micro-batches are already level (same rows, similar widths), and
   * a width change makes every check a scan: refine packed layouts only. */
  if (dp < 2 || cfg->mode == PK_MODE_PADDED)
    return 0;
  uint32_t nbins = m * dp;
  uint32_t *head = pk_malloc_array(nbins, sizeof *head);
  uint32_t *next = pk_malloc_array(n, sizeof *next);
  if (head == NULL || next == NULL) {
    free(head);
    free(next);
    return PK_ENOMEM;
  }
  for (uint32_t i = 0; i < nbins; i++)
    head[i] = UINT32_MAX;
  for (uint32_t k = n; k-- > 0;) {
    next[k] = head[s->item_bin[k]];
    head[s->item_bin[k]] = k;
  }
  bool wide = m <= 2;
  uint32_t partners = wide ? PK_REFINE_PARTNERS : 2, scan = wide ? PK_REFINE_SCAN : 16;
  uint32_t iters = (wide ? 4 : 2) * dp;
  double tol = wide ? 1e-6 : 5e-4;
  for (uint32_t c = 0; c < m; c++) {
    uint32_t base = c * dp;
    double col_total = 0;
    for (uint32_t q = 0; q < dp; q++)
      col_total += s->bins[base + q].cost;
    for (uint32_t iter = 0; iter < iters; iter++) {
      uint32_t x = base;
      for (uint32_t q = 1; q < dp; q++)
        if (s->bins[base + q].cost > s->bins[x].cost)
          x = base + q;
      if (s->bins[x].cost <= col_total / dp * (1 + tol))
        break;
      /* The cheapest few micro-batches of the column. */
      uint32_t part[PK_REFINE_PARTNERS];
      uint32_t np = 0;
      for (uint32_t q = 0; q < dp; q++) {
        uint32_t y = base + q;
        if (y == x)
          continue;
        uint32_t at = np < partners ? np++ : partners;
        if (at == partners) {
          if (s->bins[y].cost >= s->bins[part[np - 1]].cost)
            continue;
          at = np - 1;
        }
        while (at > 0 && s->bins[part[at - 1]].cost > s->bins[y].cost) {
          part[at] = part[at - 1];
          at--;
        }
        part[at] = y;
      }
      double cx = s->bins[x].cost;
      double best = cx;
      uint32_t ba = UINT32_MAX, bb = UINT32_MAX, by = UINT32_MAX;
      for (uint32_t p = 0; p < np; p++) {
        uint32_t y = part[p];
        double cy = s->bins[y].cost;
        double gap = cx - cy;
        if (gap <= cx * 1e-9)
          continue;
        /* Bounded work: at most `scan` items of each side are looked
         * at (micro-batches with many items are level already). */
        uint32_t na = 0;
        for (uint32_t a = head[x]; a != UINT32_MAX && na < scan; a = next[a], na++) {
          double ca = ctx->cost[a];
          if (!cfg->equal_count && ca < gap && s->bins[y].count < cfg->max_seqs &&
              s->bins[x].count > 1) {
            double nm = PK_MAX(cx - ca, cy + ca);
            if (nm < best && foot_after(s, head, next, y, UINT32_MAX, a) <= cfg->cap) {
              best = nm;
              ba = a;
              bb = UINT32_MAX;
              by = y;
            }
          }
          uint32_t nb = 0;
          for (uint32_t b = head[y]; b != UINT32_MAX && nb < scan; b = next[b], nb++) {
            double d = ca - ctx->cost[b];
            if (d <= 0 || d >= gap)
              continue;
            double nm = PK_MAX(cx - d, cy + d);
            if (nm < best && foot_after(s, head, next, x, a, b) <= cfg->cap &&
                foot_after(s, head, next, y, b, a) <= cfg->cap) {
              best = nm;
              ba = a;
              bb = b;
              by = y;
            }
          }
        }
      }
      if (ba == UINT32_MAX || best > cx - cx * 1e-9)
        break;
      move_item(s, head, next, ba, by);
      if (bb != UINT32_MAX)
        move_item(s, head, next, bb, x);
    }
  }
  free(head);
  free(next);
  return 0;
}

/* PADDED refinement: a micro-batch costs rows x c(widest row). Inside every
 * column, repeatedly take the costliest micro-batch and move one of its rows
 * (its narrowest, or its widest, which may narrow it) to one of the two
 * cheapest micro-batches of the column when that lowers the column's
 * maximum and the receiver stays within the cap and max_seqs. Only without
 * equal_count (moves change counts). Bounded work per column. */
static double padded_cost(const pk_cfg_t *cfg, uint32_t count, uint64_t width) {
  return (double)count * pk_slot_cost(cfg, width);
}

static int refine_padded(auto_state_t *s) {
  const pk_ctx_t *ctx = s->ctx;
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = s->dp, m = s->m, n = ctx->n, nbins = m * dp;
  if (dp < 2)
    return 0;
  uint32_t *head = pk_malloc_array(nbins, sizeof *head);
  uint32_t *next = pk_malloc_array(n, sizeof *next);
  double *real = pk_malloc_array(nbins, sizeof *real);
  if (head == NULL || next == NULL || real == NULL) {
    free(head);
    free(next);
    free(real);
    return PK_ENOMEM;
  }
  for (uint32_t i = 0; i < nbins; i++) {
    head[i] = UINT32_MAX;
    real[i] = padded_cost(cfg, s->bins[i].count, s->bins[i].width);
  }
  for (uint32_t k = n; k-- > 0;) {
    next[k] = head[s->item_bin[k]];
    head[s->item_bin[k]] = k;
  }
  for (uint32_t c = 0; c < m; c++) {
    uint32_t base = c * dp;
    for (uint32_t iter = 0; iter < 2 * dp; iter++) {
      uint32_t x = base, y1 = UINT32_MAX, y2 = UINT32_MAX;
      for (uint32_t q = 0; q < dp; q++) {
        uint32_t i = base + q;
        if (real[i] > real[x])
          x = i;
        if (y1 == UINT32_MAX || real[i] < real[y1]) {
          y2 = y1;
          y1 = i;
        } else if (y2 == UINT32_MAX || real[i] < real[y2]) {
          y2 = i;
        }
      }
      const pk_bin_t *bx = &s->bins[x];
      if (bx->count < 2)
        break;
      /* The narrowest and the widest rows of x, and x's width without its
       * widest row. */
      uint32_t narrow = UINT32_MAX, wide = UINT32_MAX;
      uint64_t second = 0;
      for (uint32_t k = head[x]; k != UINT32_MAX; k = next[k]) {
        if (narrow == UINT32_MAX || ctx->size[k] < ctx->size[narrow])
          narrow = k;
        if (wide == UINT32_MAX || ctx->size[k] > ctx->size[wide])
          wide = k;
      }
      for (uint32_t k = head[x]; k != UINT32_MAX; k = next[k])
        if (k != wide)
          second = PK_MAX(second, ctx->size[k]);
      double best = real[x];
      uint32_t bk = UINT32_MAX, by = UINT32_MAX;
      uint32_t cand[2] = {narrow, wide};
      uint32_t ys[2] = {y1, y2};
      for (int a = 0; a < 2; a++) {
        uint32_t k = cand[a];
        uint64_t wx = k == wide ? second : bx->width;
        double cx = padded_cost(cfg, bx->count - 1, wx);
        for (int b = 0; b < 2; b++) {
          uint32_t y = ys[b];
          if (y == UINT32_MAX || y == x)
            continue;
          const pk_bin_t *bb = &s->bins[y];
          uint64_t wy = PK_MAX(bb->width, ctx->size[k]);
          if (bb->count + 1 > cfg->max_seqs || (uint64_t)(bb->count + 1) * wy > cfg->cap)
            continue;
          double cy = padded_cost(cfg, bb->count + 1, wy);
          double peak = PK_MAX(cx, cy);
          if (peak < best * (1 - 1e-12)) {
            best = peak;
            bk = k;
            by = y;
          }
        }
      }
      if (bk == UINT32_MAX)
        break;
      move_item(s, head, next, bk, by);
      real[x] = padded_cost(cfg, s->bins[x].count, s->bins[x].width);
      real[by] = padded_cost(cfg, s->bins[by].count, s->bins[by].width);
    }
  }
  free(head);
  free(next);
  free(real);
  return 0;
}

/* The step cost of the state: the sum over columns of the costliest
 * micro-batch (PACKED costs). */
static double state_step(const auto_state_t *s) {
  double step = 0;
  for (uint32_t c = 0; c < s->m; c++) {
    double mx = 0;
    for (uint32_t q = 0; q < s->dp; q++)
      mx = PK_MAX(mx, s->bins[(size_t)c * s->dp + q].cost);
    step += mx;
  }
  return step;
}

/* PACKED without equal_count: the level packing and the tier packing both
 * have batches they do best (few columns with large heads; many columns of
 * like items), so both run and the lower step cost is kept. saved_* hold
 * m x dp micro-batches and n items. */
static int pack_best(auto_state_t *s, const uint32_t *order, pk_bin_t *saved_bins,
                     uint32_t *saved_item_bin) {
  size_t nbins = (size_t)s->m * s->dp, n = s->ctx->n;
  int levels = pack_levels(s, order);
  if (levels != 0 && levels != PK_EPRECOND)
    return levels;
  double levels_step = 0;
  if (levels == 0) {
    levels_step = state_step(s);
    memcpy(saved_bins, s->bins, nbins * sizeof *saved_bins);
    memcpy(saved_item_bin, s->item_bin, n * sizeof *saved_item_bin);
  }
  int tiers = try_pack(s, order);
  if (tiers != 0 && tiers != PK_EPRECOND)
    return tiers;
  if (levels == 0 && (tiers != 0 || levels_step < state_step(s))) {
    memcpy(s->bins, saved_bins, nbins * sizeof *saved_bins);
    memcpy(s->item_bin, saved_item_bin, n * sizeof *saved_item_bin);
  }
  return levels == 0 || tiers == 0 ? 0 : PK_EPRECOND;
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
    /* Micro-batches of the column, costliest first: sort_slots gives
     * ascending cost, so walk it backwards. */
    sort_slots(s, base, false);
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

int pk_auto_assign(const pk_ctx_t *ctx, pk_assign_t *out, char *err, size_t errlen) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = cfg->dp, n = ctx->n;
  uint32_t max_m = n / dp;
  uint32_t m = pk_micro_lower_bound(ctx);
  auto_state_t s = {.ctx = ctx, .dp = dp};
  pk_bin_t *saved_bins = NULL;
  uint32_t *saved_item_bin = NULL;
  int rc = 0;
  uint32_t *order = pk_malloc_array(n, sizeof *order);
  s.bins = pk_malloc_array((size_t)max_m * dp, sizeof *s.bins);
  s.col_foot = pk_malloc_array(max_m, sizeof *s.col_foot);
  s.slots = pk_malloc_array(dp, sizeof *s.slots);
  s.tmp = pk_malloc_array(dp, sizeof *s.tmp);
  s.item_bin = pk_malloc_array(n, sizeof *s.item_bin);
  if (order == NULL || s.bins == NULL || s.col_foot == NULL || s.slots == NULL || s.tmp == NULL ||
      s.item_bin == NULL || tree_init(&s.cols, max_m) != 0 || tree_init(&s.col_room, max_m) != 0 ||
      tree_init(&s.bins_rt, max_m * dp) != 0) {
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
      rc = pack_padded_groups(&s, order, m);
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
    if (rc != 0)
      goto done;
    if ((rc = refine_padded(&s)) != 0) {
      pk_fail(err, errlen, rc, "%u sequences: out of memory", n);
      goto done;
    }
    goto deal;
  }
  if (cfg->mode == PK_MODE_PADDED) {
    rc = pack_padded(&s, order, m, max_m, &m);
    if (rc == PK_EPRECOND)
      rc = pk_fail(err, errlen, PK_EPRECOND,
                   "%u sequences cannot be packed for parallel.dp %u under batching.max_tokens "
                   "and max_seqs in PADDED mode with at most %u micro-batches per rank",
                   n, dp, max_m);
    if (rc != 0)
      goto done;
    goto deal;
  }
  for (;;) {
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
      rc = try_pack(&s, order);
    } else if ((double)total_size > 0.99 * (double)m * dp * (double)cfg->cap) {
      /* Nearly full: first fit decreasing, the tightest packer here, goes
       * first; when it fails the column packings (less tight) are not
       * tried at this count. When it fits, they are tried and the better is
       * kept if one fits too (better columns); else first fit is packed
       * again. */
      rc = pack_bins_first(&s, order);
      if (rc == 0) {
        rc = pack_best(&s, order, saved_bins, saved_item_bin);
        if (rc == PK_EPRECOND)
          rc = pack_bins_first(&s, order);
      }
    } else {
      rc = pack_best(&s, order, saved_bins, saved_item_bin);
      if (rc == PK_EPRECOND)
        rc = pack_bins_first(&s, order);
    }
    if (rc == 0)
      rc = refine_columns(&s);
    if (rc == 0)
      break;
    if (rc != PK_EPRECOND) {
      pk_fail(err, errlen, rc, "%u sequences: out of memory", n);
      goto done;
    }
    m += cfg->group;
  }
deal:
  rc = deal_columns(&s, out);
  if (rc != 0)
    pk_fail(err, errlen, rc, "%u sequences: out of memory", n);
done:
  free(saved_bins);
  free(saved_item_bin);
  free(order);
  free(s.bins);
  free(s.col_foot);
  free(s.cols.t);
  free(s.bins_rt.t);
  free(s.col_room.t);
  free(s.slots);
  free(s.tmp);
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
