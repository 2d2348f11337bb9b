/* PACKED, stage 2 at one count: the candidate packers as a table, like
 * PADDED's (padded_best.c). Each entry has a name, a worth() that says
 * whether it may pay here (and, where not, why), and a run() that packs
 * the state at the count or reports that it does not fit. One loop runs the
 * entries in the order the batch asks for, keeps the best packing and
 * records every candidate's fate in the trace: best so far, fitted but not
 * kept, did not fit, or skipped with its reason.
 *
 * Before the table, where the batch nearly fills its columns, the count
 * stage for such batches runs once: one first fit pass tells the count
 * first fit needs, and above the count bound the tightening (completion
 * and repair) and the exact search try fewer. After it, where nothing fit
 * under max_seqs, completion's own count decides between taking its
 * packing there and bisecting the least count (driver.c). */
#include <string.h>

#include "auto.h"

/* One count's candidates: what they read and what the loop keeps. */
typedef struct packed_try {
  auto_state_t *s;
  const uint32_t *order;
  pk_count_search_t *cs;
  pk_packing_t *saved; /* The kept packing, when a later candidate ran. */
  uint32_t m;
  bool full;            /* The batch nearly fills m columns. */
  bool tightened;       /* The count stage packed below first fit's count. */
  bool probed;          /* The count stage's first fit pass is in the state. */
  bool completion_left; /* Completion's packing (above m) is in the state. */
  bool in_saved;        /* The kept packing is in `saved` too. */
  const char *kept;     /* The kept packing's candidate (NULL: none). */
  bool kept_columns;    /* It was packed column by column. */
  double best;          /* Its step cost. */
} packed_try_t;

typedef struct packed_candidate {
  const char *name;
  /* Whether it may pay at this count; where not, *why says why. */
  bool (*worth)(const packed_try_t *p, const char **why);
  /* Packs the state at p->m: 0, PK_EPRECOND (does not fit; the state may
   * hold anything), PK_ENOMEM or PK_ECANCELED. */
  int (*run)(packed_try_t *p);
  /* Packs column by column: such a packing is kept over first fit's even
   * where its step is higher, since its columns refine better (measured on
   * bench/planner's grid); else the lower step is kept (ties: the later). */
  bool columns;
} packed_candidate_t;

/* Whether `step` is within `frac` of the step bound at count m. */
static bool within(const packed_try_t *p, double step, double frac) {
  return step <= pk_step_lower_bound(p->s->ctx, p->m, step) * (1 + frac);
}

/* ---- first fit decreasing ---- */

static bool ffd_worth(const packed_try_t *p, const char **why) {
  if (p->tightened)
    *why = "the count stage packed below first fit's count";
  else if (p->kept != NULL)
    *why = "a column packing fits";
  return *why == NULL;
}
static int ffd_run(packed_try_t *p) {
  if (p->probed)
    return pk_auto_bins_finish(p->s, p->order);
  return p->m < p->cs->ffd_m ? PK_EPRECOND : pk_auto_pack_bins_first(p->s, p->order);
}

/* ---- the column packings (packed.c) ---- */

/* Not below first fit's own count, not where first fit is within
 * PK_AUTO_GOOD_ENOUGH of the bound (they could gain at most that), and
 * not after a column packing within PK_AUTO_CLOSE. */
static bool columns_worth(const packed_try_t *p, const char **why) {
  if (p->tightened)
    *why = "the count stage packed below first fit's count";
  else if (p->full && p->kept == NULL)
    *why = "first fit does not fit this nearly full count";
  else if (p->kept != NULL && !p->kept_columns && within(p, p->best, PK_AUTO_GOOD_ENOUGH))
    *why = "first fit is within PK_AUTO_GOOD_ENOUGH of the step bound";
  else if (p->kept != NULL && p->kept_columns && within(p, p->best, PK_AUTO_CLOSE))
    *why = "a column packing is within PK_AUTO_CLOSE of the step bound";
  return *why == NULL;
}
static int levels_run(packed_try_t *p) {
  return pk_auto_pack_levels(p->s, p->order);
}
static int tiers_run(packed_try_t *p) {
  return pk_auto_pack_tiers(p->s, p->order);
}

/* ---- micro-batch completion (complete.c), under max_seqs ---- */

static bool completion_worth(const packed_try_t *p, const char **why) {
  if (p->kept != NULL)
    *why = "a packing fits";
  else if (p->s->ctx->cfg->max_seqs == UINT32_MAX)
    *why = "no max_seqs";
  else if (p->m < p->cs->complete_m)
    *why = "completion needs more micro-batches";
  return *why == NULL;
}
/* Fits where completion needs at most m columns; where it needs more, its
 * packing stays in the state for the count stage (completion_left). */
