/* The codec of dynamic context-parallel plans (codec_dcp.h).
 *
 * Encoding. Every DcpGroup and DcpGpu message is built over the plan's own
 * arrays (protobuf-c only reads them while packing; one buffer holds the
 * local offsets) and packed once. The PlanResponse and every GPU's RankPlan
 * are then assembled from those same bytes (codec_wire.h), in field-number
 * order as protobuf-c packs them: a GPU's part is its slice of the whole
 * plan by construction, and a group of c GPUs, which is in c parts, costs
 * c copies of its bytes rather than c encodings. Nothing but the packed
 * response and parts outlives the call. */
#include "codec_dcp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_check.h"
#include "codec_wire.h"

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

/* The messages of a plan's groups and GPUs, packed once. */
typedef struct dcp_wire {
  uint32_t pool, ns, ng;
  Packd__V1__DcpGroup *groups; /* ng, over the plan's arrays. */
  int32_t *local;              /* Every group's local offsets, back to back. */
  uint32_t *first_group;       /* ns + 1: slot j's groups are [first[j], first[j+1]). */
  double *slot_cost;           /* ns: the costliest group of the slot. */
  uint8_t *group_bytes;        /* Group r at [group_off[r], group_off[r+1]). */
  size_t *group_off;           /* ng + 1. */
  uint8_t *gpu_bytes;          /* Slot j, GPU g (k = j pool + g) at [gpu_off[k], gpu_off[k+1]). */
  size_t *gpu_off;             /* ns pool + 1. */
  size_t *slot_len;            /* ns: a packed DcpSlot's bytes. */
} dcp_wire_t;

static void dcp_wire_free(dcp_wire_t *w) {
  free(w->groups);
  free(w->local);
  free(w->first_group);
  free(w->slot_cost);
  free(w->group_bytes);
  free(w->group_off);
  free(w->gpu_bytes);
  free(w->gpu_off);
  free(w->slot_len);
  memset(w, 0, sizeof *w);
}

static size_t gpu_len(const dcp_wire_t *w, size_t k) {
  return w->gpu_off[k + 1] - w->gpu_off[k];
}

static size_t group_len(const dcp_wire_t *w, uint32_t r) {
  return w->group_off[r + 1] - w->group_off[r];
}

/* The DcpGpu of GPU x in slot j (group: its index in the slot). */
static void gpu_msg(const pk_dcp_plan_t *plan, const uint32_t *first_group, uint32_t j, uint32_t x,
                    Packd__V1__DcpGpu *u) {
  packd__v1__dcp_gpu__init(u);
  uint32_t r = plan->gpu_group[(size_t)j * plan->pool + x];
  if (r == UINT32_MAX) {
    u->group = UINT32_MAX; /* Idle: in no group (the plan counts these). */
    return;
  }
  const pk_dcp_group_t *g = &plan->groups[r];
  u->group = r - first_group[j];
  u->size = g->size;
  u->rank_in_group = x - g->first;
  u->shard_tokens = g->padded_tokens / g->size;
}

/* Builds and packs the groups and GPUs of plan into w: 0, PK_ENOMEM or
 * PK_EINTERNAL (w then freed). */
