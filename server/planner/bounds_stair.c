/* PADDED: lower bounds on the sorted column levels from the costs of the
 * micro-batches themselves ("the stair"), for the step bound (bounds.c).
 *
 * Take any PADDED plan with g = m x dp micro-batches and sort their costs
 * descending, c_(1) >= c_(2) >= ...; the columns sorted by level, L_1 >=
 * ... >= L_m, have L_j >= c_((j-1) dp + 1): the j - 1 costliest columns hold
 * (j - 1) dp micro-batches, so one of the (j-1) dp + 1 costliest lies in a
 * column at or below L_j. The exchange at the top of auto/runs.c turns the
 * plan into runs of the width-descending order without raising any
 * micro-batch's cost, so c_((j-1) dp + 1) is at least
 *
 *   y_j = the least x such that some cut of the order into at most g runs
 *         has at most (j - 1) dp runs costing more than x,
 *
 * and step >= sum of y_j. Where the widest rows are few and coarse this is
 * what every plan pays: they cannot each have a micro-batch, and the ones
 * that share make a costly column, then the next, and so on.
 *
 * Whether x admits such a cut (k = (j - 1) dp "big" runs, the rest "small",
 * costing at most x): R(i, b), the fewest runs that cover positions [i, n)
 * with at most b big ones, is R(n, b) = 0 and R(i, b) = 1 + min(R(i +
 * small(i), b), R(i + big(i), b - 1)), small(i) and big(i) the most rows a
 * run opened at i takes at cost x and within the cap: taking fewer never
 * helps, as covering fewer of the narrowest rows never needs more runs. x
 * admits a cut when R(0, k) <= g. That is O(n k) per x; y_j is found by
 * bisection on x (the admitted x only grow as k falls) and then lowered to
 * the least run cost above the largest x refused, so the bound is a run cost
 * some plan could have, never above the truth. The work grows with n x m^2
 * x dp, so levels are computed while a work budget lasts. */
#include <stdlib.h>

#include "bounds_internal.h"

/* R(i, b) where no cut has at most b big runs. */
#define STAIR_NONE (UINT32_MAX / 2)

typedef struct stair {
  uint32_t n;
  uint64_t g;
  const double *cost;  /* Row cost of position i. */
  const uint32_t *big; /* Rows a run opened at i takes within the cap. */
  const uint32_t *end; /* End of the rows as wide as position i. */
  uint32_t *small;     /* The same at cost x. */
  uint32_t *r;         /* R(i, b), (n + 1) x (k + 1). */
} stair_t;

/* The most rows a run opened at i takes at cost at most x. */
static uint32_t rows_under(const stair_t *st, uint32_t i, double x) {
  double c = st->cost[i];
  if (c <= 0)
    return st->big[i];
  double q = x / c;
  if (q >= (double)st->big[i])
    return st->big[i];
  uint32_t rows = (uint32_t)q;
  /* The division may round either way; the run cost decides. */
  while (rows < st->big[i] && (double)(rows + 1) * c <= x)
    rows++;
  while (rows > 0 && (double)rows * c > x)
    rows--;
  return rows;
}

/* Whether some cut into at most g runs has at most k runs costing more
 * than x. */
static bool admits(stair_t *st, double x, uint64_t k) {
  uint32_t n = st->n, w = (uint32_t)k + 1;
  if (k == 0) {
    /* No big run: the greedy cut, jumping from run to run. */
    uint64_t runs = 0;
    for (uint32_t i = 0; i < n; runs++) {
      uint32_t rows = rows_under(st, i, x);
      if (rows == 0 || runs == st->g)
        return false;
      i += rows;
    }
    return true;
  }
  /* Rows of one width share their cost, hence their rows under x. */
  for (uint32_t i = 0; i < n;) {
    uint32_t rows = rows_under(st, i, x), e = st->end[i];
    for (; i < e; i++)
      st->small[i] = PK_MIN(rows, st->big[i]);
  }
  uint32_t *r = st->r;
  for (uint32_t b = 0; b < w; b++)
    r[(size_t)n * w + b] = 0;
  for (uint32_t i = n; i-- > 0;) {
    uint32_t *row = &r[(size_t)i * w];
    const uint32_t *by_small = st->small[i] ? &r[(size_t)(i + st->small[i]) * w] : NULL;
    const uint32_t *by_big = &r[(size_t)(i + st->big[i]) * w];
    for (uint32_t b = 0; b < w; b++) {
      uint32_t v = by_small ? by_small[b] : STAIR_NONE;
      if (b > 0 && by_big[b - 1] < v)
        v = by_big[b - 1];
      row[b] = v < STAIR_NONE ? v + 1 : STAIR_NONE;
    }
  }
  return r[k] <= st->g;
}

