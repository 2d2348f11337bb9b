/* AUTO's PADDED packings: groups of like width at a target cost (halved, or
 * cut in an even band), tiers of rows for equal counts, and the in-column
 * refinement by row moves (see the comment at auto.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "auto.h"

/* PADDED mode: a micro-batch costs rows x its widest row, so rows of like
 * width must share micro-batches. Columns are runs of consecutive tiers
 * (sorted by width, descending): each column takes tiers while rows x the
 * width of its first (widest) tier fits the cap (greedy runs are optimal
 * for sorted widths), then the widest runs are split in two until there are
 * M columns. Left-over items (n mod dp) go where they widen least. */
int pk_auto_pack_padded_tiers(auto_state_t *s, const uint32_t *order, uint32_t m, uint32_t max_m,
                              uint32_t *m_out) {
  const pk_ctx_t *ctx = s->ctx;
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = s->dp, n = ctx->n, tiers = n / dp;
  uint32_t *bounds = pk_malloc_array((size_t)max_m + 2, sizeof *bounds);
  if (bounds == NULL)
    return PK_ENOMEM;
  uint32_t used = 0;
  for (uint32_t a = 0; a < tiers;) {
    uint64_t width = ctx->size[order[(size_t)a * dp]];
    uint32_t b = a + 1;
    while (b < tiers && (uint64_t)(b - a + 1) * width <= cfg->cap && b - a + 1 <= cfg->max_seqs)
      b++;
    if (used >= max_m) {
      free(bounds);
      return PK_EPRECOND;
    }
    bounds[used++] = a;
    a = b;
  }
  bounds[used] = tiers;
  m = PK_MAX(m, (uint32_t)pk_round_up(used, cfg->group));
  int rc = PK_EPRECOND;
  for (; m <= max_m; m += cfg->group) {
    /* Split the widest multi-tier runs until there are m columns. */
    while (used < m) {
      if (pk_auto_tick(s->stop, used)) {
        free(bounds);
        return PK_ECANCELED;
      }
      uint32_t best = UINT32_MAX;
      uint64_t best_foot = 0;
      for (uint32_t c = 0; c < used; c++) {
        uint32_t rows = bounds[c + 1] - bounds[c];
        uint64_t foot = (uint64_t)rows * ctx->size[order[(size_t)bounds[c] * dp]];
        if (rows >= 2 && (best == UINT32_MAX || foot > best_foot)) {
          best = c;
          best_foot = foot;
        }
      }
      if (best == UINT32_MAX)
        break;
      memmove(&bounds[best + 2], &bounds[best + 1], (size_t)(used - best) * sizeof *bounds);
      bounds[best + 1] = bounds[best] + (bounds[best + 2] - bounds[best]) / 2;
      used++;
    }
    if (used != m)
      break;
    s->m = m;
    memset(s->bins, 0, (size_t)m * dp * sizeof *s->bins);
    memset(s->col_foot, 0, (size_t)m * sizeof *s->col_foot);
    bool ok = true;
    for (uint32_t c = 0; c < m && ok; c++)
      for (uint32_t t = bounds[c]; t < bounds[c + 1] && ok; t++)
        ok = !pk_auto_tick(s->stop, dp) && pk_auto_place_tier(s, c, order + (size_t)t * dp);
    if (pk_auto_stopped(s->stop)) {
      free(bounds);
      return PK_ECANCELED;
    }
    for (uint32_t i = tiers * dp; i < n && ok; i++) {
      uint32_t k = order[i], best = UINT32_MAX;
      uint64_t best_grow = 0;
      for (uint32_t q = 0; q < m * dp; q++) {
        if (!pk_bin_fits(ctx, &s->bins[q], k))
          continue;
        pk_bin_t after = s->bins[q];
        pk_bin_add(ctx, &after, k);
        uint64_t grow = pk_bin_footprint(cfg, &after) - pk_bin_footprint(cfg, &s->bins[q]);
        if (best == UINT32_MAX || grow < best_grow) {
          best = q;
          best_grow = grow;
        }
      }
      if (best == UINT32_MAX) {
        ok = false;
        break;
      }
      pk_bin_add(ctx, &s->bins[best], k);
      s->item_bin[k] = best;
    }
    if (ok) {
      rc = 0;
      break;
    }
  }
  free(bounds);
  *m_out = m;
  return rc;
}

