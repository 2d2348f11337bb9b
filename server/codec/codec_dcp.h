/* The codec of dynamic context-parallel plans: a PlanRequest whose
 * parallel.dynamic_cp is set <-> pk_dcp_request_t, and a pk_dcp_plan_t ->
 * the packed PlanResponse (its dynamic_cp field; no RankPlans) and every
 * GPU's packed RankPlan (its dynamic_cp field: the GPU's slice of the plan,
 * what the plan cache and store keep and GetRankPlan answers). Like codec.h
 * it decides nothing about plans; it refuses the fixed-CP fields that a
 * dynamic-CP plan cannot honour, naming the field and the value. */
#ifndef PK_CODEC_DCP_H
#define PK_CODEC_DCP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "codec.h"
#include "packd/v1/packd.pb-c.h"
#include "pk_dcp.h"
#include "pk_export.h"

/* True when msg asks for a dynamic-CP plan. */
static inline int pk_codec_is_dcp(const Packd__V1__PlanRequest *msg) {
  return msg != NULL && msg->parallel != NULL && msg->parallel->dynamic_cp != NULL;
}

/* Fills req from msg (req points into msg). Returns 0, or PK_EINVAL with a
 * message naming a fixed-CP field set to something dynamic CP cannot do
 * (PADDED or FIXED mode, mini-batches, pipeline stages, group rules, layout
 * overrides). The planner validates the rest. */
PK_EXPORT int pk_codec_dcp_request(const Packd__V1__PlanRequest *msg, pk_dcp_request_t *req,
                                   char *err, size_t errlen);

/* Packs a dynamic-CP plan under plan_id into out: resp, the PlanResponse
 * (dynamic_cp set, no RankPlans), and unless response_only, n_ranks = the
 * pool's GPUs' RankPlans in ranks and off, GPU g's holding dp_rank g,
 * plan_id and, per slot, the whole plan's DcpGpu of g and the DcpGroup it
 * is in (absent when idle). A group of c GPUs is in c of them, so together
 * they may be larger than resp. Returns 0; PK_ENOMEM; PK_EINTERNAL; or
 * PK_ELIMIT when resp, or the RankPlans together, would be over max_bytes
 * (out->resp_len and out->ranks_len then say which: ranks_len is 0 when
 * resp was refused). */
PK_EXPORT int pk_codec_pack_dcp_plan(const pk_dcp_plan_t *plan, const char *plan_id,
                                     int64_t max_bytes, bool response_only, pk_packed_plan_t *out);

#endif
