/* AUTO's PADDED candidates (stage 2 of auto.h, PADDED without
 * equal_count): at a count M, runs of like width closed at the least target
 * and halved to M x dp ("halved"), then the table padded_candidates, each
 * entry with its worth() (whether it may pay, read once after the halved
 * runs) and its run(); every packing is dealt in tiers of dp by cost and
 * refined by row moves inside each column, and the lowest step cost is
 * kept. The runs themselves are built in padded.c, the cut search in
 * runs.c, the level search in levels.c; their budgets are in knobs.h. */
#include <stdlib.h>
#include <string.h>

#include "auto.h"

/* Column c's level in PADDED costs (rows x c(widest row)); *sum, when
 * given, gets the column's total. */
static double padded_column_level(const auto_state_t *s, uint32_t c, double *sum) {
  const pk_cfg_t *cfg = s->ctx->cfg;
  double level = 0, total = 0;
  for (uint32_t q = 0; q < s->dp; q++) {
    const pk_bin_t *b = &s->bins[(size_t)c * s->dp + q];
    double cost = pk_padded_cost(cfg, b->count, b->width);
    level = PK_MAX(level, cost);
    total += cost;
  }
  if (sum != NULL)
    *sum = total;
  return level;
}

/* The step cost of the state in PADDED costs. */
static double padded_step(const auto_state_t *s) {
  double step = 0;
  for (uint32_t c = 0; c < s->m; c++)
    step += padded_column_level(s, c, NULL);
  return step;
}

/* The room the columns whose level is above t leave below their level,
 * per rank: sum over those columns of (level - their mean cost). What
 * level_runs can fill. */
static double head_room(const auto_state_t *s, double t) {
  double room = 0;
  for (uint32_t c = 0; c < s->m; c++) {
    double sum;
    double level = padded_column_level(s, c, &sum);
    if (level > t)
      room += level - sum / s->dp;
  }
  return room;
}

/* The runs into the state (deal_groups), refined; *step gets the step
 * cost. */
static int finish_runs(auto_state_t *s, const uint32_t *order, const padded_group_t *grp,
                       uint32_t m, double *step) {
  int rc = pk_padded_deal_groups(s, order, grp, m);
  if (rc == 0)
    rc = pk_auto_refine_padded(s);
  if (rc == 0)
    *step = padded_step(s);
  return rc;
}

/* Moves of the cut search for `runs` runs in tiers of dp (knobs.h,
 * PK_CUT_*): none beyond PK_CUT_MAX_RUNS runs or PK_CUT_MAX_DP per tier (an
 * accepted move costs O(runs)), else PK_CUT_MOVES, fewer past 100 tiers (a
 * move reads every tier top). */
static uint32_t search_moves(uint32_t runs, uint32_t dp) {
  if (runs > PK_CUT_MAX_RUNS || dp > PK_CUT_MAX_DP)
    return 0;
  return PK_MIN(PK_CUT_MOVES, PK_CUT_READS / PK_MAX(runs / dp, 1u));
}

/* The level search's work (pk_auto_level_search, knobs.h PK_WALK_*):
 * PK_WALK_MIN_UNITS per row, one more per PK_WALK_ROWS_PER_UNIT rows, at
 * most PK_WALK_MAX_UNITS. */
static uint64_t level_work(uint32_t n) {
  uint64_t per_row =
      PK_MIN(PK_MAX((uint64_t)n / PK_WALK_ROWS_PER_UNIT, PK_WALK_MIN_UNITS), PK_WALK_MAX_UNITS);
  return per_row * n;
}

/* What the PADDED candidates see: the rows, the count, the target the
 * halved runs were cut at, and the best runs so far (the cut search and the
 * level search start from them). */
typedef struct padded_try {
  auto_state_t *s;
  const padded_rows_t *rt;
  uint32_t m, target, halvings;
  double t;    /* The least target (pk_padded_least_target). */
  double best; /* The halved packing's step cost (worth() reads it). */
  const padded_group_t *best_grp;
} padded_try_t;

/* A PADDED candidate packer: whether it may pay (read once, after the
 * halved runs), and its runs into grp (0, PK_EPRECOND, PK_ENOMEM,
 * PK_ECANCELED). */