/* PADDED mode without equal_count: groups of like width, then tiers of
 * groups.
 *
 * A PADDED micro-batch costs rows x c(width), so a group of consecutive
 * items in width order wastes the least padding. Groups are runs of the
 * width-sorted items, each closed at a target cost T: the run opened by
 * width w takes min(T / c(w), cap / w, max_seqs) rows (at least one). The
 * smallest T giving at most M x dp groups is found by bisection (the count
 * only falls as T grows, and T = infinity is the exact greedy grouping of
 * pk_micro_lower_bound, so M = that bound always works); the costliest
 * multi-row groups are then halved until there are exactly M x dp. Groups
 * sorted by cost, descending, are dealt in tiers of dp: tier j is column j,
 * so the micro-batches that run together cost nearly the same. */
int pk_padded_rows_init(padded_rows_t *rt, const pk_ctx_t *ctx, const uint32_t *order) {
  return pk_padded_rows_init_polled(rt, ctx, order, NULL);
}

int pk_padded_rows_init_polled(padded_rows_t *rt, const pk_ctx_t *ctx, const uint32_t *order,
                               pk_auto_stop_t *stop) {
  uint32_t n = ctx->n;
  rt->n = n;
  rt->stop = stop;
  rt->cost = pk_malloc_array(n, sizeof *rt->cost);
  rt->cap_rows = pk_malloc_array(n, sizeof *rt->cap_rows);
  rt->class_end = pk_malloc_array(n, sizeof *rt->class_end);
  if (rt->cost == NULL || rt->cap_rows == NULL || rt->class_end == NULL)
    return PK_ENOMEM;
  for (uint32_t i = 0; i < n; i++) {
    if (pk_auto_tick_loop(stop, i))
      return PK_ECANCELED; /* The caller frees rt. */
    uint32_t k = order[i];
    rt->cost[i] = ctx->cost[k];
    rt->cap_rows[i] = (uint32_t)PK_MIN(pk_padded_cap_rows(ctx->cfg, ctx->size[k]), (uint64_t)n);
  }
  for (uint32_t i = n; i-- > 0;)
    rt->class_end[i] =
        i + 1 < n && rt->cost[i + 1] == rt->cost[i] && rt->cap_rows[i + 1] == rt->cap_rows[i]
            ? rt->class_end[i + 1]
            : i + 1;
  return 0;
}

void pk_padded_rows_free(padded_rows_t *rt) {
  free(rt->cost);
  free(rt->cap_rows);
  free(rt->class_end);
}

/* The most rows a run opened at position i takes under target cost t, the
 * cap and max_seqs: at least one. */
static uint32_t run_rows(const padded_rows_t *rt, uint32_t i, double t) {
  double c = rt->cost[i];
  uint32_t rows = rt->cap_rows[i];
  if (c > 0 && t / c < (double)rows)
    rows = PK_MAX((uint32_t)(t / c), 1);
  return rows;
}

/* Number of groups of positions [from, n) for target cost t (stops
 * counting above limit); out, when given, gets them (runs of run_rows). */
uint32_t pk_padded_count_groups(const padded_rows_t *rt, uint32_t from, double t, uint32_t limit,
                                padded_group_t *out) {
  uint32_t n = rt->n, g = 0;
  for (uint32_t i = from; i < n;) {
    /* Every run opening in i's class takes the same rows (the last one
     * fewer where it reaches n). */
    uint32_t rows = run_rows(rt, i, t), end = rt->class_end[i];
    uint32_t k = (end - i + rows - 1) / rows;
    if (g + k > limit)
      return limit + 1;
    for (uint32_t q = 0; out != NULL && q < k; q++) {
      uint32_t first = i + q * rows, r = PK_MIN(rows, n - first);
      out[g + q] = (padded_group_t){first, r, (double)r * rt->cost[i]};
    }
    g += k;
    i = (uint32_t)PK_MIN((uint64_t)i + (uint64_t)k * rows, (uint64_t)n);
  }
  return g;
}

