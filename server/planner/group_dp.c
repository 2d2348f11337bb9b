/* batching.groups_on_rank: every group id on one DP rank for the whole batch.
 *
 * Trainers that compute a prompt's shared prefix once for all n responses of
 * a GRPO group (verl's PrefixGrouper) need the whole group on the rank that
 * holds the prefix. The planner's rules still hold: every rank has the same
 * micro-batch count (rule 2) and no micro-batch is over the cap (rule 3).
 * Mini-batches hold whole groups (planner.c splits them by group count), so
 * a group is on one rank in one mini-batch; this file and group_micro.c
 * plan one mini-batch.
 *
 * 1. Groups to ranks. A group's cost is the sum of its sequences' costs
 *    (the request's cost model; the default a + a^2 / 24576 of the aligned
 *    length a is verl's workload 24576 L + L^2 up to a constant factor).
 *    Two starts: Karmarkar-Karp largest differencing over group costs
 *    (compat_kk.c) and LPT (costliest group first to the least loaded rank).
 *    With equal_count both give every rank the same number of groups
 *    (planner.c made the mini-batch's group count a multiple of dp); without
 *    it counts are free, but every rank keeps at least one group.
 *    Each start is improved by local search over pairs of ranks: the
 *    costliest rank, or else the cheapest, exchanges one group for a cheaper
 *    one of another rank (with free counts it may also give one away) when
 *    the exchanged cost d lies strictly between 0 and the pair's load gap D,
 *    taking the d closest to D / 2 over all partners. Both new loads lie
 *    strictly inside the old pair's interval, so the maximum never rises,
 *    the minimum never falls and the sum of squared loads falls at every
 *    step: the search ends (it also stops once the loads are within a
 *    millionth of each other, and a work budget bounds it). The
 *    start with the lower maximum (then the higher minimum) is kept, so the
 *    result is never less balanced than KK on groups alone, which is what
 *    verl's get_group_balanced_partitions computes.
 * 2. Micro-batches. The common count M starts at pk_micro_lower_bound of the
 *    whole mini-batch; each rank is packed into the least count >= M that
 *    fits; when a rank needed more, M becomes that count rounded up to
 *    microbatch_group and every rank is packed again, as the compatibility
 *    driver does (assign.c). How a rank is packed (group_micro.c): with
 *    micro_algo AUTO, cost LPT under the cap (first fit decreasing near a
 *    full cap) in PACKED mode, contiguous runs of rows of like width in
 *    PADDED mode; the peers' micro algorithms run as they do elsewhere
 *    (pk_compat_micro).
 * 3. Lock step (group_micro.c, micro_algo AUTO). Each rank numbers its
 *    micro-batches by cost, costliest first, so slot j pairs the j-th
 *    costliest of every rank (the least step cost for fixed per-rank
 *    micro-batches), and the assignment is marked as columns, so
 *    batching.order permutes slots alike on all ranks. In PACKED mode items
 *    then move between micro-batches of one rank to lower the column levels
 *    the costliest ranks set.
 *
 * Costs: O(n log n) to find groups, O(ng + dp x groups per rank) per
 * local-search step, O(n log M) per count tried, and budgeted searches. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compat_kk.h"
#include "group_dp.h"

/* Elementary steps one local search may take (a step scans one group). */
#define GROUP_SEARCH_WORK (1ull << 21)

/* ---- Groups of the mini-batch ------------------------------------------- */

typedef struct groups {
  uint32_t ng;
  uint32_t *item;  /* n: items grouped, group g at start[g] .. start[g+1]. */
  uint32_t *start; /* ng + 1 */
  double *cost;    /* ng: sum of the items' costs. */
  uint32_t *order; /* ng: groups by cost descending, ties by number. */
} groups_t;

static bool gid_less(const void *arg, uint32_t x, uint32_t y) {
  const pk_ctx_t *ctx = arg;
  return ctx->groups[ctx->idx[x]] < ctx->groups[ctx->idx[y]];
}

static bool u32_less(const void *arg, uint32_t x, uint32_t y) {
  const uint32_t *v = arg;
  return v[x] < v[y];
}

static bool cost_greater(const void *arg, uint32_t x, uint32_t y) {
  const double *v = arg;
  return v[x] > v[y];
}

static void groups_free(groups_t *g) {
  free(g->item);
  free(g->start);
  free(g->cost);
  free(g->order);
}

