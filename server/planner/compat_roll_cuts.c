/* SHARED_CUTS: ROLL's shared boundary list, cut optimally.
 *
 * Input (compat_roll.c): the s slot widths w[0 .. s) of the sorted stride
 * (slot q = sorted positions q dp .. q dp + dp - 1, its width the widest
 * padded row among them) and the micro-batch count t. Output: boundaries
 * 0 = start[0] < ... < start[t] = s; micro-batch j covers slots
 * [start[j], start[j + 1]) on every rank.
 *
 * Shape. Lengths ascend along the slots, so w[] is nondecreasing and the
 * width of slots [a, b) is w[b - 1]. They fit iff b - a <= R(b) =
 * min(max_seqs, cap / w[b - 1]), i.e. a >= reach(b) = b - R(b), and reach()
 * is nondecreasing. Every sub-range of a range that fits fits too, so
 * next-fit's count m* is the fewest (compat_roll.c) and t is m* raised to
 * min_micro_batches and to a multiple of microbatch_group.
 *
 * Objective. Micro-batch j has the same rows on every rank and the rank
 * holding slot b - 1's widest row pads to w[b - 1], so the lock-step step
 * cost is sum_j rows_j x c(w_j) with c = pk_slot_cost, the planner's PADDED
 * cost (layout.c prices a PADDED micro-batch as rows x c(width); a cost
 * per micro-batch, where the model has one, is the same for every list of
 * t micro-batches and left out). The plan is the least step cost among the
 * boundary lists with exactly t micro-batches: lexicographically the fewest
 * micro-batches (when t = m*), then the least cost.
 *
 * DP. f[k][b] = the least cost of slots [0, b) in k micro-batches =
 * min over a of f[k - 1][a] + (b - a) c(w[b - 1]), a in [reach(b), b).
 * Only the band of b that can start a plan and finish it is kept:
 * lo[k] = max(k, back[t - k]) <= b <= hi[k] = min(fwd[k], s - (t - k)),
 * fwd[k] the farthest slot k micro-batches reach from 0 (next-fit) and
 * back[j] the lowest slot j micro-batches reach back from s. Every state of
 * a band is reachable and finishable, so every window meets the previous
 * band and no state is infinite. At t = m* the bands hold at most s + 1
 * states in all: fwd[k] < back[m* - k - 1] (else m* - 1 micro-batches
 * would do), so band k is shorter than the back-greedy micro-batch m* - k.
 * In general they hold at most (t + 1)(s - t + 1).
 *
 * Two ways to fill a layer:
 * - scan: every a of every window, O(states x R) with R the most rows a
 *   micro-batch may hold (max_seqs, cap / the narrowest nonzero width). Its
 *   f[k][b] is summed left to right exactly as any boundary list's cost is,
 *   so its plan is the least in floating point too.
 * - Monge: c_b = c(w[b - 1]) is nondecreasing in b (w[] is, and c never
 *   falls as the width grows), so the cost (b - a) c_b obeys the
 *   quadrangle inequality (for a < a' < b < b' the difference
 *   cost(a, b') + cost(a', b) - cost(a, b) - cost(a', b') is
 *   (a' - a)(c_b' - c_b) >= 0), and the windows' ends are nondecreasing, so
 *   the leftmost best a is nondecreasing in b: divide and conquer fills a
 *   layer in O((|band k| + |band k-1|) log s); optimal in exact arithmetic.
 * Ties go to the leftmost a (the longest last micro-batch) both ways, so
 * plans are deterministic. Both works are counted first; the scan runs
 * when its work is within CUTS_WORK_MAX steps and small (CUTS_SCAN_FREE) or
 * at most 8 times Monge's, else Monge when its work is within the bound.
 * The argmins of all states are kept (at most CUTS_STATES_MAX, 64 MiB) to
 * walk the plan back. Above the bounds the answer is 1 and the caller
 * keeps next-fit's boundaries and splits (ROLL's own cuts), so SHARED_CUTS
 * never plans worse than NEXT_FIT. Besides the scan or Monge, the work is
 * O(s + t + states). */
#include <math.h>
#include <stdlib.h>

#include "pk_internal.h"

/* States whose argmin is kept (4 bytes each), elementary steps allowed per
 * mini-batch (about 0.2 s), and the scan's work taken even where Monge's
 * is lower (about 1 ms). */
