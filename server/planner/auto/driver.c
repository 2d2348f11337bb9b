/* The AUTO driver: the stages of auto.h, in its order. pk_auto_assign
 * reads as the overview does: init, then per count the candidate packers
 * and the improvers, then the deal; the count search's state (which counts
 * failed, what first fit and completion need, the bisection's ends) is one
 * struct, and every stage is one function with one exit. The driver polls
 * the stop callback between stages; the stages tick it inside their loops. */
#include <stdlib.h>
#include <string.h>

#include "auto.h"

/* Everything one AUTO mini-batch holds: the state every stage shares, the
 * order, the packings kept aside, and the count search. */
typedef struct auto_run {
  auto_state_t s;
  pk_auto_stop_t stop;
  uint32_t *order; /* Items by size descending. */
  uint32_t max_m;  /* n / dp: every micro-batch needs an item. */
  uint64_t total_size;
  pk_packing_t saved; /* Scratch for the candidates (max_m x dp, n). */
  pk_packing_t ffd;   /* First fit's packing kept aside (allocated when
                       * the batch nearly fills its columns). */
  /* The count search. */
  pk_exact_budget_t exact; /* Shared by every count the search is tried at. */
  uint32_t exact_m;        /* The last count it was tried at (0: none). */
  uint32_t ffd_m;          /* First fit's least count (0: not probed). */
  uint32_t complete_m;     /* The count completion needed (max_seqs). */
  /* The bisection's ends: the last count that failed, the least that fit
   * (0: not bisecting). */
  uint32_t bis_lo, bis_hi;
} auto_run_t;

/* The fewest micro-batches per rank first fit decreasing needs: one first
 * fit pass over all max_m x dp micro-batches (first fit over fewer is the
 * same pass cut short, so it fits exactly when the pass used no
 * micro-batch beyond them). The pass stays in s->bins and s->item_bin: it
 * is the first fit packing for every count from the result up.
 * UINT32_MAX when even max_m does not fit. */
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

/* Stage 0: scratch, the order, the count bound's inputs. PK_ENOMEM. */
static int stage_init(auto_run_t *r, const pk_ctx_t *ctx) {
  uint32_t dp = ctx->cfg->dp, n = ctx->n;
  auto_state_t *s = &r->s;
  r->max_m = n / dp;
  r->exact.steps = PK_EXACT_STEPS;
  r->stop.ctx = ctx;
  s->ctx = ctx;
  s->dp = dp;
  s->stop = &r->stop;
  r->order = pk_malloc_array(n, sizeof *r->order);
  s->bins = pk_malloc_array((size_t)r->max_m * dp, sizeof *s->bins);
  s->col_foot = pk_malloc_array(r->max_m, sizeof *s->col_foot);
  s->slots = pk_malloc_array(dp, sizeof *s->slots);
  s->tmp = pk_malloc_array(dp, sizeof *s->tmp);
  s->keys = pk_malloc_array(dp, sizeof *s->keys);
  s->item_bin = pk_malloc_array(n, sizeof *s->item_bin);
  if (r->order == NULL || s->bins == NULL || s->col_foot == NULL || s->slots == NULL ||
      s->tmp == NULL || s->keys == NULL || s->item_bin == NULL ||
      pk_tree_init(&s->cols, r->max_m) != 0 || pk_tree_init(&s->col_room, r->max_m) != 0 ||
      pk_tree_init(&s->bins_rt, r->max_m * dp) != 0 ||
      pk_packing_alloc(&r->saved, (size_t)r->max_m * dp, n) != 0)
    return PK_ENOMEM;
  for (uint32_t k = 0; k < n; k++)
    r->total_size += ctx->size[k];
  if (ctx->by_size != NULL) {
    memcpy(r->order, ctx->by_size, (size_t)n * sizeof *r->order);
  } else {
    for (uint32_t k = 0; k < n; k++)
      r->order[k] = k;
    pk_sort_by_cost_desc(ctx, r->order, n);
  }
  return 0;
}

static void run_free(auto_run_t *r) {
  auto_state_t *s = &r->s;
  pk_packing_free(&r->saved);
  pk_packing_free(&r->ffd);
  free(r->order);
  free(s->bins);
  free(s->col_foot);
  free(s->cols.t);
  free(s->bins_rt.t);
  free(s->col_room.t);
  free(s->slots);
  free(s->tmp);
  free(s->keys);
  free(s->item_bin);
}

