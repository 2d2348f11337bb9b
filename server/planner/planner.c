/* The planning pipeline: validate -> item sizes and costs -> mini-batches ->
 * per mini-batch assignment (AUTO, FIXED, ROLL or a compatibility pair) ->
 * plan storage (order, layout and stats in layout.c). */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pk_internal.h"
#include "pk_plan_build.h"

static uint64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static bool group_less(const void *arg, uint32_t x, uint32_t y) {
  const uint64_t *groups = arg;
  return groups[x] < groups[y];
}

static bool first_less(const void *arg, uint32_t x, uint32_t y) {
  const uint32_t *first = arg;
  return first[x] < first[y];
}

/* Splits the (optionally shuffled) sequence order into mini-batches: order[]
 * holds sequence indices grouped by mini-batch, start[b]..start[b+1]. With
 * keep_groups whole groups move together; with groups_on_rank too, and each
 * mini-batch holds the same number of groups (+-1), at least dp of them (a
 * multiple of dp with equal_count): a group is then on one rank in one
 * mini-batch, and a mini-batch is a number of prompts, as GRPO trainers
 * count it. */
static int split_mini_batches(const pk_request_t *req, const pk_cfg_t *cfg, uint32_t *order,
                              uint32_t *start, char *err, size_t errlen) {
  uint32_t n = (uint32_t)req->n;
  uint32_t nb = cfg->mini_batches;
  pk_rng_t rng = {cfg->seed ^ 0x7061636b64ull};
  for (uint32_t i = 0; i < n; i++)
    order[i] = i;

  if (!cfg->keep_groups && !cfg->groups_on_rank) {
    if (cfg->shuffle)
      for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)pk_rng_below(&rng, (uint64_t)i + 1);
        uint32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
      }
    for (uint32_t b = 0; b <= nb; b++)
      start[b] = (uint32_t)((uint64_t)n * b / nb);
    return 0;
  }

  /* Groups in order of first appearance: sort indices by (group id, index),
   * then give each group the position of its first member. */
  int rc = 0;
  uint32_t *by_group = pk_malloc_array(n, sizeof *by_group);
  uint32_t *tmp = pk_malloc_array(n, sizeof *tmp);
  uint32_t *gfirst = pk_malloc_array(n, sizeof *gfirst); /* group number -> first index */
  uint32_t *gstart = pk_malloc_array((size_t)n + 1, sizeof *gstart);
  uint32_t *gorder = pk_malloc_array(n, sizeof *gorder);
  if (by_group == NULL || tmp == NULL || gfirst == NULL || gstart == NULL || gorder == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  for (uint32_t i = 0; i < n; i++)
    by_group[i] = i;
  /* Stable merge sort by (group, index): deterministic. */
  pk_merge_sort_u32(by_group, tmp, n, group_less, req->groups);
  uint32_t ng = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (i == 0 || req->groups[by_group[i]] != req->groups[by_group[i - 1]]) {
      gstart[ng] = i;
      gfirst[ng] = by_group[i];
      ng++;
    }
  }
  gstart[ng] = n;
  uint64_t need = (uint64_t)nb * cfg->dp;
  if (cfg->groups_on_rank && ng < need) {
    rc = pk_fail(err, errlen, PK_EINVAL,
                 "batching.groups_on_rank: groups holds %u distinct ids, fewer than "
                 "batching.mini_batches %u x parallel.dp %u (every rank needs a whole group in "
                 "every mini-batch)",
                 ng, nb, cfg->dp);
    goto done;
  }
  if (cfg->groups_on_rank && cfg->equal_count && ng % need != 0) {
    rc = pk_fail(err, errlen, PK_EINVAL,
                 "batching.groups_on_rank: groups holds %u distinct ids, not a multiple of "
                 "batching.mini_batches %u x parallel.dp %u (batching.equal_count gives every "
                 "rank the same number of groups)",
                 ng, nb, cfg->dp);
    goto done;
  }
  if (ng < nb) {
    rc = pk_fail(err, errlen, PK_EPRECOND,
                 "batching.keep_groups: %u groups cannot fill batching.mini_batches %u", ng, nb);
    goto done;
  }
  /* Groups in order of their first member. */
  for (uint32_t g = 0; g < ng; g++)
    gorder[g] = g;
  pk_merge_sort_u32(gorder, tmp, ng, first_less, gfirst);
  if (cfg->shuffle)
    for (uint32_t i = ng - 1; i > 0; i--) {
      uint32_t j = (uint32_t)pk_rng_below(&rng, (uint64_t)i + 1);
      uint32_t t = gorder[i];
      gorder[i] = gorder[j];
      gorder[j] = t;
    }
  /* Fill mini-batches with whole groups; mini-batch b closes once it reaches
   * its share of the sequences, leaving at least one group per remaining
   * mini-batch. */
  uint32_t pos = 0, b = 0;
  start[0] = 0;
  for (uint32_t g = 0; g < ng; g++) {
    uint32_t grp = gorder[g];
    for (uint32_t i = gstart[grp]; i < gstart[grp + 1]; i++)
      order[pos++] = by_group[i];
    uint64_t target = (uint64_t)n * (b + 1) / nb;
    bool must_close = ng - g - 1 == nb - b - 1;
    if (cfg->groups_on_rank) {
      target = UINT64_MAX;
      must_close = g + 1 == (uint64_t)ng * (b + 1) / nb;
    }
    if (b + 1 < nb && (pos >= target || must_close))
      start[++b] = pos;
  }
  start[nb] = n;
