/* The cutting plane search over a Lagrangian dual that the runs bound
 * (bounds_runs.c) and the padding bound (bounds_padding.c) share. It knows
 * nothing of items or micro-batches: the caller's value function does. */
#include <math.h>

#include "bounds_internal.h"

double pk_dual_least(pk_dual_fn value, void *arg, double g, pk_dual_end_t lo, pk_dual_end_t hi) {
  if (lo.slope >= 0)
    return lo.b;
  double best = PK_MIN(lo.b, hi.b), width = hi.lambda;
  for (int it = 0; it < 16 && hi.lambda - lo.lambda > width * 1e-12; it++) {
    /* lo.b + lo.slope (x - lo) = hi.b + hi.slope (x - hi). */
    double x =
        hi.slope - lo.slope > 0
            ? (hi.b - lo.b + lo.slope * lo.lambda - hi.slope * hi.lambda) / (lo.slope - hi.slope)
            : lo.lambda;
    if (!(x > lo.lambda && x < hi.lambda))
      x = (lo.lambda + hi.lambda) / 2;
    double floor_b = lo.b + lo.slope * (x - lo.lambda);
    if (best - floor_b <= fabs(best) * 1e-4)
      break;
    uint32_t r;
    double v = value(arg, x, &r) + x * g;
    best = PK_MIN(best, v);
    pk_dual_end_t at = {x, v, g - r};
    if ((double)r > g)
      lo = at;
    else
      hi = at;
  }
  return best;
}
