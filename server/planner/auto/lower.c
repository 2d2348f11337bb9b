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
 * the giving column has shed an item, lowers the step cost. Where no item
 * fits whole, an exchange (a large item for smaller ones of a micro-batch
 * with cost to spare) does the same; see exchange_once. Every step keeps
 * the cap and max_seqs and never raises a column's level, so the step cost
 * only falls. */
#include <math.h>
#include <stdlib.h>

#include "auto.h"

/* The most tokens an item may have and still cost at most `slack`
 * (pk_slot_cost inverted, rounded down and kept a hair low, so that a
 * receiver found by it nearly always passes the exact check). Every item
 * pays per_sequence first; the token part is inverted on what is left. */
static uint64_t size_for_cost(const pk_cfg_t *cfg, double slack) {
  slack -= cfg->seq;
  if (slack <= 0)
    return 0;
  double s = cfg->quad > 0
                 ? (-cfg->lin + sqrt(cfg->lin * cfg->lin + 4 * cfg->quad * slack)) / (2 * cfg->quad)
                 : slack / cfg->lin;
  s *= 1 - PK_AUTO_REL_EPS;
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

/* Sets the receive room of micro-batch i, keeping *sum the sum of all. */
static void set_room(room_tree_t *rt, uint32_t i, uint64_t room, double *sum) {
  *sum += (double)room - (double)rt->t[rt->leaves + i];
  pk_tree_set(rt, i, room);
}

/* A micro-batch of another column than the giving one that can take an
 * item of `size` tokens, or UINT32_MAX (the giving column's leaves are held
 * at 0 while it gives). */
static uint32_t find_receiver(const auto_state_t *s, uint64_t size) {
  if (s->bins_rt.t[1] < size)
    return UINT32_MAX;
  return pk_tree_find(&s->bins_rt, 0, size);
}

/* Exchanges: when no item of the costliest micro-batch x fits anywhere
 * whole, x can still give an item a for the smallest items B of a
 * micro-batch y with cost to spare (tokens kept within both caps): x falls
 * by c(a) - c(B) and y rises by as much, which is free when y stays at or
 * below its column's level (another column) or below x's old cost (x's own
 * column). y is one of PK_LOWER_PARTNERS micro-batches of other columns
 * with the most cost to spare, or the cheapest of x's column; each keeps
 * its PK_LOWER_SCAN first items sorted by size with prefix sums. */

typedef struct partner {
  uint32_t bin, count; /* count items sorted in items[]. */
  uint32_t items[PK_LOWER_SCAN];
  uint64_t size_sum[PK_LOWER_SCAN + 1]; /* Prefix sums of sizes. */
  double cost_sum[PK_LOWER_SCAN + 1];   /* Prefix sums of costs. */
} partner_t;

typedef struct lower {
  auto_state_t *s;
  uint32_t *head, *next;
  double *level; /* Per column. */
  partner_t part[PK_LOWER_PARTNERS + 1];
  uint32_t nparts;
} lower_t;

/* Loads micro-batch `bin` as a partner: its first items by size ascending. */
static void partner_load(const lower_t *lw, partner_t *p, uint32_t bin) {
  const pk_ctx_t *ctx = lw->s->ctx;
  p->bin = bin;
  p->count = pk_auto_sorted_items(lw->s, lw->head, lw->next, bin, PK_LOWER_SCAN, p->items);
  p->size_sum[0] = 0;
  p->cost_sum[0] = 0;
  for (uint32_t j = 0; j < p->count; j++) {
    p->size_sum[j + 1] = p->size_sum[j] + ctx->size[p->items[j]];
    p->cost_sum[j + 1] = p->cost_sum[j] + ctx->cost[p->items[j]];
  }
}

/* The partners for column c: the micro-batches of other columns with the
 * most cost to spare below their level, and the cheapest of column c. */
static void partners_pick(lower_t *lw, uint32_t c) {
  const auto_state_t *s = lw->s;
  uint32_t dp = s->dp, nbins = s->m * dp;
  uint32_t best[PK_LOWER_PARTNERS];
  double spare[PK_LOWER_PARTNERS];
  uint32_t nb = 0;
  for (uint32_t i = 0; i < nbins; i++) {
    if (i / dp == c)
      continue;
    double sp = lw->level[i / dp] - s->bins[i].cost;
    if (sp <= 0 || (nb == PK_LOWER_PARTNERS && sp <= spare[nb - 1]))
      continue;
    uint32_t at = nb < PK_LOWER_PARTNERS ? nb++ : nb - 1;
    while (at > 0 && spare[at - 1] < sp) {
      best[at] = best[at - 1];
      spare[at] = spare[at - 1];
      at--;
    }
    best[at] = i;
    spare[at] = sp;
  }
  uint32_t cheap = c * dp;
  for (uint32_t q = 1; q < dp; q++)
    if (s->bins[c * dp + q].cost < s->bins[cheap].cost)
      cheap = c * dp + q;
  lw->nparts = 0;
  for (uint32_t k = 0; k < nb; k++)
    partner_load(lw, &lw->part[lw->nparts++], best[k]);
  partner_load(lw, &lw->part[lw->nparts++], cheap);
}

/* One exchange that lowers x, the costliest micro-batch of its column, by
 * as close to `need` as the partners allow (the largest fall within it,
 * else the least above it). Returns the partner index used, or -1. */
static int exchange_once(lower_t *lw, uint32_t x, double need) {
  auto_state_t *s = lw->s;
  const pk_ctx_t *ctx = s->ctx;
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = s->dp;
  const pk_bin_t *bx = &s->bins[x];
  uint64_t room_x = cfg->cap - bx->sum;
  double cx = bx->cost, best_d = 0;
  bool best_within = false;
  uint32_t best_a = UINT32_MAX, best_j = 0, best_last = 0;
  int best_p = -1;
  uint32_t seen = 0;
  for (uint32_t a = lw->head[x]; a != UINT32_MAX && seen < PK_LOWER_SCAN; a = lw->next[a], seen++) {
    uint64_t sa = ctx->size[a];
    for (uint32_t pi = 0; pi < lw->nparts; pi++) {
      const partner_t *p = &lw->part[pi];
      if (p->bin == x)
        continue;
      const pk_bin_t *by = &s->bins[p->bin];
      uint64_t room_y = cfg->cap - by->sum;
      uint64_t low = sa > room_y ? sa - room_y : 0;
      /* The fewest smallest items of y that leave room for a in y. */
      uint64_t high = sa + room_x;
      uint32_t lo = 0, hi = p->count + 1;
      while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (p->size_sum[mid] >= low)
          hi = mid;
        else
          lo = mid + 1;
      }
      if (lo == 0 || lo > p->count)
        continue;
      /* B is the t smallest items and one more, items[u] (u >= t), the
       * smallest whose size brings B's tokens to at least `low`: u = t for
       * the plain prefix (t = lo - 1); shorter prefixes with a larger last
       * item when the prefix overshoots x's room. */
      uint32_t j = 0, last = 0;
      double cb = 0;
      for (uint32_t t = lo - 1, tries = 0; tries < PK_LOWER_SUBSET_TRIES; t--, tries++) {
        uint64_t want = low - p->size_sum[t];
        uint32_t a2 = t, b2 = p->count;
        while (a2 < b2) {
          uint32_t mid = (a2 + b2) / 2;
          if (ctx->size[p->items[mid]] >= want)
            b2 = mid;
          else
            a2 = mid + 1;
        }
        if (a2 < p->count && p->size_sum[t] + ctx->size[p->items[a2]] <= high) {
          j = t + 1;
          last = a2;
          cb = p->cost_sum[t] + ctx->cost[p->items[a2]];
          break;
        }
        if (t == 0)
          break;
      }
      if (j == 0)
        continue;
      if (bx->count - 1 + j > cfg->max_seqs || by->count - j + 1 > cfg->max_seqs)
        continue;
      double d = ctx->cost[a] - cb;
      if (d <= cx * PK_AUTO_REL_EPS)
        continue;
      double ny = by->cost + d;
      bool own = p->bin / dp == x / dp;
      if (own ? ny >= cx * (1 - PK_AUTO_TIE_EPS) : ny > lw->level[p->bin / dp])
        continue;
      bool within = d <= need;
      if (best_p < 0 || (within && !best_within) || (within && d > best_d) ||
          (!within && !best_within && d < best_d)) {
        best_p = (int)pi;
        best_a = a;
        best_j = j;
        best_last = last;
        best_d = d;
        best_within = within;
      }
    }
  }
  if (best_p < 0)
    return -1;
  partner_t *p = &lw->part[best_p];
  for (uint32_t k = 0; k + 1 < best_j; k++)
    pk_auto_move_item(s, lw->head, lw->next, p->items[k], x);
  pk_auto_move_item(s, lw->head, lw->next, p->items[best_last], x);
  pk_auto_move_item(s, lw->head, lw->next, best_a, p->bin);
  partner_load(lw, p, p->bin);
  /* x can be a partner too (its column's cheapest when the partners were
   * picked, the costliest since): a stale copy of its items would let a
   * later exchange move items it no longer holds, past the cap. */
  for (uint32_t k = 0; k < lw->nparts; k++)
    if (lw->part[k].bin == x)
      partner_load(lw, &lw->part[k], x);
  return best_p;
}

