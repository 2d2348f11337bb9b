/* PADDED level search: lowers the step cost of a PADDED packing by moving
 * its column levels, where the cut search (runs.c) does not reach
 * (more than 512 runs or more than 32 per tier) or stops short.
 *
 * A packing is built from levels: given L_0 .. L_{m-2} for all columns but
 * the last, a walk down the width order opens each run in the column whose
 * level wastes least at that row (the level less the cost of as many rows
 * as it admits, min(L / c(w), cap rows); ties to the lower level) among
 * those with runs left. When every such run is used, or no level with runs
 * left admits the row, the rows left are the last column's, cut into at
 * most dp runs at their own least target. Where that makes fewer than dp
 * runs, the costliest runs with two rows or more are halved until there
 * are m x dp. The walk fails where the rows run out before the upper
 * columns' runs do (the levels are too high), or the last column's rows do
 * not fit dp runs. The packing's step cost is exact: its run costs sorted
 * descending, the sum of every dp-th (the deal of deal_groups).
 *
 * The search is a pattern search over the levels, from two starts: the
 * packing's own levels (its tier tops) and every upper level at the
 * highest of them (the level the widest rows force). Each level in turn is raised
 * and lowered by a factor (8 % down to 0.5 %, up to three sweeps each), a
 * change kept when the step cost falls, the levels then set to the
 * costliest run each column got. Raising an upper level lets its column
 * take wide rows that waste little at it, and the last column falls; where
 * exact solvers find better plans than runs at one target, they have this
 * shape (bench/planner/README.md). The search starts from the start whose
 * walk costs less, within the caller's work budget; the other start gets
 * the budget that search leaves (at most half the walks).
 *
 * Rows of one width and cap (a class) open runs of one length at a given
 * level, so a walk moves in batches (first row, rows per run, runs, cost):
 * one per class and level used, O(classes x m) a walk, whatever the number
 * of runs; the step cost sorts the batches, not the runs. The caller's work
 * budget bounds the walks. */
#include <stdlib.h>
#include <string.h>

#include "auto.h"

/* Pattern steps, from the coarsest (knobs.h, PK_WALK_STEPS). */
static const double level_steps[] = PK_WALK_STEPS;

/* `runs` runs of `rows` rows each, the q-th opening at first + q x rows,
 * each costing `cost`, in column `col`. */
typedef struct run_batch {
  uint32_t first, rows, runs, col;
  double cost;
} run_batch_t;

typedef struct level_walk {
  const padded_rows_t *rt;
  uint32_t m1;         /* Levels given: all columns but the last. */
  uint32_t dp, count;  /* count = (m1 + 1) x dp runs. */
  double *inv;         /* n: 1 / each row's cost (0 where it is 0). */
  double *prefix;      /* n + 1: the rows' costs summed up to each position. */
  uint32_t *left;      /* m1: runs each upper column may still take. */
  uint32_t *rows;      /* m1: rows each level admits in the current class. */
  double *waste;       /* m1: their waste. */
  const double *level; /* The levels of the current walk. */
  run_batch_t *batch;  /* The walk's batches (3 x count + 2 room). */
  uint32_t nbatch;
  uint32_t *order;     /* Batches by cost, descending (3 x count + 2). */
  uint32_t *order_tmp; /* Scratch for sorting them. */
  double *col_max;     /* m1 + 1: the costliest run of each column. */
  double tail_t;       /* The last column's target in the last walk (0: none), */
  uint32_t tail_from;  /* and the row it started at. */
  uint64_t ops;        /* Work of the walks so far. */
} level_walk_t;

/* Whether level x wastes less than level y in the current class. */
static bool wastes_less(const level_walk_t *w, uint32_t x, uint32_t y) {
  if (w->waste[x] != w->waste[y])
    return w->waste[x] < w->waste[y];
  if (w->level[x] != w->level[y])
    return w->level[x] < w->level[y];
  return x < y;
}

/* The rows a run opened in a class (row cost c, 1 / c inv, cap rows cap)
 * takes at target t: min(t / c, cap), at least one. */
static inline uint32_t class_rows(double t, double c, double inv, uint32_t cap) {
  if (c <= 0)
    return cap;
  double q = t * inv * (1 + PK_AUTO_TIE_EPS);
  if (q >= (double)cap)
    return cap;
  return q >= 1 ? (uint32_t)q : 1;
}

