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
 * order, the packing kept aside, the count search, the trace and the stage
 * a self-check caught. Nothing of a run lives outside this struct. */
typedef struct auto_run {
  auto_state_t s;
  pk_auto_stop_t stop;
  pk_auto_trace_t trace;
  const char *failed; /* The stage a debug self-check caught (PK_EINTERNAL). */
  uint32_t *order;    /* Items by size descending. */
  pk_packing_t saved; /* Scratch for the candidates (max_m x dp, n). */
  pk_count_search_t cs;
} auto_run_t;

/* Stage 0: scratch, the order, the count bound's inputs. PK_ENOMEM. */
static int stage_init(auto_run_t *r, const pk_ctx_t *ctx) {
  uint32_t dp = ctx->cfg->dp, n = ctx->n;
  auto_state_t *s = &r->s;
  uint32_t max_m = r->cs.max_m = n / dp;
  r->cs.exact.steps = PK_EXACT_STEPS;
  r->stop.ctx = ctx;
  s->ctx = ctx;
  s->dp = dp;
  s->stop = &r->stop;
  s->trace = &r->trace;
  r->order = pk_malloc_array(n, sizeof *r->order);
  s->bins = pk_malloc_array((size_t)max_m * dp, sizeof *s->bins);
  s->col_foot = pk_malloc_array(max_m, sizeof *s->col_foot);
  s->slots = pk_malloc_array(dp, sizeof *s->slots);
  s->tmp = pk_malloc_array(dp, sizeof *s->tmp);
  s->keys = pk_malloc_array(dp, sizeof *s->keys);
  s->item_bin = pk_malloc_array(n, sizeof *s->item_bin);
  if (r->order == NULL || s->bins == NULL || s->col_foot == NULL || s->slots == NULL ||
      s->tmp == NULL || s->keys == NULL || s->item_bin == NULL ||
      pk_tree_init(&s->cols, max_m) != 0 || pk_tree_init(&s->col_room, max_m) != 0 ||
      pk_tree_init(&s->bins_rt, max_m * dp) != 0 ||
      pk_packing_alloc(&r->saved, (size_t)max_m * dp, n) != 0)
    return PK_ENOMEM;
  for (uint32_t k = 0; k < n; k++)
    r->cs.total_size += ctx->size[k];
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
 * the stage (auto_run_t.failed); other release builds skip the check (O(n) per
 * stage). */
#if defined(PK_SELF_CHECK) || !defined(NDEBUG)
#define PK_AUTO_SELF_CHECK 1
#else
#define PK_AUTO_SELF_CHECK 0
#endif

static int self_check(auto_run_t *r, const char *name, double before) {
  if (!PK_AUTO_SELF_CHECK)
    return 0;
  int rc = pk_packing_check(&r->s);
  if (rc == 0 && before > 0 && pk_auto_step(&r->s) > before * (1 + PK_AUTO_TIE_EPS))
    rc = PK_EINTERNAL;
  if (rc == PK_EINTERNAL)
    r->failed = name;
  return rc;
}

/* Runs one improver and records its step cost before and after and its
 * time in the trace. */
static int traced(auto_run_t *r, const char *name, int (*stage)(auto_state_t *)) {
  auto_state_t *s = &r->s;
  double t0 = pk_auto_now_us(), before = pk_auto_step(s);
  int rc = stage(s);
  pk_auto_trace_add(&r->trace, (pk_auto_stage_rec_t){.name = name,
                                                     .fate = PK_FATE_RAN,
                                                     .m = s->m,
                                                     .before = before,
                                                     .after = rc == 0 ? pk_auto_step(s) : before,
                                                     .us = pk_auto_now_us() - t0});
  return rc == 0 ? self_check(r, name, before) : rc;
}

/* Stages 1 to 3, PADDED without equal_count: the least count whose runs
 * fit (pk_auto_pack_padded_best runs the candidate table at each), then
 * the improver. */
static int padded_pipeline(auto_run_t *r, uint32_t m) {
  const pk_cfg_t *cfg = r->s.ctx->cfg;
  int rc = PK_EPRECOND;
  for (; m <= r->cs.max_m && rc == PK_EPRECOND; m += cfg->group) {
    if (pk_auto_poll(&r->stop))
      return PK_ECANCELED;
    r->trace.nstages = 0; /* The trace tells of the count reached. */
    rc = pk_auto_pack_padded_best(&r->s, r->order, m, &r->saved);
  }
  if (rc == 0)
    rc = self_check(r, r->trace.winner, 0);
  if (rc == 0 && pk_auto_poll(&r->stop))
    rc = PK_ECANCELED;
  if (rc == 0)
    rc = traced(r, "lower-padded", pk_auto_lower_padded);
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
  if (rc == 0 && (r->cs.bis_hi == 0 || *m <= r->cs.bis_lo + group))
    return false;
  if (rc == 0)
    r->cs.bis_hi = *m;
  else if (r->cs.bis_hi != 0 && *m >= r->cs.bis_hi)
    r->cs.bis_hi = 0;
  else if (r->cs.bis_hi != 0)
    r->cs.bis_lo = *m;
  if (r->cs.bis_hi == 0)
    *m += group;
  else if (r->cs.bis_hi - r->cs.bis_lo <= group)
    *m = r->cs.bis_hi;
  else
    *m = r->cs.bis_lo + (r->cs.bis_hi - r->cs.bis_lo) / group / 2 * group;
  return true;
}

/* Stages 1 to 3, PACKED: at each count of the count search, the candidate
 * packers, then the improvers; *m_out is the count reached. PK_EPRECOND
 * when no count up to max_m fits. */
static int packed_pipeline(auto_run_t *r, uint32_t m) {
  int rc;
  for (;;) {
    if (m > r->cs.max_m || m == 0)
      return PK_EPRECOND;
    if (pk_auto_poll(&r->stop))
      return PK_ECANCELED;
    bool again = false;
    r->trace.nstages = 0; /* The trace tells of the count reached. */
    rc = pk_auto_pack_packed_best(&r->s, r->order, &r->cs, &r->saved, &m, &again);
    if (again)
      continue;
    if (rc == 0)
      rc = self_check(r, r->trace.winner, 0);
    if (rc == 0 && pk_auto_poll(&r->stop))
      rc = PK_ECANCELED;
    if (rc == 0)
      rc = traced(r, "refine", pk_auto_refine_columns);
    if (rc == 0 && pk_auto_poll(&r->stop))
      rc = PK_ECANCELED;
    if (rc == 0)
      rc = traced(r, "lower", pk_auto_lower_columns);
    if (rc != 0 && rc != PK_EPRECOND)
      return rc;
    if (!next_count(r, rc, &m))
      return 0;
  }
}

int pk_auto_assign(const pk_ctx_t *ctx, pk_assign_t *out, char *err, size_t errlen) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = cfg->dp, n = ctx->n;
  auto_run_t r = {0};
  pk_auto_trace_t *trace = &r.trace;
  /* Stage 0. */
  int rc = stage_init(&r, ctx);
  uint32_t m = pk_micro_lower_bound(ctx);
  if (rc == 0 && pk_auto_poll(&r.stop))
    rc = PK_ECANCELED;
  /* Stages 1 to 3. */
  if (rc == 0 && cfg->mode == PK_MODE_PADDED && cfg->equal_count) {
    rc = pk_auto_pack_padded_tiers(&r.s, r.order, m, r.cs.max_m, &m);
    trace->winner = "padded-tiers";
    if (rc == 0)
      rc = self_check(&r, trace->winner, 0);
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
            n, dp, r.cs.max_m);
  else if (rc == PK_EPRECOND)
    pk_fail(err, errlen, rc,
            "%u sequences cannot be packed for parallel.dp %u under batching.max_tokens "
            "and max_seqs with at most %u micro-batches per rank (each micro-batch needs "
            "a sequence); raise the cap or send more sequences",
            n, dp, r.cs.max_m);
  else if (rc == PK_ENOMEM)
    pk_fail(err, errlen, rc, "%u sequences: out of memory", n);
  else if (rc == PK_EINTERNAL)
    pk_fail(err, errlen, rc, "AUTO's %s stage broke its contract (debug self-check)",
            r.failed != NULL ? r.failed : "?");
  if (ctx->trace != NULL)
    *ctx->trace = r.trace;
  run_free(&r);
  return rc;
}