/* Exchanges run within PK_LOWER_EXCHANGE_WORK and above
 * PK_LOWER_EXCHANGE_GAP (knobs.h). */

/* Exchanges for column c while its costliest micro-batch can fall: toward
 * the level the other columns' spare cost would allow, a quarter of the way
 * (or to the next costliest) at a time, so that the spare is spread over
 * the column's micro-batches rather than spent on the first. Partners are
 * picked afresh when none takes an exchange. The move tree's leaves of the
 * partners of other columns are kept current (rt, room). */
static void exchange_column(lower_t *lw, uint32_t c, room_tree_t *rt, double *room) {
  auto_state_t *s = lw->s;
  uint32_t dp = s->dp, nbins = s->m * dp, base = c * dp;
  double spare = 0, total = 0;
  for (uint32_t i = 0; i < nbins; i++) {
    if (i / dp != c)
      spare += PK_MAX(0.0, lw->level[i / dp] - s->bins[i].cost);
    else
      total += s->bins[i].cost;
  }
  double target = PK_MAX(0.0, (total - spare) / dp);
  partners_pick(lw, c);
  bool fresh = true;
  for (uint32_t step = 0; step < PK_LOWER_MOVES * dp; step++) {
    if (pk_auto_tick(s->stop, dp))
      break; /* The caller reads the stop. */
    uint32_t x = base;
    double second = 0;
    for (uint32_t q = 1; q < dp; q++) {
      double cq = s->bins[base + q].cost;
      if (cq > s->bins[x].cost) {
        second = s->bins[x].cost;
        x = base + q;
      } else {
        second = PK_MAX(second, cq);
      }
    }
    double cx = s->bins[x].cost;
    if (cx <= target * (1 + PK_AUTO_REL_EPS))
      break;
    double need = PK_MIN(cx - target, PK_MAX(cx - second, (cx - target) / PK_LOWER_NEED_SHARE));
    int p = exchange_once(lw, x, need);
    if (p < 0) {
      if (fresh)
        break;
      partners_pick(lw, c);
      fresh = true;
      continue;
    }
    fresh = false;
    uint32_t y = lw->part[p].bin;
    if (y / dp != c)
      set_room(rt, y, receive_room(s, lw->level, y), room);
  }
  lw->level[c] = pk_auto_column_level(s, c);
}