/* Groups numbered by their first item; items of a group in item order. */
static int groups_build(const pk_ctx_t *ctx, groups_t *g) {
  uint32_t n = ctx->n;
  int rc = PK_ENOMEM;
  uint32_t *by = pk_malloc_array(n, sizeof *by);
  uint32_t *tmp = pk_malloc_array(n, sizeof *tmp);
  uint32_t *run = pk_malloc_array((size_t)n + 1, sizeof *run);
  uint32_t *first = pk_malloc_array(n, sizeof *first);
  uint32_t *runs = pk_malloc_array(n, sizeof *runs);
  g->item = pk_malloc_array(n, sizeof *g->item);
  g->start = pk_malloc_array((size_t)n + 1, sizeof *g->start);
  g->cost = pk_calloc(n, sizeof *g->cost);
  g->order = pk_malloc_array(n, sizeof *g->order);
  if (by == NULL || tmp == NULL || run == NULL || first == NULL || runs == NULL ||
      g->item == NULL || g->start == NULL || g->cost == NULL || g->order == NULL)
    goto done;
  for (uint32_t k = 0; k < n; k++)
    by[k] = k;
  /* Stable: items of one group stay in item order. */
  pk_merge_sort_u32(by, tmp, n, gid_less, ctx);
  uint32_t ng = 0;
  for (uint32_t i = 0; i < n; i++)
    if (i == 0 || gid_less(ctx, by[i - 1], by[i])) {
      run[ng] = i;
      first[ng] = by[i];
      ng++;
    }
  run[ng] = n;
  for (uint32_t r = 0; r < ng; r++)
    runs[r] = r;
  pk_merge_sort_u32(runs, tmp, ng, u32_less, first);
  uint32_t pos = 0;
  for (uint32_t q = 0; q < ng; q++) {
    uint32_t r = runs[q];
    g->start[q] = pos;
    for (uint32_t i = run[r]; i < run[r + 1]; i++) {
      g->item[pos++] = by[i];
      g->cost[q] += ctx->cost[by[i]];
    }
    g->order[q] = q;
  }
  g->start[ng] = n;
  g->ng = ng;
  pk_merge_sort_u32(g->order, tmp, ng, cost_greater, g->cost);
  rc = 0;
done:
  free(by);
  free(tmp);
  free(run);
  free(first);
  free(runs);
  return rc;
}

/* ---- Groups to ranks ---------------------------------------------------- */

typedef struct search {
  uint32_t dp, ng;
  bool equal;
  const groups_t *g;
  uint32_t *rank;   /* ng */
  double *load;     /* dp */
  uint32_t *cnt;    /* dp: groups per rank */
  uint32_t *lst;    /* ng: each rank's groups, costliest first */
  uint32_t *lstart; /* dp + 1 */
} search_t;

static void set_loads(search_t *s) {
  memset(s->load, 0, (size_t)s->dp * sizeof *s->load);
  memset(s->cnt, 0, (size_t)s->dp * sizeof *s->cnt);
  for (uint32_t q = 0; q < s->ng; q++) {
    s->load[s->rank[q]] += s->g->cost[q];
    s->cnt[s->rank[q]]++;
  }
}

/* lst: the groups of each rank in g->order (counting sort by rank). */
static void build_lists(search_t *s) {
  memset(s->lstart, 0, ((size_t)s->dp + 1) * sizeof *s->lstart);
  for (uint32_t q = 0; q < s->ng; q++)
    s->lstart[s->rank[q] + 1]++;
  for (uint32_t r = 0; r < s->dp; r++)
    s->lstart[r + 1] += s->lstart[r];
  for (uint32_t i = 0; i < s->ng; i++) {
    uint32_t q = s->g->order[i];
    s->lst[s->lstart[s->rank[q]]++] = q;
  }
  for (uint32_t r = s->dp; r > 0; r--)
    s->lstart[r] = s->lstart[r - 1];
  s->lstart[0] = 0;
}

/* The best exchange from rank a (the costlier) to rank b: group *ga of a
 * for group *gb of b (UINT32_MAX: a move, no group back), with the cost d it
 * shifts closest to half the gap D; returns |d - D/2|, or INFINITY when no
 * exchange has 0 < d < D (by a margin that keeps rounding from cycling). */