#define CUTS_STATES_MAX ((uint64_t)1 << 24)
#define CUTS_WORK_MAX ((uint64_t)1 << 27)
#define CUTS_SCAN_FREE ((uint64_t)1 << 20)

/* One layer k of the DP, filled from layer k - 1. */
typedef struct cuts {
  const uint32_t *reach; /* s + 1: reach[b] for b >= 1 */
  const double *c;       /* s + 1: c[b] = pk_slot_cost(w[b - 1]) */
  const uint32_t *lo, *hi;
  const double *fprev; /* band k - 1, indexed a - lo[k - 1] */
  double *fcur;        /* band k, indexed b - lo[k] */
  uint32_t *arg;       /* band k's argmins, indexed b - lo[k] */
  uint32_t k;
} cuts_t;

/* The window of b in layer k: a in [*a0, *a1], never empty in a band. */
static inline void window(const cuts_t *x, uint32_t b, uint32_t *a0, uint32_t *a1) {
  *a0 = PK_MAX(x->reach[b], x->lo[x->k - 1]);
  *a1 = PK_MIN(b - 1, x->hi[x->k - 1]);
}

/* The leftmost best a for b within [a0, a1]; its value in *best. */
static uint32_t best_from(const cuts_t *x, uint32_t b, uint32_t a0, uint32_t a1, double *best) {
  uint32_t base = x->lo[x->k - 1], arg = a0;
  double cb = x->c[b], v = INFINITY;
  for (uint32_t a = a0; a <= a1; a++) {
    double f = x->fprev[a - base] + (double)(b - a) * cb;
    if (f < v) {
      v = f;
      arg = a;
    }
  }
  *best = v;
  return arg;
}

static void layer_scan(cuts_t *x) {
  uint32_t lo = x->lo[x->k];
  for (uint32_t b = lo; b <= x->hi[x->k]; b++) {
    uint32_t a0, a1;
    window(x, b, &a0, &a1);
    x->arg[b - lo] = best_from(x, b, a0, a1, &x->fcur[b - lo]);
  }
}

/* Rows b0 .. b1 of layer k, whose leftmost argmins lie in [o0, o1]. The
 * clamped range is never empty: o0 is the argmin of a row above (at most
 * its window's end, which is at most b's) and o1 of a row below (at least
 * its window's start, at least b's). */
static void layer_monge(cuts_t *x, uint32_t b0, uint32_t b1, uint32_t o0, uint32_t o1) {
  while (b0 <= b1) {
    uint32_t b = b0 + (b1 - b0) / 2, a0, a1, lo = x->lo[x->k];
    window(x, b, &a0, &a1);
    uint32_t opt = best_from(x, b, PK_MAX(a0, o0), PK_MIN(a1, o1), &x->fcur[b - lo]);
    x->arg[b - lo] = opt;
    if (b > b0)
      layer_monge(x, b0, b - 1, o0, opt);
    /* The upper half iteratively: the recursion depth stays log2(s). */
    b0 = b + 1;
    o0 = opt;
  }
}

static uint32_t log2_ceil(uint64_t v) {
  uint32_t l = 0;
  while (((uint64_t)1 << l) < v)
    l++;
  return l;
}