bool pk_padded_group_costlier(const void *arg, uint32_t x, uint32_t y) {
  const padded_group_t *grp = arg;
  return grp[x].cost > grp[y].cost;
}

/* The least target cost T (to a relative 1e-7) at which pk_padded_count_groups makes
 * at most `target` groups of order[from..n), or a negative value when none
 * does. Every group costs at most T, so T >= (their total cost) / target:
 * the bisection starts there, its upper end at `fits` (a target the caller
 * knows to fit; 0: none) or doubling until the count fits. Past (items) x
 * the costliest item's cost no run is closed by T, so the count is the
 * exact greedy grouping of pk_micro_lower_bound and the doubling stops. */
double pk_padded_least_target(const padded_rows_t *rt, uint32_t from, uint32_t target,
                              double fits) {
  double total = 0, top = 0;
  for (uint32_t i = from; i < rt->n; i++) {
    if (pk_auto_tick_loop(rt->stop, i - from))
      return -1; /* Stopped: the caller's caller reads the stop. */
    total += rt->cost[i];
    top = PK_MAX(top, rt->cost[i]);
  }
  double lo = total / target * (1 - PK_AUTO_REL_EPS), hi = PK_MAX(lo, 1.0);
  if (fits > lo)
    hi = fits;
  double never = top * (rt->n - from) + 1;
  /* Each count reads up to target runs: a poll per count. Stopped, no
   * target is returned (the caller's caller reads the stop). */
  while (pk_padded_count_groups(rt, from, hi, target, NULL) > target) {
    if (hi > never || pk_auto_tick(rt->stop, PK_AUTO_POLL_EVERY))
      return -1;
    lo = hi;
    hi *= 2;
  }
  while (hi - lo > hi * PK_PADDED_TARGET_TOL) {
    if (pk_auto_tick(rt->stop, PK_AUTO_POLL_EVERY))
      return -1;
    double mid = (lo + hi) / 2;
    if (pk_padded_count_groups(rt, from, mid, target, NULL) <= target)
      hi = mid;
    else
      lo = mid;
  }
  return hi;
}

/* Exactly m x dp groups, sorted by cost (descending, stable), into the
 * state: tier j is column j. */
int pk_padded_deal_groups(auto_state_t *s, const uint32_t *order, const padded_group_t *grp,
                          uint32_t m) {
  const pk_ctx_t *ctx = s->ctx;
  uint32_t g = m * s->dp;
  uint32_t *gi = pk_malloc_array(g, sizeof *gi);
  uint32_t *gtmp = pk_malloc_array(g, sizeof *gtmp);
  if (gi == NULL || gtmp == NULL) {
    free(gi);
    free(gtmp);
    return PK_ENOMEM;
  }
  for (uint32_t q = 0; q < g; q++)
    gi[q] = q;
  pk_merge_sort_u32(gi, gtmp, g, pk_padded_group_costlier, grp);
  s->m = m;
  memset(s->bins, 0, (size_t)g * sizeof *s->bins);
  int rc = 0;
  for (uint32_t q = 0; q < g && rc == 0; q++) {
    const padded_group_t *b = &grp[gi[q]];
    if (pk_auto_tick(s->stop, b->rows + 1))
      rc = PK_ECANCELED;
    uint32_t bin = q; /* Column q / dp, slot q % dp. */
    for (uint32_t r = 0; r < b->rows; r++) {
      uint32_t k = order[b->first + r];
      pk_bin_add(ctx, &s->bins[bin], k);
      s->item_bin[k] = bin;
    }
  }
  free(gi);
  free(gtmp);
  return rc;
}

/* Whether group x is halved before group y: the costlier first, the lower
 * index on a tie. */
static bool halve_before(const void *arg, uint32_t x, uint32_t y) {
  const padded_group_t *grp = arg;
  return grp[x].cost > grp[y].cost || (grp[x].cost == grp[y].cost && x < y);
}

