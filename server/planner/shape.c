/* The caller's limits (pk_limits_t) and the plan's shape they are judged
 * by, both before any planning, in O(n) time and without allocation: the
 * sequence count before validation, then the caller's admission check on
 * the validated request's shape. The planner knows no wire sizes: the codec
 * turns a shape into an estimate of the encoded plan (codec_pack.c). */
#include <inttypes.h>

#include "pk_internal.h"

void pk_shape_of(const pk_request_t *req, const pk_cfg_t *cfg, pk_plan_shape_t *shape) {
  uint64_t dp = cfg->dp, nb = cfg->mini_batches, n = req->n;
  uint64_t sum = 0;
  for (size_t i = 0; i < req->n; i++)
    sum += pk_item_size(cfg, req->lengths[i]);
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
  *shape = (pk_plan_shape_t){.sequences = n,
                             .dp = cfg->dp,
                             .mini_batches = cfg->mini_batches,
                             .micro_batches = per_rank * dp,
                             .largest_micro = cfg->cap != UINT64_MAX ? cfg->cap : sum};
}

int pk_plan_shape(const pk_request_t *req, pk_plan_shape_t *shape, char *err, size_t errlen) {
  pk_cfg_t cfg;
  int rc = pk_validate(req, &cfg, err, errlen);
  if (rc == 0)
    pk_shape_of(req, &cfg, shape);
  return rc;
}

int pk_limit_count(const pk_request_t *req, const pk_limits_t *limits, char *err, size_t errlen) {
  if (limits != NULL && limits->max_sequences != 0 && req->n > limits->max_sequences)
    return pk_fail(err, errlen, PK_ELIMIT,
                   "lengths: %zu sequences are over the limit max_sequences = %" PRIu64, req->n,
                   limits->max_sequences);
  return 0;
}

int pk_limit_admit(const pk_request_t *req, const pk_cfg_t *cfg, const pk_limits_t *limits,
                   char *err, size_t errlen) {
  if (limits == NULL || limits->admit == NULL)
    return 0;
  pk_plan_shape_t shape;
  pk_shape_of(req, cfg, &shape);
  return limits->admit(limits->admit_arg, &shape, err, errlen);
}