static double best_exchange(const search_t *s, uint32_t a, uint32_t b, uint32_t *ga, uint32_t *gb,
                            uint64_t *work) {
  const double *w = s->g->cost;
  double d_gap = s->load[a] - s->load[b];
  double tol = 1e-12 * s->load[a];
  double best = INFINITY;
  if (!(d_gap > 2 * tol))
    return best;
  const uint32_t *la = s->lst + s->lstart[a], *lb = s->lst + s->lstart[b];
  uint32_t na = s->lstart[a + 1] - s->lstart[a], nb = s->lstart[b + 1] - s->lstart[b];
  bool move = !s->equal && na >= 2;
  uint32_t j = 0;
  for (uint32_t i = 0; i < na; i++) {
    double wa = w[la[i]], t = wa - d_gap / 2;
    /* lb is costliest first: j is the first entry at or below t. */
    while (j < nb && w[lb[j]] > t)
      j++;
    for (uint32_t c = j > 0 ? j - 1 : j; c <= j && c < nb; c++) {
      double d = wa - w[lb[c]];
      if (d > tol && d < d_gap - tol && fabs(d - d_gap / 2) < best) {
        best = fabs(d - d_gap / 2);
        *ga = la[i];
        *gb = lb[c];
      }
    }
    if (move && wa > tol && wa < d_gap - tol && fabs(wa - d_gap / 2) < best) {
      best = fabs(wa - d_gap / 2);
      *ga = la[i];
      *gb = UINT32_MAX;
    }
  }
  *work += (uint64_t)na + nb;
  return best;
}

/* Local search (see the top of the file). */
static void improve(search_t *s) {
  uint32_t dp = s->dp;
  uint64_t work = 0;
  while (work < GROUP_SEARCH_WORK) {
    build_lists(s);
    work += s->ng + dp;
    uint32_t hi = 0, lo = 0;
    for (uint32_t r = 1; r < dp; r++) {
      if (s->load[r] > s->load[hi])
        hi = r;
      if (s->load[r] < s->load[lo])
        lo = r;
    }
    /* Within a millionth: no exchange is worth its time. */
    if (s->load[hi] - s->load[lo] <= 1e-6 * s->load[hi])
      break;
    uint32_t ga = UINT32_MAX, gb = UINT32_MAX, from = 0, to = 0;
    /* The costliest rank's best partner gives the lowest new pair maximum
     * (load[hi] - D/2 + |d - D/2|); failing that, the cheapest rank's gives
     * the highest new pair minimum. */
    double best = INFINITY;
    for (uint32_t r = 0; r < dp; r++) {
      uint32_t xa = 0, xb = 0;
      if (r == hi)
        continue;
      double sc = best_exchange(s, hi, r, &xa, &xb, &work);
      double v = sc + (s->load[hi] + s->load[r]) / 2;
      if (sc < INFINITY && v < best) {
        best = v;
        ga = xa, gb = xb, from = hi, to = r;
      }
    }
    if (ga == UINT32_MAX) {
      best = -INFINITY;
      for (uint32_t r = 0; r < dp; r++) {
        uint32_t xa = 0, xb = 0;
        if (r == lo)
          continue;
        double sc = best_exchange(s, r, lo, &xa, &xb, &work);
        double v = (s->load[lo] + s->load[r]) / 2 - sc;
        if (sc < INFINITY && v > best) {
          best = v;
          ga = xa, gb = xb, from = r, to = lo;
        }
      }
    }
    if (ga == UINT32_MAX)
      break;
    s->rank[ga] = to;
    s->load[from] -= s->g->cost[ga];
    s->load[to] += s->g->cost[ga];
    s->cnt[from]--;
    s->cnt[to]++;
    if (gb != UINT32_MAX) {
      s->rank[gb] = from;
      s->load[to] -= s->g->cost[gb];
      s->load[from] += s->g->cost[gb];
      s->cnt[to]--;
      s->cnt[from]++;
    }
  }
  /* Sums recomputed from scratch: the same loads however the search went. */
  set_loads(s);
}

/* LPT heap order: load, then group count, then rank number. */
static bool lpt_before(const void *arg, uint32_t x, uint32_t y) {
  const search_t *s = arg;
  if (s->load[x] != s->load[y])
    return s->load[x] < s->load[y];
  if (s->cnt[x] != s->cnt[y])
    return s->cnt[x] < s->cnt[y];
  return x < y;
}

/* LPT over g->order; with equal every rank takes ng / dp groups. */
static void lpt_start(search_t *s, uint32_t *heap) {
  uint32_t dp = s->dp, nh = dp, share = s->ng / dp;
  memset(s->load, 0, (size_t)dp * sizeof *s->load);
  memset(s->cnt, 0, (size_t)dp * sizeof *s->cnt);
  for (uint32_t r = 0; r < dp; r++)
    heap[r] = r;
  for (uint32_t i = 0; i < s->ng && nh > 0; i++) {
    uint32_t q = s->g->order[i], r = heap[0];
    s->rank[q] = r;
    s->load[r] += s->g->cost[q];
    s->cnt[r]++;
    if (s->equal && s->cnt[r] == share)
      heap[0] = heap[--nh];
    pk_heap_down(heap, nh, 0, lpt_before, s);
  }
}

