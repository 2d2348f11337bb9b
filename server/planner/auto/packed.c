/* AUTO's PACKED packings: the level packing, first fit with tiers of
 * micro-batches, the tier packing (equal counts), the choice between them
 * and the in-column refinement (see the comment at auto.h). */
#include <stdlib.h>
#include <string.h>

#include "auto.h"

/* Per-column trees over the dp micro-batches: the cheapest one and the one
 * with the most room, each in O(log dp) per update. One node per record,
 * so an update touches one cache line per level. */
typedef struct col_node {
  double cost;      /* Min cost of the subtree. */
  uint64_t room;    /* Max room + 1 of the subtree (0: full). */
  uint32_t cost_at; /* The slot holding the min cost. */
  uint32_t room_at; /* The slot holding the max room. */
} col_node_t;

typedef struct col_trees {
  uint32_t leaves; /* A power of two >= dp. */
  col_node_t *t;   /* m * 2 * leaves. */
} col_trees_t;

/* Recomputes inner node p of the column tree at `base` from its children;
 * returns whether it changed. */
static bool col_pull(col_trees_t *ct, size_t base, uint32_t p) {
  const col_node_t *l = &ct->t[base + 2 * p], *r = l + 1;
  col_node_t v;
  const col_node_t *c = l->cost <= r->cost ? l : r;
  const col_node_t *o = l->room >= r->room ? l : r;
  v.cost = c->cost;
  v.cost_at = c->cost_at;
  v.room = o->room;
  v.room_at = o->room_at;
  col_node_t *at = &ct->t[base + p];
  if (at->cost == v.cost && at->cost_at == v.cost_at && at->room == v.room &&
      at->room_at == v.room_at)
    return false;
  *at = v;
  return true;
}

static void col_set(col_trees_t *ct, uint32_t c, uint32_t slot, double cost, uint64_t room) {
  size_t base = (size_t)c * 2 * ct->leaves;
  uint32_t p = ct->leaves + slot;
  ct->t[base + p] = (col_node_t){.cost = cost, .room = room, .cost_at = slot, .room_at = slot};
  /* Once a node is unchanged, so is every node above it. */
  for (p /= 2; p >= 1 && col_pull(ct, base, p); p /= 2)
    ;
}

/* Column c with dp empty micro-batches of room `room` each (the leaves
 * past dp: cost PK_AUTO_NO_LEVEL, room 0), in O(leaves). */
static void col_init_empty(col_trees_t *ct, uint32_t c, uint32_t dp, uint64_t room) {
  size_t base = (size_t)c * 2 * ct->leaves;
  for (uint32_t q = 0; q < ct->leaves; q++)
    ct->t[base + ct->leaves + q] = (col_node_t){.cost = q < dp ? 0 : PK_AUTO_NO_LEVEL,
                                                .room = q < dp ? room : 0,
                                                .cost_at = q,
                                                .room_at = q};
  for (uint32_t p = ct->leaves - 1; p >= 1; p--) {
    ct->t[base + p] = (col_node_t){0};
    col_pull(ct, base, p);
  }
}

/* The root of column c's tree. */
static const col_node_t *col_root(const col_trees_t *ct, uint32_t c) {
  return &ct->t[(size_t)c * 2 * ct->leaves + 1];
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
 * pk_auto_pack_bins_first). The columns tried are found by
 * pk_find_room_head: room for the item and headroom under the level for
 * its cost, so a column that cannot take it costs no try (at most
 * PK_AUTO_TRIES columns are tried per item). */
