/* Shared by the step bound's source files (bounds.c, bounds_runs.c); not
 * part of the planner's internal interface (pk_internal.h). */
#ifndef PK_BOUNDS_INTERNAL_H
#define PK_BOUNDS_INTERNAL_H

#include "pk_internal.h"

/* PADDED: where the greedy run opened at position i of by ends: a
 * micro-batch whose widest row is w takes pk_padded_cap_rows of them,
 * fewer at the end. */
static inline uint32_t pk_run_end(const pk_ctx_t *ctx, const uint32_t *by, uint32_t i) {
  uint64_t rows = pk_padded_cap_rows(ctx->cfg, ctx->size[by[i]]);
  return rows >= ctx->n - i ? ctx->n : i + (uint32_t)rows;
}

/* PADDED: raises best, the step bound for m micro-batches per rank from
 * the sorted column levels' bounds lvl[1 .. m] and what any k columns hold,
 * cap_cost[k] (whole costs), with what k columns hold through runs, where
 * that can raise it and while best is more than 0.5 % below known_step
 * (bounds_runs.c). by: the items in size-descending order. */
double pk_padded_runs_sharpen(const pk_ctx_t *ctx, const uint32_t *by, const double *lvl,
                              const double *cap_cost, uint32_t m, double total, double best,
                              double known_step);

#endif