/* Halves the costliest multi-row groups among grp[from..g) until there are
 * target groups in all; each halving adds one group (a heap of the groups
 * with two rows or more, O(log g) per halving). Fails (PK_EPRECOND) when no
 * group there has two rows left. */
int pk_padded_halve_groups(const padded_rows_t *rt, padded_group_t *grp, uint32_t from, uint32_t g,
                           uint32_t target) {
  if (g >= target)
    return 0;
  uint32_t *heap = pk_malloc_array(target, sizeof *heap);
  if (heap == NULL)
    return PK_ENOMEM;
  uint32_t size = 0;
  for (uint32_t q = from; q < g; q++)
    if (grp[q].rows >= 2) {
      heap[size] = q;
      pk_heap_up(heap, size++, halve_before, grp);
    }
  int rc = 0;
  while (g < target) {
    if (size == 0) {
      rc = PK_EPRECOND;
      break;
    }
    uint32_t best = heap[0];
    heap[0] = heap[--size];
    pk_heap_down(heap, size, 0, halve_before, grp);
    padded_group_t *b = &grp[best];
    uint32_t keep = b->rows - b->rows / 2, moved = b->rows / 2;
    uint32_t second = b->first + keep;
    b->rows = keep;
    b->cost = (double)keep * rt->cost[b->first];
    grp[g] = (padded_group_t){second, moved, (double)moved * rt->cost[second]};
    if (keep >= 2) {
      heap[size] = best;
      pk_heap_up(heap, size++, halve_before, grp);
    }
    if (moved >= 2) {
      heap[size] = g;
      pk_heap_up(heap, size++, halve_before, grp);
    }
    g++;
  }
  free(heap);
  return rc;
}

/* Groups at target t (pk_padded_least_target), the costliest halved until there are
 * target of them, into grp; *halvings tells how many were. */
int pk_padded_halved_runs(const padded_rows_t *rt, uint32_t target, double t, padded_group_t *grp,
                          uint32_t *halvings) {
  uint32_t g = pk_padded_count_groups(rt, 0, t, target, grp);
  *halvings = target - g;
  /* n >= target, so a multi-row group always exists. */
  return pk_padded_halve_groups(rt, grp, 0, g, target);
}

/* Column levels: where the widest items cost more than the common target
 * t, the first columns' levels are set by their heads anyway, and groups
 * closed at t leave those columns mostly empty (their other micro-batches
 * cost about t, far below the head), so the later columns hold too much.
 * Here, column by column while the widest item left costs more than t, the
 * column's dp groups are closed at that item's cost (it stands alone; the
 * next groups take as many rows as that level allows); the items left are
 * then grouped at their own least target and the costliest of those groups
 * halved to the count. Every column keeps at least one item for each
 * micro-batch after it. The shape follows the step bound (bounds.c): the
 * top columns hold the costliest tokens up to their forced levels.
 *
 * With cap_runs, a column's level is instead the cost of the widest item's
 * full run (as many rows as the cap and max_seqs allow at its width), for
 * as long as that run costs more than t. Where the widest rows pair under
 * the cap but a pair costs more than t (RL rollouts cut at the length
 * limit, cap = twice that limit), groups closed at t leave them alone in
 * micro-batches of half a pair's cost, each in a column whose level was
 * set by something else; pairs in a column of their own cost nothing
 * beyond their own spread (rollout n = 4096, DP 64, cap 32768: step 2.2 %
 * lower, bench/planner). */
