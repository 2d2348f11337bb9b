/* PADDED: lowering column levels by moving rows across columns.
 *
 * pk_auto_refine_padded moves rows inside a column. Here a row leaves the
 * costliest micro-batch X of a column for a micro-batch Y of another
 * column that stays at or below its own column's level (so no other level
 * rises): X's cost falls by at least one row's cost at its width, and the
 * column's level falls once no micro-batch there is left at the old level.
 * The last columns (the leftovers of the narrowest rows) and the columns
 * where the width changes step often have one micro-batch well above the
 * rest, and the columns of wide rows are rarely full to their level.
 *
 * The row to move is X's narrowest (every row but the widest lowers X's
 * cost by the same amount, and the narrowest fits most receivers) or its
 * widest (which also narrows X when the second widest is narrower): the
 * one that lowers X more, among those some receiver takes. The receiver is
 * the one left with the most room below its level. A move never raises the
 * step cost and lowers X's cost; the pass is bounded by a work budget. */
#include <math.h>
#include <stdlib.h>

#include "auto.h"

typedef struct lower {
  auto_state_t *s;
  double *real;     /* Cost of each micro-batch. */
  double *level;    /* Per column: its costliest micro-batch, */
  double *least;    /* and its cheapest. */
  double unit;      /* Cost per unit of room in the tree. */
  room_tree_t room; /* Per column: level - least, in units, rounded up. */
  uint64_t work;
} lower_t;

/* Column c's level and least cost from its micro-batches, and its room. */
static void column_update(lower_t *lw, uint32_t c) {
  uint32_t dp = lw->s->dp;
  const double *v = &lw->real[(size_t)c * dp];
  double hi = v[0], lo = v[0];
  for (uint32_t q = 1; q < dp; q++) {
    hi = PK_MAX(hi, v[q]);
    lo = PK_MIN(lo, v[q]);
  }
  lw->level[c] = hi;
  lw->least[c] = lo;
  pk_tree_set(&lw->room, c, (uint64_t)ceil((hi - lo) / lw->unit));
  lw->work += dp;
}

/* The micro-batch outside column c that takes a row of width w and keeps
 * the most room below its column's level afterwards; *after gets its cost
 * then. UINT32_MAX when none does. A row adds at least its own cost to any
 * micro-batch, so only columns with that much room are read. */
static uint32_t best_receiver(lower_t *lw, uint32_t c, uint64_t w, double *after) {
  const auto_state_t *s = lw->s;
  const pk_cfg_t *cfg = s->ctx->cfg;
  uint32_t dp = s->dp, best = UINT32_MAX;
  double room = -1, row = pk_slot_cost(cfg, w);
  uint64_t need = (uint64_t)floor(row / lw->unit);
  /* Leaves past the m columns hold room 0. */
  for (uint32_t col = pk_tree_find(&lw->room, 0, need); col < s->m;
       col = pk_tree_find(&lw->room, col + 1, need)) {
    if (col == c || lw->level[col] - lw->least[col] < row)
      continue;
    lw->work += dp;
    for (uint32_t q = 0; q < dp; q++) {
      uint32_t y = col * dp + q;
      const pk_bin_t *b = &s->bins[y];
      uint64_t wy = PK_MAX(b->width, w);
      if (b->count + 1 > cfg->max_seqs || (uint64_t)(b->count + 1) * wy > cfg->cap)
        continue;
      double cy = pk_padded_cost(cfg, b->count + 1, wy);
      if (cy > lw->level[col] || lw->level[col] - cy <= room)
        continue;
      room = lw->level[col] - cy;
      best = y;
      *after = cy;
    }
  }
  return best;
}

/* Moves rows out of column c's costliest micro-batch while one goes. */
static void lower_column(lower_t *lw, uint32_t *head, uint32_t *next, uint32_t c) {
  auto_state_t *s = lw->s;
  const pk_ctx_t *ctx = s->ctx;
  uint32_t dp = s->dp;
  while (lw->work < PK_LOWER_PADDED_READS) {
    if (pk_auto_tick(s->stop, dp))
      return; /* The caller reads the stop. */
    lw->work += dp;
    /* X: the costliest micro-batch of the column. */
    uint32_t x = c * dp;
    for (uint32_t q = 1; q < dp; q++)
      if (lw->real[c * dp + q] > lw->real[x])
        x = c * dp + q;
    const pk_bin_t *bx = &s->bins[x];
    if (bx->count < 2 || lw->real[x] <= 0)
      return;
    padded_rows_of_t rows = pk_padded_rows_of(ctx, head, next, x);
    /* The widest row first: it lowers X the most where X narrows. */
    uint32_t cand[2] = {rows.wide, rows.narrow};
    uint32_t mover = UINT32_MAX, to = UINT32_MAX;
    double to_cost = 0;
    for (int a = 0; a < 2 && mover == UINT32_MAX; a++) {
      uint32_t k = cand[a];
      if (a == 0 && rows.second == bx->width)
        continue; /* X keeps its width: the narrowest does as well. */
      double after;
      uint32_t y = best_receiver(lw, c, ctx->size[k], &after);
      if (y != UINT32_MAX) {
        mover = k;
        to = y;
        to_cost = after;
      }
    }
    if (mover == UINT32_MAX)
      return;
    pk_auto_move_item(s, head, next, mover, to);
    lw->real[x] = pk_padded_cost(ctx->cfg, s->bins[x].count, s->bins[x].width);
    lw->real[to] = to_cost;
    column_update(lw, c);
    column_update(lw, to / dp);
  }
}

int pk_auto_lower_padded(auto_state_t *s) {
  const pk_ctx_t *ctx = s->ctx;
  uint32_t dp = s->dp, m = s->m, n = ctx->n, nbins = m * dp;
  if (m < 2)
    return 0;
  lower_t lw = {.s = s};
  uint32_t *head = pk_malloc_array(nbins, sizeof *head);
  uint32_t *next = pk_malloc_array(n, sizeof *next);
  lw.real = pk_malloc_array(nbins, sizeof *lw.real);
  lw.level = pk_malloc_array(m, sizeof *lw.level);
  lw.least = pk_malloc_array(m, sizeof *lw.least);
  int rc = PK_ENOMEM;
  if (head == NULL || next == NULL || lw.real == NULL || lw.level == NULL || lw.least == NULL ||
      pk_tree_init(&lw.room, m) != 0)
    goto done;
  rc = 0;
  pk_auto_bin_lists(s, head, next);
  double top = 0;
  for (uint32_t i = 0; i < nbins; i++) {
    lw.real[i] = pk_padded_cost(ctx->cfg, s->bins[i].count, s->bins[i].width);
    top = PK_MAX(top, lw.real[i]);
  }
  if (top <= 0)
    goto done; /* Nothing costs anything. */
  /* Rooms up to the costliest micro-batch fit in 2^40 units. */
  lw.unit = top / (double)(1ull << PK_LOWER_PADDED_UNIT_BITS);
  for (uint32_t c = 0; c < m; c++)
    column_update(&lw, c);
  for (uint32_t c = 0; c < m && lw.work < PK_LOWER_PADDED_READS; c++)
    lower_column(&lw, head, next, c);
  if (pk_auto_stopped(s->stop))
    rc = PK_ECANCELED;
done:
  free(head);
  free(next);
  free(lw.real);
  free(lw.level);
  free(lw.least);
  free(lw.room.t);
  return rc;
}
