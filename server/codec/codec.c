/* The codec: packd.v1 protobuf messages (protobuf-c) <-> planner C types.
 *
 * It decides nothing about plans. It only decodes request bytes, computes the
 * plan id (a hash of the request's canonical bytes), copies a pk_plan_t into
 * a PlanResponse and maps pk_error codes to gRPC status codes.
 *
 * Memory: every message this file builds is allocated field by field with
 * the C allocator, exactly like a message from protobuf_c_message_unpack, so
 * that one function (protobuf_c_message_free_unpacked with the default
 * allocator) frees both kinds. A partially built message is always in a
 * state that function can free: counts only cover initialised entries. */
#include "codec.h"
#include "codec_check.h"
#include "grpc_status_names.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The XXH3 state type is complete only with XXH_STATIC_LINKING_ONLY; the
 * codec keeps it on the stack so that hashing cannot fail. */
#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

int pk_status_from_error(int code) {
  switch (code) {
  case PK_OK:
    return PK_GRPC_OK;
  case PK_EINVAL:
  case PK_EDECODE:
    return PK_GRPC_INVALID_ARGUMENT;
  case PK_EPRECOND:
    return PK_GRPC_FAILED_PRECONDITION;
  case PK_ENOMEM:
  case PK_ELIMIT:
    return PK_GRPC_RESOURCE_EXHAUSTED;
  case PK_ENOTFOUND:
    return PK_GRPC_NOT_FOUND;
  case PK_ECANCELED:
    return PK_GRPC_CANCELLED;
  default:
    /* PK_EINTERNAL and any code this table does not know is a bug. */
    return PK_GRPC_INTERNAL;
  }
}

/* calloc with an overflow check on count * size; NULL on overflow or
 * failure. A zero count still returns a unique pointer (or NULL), which the
 * callers never dereference. */
static void *codec_calloc(size_t count, size_t size) {
  if (size != 0 && count > SIZE_MAX / size)
    return NULL;
  return calloc(count == 0 ? 1 : count, size == 0 ? 1 : size);
}

/* Copies n elements of `size` bytes into a new array; NULL for n == 0 (the
 * message then carries no array) or on failure (*ok set to false). */
static void *codec_dup(const void *src, size_t n, size_t size, bool *ok) {
  if (n == 0)
    return NULL;
  void *dst = codec_calloc(n, size);
  if (dst == NULL) {
    *ok = false;
    return NULL;
  }
  memcpy(dst, src, n * size);
  return dst;
}

void pk_codec_request_from_msg(const Packd__V1__PlanRequest *msg, pk_request_t *req) {
  memset(req, 0, sizeof *req);
  req->lengths = msg->lengths;
  req->n = msg->n_lengths;
  req->loss_tokens = msg->n_loss_tokens > 0 ? msg->loss_tokens : NULL;
  req->n_loss_tokens = msg->n_loss_tokens;
  req->groups = msg->n_groups > 0 ? msg->groups : NULL;
  req->n_groups = msg->n_groups;
  /* Enum fields are open in proto3: unknown numbers arrive as is and the
   * planner rejects them with a message naming the field. */
  if (msg->parallel != NULL) {
    const Packd__V1__Parallel *p = msg->parallel;
    req->parallel.dp = p->dp;
    req->parallel.tp = p->tp;
    req->parallel.cp = p->cp;
    req->parallel.pp = p->pp;
    req->parallel.vpp = p->vpp;
    req->parallel.cp_algo = (uint32_t)p->cp_algo;
    req->parallel.sequence_parallel = p->sequence_parallel != 0;
    req->parallel.num_heads = p->num_heads;
    req->parallel.microbatch_group = p->microbatch_group;
  }
  if (msg->batching != NULL) {
    const Packd__V1__Batching *b = msg->batching;
    req->batching.mini_batches = b->mini_batches;
    req->batching.shuffle = b->shuffle != 0;
    req->batching.dp_balance = (uint32_t)b->dp_balance;
    req->batching.equal_count = b->equal_count != 0;
    req->batching.mode = (uint32_t)b->mode;
    req->batching.max_tokens = b->max_tokens;
    req->batching.max_seqs = b->max_seqs;
    req->batching.micro_batch_size = b->micro_batch_size;
    req->batching.min_micro_batches = b->min_micro_batches;
    req->batching.round = b->round;
    req->batching.micro_algo = (uint32_t)b->micro_algo;
    req->batching.order = (uint32_t)b->order;
    req->batching.keep_groups = b->keep_groups != 0;
    req->batching.groups_on_rank = b->groups_on_rank != 0;
  }
  if (msg->cost != NULL) {
    req->cost.linear = msg->cost->linear;
    req->cost.quadratic = msg->cost->quadratic;
    req->cost.per_sequence = msg->cost->per_sequence;
    req->cost.per_micro_batch = msg->cost->per_micro_batch;
  }
  if (msg->layout != NULL) {
    req->layout.align = msg->layout->align;
    req->layout.pad_multiple = msg->layout->pad_multiple;
    req->layout.total_multiple = msg->layout->total_multiple;
    req->layout.fixed_shape = msg->layout->fixed_shape != 0;
  }
  req->seed = msg->seed;
}