typedef struct padded_candidate {
  const char *name;
  bool (*worth)(const padded_try_t *);
  int (*run)(const padded_try_t *, padded_group_t *grp);
  const char *unworthy; /* Why it is skipped where worth() says no (trace). */
} padded_candidate_t;

/* Even band: where halving split at least 1 in PK_PADDED_EVEN_SHARE runs. */
static bool even_worth(const padded_try_t *p) {
  return p->halvings >= PK_MAX(1, p->target / PK_PADDED_EVEN_SHARE);
}
static int even_run(const padded_try_t *p, padded_group_t *grp) {
  return pk_padded_even_runs(p->rt, p->target, p->t, grp);
}

/* Column levels: where the widest rows cost more than the target and leave
 * their columns room below their level (PK_PADDED_LEVELS_ROOM). */
static bool levels_worth(const padded_try_t *p) {
  return p->rt->cost[0] > p->t && head_room(p->s, p->t) > p->best * PK_PADDED_LEVELS_ROOM;
}
static int levels_run(const padded_try_t *p, padded_group_t *grp) {
  return pk_padded_level_runs(p->rt, p->m, p->s->dp, p->t, false, grp);
}

/* Column levels at the cost of full runs: where the widest row's full run
 * (as many rows as the cap allows) costs more than the target. */
static bool cap_levels_worth(const padded_try_t *p) {
  return p->rt->cap_rows[0] > 1 && p->rt->cost[0] * p->rt->cap_rows[0] > p->t;
}
static int cap_levels_run(const padded_try_t *p, padded_group_t *grp) {
  return pk_padded_level_runs(p->rt, p->m, p->s->dp, p->t, true, grp);
}

/* The cut search from the best runs so far (runs.c). */
static bool cut_worth(const padded_try_t *p) {
  return search_moves(p->target, p->s->dp) > 0;
}
static int cut_run(const padded_try_t *p, padded_group_t *grp) {
  memcpy(grp, p->best_grp, p->target * sizeof *grp);
  return pk_auto_search_runs(p->rt, grp, p->target, p->s->dp, search_moves(p->target, p->s->dp),
                             p->s->ctx->cfg->seed);
}

/* The level search from the best runs so far (levels.c): at least two
 * columns and two ranks, at most PK_WALK_MAX_M columns (a walk reads every
 * level per width class), and a step cost more than PK_WALK_GAIN above the
 * mean cost per rank (no packing of these rows costs less than that mean). */
static bool walk_worth(const padded_try_t *p) {
  uint32_t dp = p->s->dp;
  if (p->m < 2 || p->m > PK_WALK_MAX_M || dp < 2)
    return false;
  double total = 0;
  for (uint32_t i = 0; i < p->rt->n; i++)
    total += p->rt->cost[i];
  return p->best > total / dp * (1 + PK_WALK_GAIN);
}
static int walk_run(const padded_try_t *p, padded_group_t *grp) {
  memcpy(grp, p->best_grp, p->target * sizeof *grp);
  return pk_auto_level_search(p->rt, grp, p->m, p->s->dp, level_work(p->rt->n));
}

/* The candidates after the halved runs, in the order they run (the cut
 * search and the level search start from the best before them). */
static const padded_candidate_t padded_candidates[] = {
    {"even-band", even_worth, even_run, "halving split fewer than 1 in PK_PADDED_EVEN_SHARE runs"},
    {"levels", levels_worth, levels_run,
     "the widest rows fit the target or leave under PK_PADDED_LEVELS_ROOM below their level"},
    {"cap-levels", cap_levels_worth, cap_levels_run,
     "the widest row's full run costs no more than the target"},
    {"cut-search", cut_worth, cut_run, "over PK_CUT_MAX_RUNS runs or PK_CUT_MAX_DP ranks"},
    {"level-search", walk_worth, walk_run,
     "one column or rank, over PK_WALK_MAX_M columns, or within PK_WALK_GAIN of the mean"},
};
#define PADDED_CANDIDATES (sizeof padded_candidates / sizeof padded_candidates[0])

