/* The codec of dynamic context-parallel plans (codec_dcp.h). The messages
 * are built once over the plan's own arrays (protobuf-c only reads them
 * while packing) plus one buffer for the local offsets; the PlanResponse and
 * every GPU's RankPlan are packed from those same DcpGroup and DcpGpu
 * messages, so a GPU's part is the whole plan's slice by construction.
 * Nothing of the messages outlives the call; only the packed bytes do. */
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

/* The protobuf-c messages of a plan, over the plan's arrays. */
typedef struct dcp_msgs {
  Packd__V1__DcpSlot *slots, **slot_ptr;
  Packd__V1__DcpGroup *groups, **group_ptr;
  Packd__V1__DcpGpu *gpus, **gpu_ptr; /* Slot j, GPU g at [j * pool + g]. */
  int32_t *local;                     /* Every group's local offsets, back to back. */
  uint32_t *first_group;              /* ns + 1: slot j's groups are [first[j], first[j+1]). */
} dcp_msgs_t;

static void dcp_msgs_free(dcp_msgs_t *m) {
  free(m->slots);
  free(m->slot_ptr);
  free(m->groups);
  free(m->group_ptr);
  free(m->gpus);
  free(m->gpu_ptr);
  free(m->local);
  free(m->first_group);
  memset(m, 0, sizeof *m);
}

/* Builds the messages of plan into m: 0 or PK_ENOMEM (m then freed). */
static int dcp_msgs_build(const pk_dcp_plan_t *plan, dcp_msgs_t *m) {
  memset(m, 0, sizeof *m);
  uint32_t pool = plan->pool, ns = plan->slots, ng = plan->ngroups;
  size_t ncu = 0;
  for (uint32_t r = 0; r < ng; r++)
    ncu += plan->groups[r].nseqs + 1;
  size_t ngpu = (size_t)ns * pool > 0 ? (size_t)ns * pool : 1;
  m->slots = calloc(ns ? ns : 1, sizeof *m->slots);
  m->slot_ptr = calloc(ns ? ns : 1, sizeof *m->slot_ptr);
  m->groups = calloc(ng ? ng : 1, sizeof *m->groups);
  m->group_ptr = calloc(ng ? ng : 1, sizeof *m->group_ptr);
  m->gpus = calloc(ngpu, sizeof *m->gpus);
  m->gpu_ptr = calloc(ngpu, sizeof *m->gpu_ptr);
  m->local = malloc((ncu ? ncu : 1) * sizeof *m->local);
  m->first_group = calloc((size_t)ns + 1, sizeof *m->first_group);
  int rc = PK_OK;
  PK_CODEC_CHECK(m->slots != NULL && m->slot_ptr != NULL && m->groups != NULL &&
                     m->group_ptr != NULL && m->gpus != NULL && m->gpu_ptr != NULL &&
                     m->local != NULL && m->first_group != NULL,
                 PK_ENOMEM);
  uint32_t *first_group = m->first_group;
  /* Groups are sorted by slot: the first group of each slot. */
  for (uint32_t r = 0; r < ng; r++)
    first_group[plan->groups[r].slot + 1]++;
  for (uint32_t j = 0; j < ns; j++)
    first_group[j + 1] += first_group[j];
  size_t at = 0;
  for (uint32_t r = 0; r < ng; r++) {
    const pk_dcp_group_t *g = &plan->groups[r];
    Packd__V1__DcpGroup *u = &m->groups[r];
    packd__v1__dcp_group__init(u);
    u->first_gpu = g->first;
    u->size = g->size;
    u->n_seqs = g->nseqs;
    u->seqs = (uint32_t *)g->seqs;
    u->n_cu_seqlens = u->n_cu_seqlens_padded = g->nseqs + 1;
    u->cu_seqlens = (int32_t *)g->cu_seqlens;
    u->cu_seqlens_padded = (int32_t *)g->cu_seqlens_padded;
    u->align = g->align;
    u->n_local_cu_seqlens_padded = g->nseqs + 1;
    u->local_cu_seqlens_padded = m->local + at;
    for (uint32_t k = 0; k <= g->nseqs; k++)
      m->local[at++] = g->cu_seqlens_padded[k] / (int32_t)g->size;
    u->tokens = g->tokens;
    u->padded_tokens = g->padded_tokens;
    u->cost = g->cost;
    m->group_ptr[r] = u;
  }
  for (uint32_t j = 0; j < ns; j++) {
    Packd__V1__DcpSlot *s = &m->slots[j];
    packd__v1__dcp_slot__init(s);
    s->n_groups = first_group[j + 1] - first_group[j];
    s->groups = m->group_ptr + first_group[j];
    s->n_gpus = pool;
    s->gpus = m->gpu_ptr + (size_t)j * pool;
    for (uint32_t r = first_group[j]; r < first_group[j + 1]; r++)
      s->cost = s->cost > plan->groups[r].cost ? s->cost : plan->groups[r].cost;
    for (uint32_t x = 0; x < pool; x++) {
      Packd__V1__DcpGpu *u = &m->gpus[(size_t)j * pool + x];
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
      m->gpu_ptr[(size_t)j * pool + x] = u;
    }
    m->slot_ptr[j] = s;
  }
done:
  if (rc != PK_OK)
    dcp_msgs_free(m);
  return rc;
}