static int completion_run(packed_try_t *p) {
  auto_state_t *s = p->s;
  uint32_t dp = s->dp, used = 0;
  int rc =
      pk_auto_pack_complete(s, p->order, p->m * dp, p->cs->max_m * dp, pk_auto_packing(s), &used);
  if (rc == PK_EPRECOND)
    p->cs->complete_m = UINT32_MAX; /* Not within max_m either. */
  if (rc != 0)
    return rc;
  p->cs->complete_m = (uint32_t)pk_round_up((used + dp - 1) / dp, s->ctx->cfg->group);
  p->completion_left = p->cs->complete_m > p->m;
  return p->completion_left ? PK_EPRECOND : pk_auto_bins_finish(s, p->order);
}

/* ---- the exact search (exact.c), small batches ---- */

static bool exact_worth(const packed_try_t *p, const char **why) {
  if (p->kept != NULL)
    *why = "a packing fits";
  else if (p->cs->exact_m == p->m)
    *why = "tried at this count already";
  return *why == NULL;
}
static int exact_run(packed_try_t *p) {
  p->cs->exact_m = p->m;
  return pk_auto_exact(p->s, p->order, p->m, &p->cs->exact);
}

/* The candidates; the orders below pick from them. */
enum { C_FFD, C_LEVELS, C_TIERS, C_COMPLETION, C_EXACT, C_COUNT };
static const packed_candidate_t packed_candidates[C_COUNT] = {
    [C_FFD] = {"first-fit", ffd_worth, ffd_run, false},
    [C_LEVELS] = {"level-columns", columns_worth, levels_run, true},
    [C_TIERS] = {"tier-columns", columns_worth, tiers_run, true},
    [C_COMPLETION] = {"completion", completion_worth, completion_run, false},
    [C_EXACT] = {"exact", exact_worth, exact_run, false},
};

/* The orders: which candidates run, first to last, and why the others do
 * not. The level packing runs before the tier packing but where first fit
 * came within PK_AUTO_CLOSE of the bound (a batch of like items, where the
 * tier packing does well and the level packing costs five times as much).
 * bench/planner/README.md, "AUTO stages", has what each one pays. */
typedef struct packed_order {
  uint8_t n, idx[C_COUNT];
  const char *others; /* Why the candidates not listed are skipped. */
} packed_order_t;
#define ORDER(others, ...)                                                                         \
  { sizeof((uint8_t[]){__VA_ARGS__}), {__VA_ARGS__}, others }
#define FULL "the batch nearly fills its columns (PK_AUTO_FULL_FILL)"
static const packed_order_t order_equal = ORDER("equal_count", C_TIERS, C_EXACT);
static const packed_order_t order_full_first = ORDER(FULL, C_FFD);
static const packed_order_t order_full = ORDER(FULL, C_LEVELS, C_TIERS);
static const packed_order_t order_full_close = ORDER(FULL, C_TIERS, C_LEVELS);
static const packed_order_t order_open =
    ORDER(NULL, C_LEVELS, C_TIERS, C_FFD, C_COMPLETION, C_EXACT);

static void record(packed_try_t *p, const char *name, pk_auto_fate_t fate, const char *why,
                   double before, double after, double t0) {
  pk_auto_trace_add(p->s->trace, (pk_auto_stage_rec_t){.name = name,
                                                       .fate = fate,
                                                       .why = why,
                                                       .m = p->m,
                                                       .before = before,
                                                       .after = after,
                                                       .us = pk_auto_now_us() - t0});
}

/* Runs one candidate and keeps its packing where it is the best so far;
 * else the kept packing is back in the state. */
static int try_candidate(packed_try_t *p, const packed_candidate_t *c) {
  auto_state_t *s = p->s;
  size_t nbins = (size_t)p->m * s->dp;
  uint32_t n = s->ctx->n;
  pk_packing_t cur = pk_auto_packing(s);
  const char *why = NULL;
  double t0 = pk_auto_now_us();
  if (!c->worth(p, &why)) {
    record(p, c->name, PK_FATE_SKIPPED, why, p->best, 0, t0);
    return 0;
  }
  if (pk_auto_poll(s->stop))
    return PK_ECANCELED;
  if (p->kept != NULL && !p->in_saved) {
    pk_packing_copy(p->saved, &cur, nbins, n);
    p->in_saved = true;
  }
  s->m = p->m;
  int rc = c->run(p);
  if (rc != 0 && rc != PK_EPRECOND)
    return rc;
  double step = rc == 0 ? pk_auto_step(s) : 0;
  bool keep = rc == 0 && (p->kept == NULL || step <= p->best ||
                          (c->columns && !p->kept_columns && !p->tightened));
  record(p, c->name,
         keep      ? PK_FATE_BEST
         : rc == 0 ? PK_FATE_WORSE
                   : PK_FATE_NO_FIT,
         NULL, p->best, step, t0);
  if (keep) {
    p->kept = c->name;
    p->kept_columns = c->columns;
    p->best = step;
    p->in_saved = false;
  } else if (p->kept != NULL) {
    pk_packing_copy(&cur, p->saved, nbins, n);
  }
  return 0;
}

