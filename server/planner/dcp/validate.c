/* Validation of a dynamic context-parallel request and its effective
 * configuration: every field is checked against named limits before any
 * planning, and every message names the field and its value. */
#include <math.h>
#include <stdlib.h>

#include "dcp.h"

#define DCP_CHECK(cond, ...)                                                                       \
  do {                                                                                             \
    if (!(cond))                                                                                   \
      return pk_fail(err, errlen, PK_EINVAL, __VA_ARGS__);                                         \
  } while (0)

static bool finite_nonneg(double v) {
  return isfinite(v) && v >= 0;
}

static bool is_pow2(uint32_t v) {
  return v != 0 && (v & (v - 1)) == 0;
}

/* The allowed sizes: POW2 lists the powers of two up to the pool and the
 * pool itself (Megatron-Core makes a group of every power of two and one
 * of the whole data-parallel group with context parallelism); ANY lists
 * every size. Both start at min_size. */
static int size_table(dcp_cfg_t *cfg, uint32_t min_size) {
  uint32_t count = 0;
  uint32_t cap = cfg->sizes == PK_DCP_SIZES_ANY ? cfg->pool - min_size + 1 : 18;
  cfg->size = pk_malloc_array(cap, sizeof *cfg->size);
  if (cfg->size == NULL)
    return PK_ENOMEM;
  if (cfg->sizes == PK_DCP_SIZES_ANY) {
    for (uint32_t c = min_size; c <= cfg->pool; c++)
      cfg->size[count++] = c;
  } else {
    for (uint32_t c = 1; c <= cfg->pool; c *= 2)
      if (c >= min_size)
        cfg->size[count++] = c;
    if (!is_pow2(cfg->pool))
      cfg->size[count++] = cfg->pool;
  }
  cfg->nsize = count;
  return 0;
}

int dcp_validate(const pk_dcp_request_t *req, dcp_cfg_t *cfg, char *err, size_t errlen) {
  *cfg = (dcp_cfg_t){0};
  DCP_CHECK(req != NULL, "request: missing");
  DCP_CHECK(req->n > 0 && req->lengths != NULL, "lengths: empty (a plan needs sequences)");
  DCP_CHECK(req->n <= UINT32_MAX / 2, "lengths: %zu sequences is over the limit %u", req->n,
            UINT32_MAX / 2);
  uint32_t cp = req->cp == 0 ? 1 : req->cp;
  uint32_t tp = req->tp == 0 ? 1 : req->tp;
  DCP_CHECK(req->dp >= 1, "parallel.dp: %u (must be >= 1)", req->dp);
  DCP_CHECK(cp <= DCP_MAX_POOL && (uint64_t)req->dp * cp <= DCP_MAX_POOL,
            "parallel.dp x parallel.cp: %u x %u is over the pool limit %u", req->dp, cp,
            DCP_MAX_POOL);
  DCP_CHECK(tp <= DCP_MAX_TP, "parallel.tp: %u is over the limit %u", tp, DCP_MAX_TP);
  DCP_CHECK(req->cp_algo <= PK_CP_ULYSSES, "parallel.cp_algo: %u is not a CP algorithm",
            req->cp_algo);
  DCP_CHECK(req->sizes < PK_DCP_SIZES_COUNT,
            "parallel.dynamic_cp.sizes: %u is not a size rule (0 pow2, 1 any)", req->sizes);
  DCP_CHECK(
      req->algo < PK_DCP_ALGO_COUNT,
      "parallel.dynamic_cp.algo: %u is not an algorithm (0 auto, 1 megatron, 2 megatron_packing)",
      req->algo);
  cfg->pool = req->dp * cp;
  cfg->tp = tp;
  cfg->cp_algo = req->cp_algo;
  cfg->sp = req->sequence_parallel;
  cfg->sizes = req->sizes;
  cfg->algo = req->algo;
  uint32_t min_size = req->min_size == 0 ? 1 : req->min_size;
  DCP_CHECK(min_size <= cfg->pool,
            "parallel.dynamic_cp.min_size: %u is larger than the pool of %u GPUs", min_size,
            cfg->pool);
  DCP_CHECK(cfg->sizes == PK_DCP_SIZES_ANY || is_pow2(min_size) || min_size == cfg->pool,
            "parallel.dynamic_cp.min_size: %u is not a power of two (sizes pow2)", min_size);
  DCP_CHECK(req->max_tokens >= 1, "batching.max_tokens: 0 (dynamic CP needs the per-GPU cap)");
  DCP_CHECK(req->max_tokens <= DCP_MAX_TOKENS, "batching.max_tokens: %llu is over the limit %llu",
            (unsigned long long)req->max_tokens, (unsigned long long)DCP_MAX_TOKENS);
  cfg->cap = req->max_tokens;
  cfg->max_seqs = req->max_seqs == 0 ? UINT32_MAX : req->max_seqs;
  const pk_cost_model_t *c = &req->cost.base;
  DCP_CHECK(finite_nonneg(c->linear), "cost.linear: %g (must be finite and >= 0)", c->linear);
  DCP_CHECK(finite_nonneg(c->quadratic), "cost.quadratic: %g (must be finite and >= 0)",
            c->quadratic);
  DCP_CHECK(finite_nonneg(c->per_sequence), "cost.per_sequence: %g (must be finite and >= 0)",
            c->per_sequence);
  DCP_CHECK(finite_nonneg(c->per_micro_batch), "cost.per_micro_batch: %g (must be finite and >= 0)",
            c->per_micro_batch);
  DCP_CHECK(finite_nonneg(req->cost.cp_token), "cost.cp_token: %g (must be finite and >= 0)",
            req->cost.cp_token);
  DCP_CHECK(finite_nonneg(req->cost.cp_group), "cost.cp_group: %g (must be finite and >= 0)",
            req->cost.cp_group);
  bool none = c->linear == 0 && c->quadratic == 0;
  cfg->base.lin = none ? 1.0 : c->linear;
  cfg->base.quad = none ? 1.0 / 24576.0 : c->quadratic;
  cfg->base.seq = c->per_sequence;
  cfg->base.micro = c->per_micro_batch;
  cfg->base.cap = UINT64_MAX;
  cfg->base.max_seqs = UINT32_MAX;
  cfg->cp_token = req->cost.cp_token;
  cfg->cp_group = req->cost.cp_group;
  for (size_t i = 0; i < req->n; i++)
    DCP_CHECK(req->lengths[i] >= 1, "lengths[%zu]: 0 (a dynamic-CP sequence needs a token)", i);
  if (size_table(cfg, min_size) != 0)
    return pk_fail(err, errlen, PK_ENOMEM, "parallel.dynamic_cp: out of memory");
  return 0;
}

