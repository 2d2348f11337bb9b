/* AUTO's PACKED refinement across columns: lowering a column's level by
 * moving items into micro-batches of other columns that sit below their
 * own column's level and have tokens to spare.
 *
 * The in-column refinement (pk_auto_refine_columns) only trades between the
 * micro-batches of one column, so a column that is level but high stays
 * high even when another column has room: typically the first column, whose
 * level is one long sequence, holds micro-batches far cheaper than that
 * sequence with tokens left under the cap. An item moved there from the
 * costliest micro-batch of another column costs nothing (the receiving
 * column's level does not rise) and, once every micro-batch at the top of
 * the giving column has shed an item, lowers the step cost. */
#include <math.h>
#include <stdlib.h>

#include "auto_internal.h"

/* The most tokens an item may have and still cost at most `slack`
 * (pk_slot_cost inverted, rounded down and kept a hair low, so that a
 * receiver found by it nearly always passes the exact check). */
static uint64_t size_for_cost(const pk_cfg_t *cfg, double slack) {
  if (slack <= 0)
    return 0;
  double s = cfg->quad > 0 ? (-cfg->lin + sqrt(cfg->lin * cfg->lin + 4 * cfg->quad * slack)) /
                                 (2 * cfg->quad)
                           : slack / cfg->lin;
  s *= 1 - 1e-9;
  return s >= (double)UINT64_MAX ? UINT64_MAX : (uint64_t)s;
}

/* What micro-batch i can take without breaking the cap or max_seqs and
 * without rising above its column's level, as the size of the largest item
 * that fits (0 for none). */
static uint64_t receive_room(const auto_state_t *s, const double *level, uint32_t i) {
  const pk_cfg_t *cfg = s->ctx->cfg;
  const pk_bin_t *b = &s->bins[i];
  if (b->count >= cfg->max_seqs || b->sum >= cfg->cap)
    return 0;
  uint64_t by_cost = size_for_cost(cfg, level[i / s->dp] - b->cost);
  return PK_MIN(cfg->cap - b->sum, by_cost);
}

static void column_levels(const auto_state_t *s, double *level) {
  for (uint32_t c = 0; c < s->m; c++) {
    level[c] = 0;
    for (uint32_t q = 0; q < s->dp; q++)
      level[c] = PK_MAX(level[c], s->bins[(size_t)c * s->dp + q].cost);
  }
}

/* Sets the receive room of micro-batch i, keeping *sum the sum of all. */
static void set_room(room_tree_t *rt, uint32_t i, uint64_t room, double *sum) {
  *sum += (double)room - (double)rt->t[rt->leaves + i];
  pk_tree_set(rt, i, room);
}

/* A micro-batch of another column than [base, base + dp) that can take an
 * item of `size` tokens, or UINT32_MAX (the column's own leaves are held at
 * 0 while it gives). */
static uint32_t find_receiver(const auto_state_t *s, uint64_t size) {
  if (s->bins_rt.t[1] < size)
    return UINT32_MAX;
  return pk_tree_find(&s->bins_rt, 0, size);
}

/* The moves per column are bounded by PK_LOWER_MOVES x dp, and each looks
 * at no more than PK_LOWER_SCAN items of the giving micro-batch. */
#define PK_LOWER_MOVES 8
#define PK_LOWER_SCAN 64

int pk_auto_lower_columns(auto_state_t *s) {
  const pk_ctx_t *ctx = s->ctx;
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = s->dp, m = s->m, n = ctx->n, nbins = m * dp;
  if (m < 2 || cfg->mode == PK_MODE_PADDED || cfg->equal_count || cfg->cap == UINT64_MAX)
    return 0;
  uint32_t *head = pk_malloc_array(nbins, sizeof *head);
  uint32_t *next = pk_malloc_array(n, sizeof *next);
  double *level = pk_malloc_array(m, sizeof *level);
  if (head == NULL || next == NULL || level == NULL) {
    free(head);
    free(next);
    free(level);
    return PK_ENOMEM;
  }
  for (uint32_t i = 0; i < nbins; i++)
    head[i] = UINT32_MAX;
  for (uint32_t k = n; k-- > 0;) {
    next[k] = head[s->item_bin[k]];
    head[s->item_bin[k]] = k;
  }
  column_levels(s, level);
  room_tree_t *rt = &s->bins_rt;
  for (uint32_t i = 0; i < rt->leaves; i++)
    rt->t[rt->leaves + i] = i < nbins ? receive_room(s, level, i) : 0;
  pk_tree_rebuild(rt);
  double room = 0; /* The sum of the leaves. */
  for (uint32_t i = 0; i < nbins; i++)
    room += (double)rt->t[rt->leaves + i];
  for (uint32_t c = 0; c < m; c++) {
    uint32_t base = c * dp;
    double total = 0;
    for (uint32_t q = 0; q < dp; q++) {
      set_room(rt, base + q, 0, &room);
      total += s->bins[base + q].cost;
    }
    if (rt->t[1] == 0)
      continue;
    /* The level the column would reach if the room of every other column
     * took its items (tokens cost at least `linear` each): the target each
     * costliest micro-batch is brought down to. */
    double target = PK_MAX(0.0, (total - room * cfg->lin) / dp);
    for (uint32_t move = 0; move < PK_LOWER_MOVES * dp; move++) {
      uint32_t x = base;
      for (uint32_t q = 1; q < dp; q++)
        if (s->bins[base + q].cost > s->bins[x].cost)
          x = base + q;
      double need = s->bins[x].cost - target;
      if (s->bins[x].count < 2 || need <= s->bins[x].cost * 1e-9)
        break;
      /* The costliest item of x within `need`, else the cheapest above it,
       * among those some other column can take. */
      uint64_t fits = rt->t[1];
      uint32_t pick = UINT32_MAX, seen = 0;
      bool within = false;
      for (uint32_t a = head[x]; a != UINT32_MAX && seen < PK_LOWER_SCAN; a = next[a], seen++) {
        if (ctx->size[a] > fits || ctx->cost[a] <= 0)
          continue;
        bool a_within = ctx->cost[a] <= need;
        if (pick == UINT32_MAX || (a_within && !within) ||
            (a_within && ctx->cost[a] > ctx->cost[pick]) ||
            (!a_within && !within && ctx->cost[a] < ctx->cost[pick])) {
          pick = a;
          within = a_within;
        }
      }
      if (pick == UINT32_MAX)
        break;
      uint32_t y = find_receiver(s, ctx->size[pick]);
      if (y == UINT32_MAX || !pk_bin_fits(ctx, &s->bins[y], pick) ||
          s->bins[y].cost + ctx->cost[pick] > level[y / dp])
        break;
      pk_auto_move_item(s, head, next, pick, y);
      set_room(rt, y, receive_room(s, level, y), &room);
    }
    /* The column gave what it could: its new level, and its micro-batches
     * as receivers for the columns after it. */
    level[c] = 0;
    for (uint32_t q = 0; q < dp; q++)
      level[c] = PK_MAX(level[c], s->bins[base + q].cost);
    for (uint32_t q = 0; q < dp; q++)
      set_room(rt, base + q, receive_room(s, level, base + q), &room);
  }
  free(head);
  free(next);
  free(level);
  return 0;
}