static int run_order(packed_try_t *p, const packed_order_t *o) {
  for (uint32_t i = 0; i < o->n; i++) {
    int rc = try_candidate(p, &packed_candidates[o->idx[i]]);
    if (rc != 0)
      return rc;
  }
  return 0;
}

/* The candidates no order of this count listed, as skipped. */
static void record_others(packed_try_t *p, const packed_order_t *a, const packed_order_t *b) {
  for (uint32_t c = 0; c < C_COUNT; c++) {
    bool listed = false;
    for (uint32_t i = 0; i < a->n; i++)
      listed |= a->idx[i] == c;
    for (uint32_t i = 0; b != NULL && i < b->n; i++)
      listed |= b->idx[i] == c;
    if (!listed)
      record(p, packed_candidates[c].name, PK_FATE_SKIPPED, a->others, p->best, 0,
             pk_auto_now_us());
  }
}

/* The fewest micro-batches per rank first fit decreasing needs: one first
 * fit pass over all max_m x dp micro-batches (first fit over fewer is the
 * same pass cut short, so it fits exactly when the pass used no
 * micro-batch beyond them). The pass stays in the state: it is the first
 * fit packing for every count from the result up. UINT32_MAX when even
 * max_m does not fit. */
static uint32_t ffd_min_micro(auto_state_t *s, const uint32_t *order, uint32_t max_m) {
  uint32_t n = s->ctx->n, saved_m = s->m;
  s->m = max_m;
  int rc =
      pk_auto_clear_bins(s, (size_t)max_m * s->dp) ? pk_auto_place_rest(s, order, n) : PK_ECANCELED;
  s->m = saved_m;
  if (rc != 0)
    return UINT32_MAX;
  uint32_t used = 0;
  for (uint32_t k = 0; k < n; k++)
    used = PK_MAX(used, s->item_bin[k] + 1);
  return (used + s->dp - 1) / s->dp;
}

/* The count stage of a batch that nearly fills its columns, once: first
 * fit's count, then below it the tightening and the exact search. p->m may
 * rise to first fit's count or fall to where those reach (their packing is
 * then kept: p->tightened). *again: first fit fits nowhere up to max_m. */
static int count_full(packed_try_t *p, bool *again) {
  auto_state_t *s = p->s;
  pk_count_search_t *cs = p->cs;
  uint32_t group = s->ctx->cfg->group, bound = p->m;
  double t0 = pk_auto_now_us();
  cs->ffd_m = ffd_min_micro(s, p->order, cs->max_m);
  if (pk_auto_poll(s->stop))
    return PK_ECANCELED;
  while (cs->ffd_m != UINT32_MAX && p->m < cs->ffd_m && p->m <= cs->max_m)
    p->m += group;
  if (cs->ffd_m == UINT32_MAX || p->m > cs->max_m) {
    *again = true; /* Fails at the top of the count search. */
    return PK_EPRECOND;
  }
  p->probed = true;
  pk_auto_fate_t tighten = PK_FATE_SKIPPED, exact = PK_FATE_SKIPPED;
  if (p->m > bound) {
    /* First fit needs more than the bound: repair it, or pack by
     * completion, at fewer. */
    uint32_t fit = p->m;
    int rc = pk_auto_tighten(s, p->order, bound, p->m, group, *p->saved, &fit);
    if (rc != 0)
      return rc;
    tighten = fit < p->m ? PK_FATE_BEST : PK_FATE_NO_FIT;
    if (fit < p->m) {
      cs->ffd_m = p->m = fit;
      p->tightened = true;
      p->kept = "tighten";
    }
  }
  double t1 = pk_auto_now_us();
  /* Still above the bound: the exact search (small batches), from the
   * bound up while it proves counts infeasible. Its packing is in columns
   * already. */
  for (uint32_t c = bound; c < p->m && exact != PK_FATE_BEST; c += group) {
    pk_exact_budget_t before = cs->exact;
    cs->exact_m = c;
    int rc = pk_auto_exact(s, p->order, c, &cs->exact);
    if (rc != 0 && rc != PK_EPRECOND)
      return rc;
    if (cs->exact.runs != before.runs)
      exact = rc == 0 ? PK_FATE_BEST : PK_FATE_NO_FIT;
    /* Not run (a large batch), or out of steps: no count above. */
    if (cs->exact.runs == before.runs || cs->exact.exhausted != before.exhausted)
      break;
  }
  if (exact == PK_FATE_BEST) {
    cs->ffd_m = p->m = s->m;
    p->tightened = true;
    p->kept = "exact-below";
    tighten = tighten == PK_FATE_BEST ? PK_FATE_WORSE : tighten;
  }
  p->probed = !p->tightened;
  s->m = p->m;
  int rc = tighten == PK_FATE_BEST ? pk_auto_bins_finish(s, p->order) : 0;
  if (rc != 0)
    return rc;
  p->best = p->tightened ? pk_auto_step(s) : 0;
  record(p, "tighten", tighten,
         tighten == PK_FATE_SKIPPED ? "first fit reaches the count bound" : NULL, 0,
         tighten == PK_FATE_BEST ? p->best : 0, t0);
  record(p, "exact-below", exact,
         exact == PK_FATE_SKIPPED ? "first fit reaches the count bound, or a large batch" : NULL, 0,
         exact == PK_FATE_BEST ? p->best : 0, t1);
  return 0;
}