/* Debug builds, and builds with PK_SELF_CHECK (the fuzz targets, the CI
 * build of the quality gate), check every stage's output against its
 * contract: a whole packing within the cap and max_seqs (pk_packing_check),
 * and for an improver a step cost no higher than before. PK_EINTERNAL names
 * the stage (stage_failed); other release builds skip the check (O(n) per
 * stage). */
#if defined(PK_SELF_CHECK) || !defined(NDEBUG)
#define PK_AUTO_SELF_CHECK 1
#else
#define PK_AUTO_SELF_CHECK 0
#endif

static _Thread_local const char *stage_failed; /* The stage a self-check caught. */

static int self_check(const char *name, const auto_state_t *s, double before) {
  if (!PK_AUTO_SELF_CHECK)
    return 0;
  int rc = pk_packing_check(s);
  if (rc == 0 && before > 0 && pk_auto_step(s) > before * (1 + PK_AUTO_TIE_EPS))
    rc = PK_EINTERNAL;
  if (rc == PK_EINTERNAL)
    stage_failed = name;
  return rc;
}

/* Runs one improver and records its step cost before and after and its
 * time in the trace. */
static int traced(const char *name, auto_state_t *s, int (*stage)(auto_state_t *)) {
  double t0 = pk_auto_now_us(), before = pk_auto_step(s);
  int rc = stage(s);
  pk_auto_trace_add(name, before, rc == 0 ? pk_auto_step(s) : before, pk_auto_now_us() - t0);
  return rc == 0 ? self_check(name, s, before) : rc;
}

/* Stages 1 to 3, PADDED without equal_count: the least count whose runs
 * fit (pk_auto_pack_padded_best runs the candidate table at each), then
 * the improver. */
static int padded_pipeline(auto_run_t *r, uint32_t m) {
  const pk_cfg_t *cfg = r->s.ctx->cfg;
  int rc = PK_EPRECOND;
  for (; m <= r->max_m && rc == PK_EPRECOND; m += cfg->group) {
    if (pk_auto_poll(&r->stop))
      return PK_ECANCELED;
    rc = pk_auto_pack_padded_best(&r->s, r->order, m, &r->saved);
  }
  if (rc == 0)
    rc = self_check(pk_auto_trace_last()->winner, &r->s, 0);
  if (rc == 0 && pk_auto_poll(&r->stop))
    rc = PK_ECANCELED;
  if (rc == 0)
    rc = traced("lower-padded", &r->s, pk_auto_lower_padded);
  return rc;
}

/* Stage 2 at count *m where the batch nearly fills it: first fit decreasing,
 * the tightest packer here, goes first; when it fails the column packings
 * (less tight) are not tried at this count. When it fits, they are tried
 * and the better is kept if one fits too (better columns); else the first
 * fit packing, kept aside, is restored. One probe pass (ffd_min_micro) tells
 * the counts first fit cannot fill, so those are not packed at all. The
 * first time, *m may rise to the count first fit needs, or fall back to
 * where tightening or the exact search reach; *again asks the count search
 * to try *m afresh (first fit fits nowhere up to max_m). */