int pk_codec_decode_request(const uint8_t *buf, size_t len, Packd__V1__PlanRequest **msg,
                            pk_request_t *req, char *err, size_t errlen) {
  static const uint8_t empty[1] = {0};
  *msg = NULL;
  memset(req, 0, sizeof *req);
  if (buf == NULL && len > 0) {
    pk_codec_msg(err, errlen, "request: NULL buffer with a non-zero length");
    return PK_EDECODE;
  }
  /* An empty buffer is a valid message with every field at its default;
   * the planner then reports the missing fields by name. */
  Packd__V1__PlanRequest *m = packd__v1__plan_request__unpack(NULL, len, len == 0 ? empty : buf);
  if (m == NULL) {
    if (err != NULL && errlen > 0)
      snprintf(err, errlen, "request: malformed packd.v1.PlanRequest bytes (%zu bytes)", len);
    return PK_EDECODE;
  }
  *msg = m;
  pk_codec_request_from_msg(m, req);
  return PK_OK;
}

void pk_codec_free_request(Packd__V1__PlanRequest *msg) {
  if (msg != NULL)
    packd__v1__plan_request__free_unpacked(msg, NULL);
}

/* Clears the unknown fields of a shallow copy (the copy lives on the
 * caller's stack and owns nothing). Returns true when the copy still packs
 * to at least one byte; an empty sub-message means the same to the planner
 * as an absent one, so the canonical form drops it. */
static bool codec_canon(ProtobufCMessage *copy) {
  copy->n_unknown_fields = 0;
  copy->unknown_fields = NULL;
  return protobuf_c_message_get_packed_size(copy) > 0;
}

/* A protobuf-c output buffer that feeds the bytes into an XXH3 state through
 * a fixed buffer: hashing needs no allocation sized by the request. */
typedef struct codec_hash_sink {
  ProtobufCBuffer base;
  XXH3_state_t *state;
  size_t used;
  uint8_t buf[4096];
} codec_hash_sink_t;

static void codec_hash_flush(codec_hash_sink_t *s) {
  if (s->used > 0)
    (void)XXH3_128bits_update(s->state, s->buf, s->used);
  s->used = 0;
}

static void codec_hash_append(ProtobufCBuffer *base, size_t len, const uint8_t *data) {
  codec_hash_sink_t *s = (codec_hash_sink_t *)base;
  if (len >= sizeof s->buf) {
    codec_hash_flush(s);
    (void)XXH3_128bits_update(s->state, data, len);
    return;
  }
  if (s->used + len > sizeof s->buf)
    codec_hash_flush(s);
  memcpy(s->buf + s->used, data, len);
  s->used += len;
}

