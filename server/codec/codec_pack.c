/* The one encoder of a plan: from a pk_plan_t to the bytes that leave
 * packd. The server's Plan handler and pk_plan_bytes (the embedded library,
 * `packctl plan --local`) both call pk_codec_pack_plan, so a plan has one
 * wire form whichever way it was asked for.
 *
 * Every RankPlan is packed once, back to back: those bytes are what the
 * plan cache and the plan store keep and what GetRankPlan answers, so each
 * carries the plan id. The PlanResponse is then assembled around them as
 * [plan_id] [tag + length + rank]... [stats], which is byte for byte what
 * protobuf-c packs for the whole message (fields in number order;
 * tests/unit/server/test_handlers.c checks it), without walking the ranks
 * twice. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec.h"
#include "codec_wire.h"

/* The estimate of a plan's encoded size (pk_codec_plan_size_estimate), in
 * the largest encodings, in bytes: a tag is 1 byte for the field numbers
 * used here, a length or uint32 varint at most 5, a uint64 varint 10, a
 * double 8. */
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

/* Sum of pk_wire_varint_size(i) for i in 0..n-1, in closed form per byte width. */
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

/* Every sequence appears once in some micro-batch's `seqs` (its index, a
 * permutation of 0..n-1, so the index varints sum exactly), and adds one
 * entry to `cu_seqlens` and to `cu_seqlens_padded`, each at most the varint
 * of the largest micro-batch footprint (at most INT32_MAX). Micro-batches
 * are counted at the shape's lower bound of their number, each with its
 * wrapper, headers and scalars at their largest encoding, which also covers
 * micro-batches beyond the cheap bound (PADDED rows, where the exact
 * grouping needs a sort); ranks and mini-batches likewise. */
uint64_t pk_codec_plan_size_estimate(const pk_plan_shape_t *shape) {
  uint64_t widest = shape->largest_micro > (uint64_t)INT32_MAX ? INT32_MAX : shape->largest_micro;
  uint64_t per_seq_cu = 2ull * pk_wire_varint_size((size_t)widest);
  uint64_t cells = (uint64_t)shape->dp * shape->mini_batches;
  return EST_FIXED + (uint64_t)shape->dp * EST_RANK + cells * EST_CELL +
         index_varints(shape->sequences) + shape->sequences * per_seq_cu +
         shape->micro_batches * EST_MICRO;
}

int pk_codec_admit_size(void *limits, const pk_plan_shape_t *shape, char *err, size_t errlen) {
  const pk_limits_t *lim = limits;
  if (lim == NULL || lim->max_plan_bytes == 0)
    return PK_OK;
  uint64_t est = pk_codec_plan_size_estimate(shape);
  if (est <= lim->max_plan_bytes)
    return PK_OK;
  if (err != NULL && errlen > 0)
    snprintf(err, errlen,
             "lengths: the plan for %" PRIu64 " sequences over parallel.dp %" PRIu32
             " ranks is estimated at %" PRIu64 " bytes, over the limit max_plan_bytes = %" PRIu64,
             shape->sequences, shape->dp, est, lim->max_plan_bytes);
  return PK_ELIMIT;
}

/* Packs resp into pp (see pk_codec_pack_plan for the contract). */
static int pack_response(const Packd__V1__PlanResponse *resp, int64_t max_bytes,
                         pk_packed_plan_t *pp) {
  size_t n = resp->n_ranks;
  memset(pp, 0, sizeof *pp);
  pp->n_ranks = n;
  pp->off = malloc((n + 1) * sizeof *pp->off);
  if (pp->off == NULL)
    return PK_ENOMEM;
  Packd__V1__PlanResponse head = PACKD__V1__PLAN_RESPONSE__INIT;
  Packd__V1__PlanResponse tail = PACKD__V1__PLAN_RESPONSE__INIT;
  head.plan_id = resp->plan_id;
  tail.stats = resp->stats;
  size_t head_len = packd__v1__plan_response__get_packed_size(&head);
  size_t tail_len = packd__v1__plan_response__get_packed_size(&tail);
  size_t total = head_len + tail_len;
  pp->off[0] = 0;
  for (size_t r = 0; r < n; r++) {
    size_t len = packd__v1__rank_plan__get_packed_size(resp->ranks[r]);
    pp->off[r + 1] = pp->off[r] + len;
    total += 1 + pk_wire_varint_size(len) + len; /* Tag of field 2 (one byte), length, bytes. */
  }
  pp->resp_len = total;
  pp->ranks_len = pp->off[n];
  if ((int64_t)total > max_bytes)
    return PK_ELIMIT;
  pp->ranks = malloc(pp->off[n] > 0 ? pp->off[n] : 1);
  pp->resp = malloc(total > 0 ? total : 1);
  if (pp->ranks == NULL || pp->resp == NULL)
    return PK_ENOMEM;
  uint8_t *p = pp->resp;
  p += packd__v1__plan_response__pack(&head, p);
  for (size_t r = 0; r < n; r++) {
    size_t len = pp->off[r + 1] - pp->off[r];
    packd__v1__rank_plan__pack(resp->ranks[r], pp->ranks + pp->off[r]);
    *p++ = (uint8_t)((2u << 3) | 2u); /* Field 2 (ranks), length-delimited. */
    p = pk_wire_put_varint(p, len);
    memcpy(p, pp->ranks + pp->off[r], len);
    p += len;
  }
  p += packd__v1__plan_response__pack(&tail, p);
  return (size_t)(p - pp->resp) == total ? PK_OK : PK_EINTERNAL;
}

int pk_codec_pack_plan(const pk_plan_t *plan, const char *plan_id, int64_t max_bytes,
                       pk_packed_plan_t *out) {
  memset(out, 0, sizeof *out);
  Packd__V1__PlanResponse *resp = NULL;
  int rc = pk_codec_encode_plan(plan, plan_id, &resp);
  if (rc != PK_OK)
    return rc;
  /* GetRankPlan answers are the rank bytes alone: each must name its plan.
   * pk_codec_encode_plan puts plan_id into every rank. */
  for (size_t r = 0; r < resp->n_ranks && rc == PK_OK; r++)
    if (resp->ranks[r]->plan_id == NULL || strcmp(resp->ranks[r]->plan_id, plan_id) != 0)
      rc = PK_EINTERNAL;
  if (rc == PK_OK)
    rc = pack_response(resp, max_bytes, out);
  pk_codec_free_response(resp);
  return rc;
}

void pk_packed_plan_free(pk_packed_plan_t *pp) {
  if (pp == NULL)
    return;
  free(pp->ranks);
  free(pp->off);
  free(pp->resp);
  memset(pp, 0, sizeof *pp);
}

size_t pk_pack_plan_response(const Packd__V1__PlanResponse *resp, uint8_t **out) {
  pk_packed_plan_t pp;
  *out = NULL;
  size_t len = 0;
  if (pack_response(resp, INT64_MAX, &pp) == PK_OK) {
    *out = pp.resp;
    len = pp.resp_len;
    pp.resp = NULL;
  }
  pk_packed_plan_free(&pp);
  return len;
}
