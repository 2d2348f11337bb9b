/* The codec of dynamic context-parallel plans (codec_dcp.h). The response
 * is built over the plan's own arrays (protobuf-c only reads them while
 * packing) plus one buffer for the local offsets, packed once, and freed:
 * nothing of it outlives this call. */
#include "codec_dcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_check.h"

#define DCP_REFUSE(cond, ...)                                                                      \
  do {                                                                                             \
    if (cond) {                                                                                    \
      if (err != NULL && errlen > 0)                                                               \
        snprintf(err, errlen, __VA_ARGS__);                                                        \
      return PK_EINVAL;                                                                            \
    }                                                                                              \
  } while (0)

int pk_codec_dcp_request(const Packd__V1__PlanRequest *msg, pk_dcp_request_t *req, char *err,
                         size_t errlen) {
  memset(req, 0, sizeof *req);
  const Packd__V1__Parallel *p = msg->parallel;
  const Packd__V1__DynamicCp *d = p->dynamic_cp;
  const Packd__V1__Batching *b = msg->batching;
  const Packd__V1__Layout *l = msg->layout;
  const char *why = "with parallel.dynamic_cp";
  DCP_REFUSE(p->pp > 1,
             "parallel.pp: %u is not supported %s (Megatron-Core runs it without "
             "pipeline stages)",
             p->pp, why);
  DCP_REFUSE(p->vpp > 1, "parallel.vpp: %u is not supported %s", p->vpp, why);
  if (b != NULL) {
    DCP_REFUSE(b->mode != PACKD__V1__MODE__MODE_PACKED,
               "batching.mode: %d is not supported %s (packed streams only)", (int)b->mode, why);
    DCP_REFUSE(b->mini_batches > 1, "batching.mini_batches: %u is not supported %s",
               b->mini_batches, why);
    DCP_REFUSE(b->keep_groups || b->groups_on_rank,
               "batching.keep_groups / groups_on_rank: not supported %s", why);
    DCP_REFUSE(b->micro_batch_size != 0, "batching.micro_batch_size: %u is not supported %s",
               b->micro_batch_size, why);
  }
  if (l != NULL) {
    DCP_REFUSE(l->align > 1 || l->pad_multiple > 1 || l->total_multiple > 1 || l->fixed_shape,
               "layout: align %u, pad_multiple %u, total_multiple %u, fixed_shape %d are not "
               "supported %s (group alignments follow the group sizes)",
               l->align, l->pad_multiple, l->total_multiple, (int)l->fixed_shape, why);
  }
  DCP_REFUSE(msg->n_loss_tokens != 0 && msg->n_loss_tokens != msg->n_lengths,
             "loss_tokens: %zu entries for %zu lengths", msg->n_loss_tokens, msg->n_lengths);
  req->lengths = msg->lengths;
  req->n = msg->n_lengths;
  req->dp = p->dp;
  req->cp = p->cp;
  req->tp = p->tp;
  req->cp_algo = (uint32_t)p->cp_algo;
  req->sequence_parallel = p->sequence_parallel;
  req->sizes = (uint32_t)d->sizes;
  req->min_size = d->min_size;
  req->algo = (uint32_t)d->algo;
  if (b != NULL) {
    req->max_tokens = b->max_tokens;
    req->max_seqs = b->max_seqs;
  }
  if (msg->cost != NULL) {
    req->cost.base.linear = msg->cost->linear;
    req->cost.base.quadratic = msg->cost->quadratic;
    req->cost.base.per_sequence = msg->cost->per_sequence;
    req->cost.base.per_micro_batch = msg->cost->per_micro_batch;
    req->cost.cp_token = msg->cost->cp_token;
    req->cost.cp_group = msg->cost->cp_group;
  }
  return PK_OK;
}

