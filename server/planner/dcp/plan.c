/* pk_dcp_plan: validation, the per-sequence facts, the algorithm, and the
 * plan built from its assignment (groups sorted by slot and first GPU,
 * each group's stream in sequence-index order, its cu_seqlens, costs and
 * the stats). */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dcp.h"

typedef struct dcp_storage {
  pk_dcp_group_t *groups;
  uint32_t *gpu_group;
  uint32_t *seqs;
  int32_t *cu, *cu_pad;
} dcp_storage_t;

static uint64_t now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static bool group_before(const void *arg, uint32_t x, uint32_t y) {
  const dcp_assign_t *a = arg;
  if (a->slot[x] != a->slot[y])
    return a->slot[x] < a->slot[y];
  return a->first[x] < a->first[y];
}

void pk_dcp_plan_free(pk_dcp_plan_t *plan) {
  if (plan == NULL)
    return;
  dcp_storage_t *st = plan->storage_;
  if (st != NULL) {
    free(st->groups);
    free(st->gpu_group);
    free(st->seqs);
    free(st->cu);
    free(st->cu_pad);
    free(st);
  }
  free(plan);
}

int dcp_build(const pk_dcp_request_t *req, const dcp_cfg_t *cfg, const dcp_items_t *it,
              const dcp_assign_t *a, pk_dcp_plan_t **out, char *err, size_t errlen) {
  (void)req;
  uint32_t n = it->n, ng = a->ngroups, pool = cfg->pool;
  if ((uint64_t)a->slots * pool > DCP_MAX_GPU_SLOTS)
    return pk_fail(err, errlen, PK_ELIMIT,
                   "parallel.dp x parallel.cp: the plan needs %u slots x %u GPUs = %llu GPU-slots, "
                   "over the limit of %llu",
                   a->slots, pool, (unsigned long long)a->slots * pool,
                   (unsigned long long)DCP_MAX_GPU_SLOTS);
  pk_dcp_plan_t *plan = calloc(1, sizeof *plan);
  dcp_storage_t *st = calloc(1, sizeof *st);
  uint32_t *order = pk_malloc_array(ng, sizeof *order);
  uint32_t *tmp = pk_malloc_array(ng, sizeof *tmp);
  uint32_t *rank = pk_malloc_array(ng, sizeof *rank);
  uint32_t *fill = pk_calloc((size_t)ng + 1, sizeof *fill);
  int rc = 0;
  if (plan == NULL || st == NULL || order == NULL || tmp == NULL || rank == NULL || fill == NULL) {
    free(st);
    st = NULL;
    rc = PK_ENOMEM;
    goto done;
  }
  plan->storage_ = st;
  st->groups = pk_malloc_array(ng, sizeof *st->groups); /* Each set whole below. */
  st->gpu_group = pk_malloc_array((size_t)a->slots * pool, sizeof *st->gpu_group);
  st->seqs = pk_malloc_array(n, sizeof *st->seqs);
  st->cu = pk_malloc_array((size_t)n + ng, sizeof *st->cu);
  st->cu_pad = pk_malloc_array((size_t)n + ng, sizeof *st->cu_pad);
  if (st->groups == NULL || st->gpu_group == NULL || st->seqs == NULL || st->cu == NULL ||
      st->cu_pad == NULL) {
    rc = PK_ENOMEM;
    goto done;
  }
  /* Groups by slot and first GPU: each group marks its first GPU-slot and
   * a scan reads them in order (a linear pass over an array the plan fills
   * anyway); groups that share a first GPU-slot are sorted instead. */
  for (size_t x = 0; x < (size_t)a->slots * pool; x++)
    st->gpu_group[x] = UINT32_MAX;
  for (uint32_t q = 0; q < ng; q++)
    st->gpu_group[(size_t)a->slot[q] * pool + a->first[q]] = q;
  uint32_t seen = 0;
  for (size_t x = 0; x < (size_t)a->slots * pool && seen < ng; x++)
    if (st->gpu_group[x] != UINT32_MAX)
      order[seen++] = st->gpu_group[x];
  if (seen != ng) {
    for (uint32_t q = 0; q < ng; q++)
      order[q] = q;
    pk_merge_sort_u32(order, tmp, ng, group_before, a);
  }
  for (uint32_t r = 0; r < ng; r++)
    rank[order[r]] = r;
  /* Members per group (counting sort by group rank, sequence order kept). */
  for (uint32_t i = 0; i < n; i++)
    fill[rank[a->seq_group[i]] + 1]++;
  for (uint32_t r = 0; r < ng; r++)
    fill[r + 1] += fill[r];
  pk_dcp_stats_t *stats = &plan->stats;
  for (uint32_t r = 0; r < ng; r++) {
    uint32_t q = order[r];
    pk_dcp_group_t *g = &st->groups[r];
    *g = (pk_dcp_group_t){.slot = a->slot[q],
                          .first = a->first[q],
                          .size = cfg->size[a->gk[q]],
                          .align = (uint32_t)dcp_align(cfg, cfg->size[a->gk[q]]),
                          .seqs = st->seqs + fill[r],
                          .cu_seqlens = st->cu + fill[r] + r,
                          .cu_seqlens_padded = st->cu_pad + fill[r] + r};
    st->cu[fill[r] + r] = 0;
    st->cu_pad[fill[r] + r] = 0;
    for (uint32_t x = 0; x < g->size; x++)
      st->gpu_group[(size_t)g->slot * pool + g->first + x] = r;
  }
  for (uint32_t i = 0; i < n; i++) {
    uint32_t r = rank[a->seq_group[i]];
    pk_dcp_group_t *g = &st->groups[r];
    uint32_t at = (uint32_t)(g->seqs - st->seqs) + g->nseqs;
    uint64_t al = dcp_aligned(cfg, g->size, it->len[i]);
    uint64_t pad = g->padded_tokens + al;
    if (pad > INT32_MAX) {
      rc = pk_fail(err, errlen, PK_EPRECOND,
                   "batching.max_tokens: a group stream of %llu tokens does not fit int32 "
                   "cu_seqlens; lower the cap",
                   (unsigned long long)pad);
      goto done;
    }
    st->seqs[at] = i;
    g->nseqs++;
    g->tokens += it->len[i];
    g->padded_tokens = pad;
    st->cu[at + r + 1] = (int32_t)g->tokens;
    st->cu_pad[at + r + 1] = (int32_t)pad;
    g->cost += dcp_seq_cost(cfg, g->size, al);
  }
  double step = 0, work = 0;
  for (uint32_t r = 0; r < ng; r++) {
    pk_dcp_group_t *g = &st->groups[r];
    g->cost += dcp_group_base(cfg, g->size);
    uint64_t per_gpu = g->padded_tokens / g->size;
    stats->max_gpu_tokens = PK_MAX(stats->max_gpu_tokens, per_gpu);
    if (g->padded_tokens > (uint64_t)g->size * cfg->cap || g->nseqs > cfg->max_seqs)
      stats->cap_violations++;
    work += g->cost * g->size;
  }
  for (uint32_t j = 0, r = 0; j < a->slots; j++) {
    double mx = 0;
    for (; r < ng && st->groups[r].slot == j; r++)
      mx = fmax(mx, st->groups[r].cost);
    step += mx;
  }
  for (size_t x = 0; x < (size_t)a->slots * pool; x++)
    stats->idle_gpu_slots += st->gpu_group[x] == UINT32_MAX;
  plan->pool = pool;
  plan->slots = a->slots;
  plan->ngroups = ng;
  plan->groups = st->groups;
  plan->gpu_group = st->gpu_group;
  stats->sequences = n;
  stats->pool = pool;
  stats->slots = a->slots;
  stats->groups = ng;
  stats->slots_lower_bound = dcp_slots_lower_bound(cfg, it);
  stats->step_cost = step;
  stats->step_cost_lower_bound = dcp_step_lower_bound(cfg, it, stats->slots_lower_bound);
  stats->work = work;
  stats->efficiency = step > 0 ? work / pool / step : 1;
done:
  free(order);
  free(tmp);
  free(rank);
  free(fill);
  if (rc != 0) {
    pk_dcp_plan_free(plan);
    plan = NULL;
  }
  *out = plan;
  return rc;
}