/* Points rs (one entry per slot) at GPU g's part of every slot. */
static void gpu_slots(const dcp_msgs_t *m, uint32_t pool, uint32_t ns, uint32_t g,
                      Packd__V1__DcpRankSlot *rs) {
  for (uint32_t j = 0; j < ns; j++) {
    Packd__V1__DcpGpu *u = m->gpu_ptr[(size_t)j * pool + g];
    rs[j].gpu = u;
    rs[j].group = u->group == UINT32_MAX ? NULL : m->slot_ptr[j]->groups[u->group];
  }
}

/* Packs every GPU's RankPlan back to back into out->ranks (GPU g at
 * [out->off[g], out->off[g+1])), sizes first so that a plan whose parts
 * together pass max_bytes is refused (PK_ELIMIT, out->ranks_len set)
 * before their buffer is allocated. */
static int pack_gpus(const dcp_msgs_t *m, uint32_t pool, uint32_t ns, const char *plan_id,
                     int64_t max_bytes, pk_packed_plan_t *out) {
  Packd__V1__DcpRankSlot *rs = calloc(ns ? ns : 1, sizeof *rs);
  Packd__V1__DcpRankSlot **rs_ptr = calloc(ns ? ns : 1, sizeof *rs_ptr);
  out->off = malloc(((size_t)pool + 1) * sizeof *out->off);
  int rc = PK_OK;
  PK_CODEC_CHECK(rs != NULL && rs_ptr != NULL && out->off != NULL, PK_ENOMEM);
  for (uint32_t j = 0; j < ns; j++) {
    packd__v1__dcp_rank_slot__init(&rs[j]);
    rs_ptr[j] = &rs[j];
  }
  Packd__V1__DcpRankPlan view = PACKD__V1__DCP_RANK_PLAN__INIT;
  view.pool = pool;
  view.n_slots = ns;
  view.slots = rs_ptr;
  Packd__V1__RankPlan rk = PACKD__V1__RANK_PLAN__INIT;
  rk.plan_id = (char *)plan_id;
  rk.dynamic_cp = &view;
  out->off[0] = 0;
  for (uint32_t g = 0; g < pool; g++) {
    rk.dp_rank = g;
    gpu_slots(m, pool, ns, g, rs);
    out->off[g + 1] = out->off[g] + packd__v1__rank_plan__get_packed_size(&rk);
  }
  out->ranks_len = out->off[pool];
  PK_CODEC_CHECK((int64_t)out->ranks_len <= max_bytes, PK_ELIMIT);
  out->ranks = malloc(out->ranks_len ? out->ranks_len : 1);
  PK_CODEC_CHECK(out->ranks != NULL, PK_ENOMEM);
  for (uint32_t g = 0; g < pool; g++) {
    rk.dp_rank = g;
    gpu_slots(m, pool, ns, g, rs);
    size_t len = out->off[g + 1] - out->off[g];
    PK_CODEC_CHECK(packd__v1__rank_plan__pack(&rk, out->ranks + out->off[g]) == len, PK_EINTERNAL);
  }
  out->n_ranks = pool;
done:
  free(rs);
  free(rs_ptr);
  return rc;
}

int pk_codec_pack_dcp_plan(const pk_dcp_plan_t *plan, const char *plan_id, int64_t max_bytes,
                           bool response_only, pk_packed_plan_t *out) {
  *out = (pk_packed_plan_t){0};
  dcp_msgs_t m;
  int rc = dcp_msgs_build(plan, &m);
  if (rc != PK_OK)
    return rc;
  Packd__V1__DynamicCpPlan dp = PACKD__V1__DYNAMIC_CP_PLAN__INIT;
  dp.pool = plan->pool;
  dp.n_slots = plan->slots;
  dp.slots = m.slot_ptr;
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
  PK_CODEC_CHECK(out->resp != NULL, PK_ENOMEM);
  PK_CODEC_CHECK(packd__v1__plan_response__pack(&resp, out->resp) == size, PK_EINTERNAL);
  if (!response_only)
    rc = pack_gpus(&m, plan->pool, plan->slots, plan_id, max_bytes, out);
done:
  if (rc != PK_OK) {
    size_t len = out->resp_len, ranks_len = out->ranks_len;
    pk_packed_plan_free(out);
    out->resp_len = len;
    out->ranks_len = ranks_len;
  }
  dcp_msgs_free(&m);
  return rc;
}