/* Fills rows / waste for the class of row i. */
static void class_levels(level_walk_t *w, uint32_t i) {
  double c = w->rt->cost[i], inv = w->inv[i];
  uint32_t cap = w->rt->cap_rows[i];
  for (uint32_t j = 0; j < w->m1; j++) {
    double l = w->level[j];
    uint32_t r = 0;
    if (c <= 0 || l >= c * (1 - PK_AUTO_TIE_EPS))
      r = class_rows(l, c, inv, cap);
    w->rows[j] = r;
    w->waste[j] = r > 0 ? l - (double)r * c : 0;
  }
  w->ops += w->m1;
}

/* Appends a batch of `runs` runs of `rows` rows from position i in column
 * col (the last run cut short at n gets a batch of its own); returns the
 * position after them. */
static uint32_t add_runs(level_walk_t *w, uint32_t i, uint32_t rows, uint32_t runs, uint32_t col) {
  const padded_rows_t *rt = w->rt;
  uint32_t n = rt->n;
  uint64_t end = (uint64_t)i + (uint64_t)rows * runs;
  uint32_t whole = runs;
  if (end > n)
    whole--; /* The last run ends at n. */
  double c = rt->cost[i];
  if (whole > 0)
    w->batch[w->nbatch++] = (run_batch_t){i, rows, whole, col, (double)rows * c};
  if (whole < runs) {
    uint32_t start = i + whole * rows;
    w->batch[w->nbatch++] = (run_batch_t){start, n - start, 1, col, (double)(n - start) * c};
    return n;
  }
  return (uint32_t)end;
}

/* The runs the rows [from, n) make at target t, by class (a run opened in
 * a class takes min(t / c, cap rows) rows, at least one), stopping above
 * limit; with emit, they are added as batches of the last column. */
static uint32_t tail_runs(level_walk_t *w, uint32_t from, double t, uint32_t limit, bool emit) {
  const padded_rows_t *rt = w->rt;
  uint32_t n = rt->n, i = from, g = 0;
  while (i < n) {
    uint32_t end = rt->class_end[i];
    uint32_t rows = class_rows(t, rt->cost[i], w->inv[i], rt->cap_rows[i]);
    uint32_t k = (end - i + rows - 1) / rows; /* Runs opening in this class. */
    w->ops++;
    if (g + k > limit)
      return limit + 1;
    g += k;
    i = emit ? add_runs(w, i, rows, k, w->m1)
             : (uint32_t)PK_MIN((uint64_t)i + (uint64_t)rows * k, (uint64_t)n);
  }
  return g;
}

/* The least target (to a relative 1e-5) at which the rows [from, n) make
 * at most dp runs, or -1 where none does: a bisection, bracketed by steps
 * from the previous walk's target that start at 1 % and double (walks
 * next to each other cut their last columns alike), else by doubling
 * from the mean cost per run. */
static double tail_target(level_walk_t *w, uint32_t from) {
  const padded_rows_t *rt = w->rt;
  uint32_t dp = w->dp;
  if (rt->n - from <= dp)
    return 0; /* A row per run. */
  if (w->tail_t > 0 && from == w->tail_from)
    return w->tail_t; /* The same rows as the last walk's. */
  double lo = (w->prefix[rt->n] - w->prefix[from]) / dp * (1 - PK_AUTO_REL_EPS);
  double never = rt->cost[from] * (rt->n - from) + 1; /* No run closed by t. */
  double hi = PK_MAX(w->tail_t, lo);
  if (!(hi > 0))
    hi = 1;
  if (tail_runs(w, from, hi, dp, false) <= dp) {
    /* Down by 1 %, 2 %, 4 %, ... (at most half) until the rows no longer
     * fit or the mean is reached. */
    double fall = PK_WALK_TARGET_STEP;
    for (;;) {
      double down = hi * (1 - fall);
      if (down <= lo)
        break;
      if (tail_runs(w, from, down, dp, false) > dp) {
        lo = down;
        break;
      }
      hi = down;
      fall = PK_MIN(fall * 2, PK_WALK_TARGET_MAX_FALL);
    }
  } else {
    /* Up by 1 %, 2 %, 4 %, ... from the previous walk's target, or
     * doubling from the mean. */
    double rise = w->tail_t > 0 ? PK_WALK_TARGET_STEP : 1;
    for (;;) {
      lo = hi;
      hi = PK_MIN(hi * (1 + rise), never);
      if (tail_runs(w, from, hi, dp, false) <= dp)
        break;
      if (hi >= never)
        return -1;
      rise *= 2;
    }
  }
  while (hi - lo > hi * PK_WALK_TARGET_TOL) {
    double mid = (lo + hi) / 2;
    if (tail_runs(w, from, mid, dp, false) <= dp)
      hi = mid;
    else
      lo = mid;
  }
  w->tail_t = hi;
  w->tail_from = from;
  return hi;
}

