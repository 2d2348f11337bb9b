/* PADDED cut search: moves the cuts between the runs of a PADDED packing to
 * lower its step cost.
 *
 * Why runs are enough. Take any PADDED packing with column levels L (every
 * micro-batch of column j costs at most L_j). The widest item i sits in some
 * micro-batch A of r rows; A's width is w_i, so any r items no wider than
 * w_i fit A at no more cost. Give A the r widest items (i and the r - 1
 * after it in the width order) and hand A's former items to the
 * micro-batches that held those r - 1, one for one: each of those gives up
 * an item at least as wide as the one it gets (the one it gets lies further
 * down the order), so it keeps its rows and does not widen. A is now a run
 * at the head of the order; repeat on the rest. So some best packing is made
 * of runs of the width order, each in a column whose level it fits, and
 * the step cost of a set of runs is fixed by their costs alone: sorted
 * descending and dealt in tiers of dp, tier j is column j (the least sum
 * of column maxima over any deal of the costs), as deal_groups does.
 *
 * The search keeps the runs as cuts (run q is [cut[q], cut[q + 1])) and
 * their costs in one descending array, so a move's new step cost reads the
 * tier tops of the array with a few runs taken out and put back, without
 * touching it: O(tiers + log runs). Moves: shift one cut by up to three
 * positions (the two runs beside it change), or remove a cut (merging two
 * runs) and cut another run in two. A move that raises the step cost is
 * taken with probability exp(-rise / temperature), the temperature falling
 * linearly to zero over the moves (simulated annealing), and the best cuts
 * seen are kept. Every run stays within the cap and max_seqs: a run fits
 * when its rows are at most its first row's cap_rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "auto.h"

/* At most this many runs leave or join in one move. */
#define CHANGE_MAX 3

typedef struct cut_search {
  const padded_rows_t *rt;
  uint32_t count, dp;
  uint32_t *cut;  /* count + 1 positions. */
  double *sorted; /* The runs' costs, descending. */
  double *spare;  /* count scratch for updating sorted. */
} cut_search_t;

/* Runs leaving (gone) and joining (added) in one move. */
typedef struct change {
  uint32_t k;
  double gone[CHANGE_MAX], added[CHANGE_MAX];
} change_t;

static double run_cost(const padded_rows_t *rt, uint32_t a, uint32_t b) {
  return (double)(b - a) * rt->cost[a];
}

static bool run_fits(const padded_rows_t *rt, uint32_t a, uint32_t b) {
  return b > a && b - a <= rt->cap_rows[a];
}

/* The positions in sorted of the costs leaving (ascending, distinct), and
 * the costs joining (descending). Costs are computed the same way
 * everywhere (run_cost), so a leaving cost is in the array exactly. */
static void locate(const cut_search_t *cs, const change_t *ch, uint32_t *pos, double *add) {
  for (uint32_t t = 0; t < ch->k; t++) {
    uint32_t i = pk_count_above(cs->sorted, cs->count, ch->gone[t]);
    for (bool moved = true; moved;) {
      moved = false;
      for (uint32_t u = 0; u < t; u++)
        if (pos[u] == i) {
          i++;
          moved = true;
        }
    }
    pos[t] = i;
    add[t] = ch->added[t];
  }
  for (uint32_t t = 1; t < ch->k; t++)
    for (uint32_t u = t; u > 0 && pos[u - 1] > pos[u]; u--) {
      uint32_t x = pos[u];
      pos[u] = pos[u - 1];
      pos[u - 1] = x;
    }
  for (uint32_t t = 1; t < ch->k; t++)
    for (uint32_t u = t; u > 0 && add[u - 1] < add[u]; u--) {
      double x = add[u];
      add[u] = add[u - 1];
      add[u - 1] = x;
    }
}

/* The step cost after the change: the sum of the tier tops (entries 0, dp,
 * 2 dp, ...) of the array with the leaving costs taken out and the joining
 * ones merged in, read through index arithmetic. */