int pk_auto_lower_columns(auto_state_t *s) {
  const pk_ctx_t *ctx = s->ctx;
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = s->dp, m = s->m, n = ctx->n, nbins = m * dp;
  if (m < 2 || cfg->mode == PK_MODE_PADDED || cfg->equal_count || cfg->cap == UINT64_MAX)
    return 0;
  double *level = pk_malloc_array(m, sizeof *level);
  if (level == NULL)
    return PK_ENOMEM;
  double step = 0;
  for (uint32_t c = 0; c < m; c++) {
    level[c] = pk_auto_column_level(s, c);
    step += level[c];
  }
  double bound = pk_step_lower_bound(ctx, m, step);
  if (step <= bound * (1 + PK_AUTO_GOOD_ENOUGH)) {
    free(level);
    return 0;
  }
  uint32_t *head = pk_malloc_array(nbins, sizeof *head);
  uint32_t *next = pk_malloc_array(n, sizeof *next);
  if (head == NULL || next == NULL) {
    free(head);
    free(next);
    free(level);
    return PK_ENOMEM;
  }
  pk_auto_bin_lists(s, head, next);
  /* Exchanges cost more (a scan of all micro-batches per column for
   * partners, and many candidates per step): only where the plan is
   * further than PK_LOWER_EXCHANGE_GAP above the step bound and the scans
   * stay cheap. */
  bool exchanges =
      step > bound * (1 + PK_LOWER_EXCHANGE_GAP) && (uint64_t)m * nbins <= PK_LOWER_EXCHANGE_WORK;
  lower_t lw = {.s = s, .head = head, .next = next, .level = level};
  room_tree_t *rt = &s->bins_rt;
  for (uint32_t i = 0; i < rt->leaves; i++)
    rt->t[rt->leaves + i] = i < nbins ? receive_room(s, level, i) : 0;
  pk_tree_rebuild(rt);
  double room = 0; /* The sum of the leaves. */
  for (uint32_t i = 0; i < nbins; i++)
    room += (double)rt->t[rt->leaves + i];
  int rc = 0;
  for (uint32_t c = 0; c < m; c++) {
    if (pk_auto_tick(s->stop, dp)) {
      rc = PK_ECANCELED;
      break;
    }
    uint32_t base = c * dp;
    double total = 0;
    for (uint32_t q = 0; q < dp; q++) {
      set_room(rt, base + q, 0, &room);
      total += s->bins[base + q].cost;
    }
    /* The level the column would reach if the room of every other column
     * took its items (tokens cost at least `linear` each): the target each
     * costliest micro-batch is brought down to. */
    double target = PK_MAX(0.0, (total - room * cfg->lin) / dp);
    for (uint32_t move = 0; rt->t[1] > 0 && move < PK_LOWER_MOVES * dp; move++) {
      if (pk_auto_tick(s->stop, dp))
        break;
      uint32_t x = base;
      for (uint32_t q = 1; q < dp; q++)
        if (s->bins[base + q].cost > s->bins[x].cost)
          x = base + q;
      double need = s->bins[x].cost - target;
      if (s->bins[x].count < 2 || need <= s->bins[x].cost * PK_AUTO_REL_EPS)
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
    if (exchanges)
      exchange_column(&lw, c, rt, &room);
    /* The column gave what it could: its new level, and its micro-batches
     * as receivers for the columns after it. */
    level[c] = pk_auto_column_level(s, c);
    for (uint32_t q = 0; q < dp; q++)
      set_room(rt, base + q, receive_room(s, level, base + q), &room);
  }
  free(head);
  free(next);
  free(level);
  return rc;
}