void dcp_cfg_free(dcp_cfg_t *cfg) {
  free(cfg->size);
  cfg->size = NULL;
}

uint32_t dcp_size_index(const dcp_cfg_t *cfg, uint32_t c) {
  uint32_t lo = 0, hi = cfg->nsize;
  while (lo < hi) {
    uint32_t mid = lo + (hi - lo) / 2;
    if (cfg->size[mid] < c)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < cfg->nsize && cfg->size[lo] == c ? lo : UINT32_MAX;
}

int dcp_items_init(const dcp_cfg_t *cfg, const uint32_t *len, uint32_t n, dcp_items_t *it,
                   char *err, size_t errlen) {
  it->n = n;
  it->len = len;
  it->kmin = pk_malloc_array(n, sizeof *it->kmin);
  if (it->kmin == NULL)
    return pk_fail(err, errlen, PK_ENOMEM, "lengths: out of memory for %u sequences", n);
  for (uint32_t i = 0; i < n; i++) {
    /* A group of c holds at most c x cap aligned tokens, so no size below
     * len / cap can take the sequence: start the scan there. */
    uint64_t need = (len[i] + cfg->cap - 1) / cfg->cap;
    uint32_t k = 0;
    while (k < cfg->nsize && cfg->size[k] < need)
      k++;
    while (k < cfg->nsize && dcp_aligned(cfg, cfg->size[k], len[i]) > cfg->size[k] * cfg->cap)
      k++;
    if (k == cfg->nsize) {
      uint32_t c = cfg->size[cfg->nsize - 1];
      return pk_fail(err, errlen, PK_EPRECOND,
                     "lengths[%u]: %u tokens (%llu after alignment to %llu) fit in no allowed "
                     "group: the largest, %u GPUs, holds %llu at batching.max_tokens %llu per GPU",
                     i, len[i], (unsigned long long)dcp_aligned(cfg, c, len[i]),
                     (unsigned long long)dcp_align(cfg, c), c, (unsigned long long)(c * cfg->cap),
                     (unsigned long long)cfg->cap);
    }
    it->kmin[i] = k;
  }
  return 0;
}

void dcp_items_free(dcp_items_t *it) {
  free(it->kmin);
  it->kmin = NULL;
}