/* Halves the costliest run with two rows or more (the last run of its
 * batch: it leaves the batch, its halves get batches of their own in the
 * last column). False where none has two rows. */
static bool halve_costliest(level_walk_t *w) {
  uint32_t best = UINT32_MAX;
  for (uint32_t b = 0; b < w->nbatch; b++) {
    const run_batch_t *x = &w->batch[b];
    if (x->runs > 0 && x->rows >= 2 && (best == UINT32_MAX || x->cost > w->batch[best].cost))
      best = b;
  }
  w->ops += w->nbatch;
  if (best == UINT32_MAX)
    return false;
  run_batch_t *x = &w->batch[best];
  uint32_t start = x->first + (x->runs - 1) * x->rows;
  uint32_t keep = x->rows - x->rows / 2, moved = x->rows / 2;
  x->runs--;
  const double *cost = w->rt->cost;
  w->batch[w->nbatch++] = (run_batch_t){start, keep, 1, w->m1, (double)keep * cost[start]};
  w->batch[w->nbatch++] =
      (run_batch_t){start + keep, moved, 1, w->m1, (double)moved * cost[start + keep]};
  return true;
}

static bool batch_costlier(const void *arg, uint32_t x, uint32_t y) {
  const run_batch_t *b = arg;
  return b[x].cost > b[y].cost;
}

/* The step cost of the walk's runs: sorted by cost, descending, the sum of
 * the costs at ranks 0, dp, 2 dp, ... (batches of equal runs sorted once). */
static double walk_step(level_walk_t *w) {
  for (uint32_t b = 0; b < w->nbatch; b++)
    w->order[b] = b;
  pk_merge_sort_u32(w->order, w->order_tmp, w->nbatch, batch_costlier, w->batch);
  uint64_t rank = 0, next = 0, last = (uint64_t)w->m1 * w->dp; /* Tier tops: next .. last. */
  double sum = 0;
  for (uint32_t q = 0; q < w->nbatch && next <= last; q++) {
    const run_batch_t *x = &w->batch[w->order[q]];
    rank += x->runs;
    while (next <= last && next < rank) {
      sum += x->cost;
      next += w->dp;
    }
  }
  w->ops += (uint64_t)w->nbatch * PK_WALK_BATCH_UNITS;
  return sum;
}

/* One walk at the given levels: the runs into w->batch, each column's
 * costliest run into w->col_max. Returns the step cost, or -1 where the
 * walk fails. */
static double walk(level_walk_t *w, const double *level) {
  const padded_rows_t *rt = w->rt;
  uint32_t n = rt->n, m1 = w->m1, dp = w->dp, i = 0;
  uint32_t upper = m1 * dp; /* Runs left in the upper columns. */
  w->level = level;
  w->nbatch = 0;
  for (uint32_t j = 0; j < m1; j++)
    w->left[j] = dp;
  uint32_t end = 0; /* The current class's end: rows / waste hold for it. */
  while (i < n && upper > 0) {
    if (pk_auto_tick(rt->stop, m1))
      return -1; /* pk_auto_level_search reads the stop. */
    if (i >= end) {
      end = rt->class_end[i];
      class_levels(w, i);
    }
    uint32_t best = UINT32_MAX;
    for (uint32_t j = 0; j < m1; j++)
      if (w->left[j] > 0 && w->rows[j] > 0 && (best == UINT32_MAX || wastes_less(w, j, best)))
        best = j;
    w->ops += m1;
    if (best == UINT32_MAX)
      break; /* The last column starts here. */
    uint32_t rows = w->rows[best];
    uint32_t runs = PK_MIN((end - i + rows - 1) / rows, w->left[best]);
    i = add_runs(w, i, rows, runs, best);
    w->left[best] -= runs;
    upper -= runs;
  }
  if (i >= n && upper > 0)
    return -1; /* The levels leave upper runs empty. */
  uint32_t tail = 0;
  if (i < n) {
    double t = tail_target(w, i);
    if (t < 0)
      return -1;
    tail = tail_runs(w, i, t, dp, true);
    if (tail > dp)
      return -1;
  }
  for (uint32_t j = 0; j <= m1; j++)
    w->col_max[j] = 0;
  for (uint32_t b = 0; b < w->nbatch; b++)
    w->col_max[w->batch[b].col] = PK_MAX(w->col_max[w->batch[b].col], w->batch[b].cost);
  /* Halving makes up the count (at most dp runs short: else the levels are
   * far off, and the walk fails rather than halve for long). */
  uint32_t made = m1 * dp - upper + tail;
  if (w->count - made > dp)
    return -1;
  for (; made < w->count; made++)
    if (!halve_costliest(w))
      return -1;
  return walk_step(w);
}