/* The least run cost above x (x itself when no run costs more): one try
 * per width, at its first row (which takes the most rows). */
static double next_run_cost(const stair_t *st, double x) {
  double best = x;
  bool any = false;
  for (uint32_t i = 0; i < st->n; i = st->end[i]) {
    double c = st->cost[i];
    uint32_t rows = rows_under(st, i, x) + 1;
    if (c > 0 && rows <= st->big[i] && (!any || (double)rows * c < best)) {
      best = (double)rows * c;
      any = true;
    }
  }
  return best;
}

uint32_t pk_padded_stair(const pk_ctx_t *ctx, const uint32_t *by, uint32_t m, const double *known,
                         double *level, uint64_t budget) {
  uint32_t n = ctx->n, dp = ctx->cfg->dp, done = 0;
  if (n == 0 || m == 0)
    return 0;
  /* A level with k big runs costs up to 16 bisection steps of n x (k + 1)
   * (one where the known bound is admitted); levels go on while the next
   * one's full cost fits in what is left of the budget. */
  uint64_t per_k = 16 * (uint64_t)n;
  if (budget < per_k)
    return 0;
  uint64_t kcap = budget / per_k - 1;
  uint32_t kmax = (uint32_t)PK_MIN(kcap, (uint64_t)(m - 1) * dp);
  stair_t st = {.n = n, .g = (uint64_t)m * dp};
  double *cost = pk_malloc_array(n, sizeof *cost);
  uint32_t *big = pk_malloc_array(n, sizeof *big);
  uint32_t *end = pk_malloc_array(n, sizeof *end);
  st.small = pk_malloc_array(n, sizeof *st.small);
  /* The recursion's table, where the budget reaches a level after the
   * first (the first walks the runs). */
  if (kmax >= dp)
    st.r = pk_malloc_array(((size_t)n + 1) * (kmax + 1), sizeof *st.r);
  if (cost == NULL || big == NULL || end == NULL || st.small == NULL ||
      (kmax >= dp && st.r == NULL))
    goto out;
  double hi = 0;
  for (uint32_t i = 0; i < n; i++) {
    cost[i] = ctx->cost[by[i]];
    uint64_t rows = pk_padded_cap_rows(ctx->cfg, ctx->size[by[i]]);
    big[i] = rows < n - i ? (uint32_t)rows : n - i;
    hi = PK_MAX(hi, cost[i] * big[i]);
  }
  for (uint32_t i = n; i-- > 0;)
    end[i] = i + 1 < n && ctx->size[by[i + 1]] == ctx->size[by[i]] ? end[i + 1] : i + 1;
  st.cost = cost;
  st.big = big;
  st.end = end;
  /* At x = the costliest run every run is small: the greedy cut (the
   * fewest runs, pk_micro_lower_bound) then has no big run. */
  if (!admits(&st, hi, 0))
    goto out;
  uint64_t work = n;
  for (; done < m; done++) {
    uint64_t k = (uint64_t)done * dp;
    if (k > kmax || work + per_k * (k + 1) > budget)
      break;
    /* Where the known bound is admitted the stair adds nothing here;
     * where it is refused the search starts there. */
    double lo = 0;
    if (known[done] >= hi) {
      level[done] = known[done];
      continue;
    }
    if (known[done] > 0) {
      work += n * (k + 1);
      if (admits(&st, known[done], k)) {
        level[done] = known[done];
        hi = known[done];
        continue;
      }
      lo = known[done];
    }
    if (lo == 0) {
      /* y_j may be 0 (zero-width rows); the search below only nears it. */
      work += n * (k + 1);
      if (admits(&st, 0, k)) {
        for (; done < m; done++)
          level[done] = 0;
        break;
      }
    }
    while (hi - lo > 1e-4 * hi) {
      double mid = 0.5 * (lo + hi);
      work += n * (k + 1);
      if (admits(&st, mid, k))
        hi = mid;
      else
        lo = mid;
    }
    level[done] = next_run_cost(&st, lo);
  }
out:
  free(cost);
  free(big);
  free(end);
  free(st.small);
  free(st.r);
  return done;
}