static int candidates_full(auto_run_t *r, uint32_t *m, bool *again) {
  auto_state_t *s = &r->s;
  const pk_ctx_t *ctx = s->ctx;
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = s->dp, n = ctx->n;
  double t0 = pk_auto_now_us();
  if (r->ffd.bins == NULL && pk_packing_alloc(&r->ffd, (size_t)r->max_m * dp, n) != 0)
    return PK_ENOMEM;
  bool repaired = false;
  int rc;
  if (r->ffd_m == 0) {
    /* The probe's packing is first fit at the first count it fits. */
    r->ffd_m = ffd_min_micro(s, r->order, r->max_m);
    if (pk_auto_poll(&r->stop))
      return PK_ECANCELED;
    uint32_t bound = *m;
    while (r->ffd_m != UINT32_MAX && *m < r->ffd_m && *m <= r->max_m)
      *m += cfg->group;
    if (r->ffd_m == UINT32_MAX || *m > r->max_m) {
      *again = true; /* Fails at the top of the count search. */
      return PK_EPRECOND;
    }
    pk_auto_trace_last()->winner = "first-fit";
    if (*m > bound) {
      /* First fit needs more than the bound: repair it, or pack by
       * completion, at fewer. */
      uint32_t fit = *m;
      rc = pk_auto_tighten(s, r->order, bound, *m, cfg->group, r->saved.bins, r->saved.item_bin,
                           &fit);
      if (rc != 0)
        return rc;
      repaired = fit < *m;
      if (repaired) {
        r->ffd_m = *m = fit;
        pk_auto_trace_last()->winner = "tighten";
      }
    }
    /* Still above the bound: the exact search (small batches), from the
     * bound up while it proves counts infeasible. Its packing is in columns
     * already. */
    bool exact_found = false;
    for (uint32_t c = bound; c < *m && !exact_found; c += cfg->group) {
      pk_exact_budget_t before = r->exact;
      r->exact_m = c;
      rc = pk_auto_exact(s, r->order, c, &r->exact);
      if (rc != 0 && rc != PK_EPRECOND)
        return rc;
      exact_found = rc == 0;
      /* Not run (a large batch), or out of steps: no count above. */
      if (r->exact.runs == before.runs || r->exact.exhausted != before.exhausted)
        break;
    }
    if (exact_found) {
      repaired = true;
      r->ffd_m = *m = s->m;
      pk_auto_trace_last()->winner = "exact";
    }
    s->m = *m;
    rc = exact_found ? 0 : pk_auto_bins_finish(s, r->order);
  } else {
    rc = *m < r->ffd_m ? PK_EPRECOND : pk_auto_pack_bins_first(s, r->order);
    if (rc == 0)
      pk_auto_trace_last()->winner = "first-fit";
  }
  if (rc != 0)
    return rc;
  /* Kept aside, so that it need not be packed again. The column packings
   * are less tight than first fit: below the count first fit fills on its
   * own (a repaired count) they are not tried, nor where first fit is
   * already within PK_AUTO_GOOD_ENOUGH of the step bound (they could gain
   * at most that much). Where they are tried and fit, they are kept: their
   * columns refine better (measured). Where first fit is within
   * PK_AUTO_CLOSE, the tier packing goes first. */
  size_t nbins = (size_t)*m * dp;
  pk_packing_t cur = pk_auto_packing(s);
  pk_packing_copy(&r->ffd, &cur, nbins, n);
  if (pk_auto_poll(&r->stop))
    return PK_ECANCELED;
  double ffd_step = pk_auto_step(s);
  pk_auto_trace_add(pk_auto_trace_last()->winner, 0, ffd_step, pk_auto_now_us() - t0);
  if (pk_auto_poll(&r->stop))
    return PK_ECANCELED;
  double bound = pk_step_lower_bound(ctx, *m, ffd_step);
  if (pk_auto_poll(&r->stop))
    return PK_ECANCELED;
  bool good = ffd_step <= bound * (1 + PK_AUTO_GOOD_ENOUGH);
  bool close = ffd_step <= bound * (1 + PK_AUTO_CLOSE);
  rc = repaired || good ? PK_EPRECOND : pk_auto_pack_best(s, r->order, close, &r->saved);
  if (rc == PK_EPRECOND) {
    pk_packing_copy(&cur, &r->ffd, nbins, n);
    rc = 0;
  }
  return rc;
}

/* Stage 2 under max_seqs where the column packings and first fit failed at
 * m: they fill micro-batches by tokens and run out of count first;
 * completion keeps room for later slots. Where it needs more than m, the
 * counts below its own are not packed by it again; where it needs far more,
 * first fit's own count decides between taking completion's packing at its
 * count (*m rises) and bisecting the least count (r->bis_hi set). */