static int dcp_wire_build(const pk_dcp_plan_t *plan, dcp_wire_t *w) {
  memset(w, 0, sizeof *w);
  uint32_t pool = w->pool = plan->pool, ns = w->ns = plan->slots, ng = w->ng = plan->ngroups;
  size_t ncu = 0, ngpu = (size_t)ns * pool;
  for (uint32_t r = 0; r < ng; r++)
    ncu += plan->groups[r].nseqs + 1;
  w->groups = calloc(ng ? ng : 1, sizeof *w->groups);
  w->local = malloc((ncu ? ncu : 1) * sizeof *w->local);
  w->first_group = calloc((size_t)ns + 1, sizeof *w->first_group);
  w->slot_cost = calloc(ns ? ns : 1, sizeof *w->slot_cost);
  w->group_off = malloc(((size_t)ng + 1) * sizeof *w->group_off);
  w->gpu_off = malloc((ngpu + 1) * sizeof *w->gpu_off);
  w->slot_len = calloc(ns ? ns : 1, sizeof *w->slot_len);
  int rc = PK_OK;
  PK_CODEC_CHECK(w->groups != NULL && w->local != NULL && w->first_group != NULL &&
                     w->slot_cost != NULL && w->group_off != NULL && w->gpu_off != NULL &&
                     w->slot_len != NULL,
                 PK_ENOMEM);
  uint32_t *first_group = w->first_group;
  /* Groups are sorted by slot: the first group of each slot. */
  for (uint32_t r = 0; r < ng; r++)
    first_group[plan->groups[r].slot + 1]++;
  for (uint32_t j = 0; j < ns; j++)
    first_group[j + 1] += first_group[j];
  size_t at = 0;
  w->group_off[0] = 0;
  for (uint32_t r = 0; r < ng; r++) {
    const pk_dcp_group_t *g = &plan->groups[r];
    Packd__V1__DcpGroup *u = &w->groups[r];
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
    u->local_cu_seqlens_padded = w->local + at;
    for (uint32_t k = 0; k <= g->nseqs; k++)
      w->local[at++] = g->cu_seqlens_padded[k] / (int32_t)g->size;
    u->tokens = g->tokens;
    u->padded_tokens = g->padded_tokens;
    u->cost = g->cost;
    w->group_off[r + 1] = w->group_off[r] + packd__v1__dcp_group__get_packed_size(u);
    double *cost = &w->slot_cost[g->slot];
    *cost = *cost > g->cost ? *cost : g->cost;
  }
  w->gpu_off[0] = 0;
  for (uint32_t j = 0; j < ns; j++)
    for (uint32_t x = 0; x < pool; x++) {
      Packd__V1__DcpGpu u;
      gpu_msg(plan, first_group, j, x, &u);
      size_t k = (size_t)j * pool + x;
      w->gpu_off[k + 1] = w->gpu_off[k] + packd__v1__dcp_gpu__get_packed_size(&u);
    }
  w->group_bytes = malloc(w->group_off[ng] ? w->group_off[ng] : 1);
  w->gpu_bytes = malloc(w->gpu_off[ngpu] ? w->gpu_off[ngpu] : 1);
  PK_CODEC_CHECK(w->group_bytes != NULL && w->gpu_bytes != NULL, PK_ENOMEM);
  for (uint32_t r = 0; r < ng; r++)
    PK_CODEC_CHECK(packd__v1__dcp_group__pack(&w->groups[r], w->group_bytes + w->group_off[r]) ==
                       group_len(w, r),
                   PK_EINTERNAL);
  for (uint32_t j = 0; j < ns; j++) {
    size_t len = pk_wire_double_present(w->slot_cost[j]) ? 1 + 8 : 0; /* DcpSlot.cost */
    for (uint32_t r = first_group[j]; r < first_group[j + 1]; r++)
      len += pk_wire_len_size(group_len(w, r));
    for (uint32_t x = 0; x < pool; x++) {
      Packd__V1__DcpGpu u;
      gpu_msg(plan, first_group, j, x, &u);
      size_t k = (size_t)j * pool + x;
      PK_CODEC_CHECK(packd__v1__dcp_gpu__pack(&u, w->gpu_bytes + w->gpu_off[k]) == gpu_len(w, k),
                     PK_EINTERNAL);
      len += pk_wire_len_size(gpu_len(w, k));
    }
    w->slot_len[j] = len;
  }
done:
  if (rc != PK_OK)
    dcp_wire_free(w);
  return rc;
}

/* The response: PlanResponse { plan_id = 1, dynamic_cp = 4 }, DynamicCpPlan
 * { pool = 1, slots = 2, the figures = 3 to 10 }, DcpSlot { groups = 1,
 * gpus = 2, cost = 3 }. protobuf-c packs the fields other than the slots
 * (head: the plan id; tail: the figures, with pool left out to be written
 * first), the slots are assembled between them. */