int pk_codec_pack_dcp_plan(const pk_dcp_plan_t *plan, const char *plan_id, int64_t max_bytes,
                           pk_packed_plan_t *out) {
  *out = (pk_packed_plan_t){0};
  uint32_t pool = plan->pool, ns = plan->slots, ng = plan->ngroups;
  size_t ncu = 0;
  for (uint32_t r = 0; r < ng; r++)
    ncu += plan->groups[r].nseqs + 1;
  Packd__V1__DcpSlot *slots = calloc(ns ? ns : 1, sizeof *slots);
  Packd__V1__DcpSlot **slot_ptr = calloc(ns ? ns : 1, sizeof *slot_ptr);
  Packd__V1__DcpGroup *groups = calloc(ng ? ng : 1, sizeof *groups);
  Packd__V1__DcpGroup **group_ptr = calloc(ng ? ng : 1, sizeof *group_ptr);
  size_t ngpu = (size_t)ns * pool > 0 ? (size_t)ns * pool : 1;
  Packd__V1__DcpGpu *gpus = calloc(ngpu, sizeof *gpus);
  Packd__V1__DcpGpu **gpu_ptr = calloc(ngpu, sizeof *gpu_ptr);
  int32_t *local = malloc((ncu ? ncu : 1) * sizeof *local);
  uint32_t *first_group = calloc((size_t)ns + 1, sizeof *first_group);
  int rc = PK_OK;
  PK_CODEC_CHECK(slots != NULL && slot_ptr != NULL && groups != NULL && group_ptr != NULL &&
                     gpus != NULL && gpu_ptr != NULL && local != NULL && first_group != NULL,
                 PK_ENOMEM);
  /* Groups are sorted by slot: the first group of each slot. */
  for (uint32_t r = 0; r < ng; r++)
    first_group[plan->groups[r].slot + 1]++;
  for (uint32_t j = 0; j < ns; j++)
    first_group[j + 1] += first_group[j];
  size_t at = 0;
  for (uint32_t r = 0; r < ng; r++) {
    const pk_dcp_group_t *g = &plan->groups[r];
    Packd__V1__DcpGroup *m = &groups[r];
    packd__v1__dcp_group__init(m);
    m->first_gpu = g->first;
    m->size = g->size;
    m->n_seqs = g->nseqs;
    m->seqs = (uint32_t *)g->seqs;
    m->n_cu_seqlens = m->n_cu_seqlens_padded = g->nseqs + 1;
    m->cu_seqlens = (int32_t *)g->cu_seqlens;
    m->cu_seqlens_padded = (int32_t *)g->cu_seqlens_padded;
    m->align = g->align;
    m->n_local_cu_seqlens_padded = g->nseqs + 1;
    m->local_cu_seqlens_padded = local + at;
    for (uint32_t k = 0; k <= g->nseqs; k++)
      local[at++] = g->cu_seqlens_padded[k] / (int32_t)g->size;
    m->tokens = g->tokens;
    m->padded_tokens = g->padded_tokens;
    m->cost = g->cost;
    group_ptr[r] = m;
  }
  for (uint32_t j = 0; j < ns; j++) {
    Packd__V1__DcpSlot *s = &slots[j];
    packd__v1__dcp_slot__init(s);
    s->n_groups = first_group[j + 1] - first_group[j];
    s->groups = group_ptr + first_group[j];
    s->n_gpus = pool;
    s->gpus = gpu_ptr + (size_t)j * pool;
    for (uint32_t r = first_group[j]; r < first_group[j + 1]; r++)
      s->cost = s->cost > plan->groups[r].cost ? s->cost : plan->groups[r].cost;
    for (uint32_t x = 0; x < pool; x++) {
      Packd__V1__DcpGpu *u = &gpus[(size_t)j * pool + x];
      packd__v1__dcp_gpu__init(u);
      uint32_t r = plan->gpu_group[(size_t)j * pool + x];
      if (r != UINT32_MAX) {
        const pk_dcp_group_t *g = &plan->groups[r];
        u->group = r - first_group[j];
        u->size = g->size;
        u->rank_in_group = x - g->first;
        u->shard_tokens = g->padded_tokens / g->size;
      } else {
        u->group = UINT32_MAX; /* Idle: in no group (the plan counts these). */
      }
      gpu_ptr[(size_t)j * pool + x] = u;
    }
    slot_ptr[j] = s;
  }
  Packd__V1__DynamicCpPlan dp = PACKD__V1__DYNAMIC_CP_PLAN__INIT;
  dp.pool = pool;
  dp.n_slots = ns;
  dp.slots = slot_ptr;
  dp.slots_lower_bound = plan->stats.slots_lower_bound;
  dp.step_cost = plan->stats.step_cost;
  dp.step_cost_lower_bound = plan->stats.step_cost_lower_bound;
  dp.efficiency = plan->stats.efficiency;
  dp.cap_violations = plan->stats.cap_violations;
  dp.idle_gpu_slots = plan->stats.idle_gpu_slots;
  dp.max_gpu_tokens = plan->stats.max_gpu_tokens;
  dp.plan_time_us = plan->stats.plan_time_us;
  Packd__V1__PlanResponse resp = PACKD__V1__PLAN_RESPONSE__INIT;
  resp.plan_id = (char *)plan_id;
  resp.dynamic_cp = &dp;
  size_t size = packd__v1__plan_response__get_packed_size(&resp);
  out->resp_len = size;
  PK_CODEC_CHECK((int64_t)size <= max_bytes, PK_ELIMIT);
  out->resp = malloc(size ? size : 1);
  out->off = calloc(1, sizeof *out->off);
  PK_CODEC_CHECK(out->resp != NULL && out->off != NULL, PK_ENOMEM);
  PK_CODEC_CHECK(packd__v1__plan_response__pack(&resp, out->resp) == size, PK_EINTERNAL);
done:
  if (rc != PK_OK) {
    size_t len = out->resp_len;
    pk_packed_plan_free(out);
    out->resp_len = len;
  }
  free(slots);
  free(slot_ptr);
  free(groups);
  free(group_ptr);
  free(gpus);
  free(gpu_ptr);
  free(local);
  free(first_group);
  return rc;
}