/* The levels after a walk: each upper column's costliest run (a column
 * left empty keeps its level). */
static void tighten(const level_walk_t *w, double *level) {
  for (uint32_t j = 0; j < w->m1; j++)
    if (w->col_max[j] > 0)
      level[j] = w->col_max[j];
}

/* The batches expanded into runs (count of them; a batch's runs open in
 * one class, so each costs the batch's cost). */
static void expand(const run_batch_t *batch, uint32_t nbatch, padded_group_t *runs) {
  uint32_t g = 0;
  for (uint32_t b = 0; b < nbatch; b++)
    for (uint32_t q = 0; q < batch[b].runs; q++)
      runs[g++] =
          (padded_group_t){batch[b].first + q * batch[b].rows, batch[b].rows, batch[b].cost};
}

/* The best walk so far: its step cost (-1: none) and batches. */
typedef struct level_best {
  double step;
  run_batch_t *batch;
  uint32_t nbatch;
} level_best_t;

/* Keeps the last walk (step cost v) where it beats the best. */
static bool keep_if_better(const level_walk_t *w, double v, level_best_t *b) {
  if (v < 0 || (b->step >= 0 && v >= b->step * (1 - PK_AUTO_REL_EPS)))
    return false;
  b->step = v;
  b->nbatch = w->nbatch;
  memcpy(b->batch, w->batch, w->nbatch * sizeof *b->batch);
  return true;
}

/* The pattern search from `level` (a walk's levels, tightened; cur its
 * step cost), for at most walks_max walks and until the work reaches
 * work_max: each level raised and lowered by each step in turn, a move
 * kept (and the levels tightened) when the step cost falls. */
static void pattern_search(level_walk_t *w, double *level, double *trial, double cur,
                           level_best_t *best, uint32_t walks_max, uint64_t work_max) {
  uint32_t m1 = w->m1, walks = 0;
  for (size_t s = 0; s < sizeof level_steps / sizeof *level_steps; s++) {
    for (int sweep = 0; sweep < PK_WALK_SWEEPS; sweep++) {
      bool improved = false;
      for (uint32_t j = 0; j < m1; j++) {
        for (int dir = 0; dir < 2; dir++) {
          if (walks >= walks_max || w->ops >= work_max)
            return;
          walks++;
          memcpy(trial, level, m1 * sizeof *trial);
          trial[j] *= dir == 0 ? 1 + level_steps[s] : 1 - level_steps[s];
          double v = walk(w, trial);
          if (v >= 0 && v < cur * (1 - PK_AUTO_REL_EPS)) {
            cur = v;
            improved = true;
            tighten(w, trial);
            memcpy(level, trial, m1 * sizeof *level);
            keep_if_better(w, v, best);
          }
        }
      }
      if (!improved)
        break;
    }
  }
}