/* PADDED without equal_count, at count m: runs of like width closed at the
 * least target, the costliest halved until there are m x dp ("halved"),
 * then every candidate of the table whose worth() says it may pay; each
 * packing dealt in tiers of dp by cost and refined by row moves; the
 * lowest step cost is kept, and its name goes into the trace. PK_EPRECOND
 * when m columns cannot hold the items. `saved` holds m x dp micro-batches
 * and n items. */
int pk_auto_pack_padded_best(auto_state_t *s, const uint32_t *order, uint32_t m,
                             pk_packing_t *saved) {
  const pk_ctx_t *ctx = s->ctx;
  size_t nbins = (size_t)m * s->dp;
  uint32_t n = ctx->n, target = m * s->dp, halvings = 0;
  padded_rows_t rt;
  padded_group_t *grp = pk_malloc_array(target, sizeof *grp);
  padded_group_t *best_grp = pk_malloc_array(target, sizeof *best_grp);
  pk_auto_trace_t *trace = s->trace;
  double t0 = pk_auto_now_us();
  int rc = pk_padded_rows_init_polled(&rt, ctx, order, s->stop);
  if (rc == 0 && (grp == NULL || best_grp == NULL))
    rc = PK_ENOMEM;
  if (rc != 0)
    goto done;
  double t = pk_padded_least_target(&rt, 0, target, 0), best = 0, step = 0;
  if (t < 0) {
    rc = PK_EPRECOND;
    goto done;
  }
  rc = pk_padded_halved_runs(&rt, target, t, grp, &halvings);
  if (rc == 0)
    rc = finish_runs(s, order, grp, m, &best);
  if (rc != 0)
    goto done;
  trace->winner = "halved";
  pk_auto_trace_add(trace, (pk_auto_stage_rec_t){.name = "halved",
                                                 .fate = PK_FATE_BEST,
                                                 .m = m,
                                                 .after = best,
                                                 .us = pk_auto_now_us() - t0});
  padded_try_t p = {.s = s,
                    .rt = &rt,
                    .m = m,
                    .target = target,
                    .halvings = halvings,
                    .t = t,
                    .best = best,
                    .best_grp = best_grp};
  bool worth[PADDED_CANDIDATES], any = false;
  for (size_t a = 0; a < PADDED_CANDIDATES; a++) {
    any |= worth[a] = padded_candidates[a].worth(&p);
    if (!worth[a])
      pk_auto_trace_add(trace, (pk_auto_stage_rec_t){.name = padded_candidates[a].name,
                                                     .fate = PK_FATE_SKIPPED,
                                                     .why = padded_candidates[a].unworthy,
                                                     .m = m,
                                                     .before = best});
  }
  if (!any)
    goto done; /* The halved packing stands. */
  /* saved and best_grp hold the best packing so far and its runs. */
  pk_packing_t cur = pk_auto_packing(s);
  memcpy(best_grp, grp, target * sizeof *grp);
  pk_packing_copy(saved, &cur, nbins, n);
  for (size_t a = 0; a < PADDED_CANDIDATES; a++) {
    if (!worth[a])
      continue;
    if (pk_auto_poll(s->stop)) {
      rc = PK_ECANCELED;
      goto done;
    }
    t0 = pk_auto_now_us();
    rc = padded_candidates[a].run(&p, grp);
    if (rc == 0)
      rc = finish_runs(s, order, grp, m, &step);
    if (rc != 0 && rc != PK_EPRECOND)
      goto done;
    pk_auto_trace_add(trace, (pk_auto_stage_rec_t){.name = padded_candidates[a].name,
                                                   .fate = rc != 0       ? PK_FATE_NO_FIT
                                                           : step < best ? PK_FATE_BEST
                                                                         : PK_FATE_WORSE,
                                                   .m = m,
                                                   .before = best,
                                                   .after = rc == 0 ? step : 0,
                                                   .us = pk_auto_now_us() - t0});
    if (rc == 0 && step < best) {
      best = step;
      trace->winner = padded_candidates[a].name;
      memcpy(best_grp, grp, target * sizeof *grp);
      pk_packing_copy(saved, &cur, nbins, n);
    }
  }
  rc = 0;
  pk_packing_copy(&cur, saved, nbins, n);
done:
  pk_padded_rows_free(&rt);
  free(grp);
  free(best_grp);
  return rc;
}