/* Where nothing fit at m under max_seqs and completion needs far more:
 * first fit, the tightest of the other packings, tells in one pass the
 * count it needs. At or above completion's, no count between fits by them
 * in practice (the bench's max_seqs 4 batches never did), so completion's
 * packing is taken at its own count (p->m rises); below, the least count
 * is bisected in (m, first fit's] (cs->bis_hi set). */
static int completion_far(packed_try_t *p) {
  auto_state_t *s = p->s;
  pk_count_search_t *cs = p->cs;
  uint32_t dp = s->dp, n = s->ctx->n;
  double t0 = pk_auto_now_us();
  size_t kept = (size_t)cs->complete_m * dp;
  pk_packing_t cur = pk_auto_packing(s);
  pk_packing_copy(p->saved, &cur, kept, n);
  uint32_t ffd = ffd_min_micro(s, p->order, cs->max_m);
  if (pk_auto_poll(s->stop))
    return PK_ECANCELED;
  if (ffd < cs->complete_m) {
    cs->bis_hi = ffd; /* bis_lo = m (next_count). */
    return PK_EPRECOND;
  }
  pk_packing_copy(&cur, p->saved, kept, n);
  memset(s->bins + kept, 0, ((size_t)cs->max_m * dp - kept) * sizeof *s->bins);
  p->m = s->m = cs->complete_m;
  int rc = pk_auto_bins_finish(s, p->order);
  if (rc == 0) {
    p->kept = "completion";
    p->best = pk_auto_step(s);
    record(p, "completion", PK_FATE_BEST, NULL, 0, p->best, t0);
  }
  return rc;
}

int pk_auto_pack_packed_best(auto_state_t *s, const uint32_t *order, pk_count_search_t *cs,
                             pk_packing_t *saved, uint32_t *m, bool *again) {
  const pk_cfg_t *cfg = s->ctx->cfg;
  packed_try_t p = {.s = s, .order = order, .cs = cs, .saved = saved, .m = *m};
  bool full = !cfg->equal_count &&
              (double)cs->total_size > PK_AUTO_FULL_FILL * (double)*m * s->dp * (double)cfg->cap;
  int rc = 0;
  p.full = full;
  s->m = *m;
  if (full && cs->ffd_m == 0)
    rc = count_full(&p, again);
  if (rc == 0 && cfg->equal_count) {
    rc = run_order(&p, &order_equal);
    record_others(&p, &order_equal, NULL);
  } else if (rc == 0 && full) {
    rc = run_order(&p, &order_full_first);
    const packed_order_t *rest = p.kept != NULL && !p.tightened && within(&p, p.best, PK_AUTO_CLOSE)
                                     ? &order_full_close
                                     : &order_full;
    if (rc == 0)
      rc = run_order(&p, rest);
    record_others(&p, &order_full_first, rest);
  } else if (rc == 0) {
    rc = run_order(&p, &order_open);
  }
  if (rc == 0 && p.kept == NULL && p.completion_left && cs->complete_m > p.m + cfg->group &&
      cs->bis_hi == 0)
    rc = completion_far(&p);
  *m = p.m;
  s->m = p.m;
  if (rc == 0 && p.kept == NULL)
    rc = PK_EPRECOND;
  if (rc == 0)
    s->trace->winner = p.kept;
  return rc;
}