void pk_codec_plan_id_pack(const Packd__V1__PlanRequest *msg, ProtobufCBuffer *out) {
  /* The canonical form: the decoded message re-packed by protobuf-c (fields
   * in number order, repeated scalars packed, defaults left out), without
   * unknown fields, without empty sub-messages and without `job`. The job is
   * a label for logs and metrics, not an input of the plan, so two jobs that
   * send the same batch share one plan id (and one cached plan). */
  Packd__V1__PlanRequest top = *msg;
  Packd__V1__Parallel par;
  Packd__V1__Batching bat;
  Packd__V1__Cost cost;
  Packd__V1__Layout lay;
  codec_canon(&top.base);
  top.job = (char *)protobuf_c_empty_string;
  if (msg->parallel != NULL) {
    par = *msg->parallel;
    top.parallel = codec_canon(&par.base) ? &par : NULL;
  }
  if (msg->batching != NULL) {
    bat = *msg->batching;
    top.batching = codec_canon(&bat.base) ? &bat : NULL;
  }
  if (msg->cost != NULL) {
    cost = *msg->cost;
    top.cost = codec_canon(&cost.base) ? &cost : NULL;
  }
  if (msg->layout != NULL) {
    lay = *msg->layout;
    top.layout = codec_canon(&lay.base) ? &lay : NULL;
  }

  protobuf_c_message_pack_to_buffer(&top.base, out);
}

void pk_codec_plan_id(const Packd__V1__PlanRequest *msg, char *id, size_t idlen) {
  XXH3_state_t state;
  (void)XXH3_128bits_reset(&state);
  codec_hash_sink_t sink;
  sink.base.append = codec_hash_append;
  sink.state = &state;
  sink.used = 0;
  pk_codec_plan_id_pack(msg, &sink.base);
  codec_hash_flush(&sink);
  XXH128_hash_t h = XXH3_128bits_digest(&state);

  /* The canonical (big-endian) byte order of the digest, in lowercase hex. */
  XXH128_canonical_t canon;
  XXH128_canonicalFromHash(&canon, h);
  static const char hex[] = "0123456789abcdef";
  char full[2 * sizeof canon.digest + 1];
  for (size_t i = 0; i < sizeof canon.digest; i++) {
    full[2 * i] = hex[canon.digest[i] >> 4];
    full[2 * i + 1] = hex[canon.digest[i] & 15];
  }
  full[sizeof full - 1] = '\0';
  if (id != NULL && idlen > 0)
    snprintf(id, idlen, "%s", full);
}

/* Fills one MicroBatch from a planner micro-batch. */
static int codec_encode_micro(const pk_micro_t *src, Packd__V1__MicroBatch *dst) {
  bool ok = true;
  size_t ncu = (size_t)src->nseqs + 1;
  dst->seqs = codec_dup(src->seqs, src->nseqs, sizeof *src->seqs, &ok);
  dst->n_seqs = dst->seqs != NULL ? src->nseqs : 0;
  dst->cu_seqlens = codec_dup(src->cu_seqlens, ncu, sizeof *src->cu_seqlens, &ok);
  dst->n_cu_seqlens = dst->cu_seqlens != NULL ? ncu : 0;
  dst->cu_seqlens_padded =
      codec_dup(src->cu_seqlens_padded, ncu, sizeof *src->cu_seqlens_padded, &ok);
  dst->n_cu_seqlens_padded = dst->cu_seqlens_padded != NULL ? ncu : 0;
  dst->max_seqlen = src->max_seqlen;
  dst->padded_width = src->padded_width;
  dst->tokens = src->tokens;
  dst->padded_tokens = src->padded_tokens;
  dst->cost = src->cost;
  dst->loss_scale = src->loss_scale;
  return ok ? PK_OK : PK_ENOMEM;
}

static void codec_encode_stats(const pk_stats_t *s, Packd__V1__PlanStats *d) {
  d->sequences = s->sequences;
  d->mini_batches = s->mini_batches;
  d->micro_batches_per_rank = s->micro_batches_per_rank;
  d->micro_batches_lower_bound = s->micro_batches_lower_bound;
  d->tokens = s->tokens;
  d->padded_tokens = s->padded_tokens;
  d->pad_fraction = s->pad_fraction;
  d->total_cost = s->total_cost;
  d->step_cost = s->step_cost;
  d->step_cost_lower_bound = s->step_cost_lower_bound;
  d->lockstep_efficiency = s->lockstep_efficiency;
  d->lockstep_efficiency_bound = s->lockstep_efficiency_bound;
  d->dp_imbalance = s->dp_imbalance;
  d->cap_violations = s->cap_violations;
  d->plan_time_us = s->plan_time_us;
  d->plan_micros = s->plan_micros;
  d->zero_length = s->zero_length;
  d->alignment = s->alignment;
  d->max_micro_tokens = s->max_micro_tokens;
}