/* Free counts: a rank left without a group takes the cheapest group of the
 * rank with the most groups (KK may leave a rank empty on zero costs). */
static void fill_empty(search_t *s) {
  set_loads(s);
  for (uint32_t r = 0; r < s->dp; r++) {
    if (s->cnt[r] > 0)
      continue;
    uint32_t from = 0;
    for (uint32_t x = 1; x < s->dp; x++)
      if (s->cnt[x] > s->cnt[from])
        from = x;
    uint32_t pick = UINT32_MAX;
    for (uint32_t i = s->ng; i-- > 0;)
      if (s->rank[s->g->order[i]] == from) {
        pick = s->g->order[i];
        break;
      }
    s->rank[pick] = r;
    set_loads(s);
  }
}

static bool better(const double *load, const double *best, uint32_t dp) {
  double mx = load[0], mn = load[0], bmx = best[0], bmn = best[0];
  for (uint32_t r = 1; r < dp; r++) {
    mx = PK_MAX(mx, load[r]);
    mn = PK_MIN(mn, load[r]);
    bmx = PK_MAX(bmx, best[r]);
    bmn = PK_MIN(bmn, best[r]);
  }
  return mx < bmx || (mx == bmx && mn > bmn);
}

/* Writes grank[g] for every group. */
static int groups_to_ranks(const pk_ctx_t *ctx, const groups_t *g, uint32_t *grank) {
  uint32_t dp = ctx->cfg->dp, ng = g->ng;
  search_t s = {.dp = dp, .ng = ng, .equal = ctx->cfg->equal_count, .g = g};
  double *best_load = pk_malloc_array(dp, sizeof *best_load);
  uint32_t *heap = pk_malloc_array(dp, sizeof *heap);
  s.rank = pk_malloc_array(ng, sizeof *s.rank);
  s.load = pk_malloc_array(dp, sizeof *s.load);
  s.cnt = pk_malloc_array(dp, sizeof *s.cnt);
  s.lst = pk_malloc_array(ng, sizeof *s.lst);
  s.lstart = pk_malloc_array((size_t)dp + 1, sizeof *s.lstart);
  int rc = PK_ENOMEM;
  if (best_load == NULL || heap == NULL || s.rank == NULL || s.load == NULL || s.cnt == NULL ||
      s.lst == NULL || s.lstart == NULL)
    goto done;
  if ((rc = pk_kk_partition(g->cost, ng, dp, s.equal, s.rank)) != 0) {
    rc = rc == PK_EINVAL ? PK_EINTERNAL : rc; /* Costs are finite and >= 0. */
    goto done;
  }
  if (!s.equal)
    fill_empty(&s);
  set_loads(&s);
  improve(&s);
  memcpy(grank, s.rank, (size_t)ng * sizeof *grank);
  memcpy(best_load, s.load, (size_t)dp * sizeof *best_load);
  lpt_start(&s, heap);
  improve(&s);
  if (better(s.load, best_load, dp))
    memcpy(grank, s.rank, (size_t)ng * sizeof *grank);
  rc = 0;
done:
  free(best_load);
  free(heap);
  free(s.rank);
  free(s.load);
  free(s.cnt);
  free(s.lst);
  free(s.lstart);
  return rc;
}

/* ---- Entry point -------------------------------------------------------- */