int pk_roll_shared_cuts(const pk_cfg_t *cfg, const uint64_t *width, uint32_t s, uint32_t t,
                        pk_cuts_how_t how, uint32_t *start) {
  if (t == 0 || t > s)
    return PK_EINTERNAL;
  int rc = PK_ENOMEM;
  uint32_t *reach = pk_malloc_array((size_t)s + 1, sizeof *reach);
  double *c = pk_malloc_array((size_t)s + 1, sizeof *c);
  uint32_t *fwd = pk_malloc_array((size_t)t + 1, sizeof *fwd);
  uint32_t *back = pk_malloc_array((size_t)t + 1, sizeof *back);
  uint32_t *lo = pk_malloc_array((size_t)t + 1, sizeof *lo);
  uint32_t *hi = pk_malloc_array((size_t)t + 1, sizeof *hi);
  uint64_t *off = pk_malloc_array((size_t)t + 2, sizeof *off);
  uint32_t *arg = NULL;
  double *fa = NULL, *fb = NULL;
  if (!reach || !c || !fwd || !back || !lo || !hi || !off)
    goto done;

  reach[0] = 0;
  c[0] = 0;
  for (uint32_t b = 1; b <= s; b++) {
    uint64_t rows = pk_padded_cap_rows(cfg, width[b - 1]);
    reach[b] = rows >= b ? 0 : b - (uint32_t)rows;
    c[b] = pk_slot_cost(cfg, width[b - 1]);
  }
  /* fwd by next-fit: [a, e) fits iff reach[e] <= a, and e only grows. */
  fwd[0] = 0;
  for (uint32_t k = 1, e = 0; k <= t; k++) {
    while (e < s && reach[e + 1] <= fwd[k - 1])
      e++;
    fwd[k] = e;
  }
  back[0] = s;
  for (uint32_t j = 1; j <= t; j++)
    back[j] = back[j - 1] > 0 ? reach[back[j - 1]] : 0;
  uint64_t states = 0, width_max = 1;
  for (uint32_t k = 0; k <= t; k++) {
    lo[k] = PK_MAX(k, back[t - k]);
    hi[k] = PK_MIN(fwd[k], s - (t - k));
    if (lo[k] > hi[k]) {
      rc = PK_EINTERNAL; /* t is below the fewest count m*. */
      goto done;
    }
    off[k] = states;
    states += (uint64_t)hi[k] - lo[k] + 1;
    width_max = PK_MAX(width_max, (uint64_t)hi[k] - lo[k] + 1);
  }
  off[t + 1] = states;

  /* The work of each way, counted before any is spent. */
  bool scan = how == PK_CUTS_SCAN, monge = how == PK_CUTS_MONGE;
  if (how == PK_CUTS_ANY) {
    if (states > CUTS_STATES_MAX) {
      rc = 1;
      goto done;
    }
    uint64_t work_scan = 0, work_monge = 0;
    cuts_t x = {.reach = reach, .lo = lo, .hi = hi};
    for (x.k = 1; x.k <= t && work_scan <= CUTS_WORK_MAX; x.k++)
      for (uint32_t b = lo[x.k]; b <= hi[x.k]; b++) {
        uint32_t a0, a1;
        window(&x, b, &a0, &a1);
        work_scan += (uint64_t)a1 - a0 + 1;
      }
    for (uint32_t k = 1; k <= t; k++) {
      uint64_t rows = (uint64_t)hi[k] - lo[k] + 1, cols = (uint64_t)hi[k - 1] - lo[k - 1] + 1;
      work_monge += (rows + cols) * (log2_ceil(rows) + 1);
    }
    scan =
        work_scan <= CUTS_WORK_MAX && (work_scan <= CUTS_SCAN_FREE || work_scan <= 8 * work_monge);
    monge = !scan && work_monge <= CUTS_WORK_MAX;
    if (!scan && !monge) {
      rc = 1;
      goto done;
    }
  }

  arg = pk_malloc_array((size_t)states, sizeof *arg);
  fa = pk_malloc_array((size_t)width_max, sizeof *fa);
  fb = pk_malloc_array((size_t)width_max, sizeof *fb);
  if (!arg || !fa || !fb)
    goto done;
  fa[0] = 0; /* f[0][0]: band 0 is {0}. */
  cuts_t x = {.reach = reach, .c = c, .lo = lo, .hi = hi};
  for (x.k = 1; x.k <= t; x.k++) {
    x.fprev = fa;
    x.fcur = fb;
    x.arg = arg + off[x.k];
    if (scan)
      layer_scan(&x);
    else
      layer_monge(&x, lo[x.k], hi[x.k], lo[x.k - 1], hi[x.k - 1]);
    double *tmp = fa;
    fa = fb;
    fb = tmp;
  }
  /* Walk the argmins back from f[t][s]. */
  uint32_t b = s;
  for (uint32_t k = t; k > 0; k--) {
    start[k] = b;
    b = arg[off[k] + (b - lo[k])];
  }
  start[0] = b; /* 0: band 0 is {0}. */
  rc = b == 0 ? 0 : PK_EINTERNAL;

done:
  free(reach);
  free(c);
  free(fwd);
  free(back);
  free(lo);
  free(hi);
  free(off);
  free(arg);
  free(fa);
  free(fb);
  return rc;
}
