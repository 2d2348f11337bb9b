/* What the step bound's source files share (bounds.c, bounds_dual.c,
 * bounds_padding.c, bounds_runs.c, bounds_stair.c): each of them includes
 * this header and no other's, so the bound's parts call down a tree
 * (bounds.c over the padding, runs and stair bounds, those over the dual
 * search) and never back. Not part of the planner's internal interface
 * (pk_internal.h), which declares the two bounds the planner reads
 * (pk_micro_lower_bound, pk_step_lower_bound). */
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

/* The least value of a convex piecewise-linear function B(lambda) =
 * value(arg, lambda, &runs) + lambda x g on [lo, hi] whose slope at lambda
 * is g - runs (a Lagrangian dual over runs; bounds_runs.c, bounds_padding.c),
 * by cutting planes: the tangents at the ends of the bracket meet at the
 * next lambda to try; the bracket keeps a slope < 0 and one >= 0. Every
 * lambda tried is valid and the least B is returned; the search stops once
 * the tangents' meeting point is within 1e-4 of it, or after 16 tries. lo
 * and hi give B and its slope at the ends; lo.slope >= 0 returns lo.b. */
typedef double (*pk_dual_fn)(void *arg, double lambda, uint32_t *runs);
typedef struct pk_dual_end {
  double lambda, b, slope;
} pk_dual_end_t;
double pk_dual_least(pk_dual_fn value, void *arg, double g, pk_dual_end_t lo, pk_dual_end_t hi);
/* PADDED: a lower bound on the padded cost (sum of rows x c(widest row))
 * that any grouping of the rows into at most `groups` micro-batches pays
 * in all; `total` (the rows' own costs) where no padding is forced or out
 * of memory. by: the items in size-descending order (bounds_padding.c). */
double pk_padded_least_total(const pk_ctx_t *ctx, const uint32_t *by, uint64_t groups,
                             double total);
/* PADDED: lower bounds on the sorted column levels of every plan with m
 * micro-batches per rank, from the least cost of the (j - 1) dp + 1-th
 * costliest micro-batch (bounds_stair.c). Writes level[0 .. j) for the
 * first j levels `budget` (a count of elementary steps) pays for and
 * returns j (0 when out of memory or when no plan has m per rank). by: the
 * items in size-descending order. */
uint32_t pk_padded_stair(const pk_ctx_t *ctx, const uint32_t *by, uint32_t m, const double *known,
                         double *level, uint64_t budget);

#endif