static double step_after(const cut_search_t *cs, const change_t *ch) {
  uint32_t pos[CHANGE_MAX], at[CHANGE_MAX], k = ch->k;
  double add[CHANGE_MAX];
  locate(cs, ch, pos, add);
  /* at[t]: where add[t] lands in the new array (before equal costs). */
  for (uint32_t t = 0; t < k; t++) {
    uint32_t above = pk_count_above(cs->sorted, cs->count, add[t]), kept = above;
    for (uint32_t u = 0; u < k; u++)
      kept -= pos[u] < above;
    at[t] = kept + t;
  }
  double step = 0;
  for (uint32_t top = 0; top < cs->count; top += cs->dp) {
    double v = -1;
    uint32_t before = 0;
    for (uint32_t t = 0; t < k; t++) {
      if (at[t] == top)
        v = add[t];
      before += at[t] < top;
    }
    if (v < 0) {
      uint32_t i = top - before;
      for (uint32_t t = 0; t < k; t++)
        i += i >= pos[t];
      v = cs->sorted[i];
    }
    step += v;
  }
  return step;
}

/* Applies the change to sorted (the cuts are the caller's). */
static void apply(cut_search_t *cs, const change_t *ch) {
  uint32_t pos[CHANGE_MAX], k = ch->k, kept = 0, t = 0;
  double add[CHANGE_MAX];
  locate(cs, ch, pos, add);
  double *out = cs->spare;
  uint32_t o = 0;
  for (uint32_t i = 0; i < cs->count; i++) {
    if (kept < k && pos[kept] == i) {
      kept++;
      continue;
    }
    while (t < k && add[t] > cs->sorted[i])
      out[o++] = add[t++];
    out[o++] = cs->sorted[i];
  }
  while (t < k)
    out[o++] = add[t++];
  cs->spare = cs->sorted;
  cs->sorted = out;
}

static double unit(pk_rng_t *rng) {
  return (double)(pk_rng_next(rng) >> 11) / 9007199254740992.0;
}

static bool costlier(const void *arg, uint32_t x, uint32_t y) {
  const double *c = arg;
  return c[x] > c[y];
}

static bool opens_first(const void *arg, uint32_t x, uint32_t y) {
  const padded_group_t *runs = arg;
  return runs[x].first < runs[y].first;
}

