/* PADDED: the least padded cost any plan with a given number of
 * micro-batches pays in all, for the step bound (bounds.c).
 *
 * A PADDED micro-batch costs rows x c(its widest row), at least the sum of
 * its rows' own costs; the difference is padding. With few micro-batches
 * per rank the cap forces rows of unlike width together, and the padding
 * this forces is a cost every plan pays, which the item total misses.
 *
 * Some cheapest grouping of the rows into at most g micro-batches is made
 * of runs of the width-descending order: give the micro-batch holding the
 * widest row the widest rows after it (as many as it holds), handing its
 * former rows to the micro-batches those came from; no micro-batch widens
 * or gains rows (the exchange at the top of auto/runs.c), so no cost rises;
 * repeat on the rest. So the least padded total P(g) is the least sum of
 * rows x c(first row) over cuts of the order into at most g runs, a run
 * opened by a row of width w taking at most R(w) = pk_padded_cap_rows
 * rows. Charging every run lambda >= 0, F(lambda) = the least sum of run
 * cost + lambda over cuts into any number of runs, and P(g) >= F(lambda) -
 * lambda x g for every lambda (weak duality), so any lambda gives a valid
 * bound; pk_dual_least (cutting planes over lambda, as for the runs bound
 * of bounds_runs.c) looks for the best one. Every plan with g micro-batches in all
 * has a step cost of at least its total / dp >= P(g) / dp.
 *
 * F is the recursion f(n) = 0, f(i) = lambda + min over i < j <= i + R(w_i)
 * of (j - i) c(w_i) + f(j). Rows of one width are neighbours in the order
 * and share c and R, so over such a block f(i) + i c = lambda + the least
 * j c + f(j) in a window sliding left: a monotone deque gives it in O(block
 * + R) per block, O(n + sum over widths of R(w)) in all, small as R(w)
 * falls with w.
 *
 * Where the rows split by width alone need at most g runs, P(g) is the
 * item total (no padding is forced) and nothing is computed. */
#include <stdlib.h>

#include "bounds_internal.h"

/* Rows of one width: positions [first, end) of the order, their row cost
 * and the most rows a run they open takes. */
typedef struct width_block {
  uint32_t first, end, rows;
  double cost;
} width_block_t;

typedef struct padding_dual {
  const width_block_t *block;
  uint32_t blocks, n;
  double *f;        /* f(i), i = 0..n. */
  uint32_t *runs;   /* Runs of f(i)'s cut. */
  uint32_t *window; /* The deque of candidate ends j, */
  double *value;    /* and their j c + f(j). */
} padding_dual_t;

/* Puts end j at the tail of window[head .. tail), first dropping the ends
 * there that are no better (j c + f(j) at least j's; they also leave the
 * window sooner). Returns the new tail. */
static uint32_t window_push(padding_dual_t *d, double c, uint32_t head, uint32_t tail, uint32_t j) {
  double v = (double)j * c + d->f[j];
  while (tail > head && d->value[tail - 1] >= v)
    tail--;
  d->window[tail] = j;
  d->value[tail++] = v;
  return tail;
}

/* -F(lambda) (B = -F + lambda x g is the convex function pk_dual_least
 * minimises); *runs gets the runs of F's cut. */
static double padding_dual_value(void *arg, double lambda, uint32_t *runs) {
  padding_dual_t *d = arg;
  uint32_t n = d->n;
  d->f[n] = 0;
  d->runs[n] = 0;
  for (uint32_t k = d->blocks; k-- > 0;) {
    uint32_t a = d->block[k].first, b = d->block[k].end, r = d->block[k].rows;
    double c = d->block[k].cost;
    /* window[head .. tail) holds ends j, the largest first, with j c + f(j)
     * rising from head to tail; j enters at the tail as i falls and leaves
     * at the head once j > i + r. */
    uint32_t head = 0, tail = 0;
    uint64_t last = (uint64_t)b - 1 + r;
    uint32_t hi = last < n ? (uint32_t)last : n;
    for (uint32_t j = hi + 1; j-- > b;)
      tail = window_push(d, c, head, tail, j);
    for (uint32_t i = b; i-- > a;) {
      if (i < b - 1)
        tail = window_push(d, c, head, tail, i + 1);
      while (d->window[head] > (uint64_t)i + r)
        head++;
      uint32_t j = d->window[head];
      d->f[i] = lambda + (double)(j - i) * c + d->f[j];
      d->runs[i] = d->runs[j] + 1;
    }
  }
  *runs = d->runs[0];
  return -d->f[0];
}

double pk_padded_least_total(const pk_ctx_t *ctx, const uint32_t *by, uint64_t groups,
                             double total) {
  uint32_t n = ctx->n, blocks = 0;
  width_block_t *block = pk_malloc_array((size_t)n + 1, sizeof *block);
  padding_dual_t d = {.block = block, .n = n};
  double best = total;
  if (block == NULL || groups == 0)
    goto done;
  /* The blocks, the runs the rows need when no run mixes widths, and the
   * costliest run. */
  uint64_t apart = 0;
  double hi = 0;
  for (uint32_t b = 0; b < n;) {
    uint64_t w = ctx->size[by[b]];
    uint32_t e = b;
    while (e < n && ctx->size[by[e]] == w)
      e++;
    uint64_t r = pk_padded_cap_rows(ctx->cfg, w);
    double c = ctx->cost[by[b]];
    block[blocks++] = (width_block_t){b, e, r < n ? (uint32_t)r : n, c};
    apart += (e - b + r - 1) / r;
    hi = PK_MAX(hi, c * (double)(r < n ? r : n));
    b = e;
  }
  if (apart <= groups)
    goto done;
  d.blocks = blocks;
  d.f = pk_malloc_array((size_t)n + 1, sizeof *d.f);
  d.runs = pk_malloc_array((size_t)n + 1, sizeof *d.runs);
  d.window = pk_malloc_array((size_t)n + 1, sizeof *d.window);
  d.value = pk_malloc_array((size_t)n + 1, sizeof *d.value);
  if (d.f == NULL || d.runs == NULL || d.window == NULL || d.value == NULL)
    goto done;
  /* lambda = 0 cuts every row alone (n runs, F = total); at the costliest
   * run's cost no cut with more runs than needed pays. */
  uint32_t runs;
  double b_hi = padding_dual_value(&d, hi, &runs) + hi * (double)groups;
  pk_dual_end_t lo = {0, -total, (double)groups - n}, top = {hi, b_hi, (double)groups - runs};
  best = -pk_dual_least(padding_dual_value, &d, (double)groups, lo, top);
  /* Rounding in the sums must not lift the bound above the truth. */
  best = best > total ? best * (1 - 1e-9) : total;
done:
  free(block);
  free(d.f);
  free(d.runs);
  free(d.window);
  free(d.value);
  return best;
}