int pk_padded_level_runs(const padded_rows_t *rt, uint32_t m, uint32_t dp, double t, bool cap_runs,
                         padded_group_t *grp) {
  uint32_t n = rt->n, target = m * dp, g = 0, from = 0;
  for (uint32_t c = 0; c + 1 < m && from < n; c++) {
    double head = rt->cost[from] * (cap_runs ? rt->cap_rows[from] : 1);
    if (head <= t)
      break;
    if (cap_runs)
      head *= 1 + PK_AUTO_TIE_EPS; /* So that head / cost rounds to the full run. */
    for (uint32_t q = 0; q < dp; q++) {
      uint32_t after = target - g - 1; /* Groups still to open after this one. */
      if (n - from <= after)
        return PK_EPRECOND;
      uint32_t rows = PK_MIN(run_rows(rt, from, head), n - from - after);
      grp[g++] = (padded_group_t){from, rows, (double)rows * rt->cost[from]};
      from += rows;
    }
  }
  double rest_t = pk_padded_least_target(rt, from, target - g, t);
  if (rest_t < 0)
    return PK_EPRECOND;
  uint32_t rest = pk_padded_count_groups(rt, from, rest_t, target - g, grp + g);
  if (rest > target - g)
    return PK_EPRECOND;
  return pk_padded_halve_groups(rt, grp, g, g + rest, target);
}

/* Even groups: exactly m x dp runs whose costs lie in [lo_t, hi_t] where
 * their rows allow (a run opened by width w takes between ceil(lo_t / c(w))
 * and min(hi_t / c(w), cap / w, max_seqs) rows, at least one and at most
 * the latter; the last run may be shorter), with hi_t the least target of
 * pk_padded_count_groups and lo_t as high as an exact count allows (bisection to
 * 0.4 % of hi_t). Halving the costliest groups (halved_runs) leaves a tail
 * of half-cost groups whose columns run far below the others; here every
 * run that can reach the common band does.
 *
 * For a given band, fewest[i] and most[i] are the fewest and the most runs
 * the items order[i..n) can be cut into. The runs that may start at i end
 * in a window [i + min rows, i + max rows] whose ends never fall as i grows
 * (widths fall, so c(w) does), so both are sliding-window extrema, O(n)
 * with two monotone deques. Counts between fewest and most are taken as
 * reachable; the cut is then walked forward, each run ending at the
 * farthest j with fewest[j] <= runs left - 1 <= most[j], and gives up
 * (PK_EPRECOND) if none is found. */
typedef struct even_band {
  double lo_t, hi_t;
  /* The rows of the last row cost and cap asked for (items of one width
   * are neighbours in the order, so most calls reuse them). */
  double cost;
  uint32_t cap_rows;
  uint64_t fewest, most;
  bool known;
} even_band_t;

static inline void run_window(const padded_rows_t *rt, even_band_t *band, uint32_t i,
                              uint32_t *first, uint32_t *last) {
  uint32_t n = rt->n;
  double c = rt->cost[i];
  uint32_t cap_rows = rt->cap_rows[i];
  if (!band->known || band->cost != c || band->cap_rows != cap_rows) {
    uint64_t most = run_rows(rt, i, band->hi_t);
    uint64_t fewest = 1;
    if (c > 0 && band->lo_t / c > 1) {
      double need = ceil(band->lo_t / c);
      fewest = need >= (double)most ? most : (uint64_t)need;
    }
    band->cost = c;
    band->cap_rows = cap_rows;
    band->fewest = fewest;
    band->most = most;
    band->known = true;
  }
  *first = band->fewest >= (uint64_t)(n - i) ? n : i + (uint32_t)band->fewest;
  *last = band->most >= (uint64_t)(n - i) ? n : i + (uint32_t)band->most;
}

/* fewest / most for the band into the arrays (n + 1 entries); dq is 2 x
 * (n + 1) scratch. Returns false where the windows are not monotone (a
 * zero-cost item after costlier ones): the band is then not used. */