/* The algorithms by pk_dcp_algo_t (validation keeps cfg.algo in range). */
static const dcp_algo_fn algos[PK_DCP_ALGO_COUNT] = {dcp_auto, dcp_megatron, dcp_megatron_packing};

int pk_dcp_plan(const pk_dcp_request_t *req, const pk_limits_t *limits, pk_dcp_plan_t **out,
                char *err, size_t errlen) {
  uint64_t t0 = now_us();
  if (err != NULL && errlen > 0)
    err[0] = '\0';
  if (out == NULL)
    return pk_fail(err, errlen, PK_EINVAL, "out: missing");
  *out = NULL;
  if (req != NULL && limits != NULL && limits->max_sequences != 0 && req->n > limits->max_sequences)
    return pk_fail(err, errlen, PK_ELIMIT, "lengths: %zu sequences is over the limit of %llu",
                   req->n, (unsigned long long)limits->max_sequences);
  dcp_cfg_t cfg;
  dcp_items_t it = {0};
  dcp_assign_t a = {0};
  int rc = dcp_validate(req, &cfg, err, errlen);
  if (rc != 0)
    goto done;
  rc = dcp_items_init(&cfg, req->lengths, (uint32_t)req->n, &it, err, errlen);
  if (rc != 0)
    goto done;
  rc = dcp_assign_init(&a, it.n, 64);
  if (rc != 0) {
    pk_fail(err, errlen, rc, "lengths: out of memory for %u sequences", it.n);
    goto done;
  }
  rc = algos[cfg.algo](&cfg, &it, limits, &a, err, errlen);
  if (rc != 0)
    goto done;
  rc = dcp_build(req, &cfg, &it, &a, out, err, errlen);
  if (rc == 0)
    (*out)->stats.plan_time_us = now_us() - t0;
done:
  dcp_assign_free(&a);
  dcp_items_free(&it);
  dcp_cfg_free(&cfg);
  return rc;
}

