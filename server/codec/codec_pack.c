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
#include <stdlib.h>
#include <string.h>

#include "codec.h"

/* Bytes of v as a protobuf varint. */
static size_t varint_size(size_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    n++;
  }
  return n;
}

static uint8_t *put_varint(uint8_t *p, size_t v) {
  while (v >= 0x80) {
    *p++ = (uint8_t)(v | 0x80);
    v >>= 7;
  }
  *p++ = (uint8_t)v;
  return p;
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
    total += 1 + varint_size(len) + len; /* Tag of field 2 (one byte), length, bytes. */
  }
  pp->resp_len = total;
  if ((int64_t)total > max_bytes)
    return PK_EINVAL;
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
    p = put_varint(p, len);
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