static int pack_response(const pk_dcp_plan_t *plan, const dcp_wire_t *w, const char *plan_id,
                         int64_t max_bytes, pk_packed_plan_t *out) {
  Packd__V1__DynamicCpPlan tail = PACKD__V1__DYNAMIC_CP_PLAN__INIT;
  tail.slots_lower_bound = plan->stats.slots_lower_bound;
  tail.step_cost = plan->stats.step_cost;
  tail.step_cost_lower_bound = plan->stats.step_cost_lower_bound;
  tail.efficiency = plan->stats.efficiency;
  tail.cap_violations = plan->stats.cap_violations;
  tail.idle_gpu_slots = plan->stats.idle_gpu_slots;
  tail.max_gpu_tokens = plan->stats.max_gpu_tokens;
  tail.plan_time_us = plan->stats.plan_time_us;
  Packd__V1__PlanResponse head = PACKD__V1__PLAN_RESPONSE__INIT;
  head.plan_id = (char *)plan_id;
  size_t head_len = packd__v1__plan_response__get_packed_size(&head);
  size_t tail_len = packd__v1__dynamic_cp_plan__get_packed_size(&tail);
  size_t dcp_len = (w->pool ? 1 + pk_wire_varint_size(w->pool) : 0) + tail_len;
  for (uint32_t j = 0; j < w->ns; j++)
    dcp_len += pk_wire_len_size(w->slot_len[j]);
  size_t total = head_len + pk_wire_len_size(dcp_len);
  out->resp_len = total;
  if ((int64_t)total > max_bytes)
    return PK_ELIMIT;
  uint8_t *p = out->resp = malloc(total ? total : 1);
  if (p == NULL)
    return PK_ENOMEM;
  p += packd__v1__plan_response__pack(&head, p);
  *p++ = PK_WIRE_LEN(4);
  p = pk_wire_put_varint(p, dcp_len);
  if (w->pool) {
    *p++ = PK_WIRE_VARINT(1);
    p = pk_wire_put_varint(p, w->pool);
  }
  for (uint32_t j = 0; j < w->ns; j++) {
    *p++ = PK_WIRE_LEN(2);
    p = pk_wire_put_varint(p, w->slot_len[j]);
    for (uint32_t r = w->first_group[j]; r < w->first_group[j + 1]; r++)
      p = pk_wire_put_len(p, PK_WIRE_LEN(1), w->group_bytes + w->group_off[r], group_len(w, r));
    for (uint32_t x = 0; x < w->pool; x++) {
      size_t k = (size_t)j * w->pool + x;
      p = pk_wire_put_len(p, PK_WIRE_LEN(2), w->gpu_bytes + w->gpu_off[k], gpu_len(w, k));
    }
    if (pk_wire_double_present(w->slot_cost[j])) {
      *p++ = PK_WIRE_I64(3);
      p = pk_wire_put_double(p, w->slot_cost[j]);
    }
  }
  p += packd__v1__dynamic_cp_plan__pack(&tail, p);
  return (size_t)(p - out->resp) == total ? PK_OK : PK_EINTERNAL;
}

/* Bytes of GPU g's DcpRankSlot of slot j: DcpRankSlot { gpu = 1, group = 2
 * (absent when idle) }. */
static size_t rank_slot_len(const pk_dcp_plan_t *plan, const dcp_wire_t *w, uint32_t j,
                            uint32_t g) {
  size_t k = (size_t)j * w->pool + g;
  uint32_t r = plan->gpu_group[k];
  return pk_wire_len_size(gpu_len(w, k)) +
         (r == UINT32_MAX ? 0 : pk_wire_len_size(group_len(w, r)));
}

/* Bytes of GPU g's DcpRankPlan { pool = 1, slots = 2 }. */
static size_t view_len(const pk_dcp_plan_t *plan, const dcp_wire_t *w, uint32_t g) {
  size_t len = w->pool ? 1 + pk_wire_varint_size(w->pool) : 0;
  for (uint32_t j = 0; j < w->ns; j++)
    len += pk_wire_len_size(rank_slot_len(plan, w, j, g));
  return len;
}