static bool count_range(const padded_rows_t *rt, even_band_t *band, uint32_t *fewest,
                        uint32_t *most, uint32_t *dq) {
  uint32_t n = rt->n;
  uint32_t *dmin = dq, *dmax = dq + n + 1;
  /* Deques as [front, back) over the arrays, filled from the top down:
   * front holds the lowest (newest) position. */
  uint32_t fmin = n + 1, bmin = n + 1, fmax = n + 1, bmax = n + 1;
  uint32_t added = n + 1; /* Positions >= added were pushed (maybe popped since). */
  uint32_t prev_a = n, prev_b = n;
  fewest[n] = most[n] = 0;
  for (uint32_t i = n; i-- > 0;) {
    uint32_t a, b;
    run_window(rt, band, i, &a, &b);
    if (a > prev_a || b > prev_b)
      return false;
    prev_a = a;
    prev_b = b;
    while (added > a) {
      uint32_t j = --added;
      while (fmin < bmin && fewest[dmin[fmin]] >= fewest[j])
        fmin++;
      dmin[--fmin] = j;
      while (fmax < bmax && most[dmax[fmax]] <= most[j])
        fmax++;
      dmax[--fmax] = j;
    }
    while (fmin < bmin && dmin[bmin - 1] > b)
      bmin--;
    while (fmax < bmax && dmax[bmax - 1] > b)
      bmax--;
    fewest[i] = fewest[dmin[bmin - 1]] + 1;
    most[i] = most[dmax[bmax - 1]] + 1;
  }
  return true;
}

/* Cuts order into exactly `target` runs within the band (fewest / most
 * from count_range), into grp. Returns false when the walk finds no run. */
static bool cut_runs(const padded_rows_t *rt, even_band_t *band, const uint32_t *fewest,
                     const uint32_t *most, uint32_t target, padded_group_t *grp) {
  uint32_t n = rt->n, g = 0;
  for (uint32_t i = 0; i < n; g++) {
    if (g >= target)
      return false;
    uint32_t a, b, left = target - g - 1, j = UINT32_MAX;
    run_window(rt, band, i, &a, &b);
    for (uint32_t e = b + 1; e-- > a;)
      if (fewest[e] <= left && left <= most[e]) {
        j = e;
        break;
      }
    if (j == UINT32_MAX)
      return false;
    grp[g] = (padded_group_t){i, j - i, (double)(j - i) * rt->cost[i]};
    i = j;
  }
  return g == target;
}

