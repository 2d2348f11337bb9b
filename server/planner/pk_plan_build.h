/* Building a pk_plan_t from per mini-batch assignments (layout.c): ordering
 * of micro-batches, packed layouts (cu_seqlens, cu_seqlens_padded,
 * total_multiple, fixed_shape), loss scales and stats. Internal. */
#ifndef PK_PLAN_BUILD_H
#define PK_PLAN_BUILD_H

#include "pk_internal.h"

/* One micro-batch while the plan is being built. */
typedef struct pk_rec {
  uint32_t seq_off; /* Into pk_build_t.seqs. */
  uint32_t nseqs;
  uint32_t width;   /* PADDED row width; 0 otherwise. */
  double base_cost; /* Cost before total_multiple / fixed_shape padding. */
} pk_rec_t;

typedef struct pk_build {
  const pk_request_t *req;
  const pk_cfg_t *cfg;
  uint32_t nb;       /* Mini-batches added so far. */
  uint32_t *mini_m;  /* Micro-batches per rank, per mini-batch. */
  uint32_t *mini_lb; /* Lower bound on it, per mini-batch. */
  size_t *mini_off;  /* First record of each mini-batch (rank-major inside). */
  double step_lb;    /* Sum over mini-batches of the step-cost lower bound. */
  pk_rec_t *recs;
  size_t nrecs, caprecs;
  uint32_t *seqs; /* Sequence indices, n in all. */
  uint32_t nseqs;
  uint32_t *scratch;   /* n entries. */
  uint32_t *bin_count; /* Grows with dp * M. */
  size_t bin_cap;
  /* The caller's stop condition, or NULL; pk_build_finish polls it while
   * it lays out micro-batches and returns PK_ECANCELED with nothing kept. */
  const pk_limits_t *limits;
} pk_build_t;

int pk_build_init(pk_build_t *b, const pk_request_t *req, const pk_cfg_t *cfg);
/* Adds one mini-batch. lb is its micro-batch lower bound per rank. Returns
 * PK_ECANCELED when ctx's stop condition holds after the step-cost bound
 * (its one costly part). */
int pk_build_add_mini_batch(pk_build_t *b, const pk_ctx_t *ctx, const pk_assign_t *a, uint32_t lb);
/* Lays out every micro-batch and computes stats. On success *out owns all
 * memory (pk_plan_free). */
int pk_build_finish(pk_build_t *b, pk_plan_t **out, char *err, size_t errlen);
void pk_build_cleanup(pk_build_t *b);

#endif