static int candidates_completion(auto_run_t *r, uint32_t *m) {
  auto_state_t *s = &r->s;
  const pk_cfg_t *cfg = s->ctx->cfg;
  uint32_t dp = s->dp, n = s->ctx->n, used = 0;
  int rc = pk_auto_pack_complete(s, r->order, *m * dp, r->max_m * dp, s->bins, s->item_bin, &used);
  if (rc == PK_EPRECOND)
    r->complete_m = UINT32_MAX; /* Not within max_m either. */
  if (rc != 0)
    return rc;
  r->complete_m = (uint32_t)pk_round_up((used + dp - 1) / dp, cfg->group);
  pk_auto_trace_last()->winner = "completion";
  /* Above m: completion's packing stays in s unless the exact search
   * (small batches) packs at m, in columns. */
  if (r->complete_m > *m && r->exact_m != *m) {
    r->exact_m = *m;
    rc = pk_auto_exact(s, r->order, *m, &r->exact);
    if (rc == 0)
      pk_auto_trace_last()->winner = "exact";
    if (rc != PK_EPRECOND)
      return rc;
  }
  if (r->complete_m > *m + cfg->group && r->bis_hi == 0) {
    /* Far above m: first fit, the tightest of the other packings, tells in
     * one pass the count it needs. At or above completion's, no count
     * between fits by them in practice (the bench's max_seqs 4 batches
     * never did), so completion's packing is taken at its own count; below,
     * the least count is bisected in (m, first fit's]. */
    size_t kept = (size_t)r->complete_m * dp;
    pk_packing_t cur = pk_auto_packing(s);
    pk_packing_copy(&r->saved, &cur, kept, n);
    uint32_t ffd = ffd_min_micro(s, r->order, r->max_m);
    if (pk_auto_poll(&r->stop))
      return PK_ECANCELED;
    if (ffd >= r->complete_m) {
      pk_packing_copy(&cur, &r->saved, kept, n);
      memset(s->bins + kept, 0, ((size_t)r->max_m * dp - kept) * sizeof *s->bins);
      *m = r->complete_m;
    } else {
      r->bis_hi = ffd; /* bis_lo = m (next_count). */
    }
  }
  s->m = *m;
  return r->complete_m <= *m ? pk_auto_bins_finish(s, r->order) : PK_EPRECOND;
}

/* Stage 2, PACKED, at count *m: the candidates in their order, the first
 * that fits (or the better of the column packings) kept. 0, PK_EPRECOND
 * (none fits at *m), PK_ENOMEM, PK_ECANCELED. */
static int candidates_packed(auto_run_t *r, uint32_t *m, bool *again) {
  auto_state_t *s = &r->s;
  const pk_cfg_t *cfg = s->ctx->cfg;
  int rc;
  s->m = *m;
  if (cfg->equal_count) {
    rc = pk_auto_pack_tiers(s, r->order);
    if (rc == 0)
      pk_auto_trace_last()->winner = "tiers";
  } else if ((double)r->total_size > PK_AUTO_FULL_FILL * (double)*m * s->dp * (double)cfg->cap) {
    return candidates_full(r, m, again);
  } else {
    rc = pk_auto_pack_best(s, r->order, false, &r->saved);
    if (rc == PK_EPRECOND) {
      rc = pk_auto_pack_bins_first(s, r->order);
      if (rc == 0)
        pk_auto_trace_last()->winner = "first-fit";
    }
    if (rc == PK_EPRECOND && cfg->max_seqs != UINT32_MAX && *m >= r->complete_m)
      rc = candidates_completion(r, m);
  }
  if (rc == PK_EPRECOND && r->exact_m != *m) {
    /* Every packing above missed m: the exact search (small batches). */
    r->exact_m = *m;
    rc = pk_auto_exact(s, r->order, *m, &r->exact);
    if (rc == 0)
      pk_auto_trace_last()->winner = "exact";
  }
  return rc;
}

/* Stage 1's next count after a try at m that ended in rc (0 or
 * PK_EPRECOND); false when m is the answer. Where first fit has said it
 * fits at bis_hi (below completion's count) and the packings fail below
 * it, the least count that fits is searched by bisection over (the last
 * count that failed, bis_hi], not one group at a time: under max_seqs the
 * counts can lie hundreds of groups apart (65536 RL sequences, max_seqs 4:
 * the count bound 16384, completion about 18000 micro-batches, and each
 * failed count cost two whole packings, 25 s in all). The packing at the
 * least count is made again at the end (each try overwrites the state);
 * every try is deterministic, but should that try fail, the search goes on
 * one group at a time from there. */