int pk_auto_pack_levels(auto_state_t *s, const uint32_t *order) {
  const pk_ctx_t *ctx = s->ctx;
  uint32_t dp = s->dp, m = s->m, n = ctx->n;
  col_trees_t ct = {.leaves = 1};
  while (ct.leaves < dp)
    ct.leaves *= 2;
  size_t tn = (size_t)m * 2 * ct.leaves;
  ct.t = pk_malloc_array(tn, sizeof *ct.t);
  double *level = pk_calloc(m, sizeof *level);
  uint64_t *col_room = pk_malloc_array(m, sizeof *col_room);
  head_tree_t ht = {.leaves = s->cols.leaves};
  ht.t = pk_malloc_array((size_t)ht.leaves * 2, sizeof *ht.t);
  uint64_t cfg_cap = ctx->cfg->cap;
  int rc = 0;
  if (ct.t == NULL || level == NULL || col_room == NULL || ht.t == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  memset(s->bins, 0, (size_t)m * dp * sizeof *s->bins);
  memset(s->cols.t, 0, (size_t)s->cols.leaves * 2 * sizeof *s->cols.t);
  memset(s->col_room.t, 0, (size_t)s->col_room.leaves * 2 * sizeof *s->col_room.t);
  /* The per-micro-batch tree (bins_rt) is built only when the first item
   * needs first fit: most packings never do. */
  bool bins_rt_live = false;
  uint64_t empty_room = room1(s, 0);
  for (uint32_t c = 0; c < m; c++) {
    col_room[c] = cfg_cap >= UINT64_MAX / 2 / dp ? UINT64_MAX / 2 / m : cfg_cap * dp;
    s->col_room.t[s->col_room.leaves + c] = col_room[c];
    col_init_empty(&ct, c, dp, empty_room);
    s->cols.t[s->cols.leaves + c] = col_root(&ct, c)->room;
  }
  pk_tree_rebuild(&s->col_room);
  pk_tree_rebuild(&s->cols);
  for (uint32_t c = 0; c < ht.leaves; c++)
    ht.t[ht.leaves + c] = c < m ? PK_AUTO_NO_LEVEL : -1.0;
  for (uint32_t p = ht.leaves - 1; p >= 1; p--)
    ht.t[p] = PK_MAX(ht.t[2 * p], ht.t[2 * p + 1]);
  double left_cost = 0;
  uint32_t opened = 0;
  for (uint32_t k = 0; k < n; k++)
    left_cost += ctx->cost[k];
  for (uint32_t j = 0; j < n; j++) {
    if (pk_auto_tick(s->stop, 1)) {
      rc = PK_ECANCELED;
      goto done;
    }
    uint32_t k = order[j];
    uint64_t need = ctx->size[k] + 1;
    double ck = ctx->cost[k];
    uint32_t bin = UINT32_MAX, at = 0;
    for (uint32_t tries = 0; tries < PK_AUTO_TRIES; tries++) {
      /* The head test is a little looser than the one below (rounding):
       * it only skips columns that cannot take k. */
      uint32_t c = pk_find_room_head(&s->cols, &ht, at, need, ck * (1 - PK_AUTO_REL_EPS));
      if (c == UINT32_MAX || c >= m)
        break;
      const col_node_t *root = col_root(&ct, c);
      uint32_t cheap = c * dp + root->cost_at, roomy = c * dp + root->room_at;
      double limit = level[c] * (1 + PK_AUTO_TIE_EPS);
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
      uint32_t c = pk_tree_find(&s->col_room, 0, s->col_room.t[1]);
      const col_node_t *root = col_root(&ct, c);
      uint32_t cheap = c * dp + root->cost_at, roomy = c * dp + root->room_at;
      if (room1(s, cheap) >= need)
        bin = cheap;
      else if (room1(s, roomy) >= need)
        bin = roomy;
    }
    if (bin == UINT32_MAX) {
      /* Above every level: the first micro-batch with room (first fit
       * keeps the token packing tight when the cap binds). */
      if (!bins_rt_live) {
        for (uint32_t i = 0; i < s->bins_rt.leaves; i++)
          s->bins_rt.t[s->bins_rt.leaves + i] = i < m * dp ? room1(s, i) : 0;
        pk_tree_rebuild(&s->bins_rt);
        bins_rt_live = true;
      }
      bin = pk_tree_find(&s->bins_rt, 0, need);
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
    if (bins_rt_live)
      pk_tree_set(&s->bins_rt, bin, room1(s, bin));
    col_room[c] -= PK_MIN(col_room[c], ctx->size[k]);
    pk_tree_set(&s->col_room, c, col_room[c]);
    pk_tree_set(&s->cols, c, col_root(&ct, c)->room);
    pk_head_set(&ht, c, level[c] * (1 + PK_AUTO_TIE_EPS) - col_root(&ct, c)->cost);
  }
  for (uint32_t i = 0; i < m * dp; i++)
    if (s->bins[i].count == 0) {
      rc = PK_EPRECOND;
      break;
    }
done:
  free(ct.t);
  free(level);
  free(col_room);
  free(ht.t);
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

int pk_auto_pack_bins_first(auto_state_t *s, const uint32_t *order) {
  if (!pk_auto_clear_bins(s, (size_t)s->m * s->dp))
    return PK_ECANCELED;
  int rc = pk_auto_place_rest(s, order, s->ctx->n);
  return rc != 0 ? rc : pk_auto_bins_finish(s, order);
}

int pk_auto_bins_finish(auto_state_t *s, const uint32_t *order) {
  const pk_ctx_t *ctx = s->ctx;
  uint32_t dp = s->dp, m = s->m, n = ctx->n, nbins = m * dp;
  int rc = 0;
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
  for (uint32_t j = 0; j < n && rc == 0; j++) {
    if (pk_auto_tick_loop(s->stop, j))
      rc = PK_ECANCELED;
    uint32_t k = order[j], b = s->item_bin[k];
    next[k] = head[b];
    head[b] = k;
  }
  uint32_t donor = 0;
  for (uint32_t i = 0; i < nbins && rc == 0; i++) {
    if (pk_auto_tick_loop(s->stop, i))
      rc = PK_ECANCELED;
    if (rc != 0 || s->bins[i].count != 0)
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
  /* Micro-batches by cost, descending (stable merge sort); a poll on each
   * side of it (O(nbins log nbins), tens of milliseconds at 4 M items). */
  if (pk_auto_poll(s->stop)) {
    rc = PK_ECANCELED;
    goto done;
  }
  for (uint32_t i = 0; i < nbins; i++)
    perm[i] = i;
  pk_merge_sort_u32(perm, tmp, nbins, bin_costlier, s->bins);
  if (pk_auto_poll(s->stop)) {
    rc = PK_ECANCELED;
    goto done;
  }
  pk_auto_permute_bins(s, perm, nbins, tmp, moved);
  if (pk_auto_poll(s->stop))
    rc = PK_ECANCELED;
done:
  free(perm);
  free(tmp);
  free(head);
  free(moved);
  return rc;
}

/* One packing try with m columns. Returns 0, PK_EPRECOND (does not fit) or
 * PK_ENOMEM. */
int pk_auto_pack_tiers(auto_state_t *s, const uint32_t *order) {
  const pk_ctx_t *ctx = s->ctx;
  uint32_t dp = s->dp, m = s->m, n = ctx->n;
  memset(s->bins, 0, (size_t)m * dp * sizeof *s->bins);
  memset(s->col_foot, 0, (size_t)m * sizeof *s->col_foot);
  memset(s->cols.t, 0, (size_t)s->cols.leaves * 2 * sizeof *s->cols.t);
  memset(s->bins_rt.t, 0, (size_t)s->bins_rt.leaves * 2 * sizeof *s->bins_rt.t);
  uint32_t tiers = n / dp, t = 0;
  for (; t < tiers; t++) {
    if (pk_auto_tick(s->stop, dp))
      return PK_ECANCELED;
    const uint32_t *items = order + (size_t)t * dp;
    if (t < m) {
      if (!pk_auto_place_tier(s, t, items))
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
      at = pk_tree_find(&s->cols, at, need);
      if (at == UINT32_MAX || at >= m)
        break;
      if (pk_auto_place_tier(s, at, items)) {
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
  return pk_auto_place_rest(s, order + (size_t)t * dp, n - t * dp);
}

/* Whether micro-batch i stays within the cap with item `out` replaced by
 * item `in` (`out` may be UINT32_MAX for none). PACKED footprints: token
 * sums. */
static bool swap_fits(const auto_state_t *s, uint32_t i, uint32_t out, uint32_t in) {
  const pk_ctx_t *ctx = s->ctx;
  uint64_t f = s->bins[i].sum + ctx->size[in];
  if (out != UINT32_MAX)
    f -= ctx->size[out];
  return f <= ctx->cfg->cap;
}

/* Lock-step refinement: inside every column, repeatedly take the costliest
 * micro-batch and move one item to, or swap one pair with, one of the
 * cheapest micro-batches of the column when that lowers the column's
 * maximum and keeps both under the cap. Moves are skipped with equal_count
 * (they change counts); swaps keep counts. Bounded work per column: with
 * one or two columns (DP balancing alone, as verl's balance_batch asks) the
 * search is wider and runs until the column is level within PK_REFINE_TOL_WIDE; with many
 * columns it is narrower and stops within PK_REFINE_TOL of the column's mean (knobs.h). */

/* The number of values in v[0..n) (ascending) below x, without branches on
 * the comparisons (the refinement runs this for every item it scans). */
static uint32_t count_below(const double *v, uint32_t n, double x) {
  if (n == 0)
    return 0;
  const double *base = v;
  while (n > 1) {
    uint32_t half = n / 2;
    base = base[half] < x ? base + half : base;
    n -= half;
  }
  return (uint32_t)(base - v) + (*base < x);
}

int pk_auto_refine_columns(auto_state_t *s) {
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
  /* With one or two columns (the wide search below), every micro-batch
   * keeps its first PK_REFINE_SCAN items sorted by cost ascending until it
   * changes: the cheapest micro-batches of a column stay partners over many
   * steps. Otherwise one scratch row is sorted afresh for each partner. */
  bool wide = m <= 2;
  uint32_t rows = wide ? nbins : 1;
  uint32_t *sorted = pk_malloc_array((size_t)rows * PK_REFINE_SCAN, sizeof *sorted);
  double *sorted_cost = pk_malloc_array((size_t)rows * PK_REFINE_SCAN, sizeof *sorted_cost);
  uint32_t *nsorted = pk_malloc_array(rows, sizeof *nsorted);
  if (head == NULL || next == NULL || sorted == NULL || sorted_cost == NULL || nsorted == NULL) {
    free(head);
    free(next);
    free(sorted);
    free(sorted_cost);
    free(nsorted);
    return PK_ENOMEM;
  }
  for (uint32_t i = 0; i < rows; i++)
    nsorted[i] = UINT32_MAX; /* Not sorted yet. */
  pk_auto_bin_lists(s, head, next);
  uint32_t partners = wide ? PK_REFINE_PARTNERS : PK_REFINE_PARTNERS_MANY;
  uint32_t scan = wide ? PK_REFINE_SCAN : PK_REFINE_SCAN_MANY;
  uint32_t iters = (wide ? PK_REFINE_ROUNDS_WIDE : PK_REFINE_ROUNDS) * dp;
  double tol = wide ? PK_REFINE_TOL_WIDE : PK_REFINE_TOL;
  int rc = 0;
  for (uint32_t c = 0; c < m && rc == 0; c++) {
    uint32_t base = c * dp;
    double col_total = 0;
    for (uint32_t q = 0; q < dp; q++)
      col_total += s->bins[base + q].cost;
    for (uint32_t iter = 0; iter < iters; iter++) {
      if (pk_auto_tick(s->stop, dp)) {
        rc = PK_ECANCELED;
        break;
      }
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
        if (gap <= cx * PK_AUTO_REL_EPS)
          continue;
        /* No move or swap with y leaves both below (cx + cy) / 2, and the
         * partners come cheapest first: once that is not below the best
         * found (less a rounding margin), neither y nor any later partner
         * can do better. */
        if ((cx + cy) / 2 - cx * PK_AUTO_TIE_EPS >= best)
          break;
        /* Bounded work: at most `scan` items of each side are looked at
         * (micro-batches with many items are level already). y's items
         * sorted by cost ascending, for the swap search below. */
        uint32_t row = wide ? y : 0;
        uint32_t *ys = &sorted[(size_t)row * PK_REFINE_SCAN];
        double *ysc = &sorted_cost[(size_t)row * PK_REFINE_SCAN];
        uint32_t ny = wide ? nsorted[row] : UINT32_MAX;
        if (ny == UINT32_MAX) {
          ny = pk_auto_sorted_items(s, head, next, y, scan, ys);
          nsorted[row] = ny;
          for (uint32_t j = 0; j < ny; j++)
            ysc[j] = ctx->cost[ys[j]];
        }
        uint32_t na = 0;
        for (uint32_t a = head[x]; a != UINT32_MAX && na < scan; a = next[a], na++) {
          double ca = ctx->cost[a];
          if (!cfg->equal_count && ca < gap && s->bins[y].count < cfg->max_seqs &&
              s->bins[x].count > 1) {
            double nm = PK_MAX(cx - ca, cy + ca);
            if (nm < best && swap_fits(s, y, UINT32_MAX, a)) {
              best = nm;
              ba = a;
              bb = UINT32_MAX;
              by = y;
            }
          }
          /* A swap a <-> b moves d = ca - cb from x to y: the new maximum
           * max(cx - d, cy + d) is least for d nearest gap / 2, so only
           * the two items of y around cost ca - gap / 2 are candidates
           * (each still checked against the cap on both sides). */
          uint32_t lo = count_below(ysc, ny, ca - gap / 2);
          for (uint32_t side = 0; side < 2; side++) {
            if (side == 0 ? lo == 0 : lo >= ny)
              continue;
            uint32_t b = ys[side == 0 ? lo - 1 : lo];
            double d = ca - ysc[side == 0 ? lo - 1 : lo];
            if (d <= 0 || d >= gap)
              continue;
            double nm = PK_MAX(cx - d, cy + d);
            if (nm < best && swap_fits(s, x, a, b) && swap_fits(s, y, b, a)) {
              best = nm;
              ba = a;
              bb = b;
              by = y;
            }
          }
        }
      }
      if (ba == UINT32_MAX || best > cx - cx * PK_AUTO_REL_EPS)
        break;
      pk_auto_move_item(s, head, next, ba, by);
      if (bb != UINT32_MAX)
        pk_auto_move_item(s, head, next, bb, x);
      if (wide)
        nsorted[x] = nsorted[by] = UINT32_MAX;
    }
  }
  free(head);
  free(next);
  free(sorted);
  free(sorted_cost);
  free(nsorted);
  return rc;
}