/* Builds the RankPlan of one rank. */
static int codec_encode_rank(const pk_plan_t *plan, uint32_t rank, const char *plan_id,
                             Packd__V1__RankPlan *rp) {
  int rc = PK_OK;
  rp->dp_rank = rank;
  /* Every RankPlan carries the plan id so that it stands alone when the
   * trainer hands it to a worker. */
  if (plan_id != NULL && plan_id[0] != '\0') {
    size_t len = strlen(plan_id);
    char *copy = codec_calloc(len + 1, 1);
    PK_CODEC_CHECK(copy != NULL, PK_ENOMEM);
    memcpy(copy, plan_id, len);
    rp->plan_id = copy;
  }
  if (plan->mini_batches == 0)
    goto done;
  rp->mini_batches = codec_calloc(plan->mini_batches, sizeof *rp->mini_batches);
  PK_CODEC_CHECK(rp->mini_batches != NULL, PK_ENOMEM);
  for (uint32_t m = 0; m < plan->mini_batches; m++) {
    const pk_cell_t *cell = pk_plan_cell(plan, rank, m);
    Packd__V1__MiniBatch *mb = malloc(sizeof *mb);
    PK_CODEC_CHECK(mb != NULL, PK_ENOMEM);
    packd__v1__mini_batch__init(mb);
    rp->mini_batches[m] = mb;
    rp->n_mini_batches = (size_t)m + 1;
    if (cell->nmicros == 0)
      continue;
    mb->micro_batches = codec_calloc(cell->nmicros, sizeof *mb->micro_batches);
    PK_CODEC_CHECK(mb->micro_batches != NULL, PK_ENOMEM);
    for (uint32_t j = 0; j < cell->nmicros; j++) {
      Packd__V1__MicroBatch *mi = malloc(sizeof *mi);
      PK_CODEC_CHECK(mi != NULL, PK_ENOMEM);
      packd__v1__micro_batch__init(mi);
      mb->micro_batches[j] = mi;
      mb->n_micro_batches = (size_t)j + 1;
      rc = codec_encode_micro(&cell->micros[j], mi);
      PK_CODEC_CHECK(rc == PK_OK, rc);
    }
  }
done:
  return rc;
}

int pk_codec_encode_plan(const pk_plan_t *plan, const char *plan_id,
                         Packd__V1__PlanResponse **out) {
  int rc = PK_OK;
  *out = NULL;
  Packd__V1__PlanResponse *resp = malloc(sizeof *resp);
  PK_CODEC_CHECK(resp != NULL, PK_ENOMEM);
  packd__v1__plan_response__init(resp);
  if (plan_id != NULL && plan_id[0] != '\0') {
    size_t len = strlen(plan_id);
    char *copy = codec_calloc(len + 1, 1);
    PK_CODEC_CHECK(copy != NULL, PK_ENOMEM);
    memcpy(copy, plan_id, len);
    resp->plan_id = copy;
  }
  Packd__V1__PlanStats *stats = malloc(sizeof *stats);
  PK_CODEC_CHECK(stats != NULL, PK_ENOMEM);
  packd__v1__plan_stats__init(stats);
  codec_encode_stats(&plan->stats, stats);
  resp->stats = stats;
  if (plan->dp > 0) {
    resp->ranks = codec_calloc(plan->dp, sizeof *resp->ranks);
    PK_CODEC_CHECK(resp->ranks != NULL, PK_ENOMEM);
  }
  for (uint32_t r = 0; r < plan->dp; r++) {
    Packd__V1__RankPlan *rp = malloc(sizeof *rp);
    PK_CODEC_CHECK(rp != NULL, PK_ENOMEM);
    packd__v1__rank_plan__init(rp);
    resp->ranks[r] = rp;
    resp->n_ranks = (size_t)r + 1;
    rc = codec_encode_rank(plan, r, plan_id, rp);
    PK_CODEC_CHECK(rc == PK_OK, rc);
  }
done:
  if (rc != PK_OK) {
    pk_codec_free_response(resp);
    resp = NULL;
  }
  *out = resp;
  return rc;
}

void pk_codec_free_response(Packd__V1__PlanResponse *msg) {
  if (msg != NULL)
    packd__v1__plan_response__free_unpacked(msg, NULL);
}

void pk_codec_free_bytes(uint8_t *buf) {
  free(buf);
}