static bool next_count(auto_run_t *r, int rc, uint32_t *m) {
  uint32_t group = r->s.ctx->cfg->group;
  if (rc == 0 && (r->bis_hi == 0 || *m <= r->bis_lo + group))
    return false;
  if (rc == 0)
    r->bis_hi = *m;
  else if (r->bis_hi != 0 && *m >= r->bis_hi)
    r->bis_hi = 0;
  else if (r->bis_hi != 0)
    r->bis_lo = *m;
  if (r->bis_hi == 0)
    *m += group;
  else if (r->bis_hi - r->bis_lo <= group)
    *m = r->bis_hi;
  else
    *m = r->bis_lo + (r->bis_hi - r->bis_lo) / group / 2 * group;
  return true;
}

/* Stages 1 to 3, PACKED: at each count of the count search, the candidate
 * packers, then the improvers; *m_out is the count reached. PK_EPRECOND
 * when no count up to max_m fits. */
static int packed_pipeline(auto_run_t *r, uint32_t m) {
  int rc;
  for (;;) {
    if (m > r->max_m || m == 0)
      return PK_EPRECOND;
    if (pk_auto_poll(&r->stop))
      return PK_ECANCELED;
    bool again = false;
    double t0 = pk_auto_now_us();
    rc = candidates_packed(r, &m, &again);
    if (again)
      continue;
    if (rc == 0)
      pk_auto_trace_add("candidates", 0, pk_auto_step(&r->s), pk_auto_now_us() - t0);
    if (rc == 0)
      rc = self_check(pk_auto_trace_last()->winner, &r->s, 0);
    if (rc == 0 && pk_auto_poll(&r->stop))
      rc = PK_ECANCELED;
    if (rc == 0)
      rc = traced("refine", &r->s, pk_auto_refine_columns);
    if (rc == 0 && pk_auto_poll(&r->stop))
      rc = PK_ECANCELED;
    if (rc == 0)
      rc = traced("lower", &r->s, pk_auto_lower_columns);
    if (rc != 0 && rc != PK_EPRECOND)
      return rc;
    if (!next_count(r, rc, &m))
      return 0;
  }
}

int pk_auto_assign(const pk_ctx_t *ctx, pk_assign_t *out, char *err, size_t errlen) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = cfg->dp, n = ctx->n;
  pk_auto_trace_t *trace = pk_auto_trace_last();
  memset(trace, 0, sizeof *trace);
  auto_run_t r = {0};
  /* Stage 0. */
  int rc = stage_init(&r, ctx);
  uint32_t m = pk_micro_lower_bound(ctx);
  if (rc == 0 && pk_auto_poll(&r.stop))
    rc = PK_ECANCELED;
  /* Stages 1 to 3. */
  if (rc == 0 && cfg->mode == PK_MODE_PADDED && cfg->equal_count) {
    rc = pk_auto_pack_padded_tiers(&r.s, r.order, m, r.max_m, &m);
    trace->winner = "padded-tiers";
    if (rc == 0)
      rc = self_check(trace->winner, &r.s, 0);
  } else if (rc == 0 && cfg->mode == PK_MODE_PADDED) {
    rc = padded_pipeline(&r, m);
  } else if (rc == 0) {
    rc = packed_pipeline(&r, m);
  }
  /* Stage 4. */
  if (rc == 0 && pk_auto_poll(&r.stop))
    rc = PK_ECANCELED;
  if (rc == 0) {
    trace->m = r.s.m;
    trace->step = pk_auto_step(&r.s);
    rc = pk_auto_deal(&r.s, out);
  }
  if (rc == PK_EPRECOND && cfg->mode == PK_MODE_PADDED)
    pk_fail(err, errlen, rc,
            "%u sequences cannot be packed for parallel.dp %u under batching.max_tokens "
            "and max_seqs in PADDED mode with at most %u micro-batches per rank",
            n, dp, r.max_m);
  else if (rc == PK_EPRECOND)
    pk_fail(err, errlen, rc,
            "%u sequences cannot be packed for parallel.dp %u under batching.max_tokens "
            "and max_seqs with at most %u micro-batches per rank (each micro-batch needs "
            "a sequence); raise the cap or send more sequences",
            n, dp, r.max_m);
  else if (rc == PK_ENOMEM)
    pk_fail(err, errlen, rc, "%u sequences: out of memory", n);
  else if (rc == PK_EINTERNAL)
    pk_fail(err, errlen, rc, "AUTO's %s stage broke its contract (debug self-check)",
            stage_failed != NULL ? stage_failed : "?");
  run_free(&r);
  return rc;
}
