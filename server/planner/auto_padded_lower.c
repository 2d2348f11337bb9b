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
#include <stdlib.h>

#include "auto_internal.h"

/* Most reads of one pass: a move or a failed try reads every column's
 * room, and the micro-batches of the columns with room for the row. */
#define LOWER_BUDGET 4000000u

static double bin_cost(const pk_cfg_t *cfg, const pk_bin_t *b) {
  return (double)b->count * pk_slot_cost(cfg, b->width);
}

/* The micro-batch outside column c that takes a row of width w and keeps
 * the most room below its column's level afterwards; *after gets its cost
 * then, *work the reads. UINT32_MAX when none does. */
static uint32_t best_receiver(const auto_state_t *s, const double *level, const double *least,
                              uint32_t c, uint64_t w, double *after, uint64_t *work) {
  const pk_cfg_t *cfg = s->ctx->cfg;
  uint32_t dp = s->dp, best = UINT32_MAX;
  double room = -1, row = pk_slot_cost(cfg, w);
  for (uint32_t col = 0; col < s->m; col++) {
    /* A row adds at least its own cost to any micro-batch. */
    if (col == c || level[col] - least[col] < row)
      continue;
    *work += dp;
    for (uint32_t q = 0; q < dp; q++) {
      uint32_t y = col * dp + q;
      const pk_bin_t *b = &s->bins[y];
      uint64_t wy = PK_MAX(b->width, w);
      if (b->count + 1 > cfg->max_seqs || (uint64_t)(b->count + 1) * wy > cfg->cap)
        continue;
      double cy = (double)(b->count + 1) * pk_slot_cost(cfg, wy);
      if (cy > level[col] || level[col] - cy <= room)
        continue;
      room = level[col] - cy;
      best = y;
      *after = cy;
    }
  }
  return best;
}

/* The costliest and the cheapest micro-batch cost of column c. */
static void column_range(const double *real, uint32_t c, uint32_t dp, double *level,
                         double *least) {
  *level = real[(size_t)c * dp];
  *least = *level;
  for (uint32_t q = 1; q < dp; q++) {
    double v = real[(size_t)c * dp + q];
    *level = PK_MAX(*level, v);
    *least = PK_MIN(*least, v);
  }
}

int pk_auto_lower_padded(auto_state_t *s) {
  const pk_ctx_t *ctx = s->ctx;
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = s->dp, m = s->m, n = ctx->n, nbins = m * dp;
  if (m < 2)
    return 0;
  uint32_t *head = pk_malloc_array(nbins, sizeof *head);
  uint32_t *next = pk_malloc_array(n, sizeof *next);
  double *real = pk_malloc_array(nbins, sizeof *real);
  double *level = pk_malloc_array(m, sizeof *level);
  double *least = pk_malloc_array(m, sizeof *least);
  if (head == NULL || next == NULL || real == NULL || level == NULL || least == NULL) {
    free(head);
    free(next);
    free(real);
    free(level);
    free(least);
    return PK_ENOMEM;
  }
  pk_auto_bin_lists(s, head, next);
  for (uint32_t i = 0; i < nbins; i++)
    real[i] = bin_cost(cfg, &s->bins[i]);
  for (uint32_t c = 0; c < m; c++)
    column_range(real, c, dp, &level[c], &least[c]);
  uint64_t work = 0;
  for (uint32_t c = 0; c < m && work < LOWER_BUDGET; c++) {
    while (work < LOWER_BUDGET) {
      work += m + dp;
      /* X: the costliest micro-batch of the column. */
      uint32_t x = c * dp;
      for (uint32_t q = 1; q < dp; q++)
        if (real[c * dp + q] > real[x])
          x = c * dp + q;
      const pk_bin_t *bx = &s->bins[x];
      if (bx->count < 2 || real[x] <= 0)
        break;
      uint32_t narrow = UINT32_MAX, wide = UINT32_MAX;
      for (uint32_t k = head[x]; k != UINT32_MAX; k = next[k]) {
        if (narrow == UINT32_MAX || ctx->size[k] < ctx->size[narrow])
          narrow = k;
        if (wide == UINT32_MAX || ctx->size[k] > ctx->size[wide])
          wide = k;
      }
      uint64_t second = 0;
      for (uint32_t k = head[x]; k != UINT32_MAX; k = next[k])
        if (k != wide)
          second = PK_MAX(second, ctx->size[k]);
      /* The widest row first: it lowers X the most where X narrows. */
      uint32_t cand[2] = {wide, narrow};
      uint32_t mover = UINT32_MAX, to = UINT32_MAX;
      double to_cost = 0;
      for (int a = 0; a < 2 && mover == UINT32_MAX; a++) {
        uint32_t k = cand[a];
        if (a == 0 && second == bx->width)
          continue; /* X keeps its width: the narrowest does as well. */
        double after;
        uint32_t y = best_receiver(s, level, least, c, ctx->size[k], &after, &work);
        if (y != UINT32_MAX) {
          mover = k;
          to = y;
          to_cost = after;
        }
      }
      if (mover == UINT32_MAX)
        break;
      pk_auto_move_item(s, head, next, mover, to);
      real[x] = bin_cost(cfg, &s->bins[x]);
      real[to] = to_cost;
      column_range(real, c, dp, &level[c], &least[c]);
      column_range(real, to / dp, dp, &level[to / dp], &least[to / dp]);
      work += 2 * dp;
    }
  }
  free(head);
  free(next);
  free(real);
  free(level);
  free(least);
  return 0;
}