done:
  free(by_group);
  free(tmp);
  free(gfirst);
  free(gstart);
  free(gorder);
  return rc;
}

/* Chooses the algorithm for one mini-batch and checks the counts it needs. */
static int assign_mini_batch(const pk_ctx_t *ctx, pk_assign_t *a, uint32_t mini, char *err,
                             size_t errlen) {
  const pk_cfg_t *cfg = ctx->cfg;
  if (ctx->n < cfg->dp)
    return pk_fail(err, errlen, PK_EPRECOND,
                   "mini-batch %u has %u sequences for parallel.dp %u ranks (every rank needs at "
                   "least one sequence per micro-batch)",
                   mini, ctx->n, cfg->dp);
  bool roll = cfg->dp_balance == PK_DP_SORTED_STRIDE &&
              (cfg->micro_algo == PK_MICRO_NEXT_FIT || cfg->micro_algo == PK_MICRO_SHARED_CUTS);
  /* With groups_on_rank, equal_count means equal group counts (checked when
   * the mini-batches were split). */
  if ((cfg->equal_count || cfg->mode == PK_MODE_FIXED || roll) && !cfg->groups_on_rank &&
      ctx->n % cfg->dp != 0)
    return pk_fail(err, errlen, PK_EPRECOND,
                   "mini-batch %u has %u sequences, not divisible by parallel.dp %u (required by "
                   "%s)",
                   mini, ctx->n, cfg->dp,
                   cfg->equal_count                       ? "batching.equal_count"
                   : cfg->mode == PK_MODE_FIXED           ? "batching.mode FIXED"
                   : cfg->micro_algo == PK_MICRO_NEXT_FIT ? "sorted_stride + next_fit (ROLL)"
                                                          : "sorted_stride + shared_cuts (ROLL)");
  uint32_t lb = pk_micro_lower_bound(ctx);
  if ((uint64_t)lb * cfg->dp > ctx->n)
    return pk_fail(err, errlen, PK_EPRECOND,
                   "mini-batch %u has %u sequences, fewer than parallel.dp %u x %u micro-batches "
                   "(the fewest the token cap, max_seqs, min_micro_batches and microbatch_group "
                   "allow)",
                   mini, ctx->n, cfg->dp, lb);
  int rc;
  if (cfg->groups_on_rank)
    rc = pk_group_assign(ctx, a, err, errlen);
  else if (cfg->mode == PK_MODE_FIXED)
    rc = pk_fixed_assign(ctx, a, err, errlen);
  else if (roll)
    rc = pk_roll_assign(ctx, a, err, errlen);
  else if (cfg->dp_balance == PK_DP_AUTO && cfg->micro_algo == PK_MICRO_AUTO)
    rc = pk_auto_assign(ctx, a, err, errlen);
  else
    rc = pk_compat_assign(ctx, a, err, errlen);
  if (rc == PK_ECANCELED && err != NULL && err[0] == '\0')
    pk_fail(err, errlen, rc, "planning stopped by the caller at mini-batch %u", mini);
  else if (rc != 0 && rc != PK_ENOMEM && err != NULL && err[0] == '\0')
    pk_fail(err, errlen, rc, "mini-batch %u: no plan satisfies the constraints", mini);
  return rc;
}