int pk_group_assign(const pk_ctx_t *ctx, pk_assign_t *out, char *err, size_t errlen) {
  const pk_cfg_t *cfg = ctx->cfg;
  uint32_t dp = cfg->dp, n = ctx->n;
  groups_t g = {0};
  pk_group_packer_t pk = {0};
  uint32_t *grank = NULL, *items = NULL, *rstart = NULL, *micro = NULL, *ord = NULL, *pos = NULL;
  uint32_t *fill = NULL, *by = NULL;
  int rc;
  if (ctx->groups == NULL)
    return PK_EINTERNAL; /* Validation requires groups. */
  if ((rc = groups_build(ctx, &g)) != 0)
    goto done;
  if (g.ng < dp || (cfg->equal_count && g.ng % dp != 0)) {
    rc = PK_EINTERNAL; /* planner.c splits mini-batches so that they fit. */
    goto done;
  }
  rc = PK_ENOMEM;
  grank = pk_malloc_array(g.ng, sizeof *grank);
  items = pk_malloc_array(n, sizeof *items);
  rstart = pk_calloc((size_t)dp + 2, sizeof *rstart);
  micro = pk_malloc_array(n, sizeof *micro);
  ord = pk_malloc_array(n, sizeof *ord);
  pos = pk_malloc_array(n, sizeof *pos);
  fill = pk_malloc_array(dp, sizeof *fill);
  if (grank == NULL || items == NULL || rstart == NULL || micro == NULL || ord == NULL ||
      pos == NULL || fill == NULL || (rc = pk_group_packer_init(&pk, ctx)) != 0) {
    rc = PK_ENOMEM;
    goto done;
  }
  if (ctx->by_size == NULL) {
    if ((by = pk_malloc_array(n, sizeof *by)) == NULL)
      goto done;
    for (uint32_t k = 0; k < n; k++)
      by[k] = k;
    pk_sort_by_cost_desc(ctx, by, n);
  }
  if ((rc = groups_to_ranks(ctx, &g, grank)) != 0)
    goto done;
  if (pk_stopped(ctx)) {
    rc = PK_ECANCELED;
    goto done;
  }

  /* Each rank's items in item order (items) and by size descending (ord),
   * both at rstart[r] .. rstart[r + 1]; pos: item -> place in items. */
  for (uint32_t q = 0; q < g.ng; q++)
    rstart[grank[q] + 1] += g.start[q + 1] - g.start[q];
  for (uint32_t r = 0; r < dp; r++)
    rstart[r + 1] += rstart[r];
  for (uint32_t q = 0; q < g.ng; q++)
    for (uint32_t i = g.start[q]; i < g.start[q + 1]; i++)
      out->rank[g.item[i]] = grank[q];
  memcpy(fill, rstart, (size_t)dp * sizeof *fill);
  for (uint32_t k = 0; k < n; k++) {
    pos[k] = fill[out->rank[k]]++;
    items[pos[k]] = k;
  }
  memcpy(fill, rstart, (size_t)dp * sizeof *fill);
  for (uint32_t i = 0; i < n; i++) {
    uint32_t k = by != NULL ? by[i] : ctx->by_size[i];
    ord[fill[out->rank[k]]++] = k;
  }
  for (uint32_t k = 0; k < n; k++)
    pos[k] -= rstart[out->rank[k]];
  uint32_t fewest = UINT32_MAX, fewest_rank = 0;
  for (uint32_t r = 0; r < dp; r++)
    if (rstart[r + 1] - rstart[r] < fewest) {
      fewest = rstart[r + 1] - rstart[r];
      fewest_rank = r;
    }

  /* The common count (rule 2). */
  uint32_t target = pk_micro_lower_bound(ctx);
  for (;;) {
    if (target > fewest) {
      rc = pk_fail(err, errlen, PK_EPRECOND,
                   "batching.groups_on_rank: rank %u holds %u sequences (whole groups), fewer "
                   "than the %u micro-batches every rank needs under the token cap, max_seqs, "
                   "min_micro_batches and microbatch_group",
                   fewest_rank, fewest, target);
      goto done;
    }
    uint32_t need = target;
    for (uint32_t r = 0; r < dp; r++) {
      uint32_t s = rstart[r], cnt = rstart[r + 1] - s, got = 0;
      rc = pk_group_pack_rank(&pk, items + s, ord + s, pos, cnt, target, micro + s, &got);
      if (rc == 0 && pk_stopped(ctx))
        rc = PK_ECANCELED; /* Polled per rank: one rank's packing is one pass. */
      if (rc == PK_EPRECOND) {
        rc = pk_fail(err, errlen, PK_EPRECOND,
                     "batching.micro_algo %s cannot fit rank %u's %u sequences under the cap "
                     "(batching.groups_on_rank)",
                     pk_micro_algo_name(cfg->micro_algo), r, cnt);
        goto done;
      }
      if (rc != 0)
        goto done;
      need = PK_MAX(need, got);
    }
    if (need == target)
      break;
    target = (uint32_t)pk_round_up(need, cfg->group);
  }
  /* The peers' micro algorithms keep their own order on every rank. */
  out->columns = cfg->micro_algo == PK_MICRO_AUTO;
  if (out->columns && (rc = pk_group_columns(ctx, items, rstart, micro, target)) != 0)
    goto done;
  for (uint32_t q = 0; q < n; q++) {
    out->micro[items[q]] = micro[q];
    out->pos[items[q]] = items[q];
  }
  out->nmicro = target;
  rc = 0;
done:
  if (rc == PK_ENOMEM)
    pk_fail(err, errlen, rc, "%u sequences: out of memory", n);
  groups_free(&g);
  free(grank);
  free(items);
  free(rstart);
  free(micro);
  free(ord);
  free(pos);
  free(fill);
  free(by);
  pk_group_packer_free(&pk);
  return rc;
}