/* Every GPU's RankPlan { dp_rank = 1, plan_id = 3, dynamic_cp = 4 } back to
 * back into out->ranks (GPU g at [out->off[g], out->off[g+1])), sizes first
 * so that parts that together pass max_bytes are refused (PK_ELIMIT,
 * out->ranks_len set) before their buffer is allocated. */
static int pack_gpus(const pk_dcp_plan_t *plan, const dcp_wire_t *w, const char *plan_id,
                     int64_t max_bytes, pk_packed_plan_t *out) {
  size_t idlen = strlen(plan_id), pool = w->pool;
  size_t *views = malloc((pool ? pool : 1) * sizeof *views);
  out->off = malloc((pool + 1) * sizeof *out->off);
  int rc = PK_OK;
  PK_CODEC_CHECK(views != NULL && out->off != NULL, PK_ENOMEM);
  out->off[0] = 0;
  for (uint32_t g = 0; g < pool; g++) {
    views[g] = view_len(plan, w, g);
    size_t len = (g ? 1 + pk_wire_varint_size(g) : 0) + (idlen ? pk_wire_len_size(idlen) : 0) +
                 pk_wire_len_size(views[g]);
    out->off[g + 1] = out->off[g] + len;
  }
  out->ranks_len = out->off[pool];
  PK_CODEC_CHECK((int64_t)out->ranks_len <= max_bytes, PK_ELIMIT);
  out->ranks = malloc(out->ranks_len ? out->ranks_len : 1);
  PK_CODEC_CHECK(out->ranks != NULL, PK_ENOMEM);
  for (uint32_t g = 0; g < pool; g++) {
    uint8_t *p = out->ranks + out->off[g];
    if (g) {
      *p++ = PK_WIRE_VARINT(1);
      p = pk_wire_put_varint(p, g);
    }
    if (idlen)
      p = pk_wire_put_len(p, PK_WIRE_LEN(3), (const uint8_t *)plan_id, idlen);
    *p++ = PK_WIRE_LEN(4);
    p = pk_wire_put_varint(p, views[g]);
    if (w->pool) {
      *p++ = PK_WIRE_VARINT(1);
      p = pk_wire_put_varint(p, w->pool);
    }
    for (uint32_t j = 0; j < w->ns; j++) {
      size_t k = (size_t)j * pool + g;
      uint32_t r = plan->gpu_group[k];
      *p++ = PK_WIRE_LEN(2);
      p = pk_wire_put_varint(p, rank_slot_len(plan, w, j, g));
      p = pk_wire_put_len(p, PK_WIRE_LEN(1), w->gpu_bytes + w->gpu_off[k], gpu_len(w, k));
      if (r != UINT32_MAX)
        p = pk_wire_put_len(p, PK_WIRE_LEN(2), w->group_bytes + w->group_off[r], group_len(w, r));
    }
    PK_CODEC_CHECK(p == out->ranks + out->off[g + 1], PK_EINTERNAL);
  }
  out->n_ranks = pool;
done:
  free(views);
  return rc;
}

int pk_codec_pack_dcp_plan(const pk_dcp_plan_t *plan, const char *plan_id, int64_t max_bytes,
                           bool response_only, pk_packed_plan_t *out) {
  *out = (pk_packed_plan_t){0};
  dcp_wire_t w;
  int rc = dcp_wire_build(plan, &w);
  if (rc != PK_OK)
    return rc;
  rc = pack_response(plan, &w, plan_id, max_bytes, out);
  if (rc == PK_OK && !response_only)
    rc = pack_gpus(plan, &w, plan_id, max_bytes, out);
  if (rc != PK_OK) {
    size_t len = out->resp_len, ranks_len = out->ranks_len;
    pk_packed_plan_free(out);
    out->resp_len = len;
    out->ranks_len = ranks_len;
  }
  dcp_wire_free(&w);
  return rc;
}