/* The caller's stop condition as the planner's stages see it: asked until
 * its first nonzero answer and never again after it. A stage may then poll
 * as often as it likes (a stopped inner loop and the stage around it both
 * ask), the caller sees exactly one call that said stop, and an answer
 * that flips back cannot restart planning half way. */
typedef struct sticky_stop {
  const pk_limits_t *user;
  bool stopped;
} sticky_stop_t;

static int sticky_should_stop(void *arg) {
  sticky_stop_t *s = arg;
  if (!s->stopped)
    s->stopped = s->user->should_stop(s->user->stop_arg) != 0;
  return s->stopped;
}

int pk_plan(const pk_request_t *req, pk_plan_t **out, char *err, size_t errlen) {
  return pk_plan_limited(req, NULL, out, err, errlen);
}

int pk_plan_limited(const pk_request_t *req, const pk_limits_t *limits, pk_plan_t **out, char *err,
                    size_t errlen) {
  uint64_t t0 = now_us();
  if (err != NULL && errlen > 0)
    err[0] = '\0';
  if (out == NULL)
    return pk_fail(err, errlen, PK_EINVAL, "out: missing");
  *out = NULL;

  /* The sequence count first: it needs no pass over the lengths. Then the
   * whole request, then the caller's admission check, all before any
   * allocation. */
  pk_cfg_t cfg;
  int rc = req != NULL ? pk_limit_count(req, limits, err, errlen) : 0;
  if (rc == 0)
    rc = pk_validate(req, &cfg, err, errlen);
  if (rc == 0)
    rc = pk_limit_admit(req, &cfg, limits, err, errlen);
  if (rc != 0)
    return rc;

  uint32_t n = (uint32_t)req->n;
  uint32_t nb = cfg.mini_batches;
  sticky_stop_t sticky = {limits, false};
  pk_limits_t stop_limits = {0};
  const pk_limits_t *stages = NULL; /* What the stages poll; NULL: no stop. */
  if (limits != NULL && limits->should_stop != NULL) {
    stop_limits = *limits;
    stop_limits.should_stop = sticky_should_stop;
    stop_limits.stop_arg = &sticky;
    stages = &stop_limits;
  }
  pk_build_t bld = {0};
  uint32_t *order = pk_malloc_array(n, sizeof *order);
  uint32_t *start = pk_malloc_array((size_t)nb + 1, sizeof *start);
  uint64_t *size = pk_malloc_array(n, sizeof *size);
  double *cost = pk_malloc_array(n, sizeof *cost);
  uint32_t *len = pk_malloc_array(n, sizeof *len);
  uint32_t *arank = pk_malloc_array(n, sizeof *arank);
  uint32_t *amicro = pk_malloc_array(n, sizeof *amicro);
  uint32_t *apos = pk_malloc_array(n, sizeof *apos);
  uint32_t *by_size = pk_malloc_array(n, sizeof *by_size);
  if (by_size == NULL || order == NULL || start == NULL || size == NULL || cost == NULL ||
      len == NULL || arank == NULL || amicro == NULL || apos == NULL) {
    rc = pk_fail(err, errlen, PK_ENOMEM, "lengths: %u sequences: out of memory", n);
    goto done;
  }
  if ((rc = split_mini_batches(req, &cfg, order, start, err, errlen)) != 0)
    goto done;
  if ((rc = pk_build_init(&bld, req, &cfg)) != 0) {
    pk_fail(err, errlen, rc, "lengths: %u sequences: out of memory", n);
    goto done;
  }
  bld.limits = stages;

  for (uint32_t b = 0; b < nb; b++) {
    uint32_t m = start[b + 1] - start[b];
    const uint32_t *idx = order + start[b];
    pk_ctx_t ctx = {.cfg = &cfg,
                    .n = m,
                    .idx = idx,
                    .size = size,
                    .cost = cost,
                    .len = len,
                    .groups = req->groups,
                    .limits = stages,
                    .trace = limits != NULL ? limits->trace : NULL};
    uint32_t tick = 0;
    bool stop = pk_stopped(&ctx);
    for (uint32_t k = 0; k < m && !stop; k++) {
      len[k] = req->lengths[idx[k]];
      size[k] = pk_item_size(&cfg, len[k]);
      cost[k] = pk_slot_cost(&cfg, size[k]);
      stop = pk_stop_tick(&ctx, &tick);
    }
    if (stop) {
      rc = pk_fail(err, errlen, PK_ECANCELED, "planning stopped by the caller at mini-batch %u", b);
      goto done;
    }
    for (uint32_t k = 0; k < m; k++)
      by_size[k] = k;
    pk_sort_by_cost_desc(&ctx, by_size, m);
    ctx.by_size = by_size;
    /* The sort and the bound are each one pass of O(n log n) or less: a
     * poll between them keeps a stop within one pass. */
    if (!pk_stopped(&ctx))
      ctx.micro_lb = pk_micro_lower_bound(&ctx);
    if (pk_stopped(&ctx)) {
      rc = pk_fail(err, errlen, PK_ECANCELED, "planning stopped by the caller at mini-batch %u", b);
      goto done;
    }
    pk_step_memo_t step_memo = {0};
    ctx.step_memo = &step_memo;
    pk_assign_t a = {.rank = arank, .micro = amicro, .pos = apos, .nmicro = 0};
    if ((rc = assign_mini_batch(&ctx, &a, b, err, errlen)) != 0)
      goto done;
    if (pk_stopped(&ctx)) {
      rc = pk_fail(err, errlen, PK_ECANCELED, "planning stopped by the caller at mini-batch %u", b);
      goto done;
    }
    if ((rc = pk_build_add_mini_batch(&bld, &ctx, &a, ctx.micro_lb)) != 0) {
      if (rc == PK_ECANCELED)
        pk_fail(err, errlen, rc, "planning stopped by the caller at mini-batch %u", b);
      else if (rc == PK_ENOMEM)
        pk_fail(err, errlen, rc, "mini-batch %u: out of memory", b);
      else
        pk_fail(err, errlen, rc, "mini-batch %u: internal error while building the plan", b);
      goto done;
    }
  }
  rc = pk_build_finish(&bld, out, err, errlen);
  if (rc == 0)
    (*out)->stats.plan_time_us = now_us() - t0;
done:
  pk_build_cleanup(&bld);
  free(order);
  free(start);
  free(size);
  free(cost);
  free(len);
  free(arank);
  free(amicro);
  free(apos);
  free(by_size);
  return rc;
}

uint32_t pk_alignment(const pk_request_t *req) {
  pk_cfg_t cfg;
  char err[8];
  /* Only the layout part matters; validation of lengths may fail without
   * changing the alignment, so validate a copy with one dummy length. */
  pk_request_t r = *req;
  uint32_t one = 0;
  r.lengths = &one;
  r.n = 1;
  r.loss_tokens = NULL;
  r.n_loss_tokens = 0;
  r.groups = NULL;
  r.n_groups = 0;
  r.batching.keep_groups = false;
  r.batching.groups_on_rank = false;
  r.batching.mini_batches = 0;
  r.batching.min_micro_batches = 0;
  if (pk_validate(&r, &cfg, err, sizeof err) != 0)
    return 0;
  return cfg.align;
}