int pk_padded_even_runs(const padded_rows_t *rt, uint32_t target, double hi_t,
                        padded_group_t *grp) {
  uint32_t n = rt->n;
  uint32_t *fewest = pk_malloc_array((size_t)n + 1, sizeof *fewest);
  uint32_t *most = pk_malloc_array((size_t)n + 1, sizeof *most);
  uint32_t *dq = pk_malloc_array(2 * ((size_t)n + 1), sizeof *dq);
  int rc = PK_EPRECOND;
  if (fewest == NULL || most == NULL || dq == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  /* The largest lo_t (to 0.4 % of hi_t) whose band reaches the count. */
  double lo = 0, hi = hi_t;
  even_band_t band = {.lo_t = 0, .hi_t = hi_t};
  if (!count_range(rt, &band, fewest, most, dq) || fewest[0] > target || most[0] < target)
    goto done;
  while (hi - lo > hi_t * PK_PADDED_BAND_TOL) {
    if (pk_auto_tick(rt->stop, PK_AUTO_POLL_EVERY))
      goto done; /* The caller reads the stop. */
    band = (even_band_t){.lo_t = (lo + hi) / 2, .hi_t = hi_t};
    if (count_range(rt, &band, fewest, most, dq) && fewest[0] <= target && target <= most[0])
      lo = band.lo_t;
    else
      hi = band.lo_t;
  }
  band = (even_band_t){.lo_t = lo, .hi_t = hi_t};
  if (count_range(rt, &band, fewest, most, dq) && cut_runs(rt, &band, fewest, most, target, grp))
    rc = 0;
done:
  free(fewest);
  free(most);
  free(dq);
  return rc;
}

padded_rows_of_t pk_padded_rows_of(const pk_ctx_t *ctx, const uint32_t *head, const uint32_t *next,
                                   uint32_t bin) {
  padded_rows_of_t r = {UINT32_MAX, UINT32_MAX, 0};
  for (uint32_t k = head[bin]; k != UINT32_MAX; k = next[k]) {
    if (r.narrow == UINT32_MAX || ctx->size[k] < ctx->size[r.narrow])
      r.narrow = k;
    if (r.wide == UINT32_MAX || ctx->size[k] > ctx->size[r.wide])
      r.wide = k;
  }
  for (uint32_t k = head[bin]; k != UINT32_MAX; k = next[k])
    if (k != r.wide)
      r.second = PK_MAX(r.second, ctx->size[k]);
  return r;
}

/* PADDED refinement: a micro-batch costs rows x c(widest row). Inside every
 * column, repeatedly take the costliest micro-batch and move one of its rows
 * (its narrowest, or its widest, which may narrow it) to one of the two
 * cheapest micro-batches of the column when that lowers the column's
 * maximum and the receiver stays within the cap and max_seqs. Only without
 * equal_count (moves change counts). Bounded work per column. */
int pk_auto_refine_padded(auto_state_t *s) {
  const pk_ctx_t *ctx = s->ctx;
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = s->dp, m = s->m, n = ctx->n, nbins = m * dp;
  if (dp < 2)
    return 0;
  uint32_t *head = pk_malloc_array(nbins, sizeof *head);
  uint32_t *next = pk_malloc_array(n, sizeof *next);
  double *real = pk_malloc_array(nbins, sizeof *real);
  if (head == NULL || next == NULL || real == NULL) {
    free(head);
    free(next);
    free(real);
    return PK_ENOMEM;
  }
  for (uint32_t i = 0; i < nbins; i++)
    real[i] = pk_padded_cost(cfg, s->bins[i].count, s->bins[i].width);
  pk_auto_bin_lists(s, head, next);
  for (uint32_t c = 0; c < m && !pk_auto_stopped(s->stop); c++) {
    uint32_t base = c * dp;
    for (uint32_t iter = 0; iter < 2 * dp; iter++) {
      if (pk_auto_tick(s->stop, dp))
        break;
      uint32_t x = base, y1 = UINT32_MAX, y2 = UINT32_MAX;
      for (uint32_t q = 0; q < dp; q++) {
        uint32_t i = base + q;
        if (real[i] > real[x])
          x = i;
        if (y1 == UINT32_MAX || real[i] < real[y1]) {
          y2 = y1;
          y1 = i;
        } else if (y2 == UINT32_MAX || real[i] < real[y2]) {
          y2 = i;
        }
      }
      const pk_bin_t *bx = &s->bins[x];
      if (bx->count < 2)
        break;
      padded_rows_of_t rows = pk_padded_rows_of(ctx, head, next, x);
      uint32_t narrow = rows.narrow, wide = rows.wide;
      uint64_t second = rows.second;
      double best = real[x];
      uint32_t bk = UINT32_MAX, by = UINT32_MAX;
      uint32_t cand[2] = {narrow, wide};
      uint32_t ys[2] = {y1, y2};
      for (int a = 0; a < 2; a++) {
        uint32_t k = cand[a];
        uint64_t wx = k == wide ? second : bx->width;
        double cx = pk_padded_cost(cfg, bx->count - 1, wx);
        for (int b = 0; b < 2; b++) {
          uint32_t y = ys[b];
          if (y == UINT32_MAX || y == x)
            continue;
          const pk_bin_t *bb = &s->bins[y];
          uint64_t wy = PK_MAX(bb->width, ctx->size[k]);
          if (bb->count + 1 > cfg->max_seqs || (uint64_t)(bb->count + 1) * wy > cfg->cap)
            continue;
          double cy = pk_padded_cost(cfg, bb->count + 1, wy);
          double peak = PK_MAX(cx, cy);
          if (peak < best * (1 - PK_AUTO_TIE_EPS)) {
            best = peak;
            bk = k;
            by = y;
          }
        }
      }
      if (bk == UINT32_MAX)
        break;
      pk_auto_move_item(s, head, next, bk, by);
      real[x] = pk_padded_cost(cfg, s->bins[x].count, s->bins[x].width);
      real[by] = pk_padded_cost(cfg, s->bins[by].count, s->bins[by].width);
    }
  }
  free(head);
  free(next);
  free(real);
  return pk_auto_stopped(s->stop) ? PK_ECANCELED : 0;
}