int pk_auto_search_runs(const padded_rows_t *rt, padded_group_t *runs, uint32_t count, uint32_t dp,
                        uint32_t moves, uint64_t seed) {
  uint32_t n = rt->n;
  if (count == 0 || dp == 0)
    return 0;
  if (count < 2)
    moves = 0; /* One run: no cut to move. */
  cut_search_t cs = {.rt = rt, .count = count, .dp = dp};
  uint32_t *best_cut = pk_malloc_array((size_t)count + 1, sizeof *best_cut);
  uint32_t *idx = pk_malloc_array(count, sizeof *idx);
  uint32_t *tmp = pk_malloc_array(count, sizeof *tmp);
  cs.cut = pk_malloc_array((size_t)count + 1, sizeof *cs.cut);
  cs.sorted = pk_malloc_array(count, sizeof *cs.sorted);
  cs.spare = pk_malloc_array(count, sizeof *cs.spare);
  int rc = PK_ENOMEM;
  if (best_cut == NULL || idx == NULL || tmp == NULL || cs.cut == NULL || cs.sorted == NULL ||
      cs.spare == NULL)
    goto done;
  /* The cuts from the runs' first positions (the runs come in any order). */
  for (uint32_t q = 0; q < count; q++)
    idx[q] = q;
  pk_merge_sort_u32(idx, tmp, count, opens_first, runs);
  for (uint32_t q = 0; q < count; q++)
    cs.cut[q] = runs[idx[q]].first;
  cs.cut[count] = n;
  for (uint32_t q = 0; q < count; q++) {
    cs.sorted[q] = run_cost(rt, cs.cut[q], cs.cut[q + 1]);
    idx[q] = q;
  }
  pk_merge_sort_u32(idx, tmp, count, costlier, cs.sorted);
  for (uint32_t q = 0; q < count; q++)
    cs.spare[q] = cs.sorted[idx[q]];
  memcpy(cs.sorted, cs.spare, (size_t)count * sizeof *cs.sorted);
  memcpy(best_cut, cs.cut, ((size_t)count + 1) * sizeof *best_cut);
  change_t none = {0};
  /* The starting temperature: the larger of 0.2 % of the step cost and 15
   * % of the mean row cost, so that moving a row or two can climb early on
   * in small batches too. */
  double total = 0;
  for (uint32_t i = 0; i < n; i++)
    total += rt->cost[i];
  double cur = step_after(&cs, &none), best = cur;
  double t0 = PK_MAX(cur * PK_CUT_TEMP_STEP, PK_CUT_TEMP_ROW * total / n);
  pk_rng_t rng = {seed ^ 0x63757473ull};
  /* A move reads every tier top (count / dp) at most. */
  uint32_t move_work = PK_MIN(PK_MAX(count / dp, 1u), PK_AUTO_POLL_EVERY);
  for (uint32_t it = 0; it < moves; it++) {
    if (pk_auto_tick(rt->stop, move_work)) {
      rc = PK_ECANCELED; /* runs unchanged. */
      goto done;
    }
    double temp = t0 * (1.0 - (double)it / moves);
    uint32_t *cut = cs.cut;
    change_t ch = {0};
    uint64_t draw = pk_rng_next(&rng);
    uint32_t q = 1 + (uint32_t)((draw >> 8) % (count - 1));
    if ((draw & (PK_CUT_SPLIT_EVERY - 1)) != PK_CUT_SPLIT_EVERY - 1) {
      /* Shift cut q by d in -PK_CUT_SHIFT_MAX..PK_CUT_SHIFT_MAX, d != 0. */
      int d = (int)((draw >> 40) % (2 * PK_CUT_SHIFT_MAX)) - PK_CUT_SHIFT_MAX;
      d += d >= 0;
      int64_t at = (int64_t)cut[q] + d;
      if (at <= cut[q - 1] || at >= cut[q + 1])
        continue;
      uint32_t a = (uint32_t)at;
      if (!run_fits(rt, cut[q - 1], a) || !run_fits(rt, a, cut[q + 1]))
        continue;
      ch = (change_t){2,
                      {run_cost(rt, cut[q - 1], cut[q]), run_cost(rt, cut[q], cut[q + 1])},
                      {run_cost(rt, cut[q - 1], a), run_cost(rt, a, cut[q + 1])}};
      double v = step_after(&cs, &ch);
      if (v > cur && !(temp > 0 && unit(&rng) < exp((cur - v) / temp)))
        continue;
      apply(&cs, &ch);
      cut[q] = a;
      cur = v;
    } else {
      /* Remove cut q (runs q - 1 and q merge) and cut run r in two at p. */
      uint32_t r = (uint32_t)((draw >> 40) % count);
      if (r + 1 == q || r == q || !run_fits(rt, cut[q - 1], cut[q + 1]))
        continue;
      uint32_t rows = cut[r + 1] - cut[r];
      if (rows < 2)
        continue;
      uint32_t p = cut[r] + 1 + (uint32_t)(pk_rng_next(&rng) % (rows - 1));
      ch = (change_t){3,
                      {run_cost(rt, cut[q - 1], cut[q]), run_cost(rt, cut[q], cut[q + 1]),
                       run_cost(rt, cut[r], cut[r + 1])},
                      {run_cost(rt, cut[q - 1], cut[q + 1]), run_cost(rt, cut[r], p),
                       run_cost(rt, p, cut[r + 1])}};
      double v = step_after(&cs, &ch);
      if (v > cur && !(temp > 0 && unit(&rng) < exp((cur - v) / temp)))
        continue;
      apply(&cs, &ch);
      /* The cuts: drop cut[q], add p (keeping them ascending). */
      if (r > q) {
        memmove(&cut[q], &cut[q + 1], (size_t)(r - q) * sizeof *cut);
        cut[r] = p;
      } else {
        memmove(&cut[r + 2], &cut[r + 1], (size_t)(q - r - 1) * sizeof *cut);
        cut[r + 1] = p;
      }
      cur = v;
    }
    if (cur < best * (1 - PK_AUTO_TIE_EPS)) {
      best = cur;
      memcpy(best_cut, cut, ((size_t)count + 1) * sizeof *best_cut);
    }
  }
  for (uint32_t q = 0; q < count; q++) {
    uint32_t a = best_cut[q], b = best_cut[q + 1];
    runs[q] = (padded_group_t){a, b - a, run_cost(rt, a, b)};
  }
  rc = 0;
done:
  free(best_cut);
  free(idx);
  free(tmp);
  free(cs.cut);
  free(cs.sorted);
  free(cs.spare);
  return rc;
}