double pk_dcp_group_cost(const pk_dcp_request_t *req, uint32_t size, const uint32_t *seqs,
                         uint32_t nseqs, uint64_t *gpu_tokens) {
  dcp_cfg_t cfg;
  if (dcp_validate(req, &cfg, NULL, 0) != 0)
    return -1;
  double cost = -1;
  if (size >= 1 && size <= cfg.pool) {
    cost = dcp_group_base(&cfg, size);
    uint64_t tokens = 0;
    for (uint32_t x = 0; x < nseqs && cost >= 0; x++) {
      if (seqs[x] >= req->n) {
        cost = -1;
        break;
      }
      uint64_t al = dcp_aligned(&cfg, size, req->lengths[seqs[x]]);
      tokens += al;
      cost += dcp_seq_cost(&cfg, size, al);
    }
    if (gpu_tokens != NULL)
      *gpu_tokens = tokens / size;
  }
  dcp_cfg_free(&cfg);
  return cost;
}

double pk_dcp_step_lower_bound(const pk_dcp_request_t *req, uint32_t *slots_lower_bound) {
  dcp_cfg_t cfg;
  dcp_items_t it = {0};
  double bound = -1;
  if (dcp_validate(req, &cfg, NULL, 0) != 0)
    return -1;
  if (dcp_items_init(&cfg, req->lengths, (uint32_t)req->n, &it, NULL, 0) == 0) {
    uint32_t m = dcp_slots_lower_bound(&cfg, &it);
    bound = dcp_step_lower_bound(&cfg, &it, m);
    if (slots_lower_bound != NULL)
      *slots_lower_bound = m;
  }
  dcp_items_free(&it);
  dcp_cfg_free(&cfg);
  return bound;
}

static const char *const sizes_names[PK_DCP_SIZES_COUNT] = {"pow2", "any"};
static const char *const algo_names[PK_DCP_ALGO_COUNT] = {"auto", "megatron", "megatron_packing"};

const char *pk_dcp_sizes_name(uint32_t v) {
  return v < PK_DCP_SIZES_COUNT ? sizes_names[v] : NULL;
}

const char *pk_dcp_algo_name(uint32_t v) {
  return v < PK_DCP_ALGO_COUNT ? algo_names[v] : NULL;
}

static int parse(const char *const *names, uint32_t count, const char *s, uint32_t *value) {
  for (uint32_t v = 0; s != NULL && v < count; v++)
    if (strcmp(names[v], s) == 0) {
      *value = v;
      return 0;
    }
  return PK_EINVAL;
}

int pk_dcp_sizes_parse(const char *s, uint32_t *value) {
  return parse(sizes_names, PK_DCP_SIZES_COUNT, s, value);
}

int pk_dcp_algo_parse(const char *s, uint32_t *value) {
  return parse(algo_names, PK_DCP_ALGO_COUNT, s, value);
}
