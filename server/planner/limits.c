/* Early refusal of oversized requests: the caller's limits (pk_limits_t) and
 * an estimate of the encoded plan size, both checked after validation and
 * before any planning, in O(n) time and without allocation.
 *
 * The estimate counts the PlanResponse of proto/packd/v1/packd.proto field
 * by field. Every sequence appears once in some micro-batch's `seqs` (its
 * index, a permutation of 0..n-1, so the index varints sum exactly), and
 * adds one entry to `cu_seqlens` and to `cu_seqlens_padded`, each at most
 * the varint of the largest micro-batch footprint (the token cap, else the
 * whole batch, both at most INT32_MAX). Micro-batches are counted at a lower
 * bound of their number (min_micro_batches, microbatch_group, the token cap
 * and max_seqs pooled over the batch), each with its wrapper, headers and
 * scalars at their largest encoding; ranks and mini-batches likewise. */
#include <inttypes.h>

#include "pk_internal.h"

/* Largest encodings, in bytes: a tag is 1 byte for the field numbers used
 * here, a length or uint32 varint at most 5, a uint64 varint 10, a double 8. */
#define EST_LEN 5u
#define EST_U32 5u
#define EST_U64 10u
#define EST_DOUBLE 8u
#define EST_PLAN_ID 40u      /* plan_id characters (32 hex today). */
#define EST_STATS_FIELDS 24u /* PlanStats has 19; room for a few more. */

/* MicroBatch: its wrapper in MiniBatch, the three packed fields' headers and
 * leading zeros, and six scalars. */
#define EST_MICRO                                                                                  \
  ((1 + EST_LEN) + 3 * (1 + EST_LEN) + 2 + 2 * (1 + EST_U32) + 2 * (1 + EST_U64) +                 \
   2 * (1 + EST_DOUBLE))
/* RankPlan: its wrapper, dp_rank and plan_id. */
#define EST_RANK ((1 + EST_LEN) + (1 + EST_U32) + (1 + 1 + EST_PLAN_ID))
/* MiniBatch wrapper, per (rank, mini-batch). */
#define EST_CELL (1 + EST_LEN)
/* PlanResponse: plan_id and stats. */
#define EST_FIXED ((1 + 1 + EST_PLAN_ID) + (1 + EST_LEN) + EST_STATS_FIELDS * (1 + EST_U64))

static uint32_t varint_size(uint64_t v) {
  uint32_t s = 1;
  while (v >= 0x80) {
    v >>= 7;
    s++;
  }
  return s;
}

/* Sum of varint_size(i) for i in 0..n-1, in closed form per byte width. */
static uint64_t index_varints(uint64_t n) {
  uint64_t total = 0, lo = 0;
  for (uint32_t w = 1; lo < n; w++) {
    uint64_t hi = w >= 10 ? UINT64_MAX : (1ull << (7 * w)); /* first value of width w+1 */
    uint64_t top = hi < n ? hi : n;
    total += (top - lo) * w;
    lo = top;
  }
  return total;
}

/* A lower bound on the micro-batches of the whole plan, over all ranks and
 * mini-batches; *size_sum receives the sum of the item footprints. */
static uint64_t micro_lower_bound(const pk_request_t *req, const pk_cfg_t *cfg,
                                  uint64_t *size_sum) {
  uint64_t dp = cfg->dp, nb = cfg->mini_batches, n = req->n;
  uint64_t sum = 0;
  for (size_t i = 0; i < req->n; i++)
    sum += pk_item_size(cfg, req->lengths[i]);
  *size_sum = sum;
  /* Per rank and mini-batch at least min_micro_batches, a multiple of the
   * group; every rank has the same count. */
  uint64_t per_rank = nb * pk_round_up(cfg->min_micro, cfg->group);
  if (cfg->mode == PK_MODE_FIXED && cfg->micro_batch_size > 0)
    per_rank = PK_MAX(per_rank, n / (dp * cfg->micro_batch_size));
  /* Pooled: the cap bounds each micro-batch's footprint (PADDED rows x
   * width >= the sum of the widths), max_seqs its count. */
  uint64_t pooled = 0;
  if (cfg->cap != UINT64_MAX)
    pooled = (sum + cfg->cap - 1) / cfg->cap;
  if (cfg->max_seqs != UINT32_MAX)
    pooled = PK_MAX(pooled, (n + cfg->max_seqs - 1) / cfg->max_seqs);
  per_rank = PK_MAX(per_rank, (pooled + dp - 1) / dp);
  return per_rank * dp;
}

uint64_t pk_estimate_plan_bytes(const pk_request_t *req, const pk_cfg_t *cfg) {
  uint64_t sum;
  uint64_t micros = micro_lower_bound(req, cfg, &sum);
  /* The largest cu_seqlens_padded entry: a micro-batch's footprint. */
  uint64_t widest = cfg->cap != UINT64_MAX ? cfg->cap : sum;
  if (widest > (uint64_t)INT32_MAX)
    widest = INT32_MAX;
  uint64_t per_seq_cu = 2ull * varint_size(widest);
  uint64_t cells = (uint64_t)cfg->dp * cfg->mini_batches;
  /* Headers at their largest encoding also cover micro-batches beyond the
   * cheap bound (PADDED rows, where the exact grouping needs a sort). */
  return EST_FIXED + (uint64_t)cfg->dp * EST_RANK + cells * EST_CELL + index_varints(req->n) +
         (uint64_t)req->n * per_seq_cu + micros * EST_MICRO;
}

int pk_check_limits(const pk_request_t *req, const pk_cfg_t *cfg, const pk_limits_t *limits,
                    char *err, size_t errlen) {
  if (limits == NULL)
    return 0;
  if (limits->max_sequences != 0 && req->n > limits->max_sequences)
    return pk_fail(err, errlen, PK_ENOMEM,
                   "lengths: %zu sequences are over the limit max_sequences = %" PRIu64, req->n,
                   limits->max_sequences);
  if (limits->max_plan_bytes == 0 || cfg == NULL)
    return 0;
  uint64_t est = pk_estimate_plan_bytes(req, cfg);
  if (est > limits->max_plan_bytes)
    return pk_fail(err, errlen, PK_ENOMEM,
                   "lengths: the plan for %zu sequences over parallel.dp %" PRIu32
                   " ranks is estimated at %" PRIu64
                   " bytes, over the limit max_plan_bytes = %" PRIu64,
                   req->n, cfg->dp, est, limits->max_plan_bytes);
  return 0;
}

uint64_t pk_plan_size_estimate(const pk_request_t *req) {
  pk_cfg_t cfg;
  char err[8];
  if (pk_validate(req, &cfg, err, sizeof err) != 0)
    return 0;
  return pk_estimate_plan_bytes(req, &cfg);
}