int pk_auto_level_search(const padded_rows_t *rt, padded_group_t *runs, uint32_t m, uint32_t dp,
                         uint64_t work) {
  uint32_t n = rt->n, count = m * dp, m1 = m - 1;
  if (m < 2 || dp < 2 || n < count)
    return PK_EPRECOND;
  level_walk_t w = {.rt = rt, .m1 = m1, .dp = dp, .count = count};
  size_t room = 3 * (size_t)count + 2;
  int rc = PK_ENOMEM;
  uint32_t *idx = pk_malloc_array(count, sizeof *idx);
  uint32_t *tmp = pk_malloc_array(count, sizeof *tmp);
  double *level = pk_malloc_array(m1, sizeof *level);
  double *trial = pk_malloc_array(m1, sizeof *trial);
  double *top = pk_malloc_array(m1, sizeof *top);
  run_batch_t *best_batch = pk_malloc_array(room, sizeof *best_batch);
  w.inv = pk_malloc_array(n, sizeof *w.inv);
  w.prefix = pk_malloc_array((size_t)n + 1, sizeof *w.prefix);
  w.left = pk_malloc_array(m1, sizeof *w.left);
  w.rows = pk_malloc_array(m1, sizeof *w.rows);
  w.waste = pk_malloc_array(m1, sizeof *w.waste);
  w.batch = pk_malloc_array(room, sizeof *w.batch);
  w.order = pk_malloc_array(room, sizeof *w.order);
  w.order_tmp = pk_malloc_array(room, sizeof *w.order_tmp);
  w.col_max = pk_malloc_array((size_t)m1 + 1, sizeof *w.col_max);
  if (idx == NULL || tmp == NULL || level == NULL || trial == NULL || top == NULL ||
      best_batch == NULL || w.inv == NULL || w.prefix == NULL || w.left == NULL || w.rows == NULL ||
      w.waste == NULL || w.batch == NULL || w.order == NULL || w.order_tmp == NULL ||
      w.col_max == NULL)
    goto done;
  rc = PK_EPRECOND;
  w.prefix[0] = 0;
  for (uint32_t i = 0; i < n; i++)
    w.prefix[i + 1] = w.prefix[i] + rt->cost[i];
  for (uint32_t i = 0; i < n; i = rt->class_end[i]) {
    double inv = rt->cost[i] > 0 ? 1 / rt->cost[i] : 0; /* One division a class. */
    for (uint32_t k = i; k < rt->class_end[i]; k++)
      w.inv[k] = inv;
  }
  /* The start: the packing's step cost and its tier tops as levels. */
  for (uint32_t q = 0; q < count; q++)
    idx[q] = q;
  pk_merge_sort_u32(idx, tmp, count, pk_padded_group_costlier, runs);
  double start = 0;
  for (uint32_t j = 0; j < m; j++)
    start += runs[idx[(size_t)j * dp]].cost;
  for (uint32_t j = 0; j < m1; j++)
    level[j] = runs[idx[(size_t)j * dp]].cost;
  double first = -1;
  for (int tries = 0; first < 0 && tries < PK_WALK_START_TRIES && w.ops < work; tries++) {
    if (tries > 0)
      for (uint32_t j = 0; j < m1; j++)
        level[j] *= PK_WALK_START_RAISE;
    first = walk(&w, level);
  }
  level_best_t best = {.step = -1, .batch = best_batch};
  if (!keep_if_better(&w, first, &best))
    goto done;
  tighten(&w, level);
  /* The second start: every upper column at the highest level (the
   * widest rows force it anyway; exact solvers' better plans often fill
   * the upper columns up to it and let the last ones fall). */
  double highest = 0;
  for (uint32_t j = 0; j < m1; j++)
    highest = PK_MAX(highest, level[j]);
  for (uint32_t j = 0; j < m1; j++)
    top[j] = highest;
  double second = walk(&w, top);
  if (second >= 0) {
    tighten(&w, top);
    keep_if_better(&w, second, &best);
  }
  /* The pattern search from the start with the cheaper walk first; the
   * other gets the work it leaves. */
  double *a = level, *b = top, va = first, vb = second;
  if (second >= 0 && second < first) {
    a = top;
    b = level;
    va = second;
    vb = first;
  }
  pattern_search(&w, a, trial, va, &best, PK_WALK_MAX_WALKS, work);
  if (vb >= 0)
    pattern_search(&w, b, trial, vb, &best, PK_WALK_MAX_WALKS / 2, work);
  if (best.step < start * (1 - PK_AUTO_REL_EPS)) {
    expand(best.batch, best.nbatch, runs);
    rc = 0;
  }
done:
  if (rc != PK_ENOMEM && pk_auto_stopped(rt->stop))
    rc = PK_ECANCELED;
  free(idx);
  free(tmp);
  free(level);
  free(trial);
  free(top);
  free(best_batch);
  free(w.inv);
  free(w.prefix);
  free(w.left);
  free(w.rows);
  free(w.waste);
  free(w.batch);
  free(w.order);
  free(w.order_tmp);
  free(w.col_max);
  return rc;
}
